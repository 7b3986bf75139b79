//! The MPMD runtime on host values: a 3-group pipeline with cross-group transfers, order and
//! timings, error propagation without hangs, deadlock detection, and deadlines: an executor
//! that never returns and a transport that fails or loses values give an error naming group,
//! task and value within the deadline, with every worker stopped.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tessera_mpmd::runtime::{
    BoxError, Executor, Mailbox, Plan, RunError, RunOptions, Stuck, TaskSpec, Transport, ValueId,
    parse_timeout, run,
};

/// Tasks add their payload to the sum of their inputs; "fail" tasks fail and "hang" tasks never
/// return. Counts the tasks it started.
#[derive(Default)]
struct Adder {
    started: AtomicUsize,
}

impl Executor<f64, f64> for Adder {
    fn run(&self, task: &TaskSpec<f64>, inputs: &[&f64]) -> Result<Vec<f64>, BoxError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        if task.name.starts_with("fail") {
            return Err("the device ran out of memory".into());
        }
        if task.name.starts_with("hang") {
            loop {
                std::thread::park();
            }
        }
        std::thread::sleep(Duration::from_millis(2));
        let sum: f64 = inputs.iter().copied().sum::<f64>() + task.payload;
        Ok(task.outputs.iter().map(|_| sum).collect())
    }

    fn value_bytes(&self, _value: &f64) -> u64 {
        8
    }

    /// "donate" tasks consume their first input.
    fn donated_inputs(&self, task: &TaskSpec<f64>) -> Vec<usize> {
        if task.name.starts_with("donate") {
            vec![0]
        } else {
            Vec::new()
        }
    }
}

/// What a [`Recorder`] does with one value.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// Refuses to send it.
    FailSend,
    /// Sends it but fails when it is received.
    FailRecv,
    /// Accepts it and never delivers it.
    Lose,
}

/// Copies values through a mailbox and records every send; may mistreat one value.
#[derive(Default)]
struct Recorder {
    sends: Mutex<Vec<(usize, usize)>>,
    mailbox: Mailbox<f64>,
    fault: Option<(ValueId, Fault)>,
}

impl Recorder {
    fn faulty(value: ValueId, fault: Fault) -> Self {
        Recorder {
            fault: Some((value, fault)),
            ..Recorder::default()
        }
    }

    fn fault(&self, id: ValueId) -> Option<Fault> {
        self.fault.filter(|&(v, _)| v == id).map(|(_, f)| f)
    }
}

impl Transport<f64> for Recorder {
    fn send(&self, id: ValueId, value: &f64, from: usize, to: usize) -> Result<(), BoxError> {
        self.sends.lock().unwrap().push((from, to));
        match self.fault(id) {
            Some(Fault::FailSend) => Err("the link is down".into()),
            Some(Fault::Lose) => Ok(()),
            _ => {
                self.mailbox.put(to, id, *value, Instant::now());
                Ok(())
            }
        }
    }

    fn recv(&self, id: ValueId, to: usize, deadline: Instant) -> Result<Option<f64>, BoxError> {
        if self.fault(id) == Some(Fault::FailRecv) {
            return Err("the packet was corrupted".into());
        }
        Ok(self.mailbox.take(to, id, deadline))
    }
}

fn start(
    plan: Plan<f64>,
    initial: Vec<(usize, usize, f64)>,
    executor: &Arc<Adder>,
    transport: &Arc<Recorder>,
    timeout: Duration,
) -> Result<tessera_mpmd::runtime::RunOutput<f64>, RunError> {
    run(
        Arc::new(plan),
        initial,
        executor.clone(),
        transport.clone(),
        &RunOptions { timeout },
    )
}

fn go(plan: Plan<f64>, initial: Vec<(usize, usize, f64)>) -> Result<Vec<f64>, RunError> {
    let transport = Arc::new(Recorder::default());
    start(
        plan,
        initial,
        &Arc::new(Adder::default()),
        &transport,
        Duration::from_secs(60),
    )
    .map(|out| out.results)
}

fn task(
    name: &str,
    group: usize,
    inputs: &[usize],
    outputs: &[usize],
    payload: f64,
) -> TaskSpec<f64> {
    TaskSpec {
        name: name.into(),
        group,
        inputs: inputs.to_vec(),
        outputs: outputs.to_vec(),
        payload,
    }
}

