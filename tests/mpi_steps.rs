//! `mpmd_jit` step shapes under MPI (issue 32), two ranks, one per group: steps of two
//! sequential `treduce` loops (train then eval, two accumulation loops), a step whose code before its loop runs on a group's devices and
//! sends its results to the ranks reading them, a step differentiating values it computes
//! before its loop, a step whose update mixes large values of both groups (run by rank 0,
//! group 1's values sent to it), and a step keeping gradients per micro-batch (`Concat`, of a
//! value differing per micro-batch). The `mpi_steps` example runs each twice (the second call on the weights the
//! first left on their groups) and checks every result it holds against the interpreter; here
//! every result of the job equals the one-process run's bit for bit (the same programs run on
//! the same groups), and every result is printed by some rank. A parameter on devices held by
//! another process's group than the one reading it is refused, naming the fix; ranks calling a
//! step with arguments of other shapes or placements are refused alike instead of hanging; a
//! rank that never starts an exchange times the other out, and dropping the job ends it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use tessera_ir::trace::{trace, treduce, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::processes::{ProcessError, Processes};
use tessera_mpmd::runtime::{OutputLayout, Transport, ValueId};
use tessera_mpmd::{MpmdArray, MpmdJitOptions, MpmdMesh, MpmdSharding, StepArg, mpmd_jit_with};
use tessera_pjrt::{Client, ElementType};
use tessera_sharding::{Mesh, PartitionSpec};
use tessera_tests::mpi_launch::mpirun;
use tessera_tests::tessera_bin;

/// The example program `name` (built by `cargo build -p tessera-examples --example NAME`).
fn example(name: &str) -> PathBuf {
    let path = tessera_bin().parent().unwrap().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo xtask test` builds it (cargo build -p tessera-examples --example {name})",
        path.display()
    );
    path
}

/// The `SHAPE call N result K: BITS` lines of an output, without their `rank R: ` prefix.
fn results(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.contains(" result "))
        .map(|l| l.split_once(": ").unwrap().1.to_owned())
        .collect()
}

/// `SHAPE call N result K` of a result line.
fn name(line: &str) -> &str {
    line.split_once(": ").unwrap().0
}

#[test]
fn six_step_shapes_on_two_ranks_equal_the_one_process_run_bit_for_bit() {
    let program = example("mpi_steps");
    let alone = std::process::Command::new(&program)
        .env_remove("TESSERA_PJRT_PLUGIN")
        .output()
        .unwrap();
    let alone_out = String::from_utf8_lossy(&alone.stdout).into_owned();
    assert!(
        alone.status.success(),
        "{alone_out}{}",
        String::from_utf8_lossy(&alone.stderr)
    );
    let job = mpirun(
        &["-n", "2", program.to_str().unwrap()],
        &[],
        Duration::from_secs(300),
        None,
    );
    assert!(job.status.success(), "{}\n{}", job.stdout, job.stderr);
    for rank in 0..2 {
        let done = format!("rank {rank}: every step equals the interpreter");
        assert!(job.stdout.contains(&done), "{}", job.stdout);
    }
    // `MpiJob::gather_to_root` in rounds of pieces (as it moves more than MPI's 32-bit counts).
    let gathered =
        "rank 0: gathered 2 ranks' bytes whole and in pieces of 5, as each rank sent them";
    assert!(job.stdout.contains(gathered), "{}", job.stdout);
    let one: BTreeSet<String> = results(&alone_out).into_iter().collect();
    let many = results(&job.stdout);
    // 2 calls of: two loops (4 results), two sources (4), before (3), computed (5), mixed (4),
    // stacked (5).
    assert_eq!(one.len(), 2 * (4 + 4 + 3 + 5 + 4 + 5), "{alone_out}");
    for line in &many {
        assert!(
            one.contains(line),
            "a job's result differs from the one-process run's: {line}\none process:\n{alone_out}"
        );
    }
    let covered: BTreeSet<&str> = many.iter().map(|l| name(l)).collect();
    let all: BTreeSet<&str> = one.iter().map(|l| name(l)).collect();
    assert_eq!(covered, all, "results no rank printed");
    // `mixed`'s update, run by rank 0 on group 0, sent `w1'` to rank 1, and rank 0 holds none of
    // it; `w0 * w1` (read from rank 1 on the second call) stays on group 0.
    for (line, printed) in [
        ("rank 1: mixed call 2 result 1: ", true),
        ("rank 0: mixed call 2 result 1: ", false),
        ("rank 0: mixed call 2 result 3: ", true),
        ("rank 1: mixed call 2 result 3: ", false),
    ] {
        assert_eq!(job.stdout.contains(line), printed, "{line}\n{}", job.stdout);
    }
    // Rank 1 holds the second weight and rank 0 the first: each prints only its own.
    assert!(
        job.stdout.contains("rank 1: before call 2 result 1: "),
        "{}",
        job.stdout
    );
    assert!(
        !job.stdout.contains("rank 1: before call 2 result 0: "),
        "{}",
        job.stdout
    );
    // The code before the loop ran on a group's devices, never on the host: for `before`, last
    // on group 1, which holds the last weight it reads (the batch it reads came from group 0);
    // for `computed`, on group 0, which holds `w0` (`w1` came from group 1).
    for rank in 0..2 {
        for (shape, group) in [("before", 1), ("computed", 0)] {
            let line = format!(
                "rank {rank}: {shape} ran its code before the loop 2 times on the groups (the last on group Some({group})), 0 on the host"
            );
            assert!(job.stdout.contains(&line), "{}", job.stdout);
        }
    }
}

