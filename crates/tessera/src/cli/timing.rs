//! What `tessera train` reports about a pipelined step's timing: the table of task times, and
//! the measured makespan next to the schedule simulator's prediction from the measured task
//! times.

use super::out::outln;
use std::collections::HashMap;

use tessera_schedule::Costs;

/// How long each task (in `timings.tasks` order) kept its group busy: its own time plus the
/// transfers of its outputs, which its group's worker issues before the next task.
fn busy_times_us(timings: &tessera_mpmd::runtime::Timings) -> Vec<f64> {
    timings
        .tasks
        .iter()
        .map(|t| {
            let end = t.start_us + t.duration_us;
            let next = timings
                .tasks
                .iter()
                .filter(|o| o.group == t.group && o.start_us >= end)
                .map(|o| o.start_us)
                .fold(f64::INFINITY, f64::min);
            let sent: f64 = timings
                .transfers
                .iter()
                .filter(|x| x.from == t.group && x.start_us >= end && x.start_us < next)
                .map(|x| x.duration_us)
                .sum();
            t.duration_us + sent
        })
        .collect()
}

/// The measured makespan of a step and the simulator's prediction from the measured task times
/// (F, B, W per stage, each including the transfers of its outputs, which the runtime issues on
/// the sending group; a fused action's time is split in the proportions of the unfused tasks),
/// both in milliseconds.
pub fn calibrate(
    timings: &tessera_mpmd::runtime::Timings,
    plan: &tessera_schedule::Plan,
) -> (f64, f64) {
    let start = timings
        .tasks
        .iter()
        .map(|t| t.start_us)
        .fold(f64::INFINITY, f64::min);
    let end = timings
        .tasks
        .iter()
        .map(|t| t.start_us + t.duration_us)
        .fold(0.0, f64::max);
    let stages = plan.num_stages as usize;
    // Mean time of each single task kind per stage.
    let mut sums: HashMap<(char, usize), (f64, usize)> = HashMap::new();
    let mut fused: Vec<(Vec<(char, usize)>, f64)> = Vec::new();
    let busy = busy_times_us(timings);
    for (t, &busy_us) in timings.tasks.iter().zip(&busy) {
        let parts: Vec<(char, usize)> = t
            .name
            .split(" + ")
            .filter_map(|p| {
                let mut words = p.split(' ');
                let kind = words.next()?.chars().next()?;
                let stage = words.next()?.strip_prefix('s')?.parse().ok()?;
                Some((kind, stage))
            })
            .collect();
        if parts.len() == 1 {
            let e = sums.entry(parts[0]).or_insert((0.0, 0));
            e.0 += busy_us / 1000.0;
            e.1 += 1;
        } else {
            fused.push((parts, busy_us / 1000.0));
        }
    }
    let mean = |k: (char, usize)| sums.get(&k).map(|&(s, n)| s / n as f64);
    let typical = |kind: char| {
        let v: Vec<f64> = (0..stages).filter_map(|s| mean((kind, s))).collect();
        if v.is_empty() {
            None
        } else {
            Some(v.iter().sum::<f64>() / v.len() as f64)
        }
    };
    // Per stage: F, the whole backward B, and its parts I and W, from unfused means; then the
    // missing ones from fused actions, split in the proportions of the typical unfused tasks.
    let part = |kind: char| -> Vec<f64> {
        (0..stages)
            .map(|s| mean((kind, s)).unwrap_or(0.0))
            .collect()
    };
    let (mut f, mut b_whole, mut i, mut w) = (part('F'), part('B'), part('I'), part('W'));
    let mut fused_sum: HashMap<(char, usize), (f64, usize)> = HashMap::new();
    for (parts, total) in &fused {
        let weights: Vec<f64> = parts
            .iter()
            .map(|&(k, _)| typical(k).or_else(|| typical('B')).unwrap_or(1.0))
            .collect();
        let sum: f64 = weights.iter().sum::<f64>().max(1e-12);
        for (&key, wt) in parts.iter().zip(&weights) {
            let e = fused_sum.entry(key).or_insert((0.0, 0));
            e.0 += total * wt / sum;
            e.1 += 1;
        }
    }
    for (&(kind, stage), &(total, n)) in &fused_sum {
        let share = total / n as f64;
        let slot = match kind {
            'F' => &mut f[stage],
            'B' => &mut b_whole[stage],
            'I' => &mut i[stage],
            _ => &mut w[stage],
        };
        if *slot == 0.0 {
            *slot = share;
        }
    }
    let b: Vec<f64> = (0..stages)
        .map(|s| {
            if b_whole[s] > 0.0 {
                b_whole[s].max(w[s])
            } else {
                i[s] + w[s]
            }
        })
        .collect();
    let costs = Costs {
        forward: f,
        backward: b,
        weight: w,
        split: Vec::new(),
        latency: 0.0,
        fused_chain: 1.0,
        fused_apart: 1.0,
        dispatch: 0.0,
    };
    let predicted = tessera_schedule::simulate(plan, &costs).map_or(f64::NAN, |s| s.makespan);
    ((end - start) / 1000.0, predicted)
}

/// Mean task times of the last step, per task kind and stage (microbatches pooled).
/// Each task name's times in milliseconds (`F s0`, `B s1`, ...: every micro-batch's task of a
/// kind and stage pooled).
pub fn task_times_by_name(
    timings: &tessera_mpmd::runtime::Timings,
) -> std::collections::BTreeMap<String, Vec<f64>> {
    let mut pooled: std::collections::BTreeMap<String, Vec<f64>> =
        std::collections::BTreeMap::new();
    for (name, times) in timings.task_times_ms() {
        let key: Vec<&str> = name.split(' ').filter(|w| !w.starts_with("mb")).collect();
        pooled.entry(key.join(" ")).or_default().extend(times);
    }
    pooled
}

pub fn print_task_table(timings: &tessera_mpmd::runtime::Timings) -> anyhow::Result<()> {
    let pooled = task_times_by_name(timings);
    outln!("{:<16} {:>6} {:>10}", "task", "runs", "mean ms")?;
    for (name, times) in pooled {
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        outln!("{name:<16} {:>6} {mean:>10.3}", times.len())?;
    }
    Ok(())
}