/// Two microbatches through three stages: value 0/1 are the inputs on group 0.
fn pipeline() -> Plan<f64> {
    let tasks = vec![
        task("fwd s0 mb0", 0, &[0], &[10], 1.0),
        task("fwd s0 mb1", 0, &[1], &[11], 1.0),
        task("fwd s1 mb0", 1, &[10], &[20], 10.0),
        task("fwd s1 mb1", 1, &[11], &[21], 10.0),
        task("fwd s2 mb0", 2, &[20], &[30], 100.0),
        task("fwd s2 mb1", 2, &[21], &[31], 100.0),
        task("sum", 2, &[30, 31], &[40], 0.0),
    ];
    Plan {
        tasks,
        order: vec![vec![0, 1], vec![2, 3], vec![4, 5, 6]],
        results: vec![(40, 2), (10, 1)],
    }
}

#[test]
fn a_pipeline_runs_in_order_and_moves_values_between_groups() {
    let transport = Arc::new(Recorder::default());
    let out = start(
        pipeline(),
        vec![(0, 0, 1.0), (1, 0, 2.0)],
        &Arc::new(Adder::default()),
        &transport,
        Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(out.results, [(1.0 + 111.0) + (2.0 + 111.0), 2.0]);
    let moves: HashSet<(usize, usize)> = transport.sends.lock().unwrap().iter().copied().collect();
    assert_eq!(moves, HashSet::from([(0, 1), (1, 2)]));
    let orders = out.timings.group_orders(3);
    assert_eq!(orders[2], ["fwd s2 mb0", "fwd s2 mb1", "sum"]);
    assert_eq!(out.timings.task_times_ms().len(), 7);
    assert!(out.timings.bubble_ratio(3) > 0.0 && out.timings.bubble_ratio(3) < 1.0);
    let trace = out.timings.to_chrome_trace();
    let parsed: serde_json::Value = serde_json::from_str(&trace).unwrap();
    // 7 tasks, one row name per group, the transfers on their senders' rows, the waits on the
    // receivers' rows, and a live-bytes counter sample at each value's start and end.
    let transfers = out.timings.transfers.len();
    assert_eq!(transfers, transport.sends.lock().unwrap().len());
    assert!(
        transport.mailbox.is_empty(),
        "every sent value was received"
    );
    let counters = 2 * out.timings.values.len();
    // Each wait for a value from another group (a receive, one per transfer) on its row.
    let waits = out.timings.waits.len();
    assert_eq!(waits, transfers, "{:?}", out.timings.waits);
    assert_eq!(
        parsed["traceEvents"].as_array().unwrap().len(),
        7 + 3 + transfers + counters + waits
    );
}

#[test]
fn values_are_freed_after_their_last_reader_and_results_are_kept() {
    let out = start(
        pipeline(),
        vec![(0, 0, 1.0), (1, 0, 2.0)],
        &Arc::new(Adder::default()),
        &Arc::new(Recorder::default()),
        Duration::from_secs(60),
    )
    .unwrap();
    // Holding everything, group 2 would peak at 5 values (20, 21, 30, 31, 40); freeing each
    // after its last reader, no group holds more than 3 at once.
    assert_eq!(out.timings.peak_live_bytes(3), [24, 24, 24]);
    // Every span is closed: the accounting ends at zero on every group.
    for group in 0..3 {
        let end = out.timings.live_bytes(group).last().unwrap().1;
        assert_eq!(end, 0, "group {group} ends with {end} bytes accounted");
    }
    // Value 10 is returned from group 1: held there from its arrival to the end of the list.
    let on_1: Vec<_> = out
        .timings
        .values
        .iter()
        .filter(|v| v.value == 10 && v.group == 1)
        .collect();
    assert_eq!(on_1.len(), 1);
    let last_task_end = out
        .timings
        .tasks
        .iter()
        .filter(|t| t.group == 1)
        .map(|t| t.start_us + t.duration_us)
        .fold(0.0, f64::max);
    assert!(on_1[0].end_us >= last_task_end);
}

#[test]
fn a_failing_task_stops_every_group_with_its_error() {
    let mut plan = pipeline();
    plan.tasks[2].name = "fail s1 mb0".into();
    let err = go(plan, vec![(0, 0, 1.0), (1, 0, 2.0)]).unwrap_err();
    match err {
        RunError::Task {
            task,
            group,
            source,
        } => {
            assert_eq!((task.as_str(), group), ("fail s1 mb0", 1));
            assert!(source.to_string().contains("out of memory"));
        }
        other => panic!("expected the task's error, got {other}"),
    }
}

#[test]
fn a_schedule_that_waits_in_a_cycle_is_reported_as_a_deadlock() {
    // Group 0 waits for group 1's value before producing what group 1 waits for.
    let tasks = vec![task("a", 0, &[2], &[1], 0.0), task("b", 1, &[1], &[2], 0.0)];
    let plan = Plan {
        tasks,
        order: vec![vec![0], vec![1]],
        results: vec![],
    };
    let err = go(plan, vec![]).unwrap_err();
    assert!(matches!(err, RunError::Deadlock { .. }), "{err}");
}

#[test]
fn malformed_plans_are_refused_before_running() {
    let mut plan = pipeline();
    plan.order[1].push(0);
    let err = go(plan, vec![]).unwrap_err();
    assert!(
        err.to_string().contains("belongs to another group"),
        "{err}"
    );
    let mut plan = pipeline();
    plan.order[2].pop();
    assert!(
        go(plan, vec![])
            .unwrap_err()
            .to_string()
            .contains("in no group's order")
    );
}

/// Runs `pipeline()` with a deadline of 300 ms and returns the error (the callers check which),
/// checking that no task started after the run returned.
fn fails_in_time(plan: Plan<f64>, transport: Recorder) -> RunError {
    let timeout = Duration::from_millis(300);
    let executor = Arc::new(Adder::default());
    let err = start(
        plan,
        vec![(0, 0, 1.0), (1, 0, 2.0)],
        &executor,
        &Arc::new(transport),
        timeout,
    )
    .unwrap_err();
    let started = executor.started.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        executor.started.load(Ordering::SeqCst),
        started,
        "a worker ran a task after the run failed"
    );
    err
}