/// Rank 1 calls a step with an argument of another shape, then of another placement: instead of
/// waiting forever for each other, both ranks are refused with the same error naming rank 1,
/// the argument and the fix, and a call made alike then runs; the job ends.
#[test]
fn ranks_calling_a_step_differently_are_refused_alike_and_the_job_goes_on() {
    let program = example("mpi_steps");
    let job = mpirun(
        &["-n", "2", program.to_str().unwrap(), "--mismatch"],
        &[],
        Duration::from_secs(240),
        None,
    );
    assert!(job.status.success(), "{}\n{}", job.stdout, job.stderr);
    for rank in 0..2 {
        let refused: Vec<&str> = job
            .stdout
            .lines()
            .filter(|l| l.starts_with(&format!("rank {rank}: refused: ")))
            .collect();
        assert_eq!(refused.len(), 2, "{}", job.stdout);
        let shape = "called the step differently (rank 1): rank 1 passes argument 3 as \
                     F32[4, 2, 72] from the host, rank 0 as F32[4, 4, 72] from the host";
        assert!(refused[0].contains(shape), "{}", refused[0]);
        let place = "rank 1 passes argument 4 as F32[4, 4, 72] from the host, rank 0 as \
                     F32[4, 4, 72] as an array on groups [0]";
        assert!(refused[1].contains(place), "{}", refused[1]);
        for line in &refused {
            assert!(line.contains("fix the call on the ranks named"), "{line}");
        }
        let ran = format!("rank {rank}: the call after the refused ones ran");
        assert!(job.stdout.contains(&ran), "{}", job.stdout);
    }
}

/// Rank 1 never starts its second exchange (`TESSERA_FAULT=stall-exchange@1`): rank 0's exchange
/// gives up at the deadline (3 s) with the typed timeout naming rank 1, the example's `?` drops
/// the job, and dropping a job whose collective is stuck aborts it (rank 1 with it) instead of
/// waiting in `MPI_Finalize`: the job ends, by that abort.
#[test]
fn a_library_user_dropping_the_job_after_an_exchange_timed_out_ends_the_job() {
    let program = example("mpi_steps");
    let job = mpirun(
        &["-n", "2", program.to_str().unwrap()],
        &[
            ("TESSERA_FAULT", "stall-exchange@1"),
            ("TESSERA_MPI_TIMEOUT_S", "3"),
        ],
        Duration::from_secs(120),
        Some("never starts its second exchange"),
    );
    assert!(!job.status.success(), "{}\n{}", job.stdout, job.stderr);
    let report = job
        .stderr
        .lines()
        .find(|l| l.starts_with("tessera: rank 0 ends the MPI job (MPI_Abort) as it is dropped"))
        .unwrap_or_else(|| panic!("rank 0 did not abort the job: {}", job.stderr));
    for part in [
        "the MPI collective 'exchange' did not complete on rank 0 within 3s",
        "rank 1 never reached it",
    ] {
        assert!(report.contains(part), "missing '{part}': {report}");
    }
    // The job ended (within the test's limit: a job waiting in MPI_Finalize would have been
    // killed there and failed the test), by rank 0's abort, reported above.
}

