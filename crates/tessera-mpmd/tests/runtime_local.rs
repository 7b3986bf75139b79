//! `run_local`: each process runs its own groups of a plan, the others' values arriving through
//! the transport. Three threads stand for three processes over one shared transport: together
//! they compute what one `run` computes, each returns only its own groups' results, and a wait
//! for a value another process never sends ends at the deadline naming the value (it is not a
//! deadlock this process can see).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use tessera_mpmd::runtime::{
    BoxError, Executor, LocalTransport, Plan, RunError, RunOptions, Stuck, TaskSpec, Transport,
    run, run_local,
};

/// Tasks add their payload to the sum of their inputs.
struct Adder;

impl Executor<f64, f64> for Adder {
    fn run(&self, task: &TaskSpec<f64>, inputs: &[&f64]) -> Result<Vec<f64>, BoxError> {
        let sum: f64 = inputs.iter().copied().sum::<f64>() + task.payload;
        Ok(vec![sum; task.outputs.len()])
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

/// Two microbatches through three stages; value 0/1 are the inputs on group 0.
fn pipeline() -> Arc<Plan<f64>> {
    Arc::new(Plan {
        tasks: vec![
            task("fwd s0 mb0", 0, &[0], &[10], 1.0),
            task("fwd s0 mb1", 0, &[1], &[11], 1.0),
            task("fwd s1 mb0", 1, &[10], &[20], 10.0),
            task("fwd s1 mb1", 1, &[11], &[21], 10.0),
            task("fwd s2 mb0", 2, &[20], &[30], 100.0),
            task("fwd s2 mb1", 2, &[21], &[31], 100.0),
            task("sum", 2, &[30, 31], &[40], 0.0),
        ],
        order: vec![vec![0, 1], vec![2, 3], vec![4, 5, 6]],
        results: vec![(40, 2), (10, 1)],
    })
}

fn options(seconds: u64) -> RunOptions {
    RunOptions {
        timeout: Duration::from_secs(seconds),
    }
}

#[test]
fn processes_running_their_own_groups_compute_what_one_run_does() {
    let plan = pipeline();
    let initial = || vec![(0, 0, 1.0), (1, 0, 2.0)];
    let whole = run(
        plan.clone(),
        initial(),
        Arc::new(Adder),
        Arc::new(LocalTransport::<f64>::cloning()),
        &options(60),
    )
    .unwrap();
    let transport: Arc<dyn Transport<f64>> = Arc::new(LocalTransport::<f64>::cloning());
    let processes: Vec<_> = (0..3)
        .map(|group| {
            let (plan, transport) = (plan.clone(), transport.clone());
            let mine = initial().into_iter().filter(|v| v.1 == group).collect();
            std::thread::spawn(move || {
                run_local(
                    plan,
                    mine,
                    Arc::new(Adder),
                    transport,
                    &options(60),
                    &[group],
                )
                .unwrap()
            })
        })
        .collect();
    let outs: Vec<_> = processes.into_iter().map(|p| p.join().unwrap()).collect();
    assert_eq!(outs[0].results, [None, None]);
    assert_eq!(outs[1].results, [None, Some(whole.results[1])]);
    assert_eq!(outs[2].results, [Some(whole.results[0]), None]);
    // Each process times only its own tasks.
    assert_eq!(
        outs[2].timings.group_orders(3)[2],
        ["fwd s2 mb0", "fwd s2 mb1", "sum"]
    );
    assert!(outs[2].timings.tasks.iter().all(|t| t.group == 2));
}

#[test]
fn a_value_another_process_never_sends_ends_at_the_deadline_naming_it() {
    let err = run_local(
        pipeline(),
        Vec::new(),
        Arc::new(Adder),
        Arc::new(LocalTransport::<f64>::cloning()),
        &options(1),
        &[1],
    )
    .unwrap_err();
    assert!(
        matches!(
            &err,
            RunError::Timeout {
                group: 1,
                stuck: Stuck::Input(10),
                ..
            }
        ),
        "{err}"
    );
}

/// The calling thread's time slice in nanoseconds (`se.slice` of `/proc/thread-self/sched`).
fn thread_slice_ns() -> Result<f64, BoxError> {
    let sched = std::fs::read_to_string("/proc/thread-self/sched")?;
    let slice = sched
        .lines()
        .find(|l| l.starts_with("se.slice"))
        .and_then(|l| l.split(':').nth(1))
        .ok_or("no se.slice line")?;
    Ok(slice.trim().parse()?)
}

/// Tasks return the largest of their inputs and the time slice of the thread running them.
struct SliceReader;

impl Executor<f64, f64> for SliceReader {
    fn run(&self, task: &TaskSpec<f64>, inputs: &[&f64]) -> Result<Vec<f64>, BoxError> {
        let largest = inputs
            .iter()
            .copied()
            .fold(thread_slice_ns()?, |a, &b| a.max(b));
        Ok(vec![largest; task.outputs.len()])
    }
}

#[test]
fn every_worker_runs_its_tasks_on_the_short_slice_it_asked_for() {
    // The slice of a plain thread, and of one that asked for the short slice.
    let (plain, prompt) = std::thread::spawn(|| {
        let plain = thread_slice_ns().unwrap();
        tessera_pjrt::background::wake_promptly();
        (plain, thread_slice_ns().unwrap())
    })
    .join()
    .unwrap();
    if prompt == plain {
        // Counted as skipped by `cargo xtask test` (its skip file, as `tests/lib.rs` writes).
        let why = "every_worker_runs_its_tasks_on_the_short_slice_it_asked_for: \
                   this kernel gives normal threads no custom slice (Linux 6.12)";
        eprintln!("skipped: {why}");
        if let Some(path) = std::env::var_os("TESSERA_TEST_SKIPS") {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            writeln!(file, "{why}").unwrap();
        }
        return;
    }
    assert_eq!(prompt, tessera_pjrt::background::PROMPT_SLICE_NS as f64);
    let out = run(
        pipeline(),
        vec![(0, 0, 0.0), (1, 0, 0.0)],
        Arc::new(SliceReader),
        Arc::new(LocalTransport::<f64>::cloning()),
        &options(60),
    )
    .unwrap();
    // Every task of every group fed its slice into the results.
    assert_eq!(out.results, [prompt, prompt]);
}
