//! Task timings: per-task durations (JAXPP's `collect_task_times_ms`), when each value was held
//! by each group and the live bytes that follow, and a Chrome / Perfetto trace of the run with
//! one memory counter track per group.

use std::collections::BTreeMap;

/// Microseconds since the Unix epoch now (0 if the clock is before it): what
/// [`Timings::epoch_unix_us`] records.
pub(crate) fn unix_now_us() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

/// When one task ran, relative to the start of the run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TaskTiming {
    /// The task's name.
    pub name: String,
    /// The group that ran it.
    pub group: usize,
    /// Start, in microseconds since the run began.
    pub start_us: f64,
    /// Duration in microseconds.
    pub duration_us: f64,
}

/// When one transfer of a value between groups ran (on the sending group's worker).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TransferTiming {
    /// The sending group.
    pub from: usize,
    /// The receiving group.
    pub to: usize,
    /// Start, in microseconds since the run began.
    pub start_us: f64,
    /// Duration in microseconds (issuing the copy; the devices may finish it later).
    pub duration_us: f64,
}

/// When a group waited for an input another group produces (from the moment its next task
/// needed it until it arrived).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InputWait {
    /// The value.
    pub value: super::plan::ValueId,
    /// The waiting group.
    pub group: usize,
    /// Since when, in microseconds since the run began.
    pub start_us: f64,
    /// Until when.
    pub end_us: f64,
}

/// When a group held a value, and its device bytes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ValueSpan {
    /// The value.
    pub value: super::plan::ValueId,
    /// The group holding it.
    pub group: usize,
    /// Its device bytes (as the executor counts them).
    pub bytes: u64,
    /// Since when, in microseconds since the run began (0 for values placed before the run).
    pub start_us: f64,
    /// Until when (the end of its group's list for values held to the end).
    pub end_us: f64,
}

/// The timings of one run: tasks (by start), transfers, and the values each group held.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Timings {
    /// Every task run.
    pub tasks: Vec<TaskTiming>,
    /// Every transfer between groups.
    pub transfers: Vec<TransferTiming>,
    /// Every value each group held, by start.
    pub values: Vec<ValueSpan>,
    /// Every wait of a group for an input, by start.
    #[serde(default)]
    pub waits: Vec<InputWait>,
    /// When the run began, in microseconds since the Unix epoch (what lines up the timings of
    /// the processes of one job on one host; 0 when unknown).
    #[serde(default)]
    pub epoch_unix_us: f64,
}

impl Timings {
    /// One run's timings from the parts each process recorded (each holding its own groups):
    /// every time is shifted onto the earliest part's clock, by the difference of their epochs.
    /// Processes on one host share that clock; across hosts the result is as good as their
    /// clocks' agreement.
    pub fn merged(parts: Vec<Timings>) -> Timings {
        let epoch = parts
            .iter()
            .map(|t| t.epoch_unix_us)
            .fold(f64::INFINITY, f64::min);
        let mut out = Timings {
            epoch_unix_us: if epoch.is_finite() { epoch } else { 0.0 },
            ..Timings::default()
        };
        for part in parts {
            let shift = part.epoch_unix_us - out.epoch_unix_us;
            out.tasks.extend(part.tasks.into_iter().map(|mut t| {
                t.start_us += shift;
                t
            }));
            out.transfers
                .extend(part.transfers.into_iter().map(|mut t| {
                    t.start_us += shift;
                    t
                }));
            out.waits.extend(part.waits.into_iter().map(|mut w| {
                w.start_us += shift;
                w.end_us += shift;
                w
            }));
            out.values.extend(part.values.into_iter().map(|mut v| {
                // A value placed before its process's run began is there from that start on.
                v.start_us += shift;
                v.end_us += shift;
                v
            }));
        }
        out.tasks.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        out.transfers
            .sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        out.values.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        out.waits.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        out
    }

    /// Per group (of `groups`), the milliseconds its tasks waited for inputs that had already
    /// been produced: each wait from the later of its start and the producing task's end
    /// (`produced`, `None` when unknown: the wait's start) until the input arrived. A wait for
    /// a producer still computing (the pipeline's bubble) does not count; the transfer's own
    /// time, exposed, does.
    pub fn transfer_wait_ms(
        &self,
        groups: usize,
        produced: impl Fn(super::plan::ValueId) -> Option<f64>,
    ) -> Vec<f64> {
        let mut per_group = vec![0.0; groups];
        for w in &self.waits {
            let from = produced(w.value).map_or(w.start_us, |p| p.max(w.start_us));
            if let Some(g) = per_group.get_mut(w.group) {
                *g += (w.end_us - from).max(0.0) / 1000.0;
            }
        }
        per_group
    }

    /// Milliseconds per task name (a name may run several times across steps).
    pub fn task_times_ms(&self) -> BTreeMap<String, Vec<f64>> {
        let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for t in &self.tasks {
            out.entry(t.name.clone())
                .or_default()
                .push(t.duration_us / 1000.0);
        }
        out
    }