#[test]
fn a_task_that_never_returns_fails_the_run_at_the_deadline() {
    let mut plan = pipeline();
    plan.tasks[3].name = "hang s1 mb1".into();
    match fails_in_time(plan, Recorder::default()) {
        RunError::Timeout {
            group, task, stuck, ..
        } => {
            assert_eq!((group, task.as_str()), (1, "hang s1 mb1"));
            assert_eq!(stuck, Stuck::Running(vec![21]));
        }
        other => panic!("expected a timeout, got {other}"),
    }
}

#[test]
fn a_value_the_transport_loses_fails_the_run_at_the_deadline() {
    let err = fails_in_time(pipeline(), Recorder::faulty(20, Fault::Lose));
    match &err {
        RunError::Timeout {
            group, task, stuck, ..
        } => {
            assert_eq!((*group, task.as_str()), (2, "fwd s2 mb0"));
            assert_eq!(*stuck, Stuck::Input(20));
        }
        other => panic!("expected a timeout, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("group 2") && text.contains("'fwd s2 mb0'") && text.contains("value 20"),
        "{text}"
    );
}

#[test]
fn a_failing_transport_names_the_value_the_group_and_the_task() {
    match fails_in_time(pipeline(), Recorder::faulty(11, Fault::FailSend)) {
        RunError::Transfer {
            value,
            from,
            to,
            group,
            task,
            source,
        } => {
            assert_eq!((value, from, to, group), (11, 0, 1, 0));
            assert_eq!(task, "fwd s0 mb1");
            assert!(source.to_string().contains("link is down"));
        }
        other => panic!("expected a transfer error, got {other}"),
    }
    match fails_in_time(pipeline(), Recorder::faulty(21, Fault::FailRecv)) {
        RunError::Transfer {
            value,
            from,
            to,
            group,
            task,
            ..
        } => {
            assert_eq!((value, from, to, group), (21, 1, 2, 2));
            assert_eq!(task, "fwd s2 mb1");
        }
        other => panic!("expected a transfer error, got {other}"),
    }
}

#[test]
fn the_deadline_reads_positive_seconds_and_refuses_anything_else() {
    assert_eq!(parse_timeout("2.5").unwrap(), Duration::from_millis(2500));
    for bad in ["", "0", "-3", "soon", "inf", "NaN"] {
        let err = parse_timeout(bad).unwrap_err().to_string();
        assert!(err.contains("TESSERA_TIMEOUT_S"), "{bad}: {err}");
    }
}

#[test]
fn a_donated_input_stops_counting_when_its_task_starts_and_only_a_last_use_is_donated() {
    let mut plan = pipeline();
    plan.tasks[6].name = "donate sum".into();
    let out = start(
        plan,
        vec![(0, 0, 1.0), (1, 0, 2.0)],
        &Arc::new(Adder::default()),
        &Arc::new(Recorder::default()),
        Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(out.results[0], (1.0 + 111.0) + (2.0 + 111.0));
    let sum = out
        .timings
        .tasks
        .iter()
        .find(|t| t.name == "donate sum")
        .unwrap();
    let donated = out.timings.values.iter().find(|v| v.value == 30).unwrap();
    assert_eq!(donated.end_us, sum.start_us);
    // Value 10 is returned from group 1: it may not be donated there.
    let mut plan = pipeline();
    plan.tasks[2].name = "donate s1 mb0".into();
    let err = go(plan, vec![(0, 0, 1.0), (1, 0, 2.0)]).unwrap_err();
    assert!(
        matches!(
            &err,
            RunError::Donation {
                value: 10,
                group: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("the run returns it"), "{err}");
}