/// Process 0 of a two-process job, running group 0: it agrees with itself and moves nothing.
struct GroupZeroOfTwo;

impl Processes for GroupZeroOfTwo {
    fn local_groups(&self) -> Vec<usize> {
        vec![0]
    }
    fn process_index(&self) -> (usize, usize) {
        (2, 0)
    }
    fn process_of(&self, group: usize) -> usize {
        group
    }
    fn exchange(&self, outgoing: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ProcessError> {
        Ok(vec![Vec::new(); outgoing.len()])
    }
    fn transport(
        &self,
        _: &std::sync::Arc<std::collections::HashMap<ValueId, OutputLayout>>,
    ) -> Result<std::sync::Arc<dyn Transport<tessera_pjrt::Array>>, ProcessError> {
        Err(ProcessError::Comm("no transport in this test".into()))
    }
    fn broadcast(&self, _: usize, values: Vec<f64>) -> Result<Vec<f64>, ProcessError> {
        Ok(values)
    }
    fn agree(&self, _: u64, _: &str) -> Result<(), ProcessError> {
        Ok(())
    }
}

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// `(w0, w1, lr, xs, ys) -> (w0', w1')`: 1F1B over two stages, a layer each, then SGD.
fn one_loop_step() -> ClosedJaxpr {
    let (rows, w) = (f32(&[4, 8]), f32(&[8, 8]));
    let loss = trace(&[rows.clone(), w.clone(), w.clone(), rows], |a| {
        let h = a[0]
            .matmul(&a[1])
            .tanh()
            .enter_stage(1)
            .matmul(&a[2])
            .tanh();
        vec![(&h - &a[3]).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap();
    let batch = f32(&[2, 4, 8]);
    trace(&[w.clone(), w, f32(&[]), batch.clone(), batch], |a| {
        let outs = treduce(&[&a[0], &a[1]], &[&a[3], &a[4]], 0, "1f1b", &[], |w, mb| {
            value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
        });
        vec![&a[0] - &(&a[2] * &outs[1]), &a[1] - &(&a[2] * &outs[2])]
    })
    .unwrap()
}

#[test]
fn a_parameter_or_data_held_by_another_processs_group_is_refused_naming_the_fix() {
    let client = Client::cpu(8).unwrap();
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 2), ("data", 4)]).unwrap(), "stage").unwrap();
    let options = MpmdJitOptions {
        processes: Some(std::sync::Arc::new(GroupZeroOfTwo)),
        ..MpmdJitOptions::default()
    };
    let step = one_loop_step();
    let jit = mpmd_jit_with(&client, &mesh, &step, &options).unwrap();
    let mut args: Vec<StepArg> = step
        .jaxpr
        .in_avals()
        .iter()
        .map(|a| StepArg::Host(Array::zeros(a)))
        .collect();
    // The first stage's weight, on group 1 (process 1) instead of group 0, where it is read.
    let sharding = MpmdSharding::new(&mesh, [1], &PartitionSpec::replicated()).unwrap();
    let remote = MpmdArray::remote(&[8, 8], ElementType::F32, sharding);
    args[0] = StepArg::Mpmd(Box::new(remote));
    let err = jit.call_mpmd(&args).unwrap_err().to_string();
    assert!(
        err.contains("step argument 0 lies on groups [1], of other processes"),
        "{err}"
    );
    assert!(err.contains("pass it from the host"), "{err}");
    // Micro-batch data read by stage 0 (group 0), on group 1: refused alike, by every process
    // (the check reads only where arguments lie, which the processes agreed on), so none waits
    // for the others.
    args[0] = StepArg::Host(Array::zeros(&f32(&[8, 8])));
    let sharding = MpmdSharding::new(&mesh, [1], &PartitionSpec::replicated()).unwrap();
    let remote = MpmdArray::remote(&[2, 4, 8], ElementType::F32, sharding);
    args[3] = StepArg::Mpmd(Box::new(remote));
    let err = jit.call_mpmd(&args).unwrap_err().to_string();
    assert!(
        err.contains("step argument 3 lies on groups [1], of other processes, but stages on groups [0] read it"),
        "{err}"
    );
    assert!(
        err.contains("micro-batch data on devices must lie"),
        "{err}"
    );
}