    /// The order in which each group ran its tasks.
    pub fn group_orders(&self, groups: usize) -> Vec<Vec<String>> {
        let mut per_group: Vec<Vec<&TaskTiming>> = vec![Vec::new(); groups];
        for t in &self.tasks {
            if let Some(list) = per_group.get_mut(t.group) {
                list.push(t);
            }
        }
        per_group
            .into_iter()
            .map(|mut list| {
                list.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
                list.into_iter().map(|t| t.name.clone()).collect()
            })
            .collect()
    }

    /// The mean time a transfer took to issue, in microseconds (0 without transfers).
    pub fn mean_transfer_us(&self) -> f64 {
        if self.transfers.is_empty() {
            return 0.0;
        }
        self.transfers.iter().map(|t| t.duration_us).sum::<f64>() / self.transfers.len() as f64
    }

    /// The first task's start and the last task's end, in microseconds (`None` without tasks).
    fn task_bounds_us(&self) -> Option<(f64, f64)> {
        let start = self.tasks.iter().map(|t| t.start_us).reduce(f64::min)?;
        let end = self
            .tasks
            .iter()
            .map(|t| t.start_us + t.duration_us)
            .reduce(f64::max)?;
        Some((start, end))
    }

    /// The milliseconds from the first task's start to the last task's end (0 without tasks).
    pub fn task_span_ms(&self) -> f64 {
        self.task_bounds_us()
            .map_or(0.0, |(start, end)| (end - start).max(0.0) / 1000.0)
    }

    /// Each of `groups` groups' busy time, the sum of its tasks' durations, in milliseconds:
    /// how evenly the stage boundaries spread the work (the group that leads sets a pipeline's
    /// pace).
    pub fn group_busy_ms(&self, groups: usize) -> Vec<f64> {
        let mut busy = vec![0.0; groups];
        for t in &self.tasks {
            if let Some(b) = busy.get_mut(t.group) {
                *b += t.duration_us / 1000.0;
            }
        }
        busy
    }

    /// The fraction of group-time spent idle between the first start and the last end.
    pub fn bubble_ratio(&self, groups: usize) -> f64 {
        let Some((start, end)) = self.task_bounds_us() else {
            return 0.0;
        };
        let busy: f64 = self.tasks.iter().map(|t| t.duration_us).sum();
        let span = (end - start) * groups as f64;
        if span > 0.0 { 1.0 - busy / span } else { 0.0 }
    }

    /// Group `group`'s live bytes over the run: `(time in microseconds, bytes)` after each
    /// change, in time order (a value freed and another allocated at the same instant count
    /// the free first).
    pub fn live_bytes(&self, group: usize) -> Vec<(f64, u64)> {
        let mut changes: Vec<(f64, i128)> = Vec::new();
        for v in self.values.iter().filter(|v| v.group == group) {
            changes.push((v.start_us, i128::from(v.bytes)));
            changes.push((v.end_us, -i128::from(v.bytes)));
        }
        changes.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut live: i128 = 0;
        changes
            .into_iter()
            .map(|(t, d)| {
                live += d;
                (t, u64::try_from(live).unwrap_or(0))
            })
            .collect()
    }

    /// Each of `groups` groups' peak live bytes.
    pub fn peak_live_bytes(&self, groups: usize) -> Vec<u64> {
        (0..groups)
            .map(|g| {
                self.live_bytes(g)
                    .into_iter()
                    .map(|(_, b)| b)
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// The run as a Chrome trace (`chrome://tracing`, Perfetto): one thread row per group (its
    /// tasks, its sends, and its waits for other groups' values) and one `live bytes` counter
    /// track per group.
    pub fn to_chrome_trace(&self) -> String {
        let mut events = Vec::with_capacity(self.tasks.len());
        for t in &self.tasks {
            events.push(format!(
                "{{\"name\":{},\"ph\":\"X\",\"pid\":0,\"tid\":{},\"ts\":{:.3},\"dur\":{:.3}}}",
                json_string(&t.name),
                t.group,
                t.start_us,
                t.duration_us
            ));
        }
        for t in &self.transfers {
            events.push(format!(
                "{{\"name\":\"send to group {}\",\"cat\":\"transfer\",\"ph\":\"X\",\"pid\":0,\"tid\":{},\"ts\":{:.3},\"dur\":{:.3}}}",
                t.to, t.from, t.start_us, t.duration_us
            ));
        }
        for w in &self.waits {
            events.push(format!(
                "{{\"name\":\"wait for value {}\",\"cat\":\"wait\",\"ph\":\"X\",\"pid\":0,\"tid\":{},\"ts\":{:.3},\"dur\":{:.3}}}",
                w.value,
                w.group,
                w.start_us,
                w.end_us - w.start_us
            ));
        }
        let groups: std::collections::BTreeSet<usize> = self
            .tasks
            .iter()
            .map(|t| t.group)
            .chain(self.values.iter().map(|v| v.group))
            .collect();
        for &g in &groups {
            for (t, bytes) in self.live_bytes(g) {
                events.push(format!(
                    "{{\"name\":\"live bytes, group {g}\",\"ph\":\"C\",\"pid\":0,\"ts\":{t:.3},\"args\":{{\"bytes\":{bytes}}}}}"
                ));
            }
        }
        for g in groups {
            events.push(format!(
                "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":{g},\"args\":{{\"name\":\"group {g}\"}}}}"
            ));
        }
        format!("{{\"traceEvents\":[{}]}}", events.join(","))
    }
}

fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
