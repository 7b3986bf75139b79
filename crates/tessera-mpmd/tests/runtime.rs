//! The MPMD runtime on host values: a 3-group pipeline with cross-group transfers, order and
//! timings, error propagation without hangs, and deadlock detection.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::HashSet;
use std::sync::Mutex;

use tessera_mpmd::runtime::{Executor, Plan, RunError, TaskSpec, Transport, run};

/// Tasks add their payload to the sum of their inputs; "fail" tasks fail.
struct Adder;

impl Executor<f64, f64> for Adder {
    fn run(
        &self,
        task: &TaskSpec<f64>,
        inputs: &[&f64],
    ) -> Result<Vec<f64>, Box<dyn std::error::Error + Send + Sync>> {
        if task.name.starts_with("fail") {
            return Err("the device ran out of memory".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        let sum: f64 = inputs.iter().copied().sum::<f64>() + task.payload;
        Ok(task.outputs.iter().map(|_| sum).collect())
    }
}

/// Copies values and records every transfer.
#[derive(Default)]
struct Recorder(Mutex<Vec<(usize, usize)>>);

impl Transport<f64> for Recorder {
    fn transfer(
        &self,
        value: &f64,
        from: usize,
        to: usize,
    ) -> Result<f64, Box<dyn std::error::Error + Send + Sync>> {
        self.0.lock().unwrap().push((from, to));
        Ok(*value)
    }
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
    let transport = Recorder::default();
    let out = run(
        &pipeline(),
        vec![(0, 0, 1.0), (1, 0, 2.0)],
        &Adder,
        &transport,
    )
    .unwrap();
    assert_eq!(out.results, [(1.0 + 111.0) + (2.0 + 111.0), 2.0]);
    let moves: HashSet<(usize, usize)> = transport.0.lock().unwrap().iter().copied().collect();
    assert_eq!(moves, HashSet::from([(0, 1), (1, 2)]));
    let orders = out.timings.group_orders(3);
    assert_eq!(orders[2], ["fwd s2 mb0", "fwd s2 mb1", "sum"]);
    assert_eq!(out.timings.task_times_ms().len(), 7);
    assert!(out.timings.bubble_ratio(3) > 0.0 && out.timings.bubble_ratio(3) < 1.0);
    let trace = out.timings.to_chrome_trace();
    let parsed: serde_json::Value = serde_json::from_str(&trace).unwrap();
    // 7 tasks, one row name per group, and the transfers on their senders' rows.
    let transfers = out.timings.transfers.len();
    assert_eq!(transfers, transport.0.lock().unwrap().len());
    assert_eq!(
        parsed["traceEvents"].as_array().unwrap().len(),
        7 + 3 + transfers
    );
}

#[test]
fn a_failing_task_stops_every_group_with_its_error() {
    let mut plan = pipeline();
    plan.tasks[2].name = "fail s1 mb0".into();
    let err = run(
        &plan,
        vec![(0, 0, 1.0), (1, 0, 2.0)],
        &Adder,
        &Recorder::default(),
    )
    .unwrap_err();
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
    let err = run(&plan, vec![], &Adder, &Recorder::default()).unwrap_err();
    assert!(matches!(err, RunError::Deadlock { .. }), "{err}");
}

#[test]
fn malformed_plans_are_refused_before_running() {
    let mut plan = pipeline();
    plan.order[1].push(0);
    let err = run(&plan, vec![], &Adder, &Recorder::default()).unwrap_err();
    assert!(
        err.to_string().contains("belongs to another group"),
        "{err}"
    );
    let mut plan = pipeline();
    plan.order[2].pop();
    assert!(
        run(&plan, vec![], &Adder, &Recorder::default())
            .unwrap_err()
            .to_string()
            .contains("in no group's order")
    );
}
