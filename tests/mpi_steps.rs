//! `mpmd_jit` step shapes under MPI (issue 32), two ranks, one per group: steps of two
//! sequential `treduce` loops (train then eval, two accumulation loops), a step whose code before its loop runs on a group's devices and
//! sends its results to the ranks reading them, and a step differentiating values it computes
//! before its loop. The `mpi_steps` example runs each twice (the second call on the weights the
//! first left on their groups) and checks every result it holds against the interpreter; here
//! every result of the job equals the one-process run's bit for bit (the same programs run on
//! the same groups), and every result is printed by some rank.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

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
fn four_step_shapes_on_two_ranks_equal_the_one_process_run_bit_for_bit() {
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
    let one: BTreeSet<String> = results(&alone_out).into_iter().collect();
    let many = results(&job.stdout);
    // 2 calls of: two loops (4 results), two sources (4), before (3), computed (5).
    assert_eq!(one.len(), 2 * (4 + 4 + 3 + 5), "{alone_out}");
    for line in &many {
        assert!(
            one.contains(line),
            "a job's result differs from the one-process run's: {line}\none process:\n{alone_out}"
        );
    }
    let covered: BTreeSet<&str> = many.iter().map(|l| name(l)).collect();
    let all: BTreeSet<&str> = one.iter().map(|l| name(l)).collect();
    assert_eq!(covered, all, "results no rank printed");
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
