//! `tessera train` as an MPI job (`mpirun -n G`, one rank per MPMD group): its losses equal the
//! one-process run's bit for bit (also with tensor-parallel and FSDP stages), and failures end the whole job in bounded time — a task that
//! fails on rank 2, a rank killed with SIGKILL, a rank that stalls (in a task, or before an
//! exchange: the others' collective times out), ranks that built different steps, and a job
//! whose size is not the group count.
//!
//! Every job runs under a time limit after which the test kills it (mpirun and its ranks, by
//! process group); the jobs run one at a time (4 ranks on a small machine).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::PathBuf;
use std::time::Duration;

use tessera_tests::mpi_launch::{Ended, mpirun, run_alone, scratch};
use tessera_tests::tessera_bin;

fn train_args(schedule: &str, stages: &str, groups: &str, steps: &str) -> Vec<String> {
    [
        "train",
        "--model",
        "gpt",
        "--schedule",
        schedule,
        "--stages",
        stages,
        "--mpmd-dim",
        groups,
        "--microbatches",
        "8",
        "--devices",
        "8",
        "--steps",
        steps,
        "--json",
    ]
    .map(String::from)
    .to_vec()
}

/// The `losses` of a `--json` summary, the last line of `stdout`.
fn losses(stdout: &str) -> Vec<f64> {
    let last = stdout.lines().last().unwrap_or_default();
    let summary: serde_json::Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("the last line is not the JSON summary ({e}): {stdout}"));
    summary["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap())
        .collect()
}

/// The `--stages` value of a command line.
fn stages_of(args: &[String]) -> usize {
    let at = args.iter().position(|a| a == "--stages").unwrap();
    args[at + 1].parse().unwrap()
}

fn equal_to_one_process(schedule: &str, stages: &str, groups: &str) {
    let args = train_args(schedule, stages, groups, "3");
    same_losses_in_a_job(&args, groups, schedule);
}

/// Runs `tessera` with `args` in one process and as a job of `groups` ranks, and checks their
/// losses bit for bit.
fn same_losses_in_a_job(args: &[String], groups: &str, schedule: &str) {
    let alone = run_alone(args);
    assert!(
        alone.status.success(),
        "{}",
        String::from_utf8_lossy(&alone.stderr)
    );
    let bin = tessera_bin();
    let mut launch = vec!["-n", groups, bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    let job = mpirun(&launch, &[], Duration::from_secs(300), None);
    assert!(job.status.success(), "{}", job.stderr);
    // No rank prints the plugin's log preamble (absl's warning, the device count).
    for noise in [
        "absl::InitializeLog",
        "cpu_device_count set via create_options",
    ] {
        assert!(!job.stderr.contains(noise), "{}", job.stderr);
    }
    let (one, many) = (
        losses(&String::from_utf8_lossy(&alone.stdout)),
        losses(&job.stdout),
    );
    assert_eq!(one.len(), 3);
    // Bit for bit: the same programs accumulate in the same order.
    assert_eq!(
        one.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
        many.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
        "{schedule}: one process {one:?}, {groups} ranks {many:?}"
    );
    // Rank 0 reports the whole job's pipeline figures, from every rank's timings.
    let summary = |out: &str| -> serde_json::Value {
        serde_json::from_str(out.lines().last().unwrap_or_default()).unwrap()
    };
    let (one, many) = (
        summary(&String::from_utf8_lossy(&alone.stdout)),
        summary(&job.stdout),
    );
    assert_eq!(many["order_matches_schedule"], true, "{many}");
    let bubble = many["bubble_ratio_measured"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&bubble), "{schedule}: bubble {bubble}");
    let makespan = many["makespan_ms"].as_f64().unwrap();
    assert!(makespan > 0.0, "{schedule}: makespan {makespan}");
    let inflight = |v: &serde_json::Value| v["memory"]["stages"].clone();
    let per_stage = inflight(&many);
    assert_eq!(
        per_stage.as_array().map(Vec::len),
        Some(stages_of(args)),
        "{many}"
    );
    // The same schedule order gives the same in-flight micro-batches per stage.
    let counts = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["peak_inflight_microbatches"].clone())
            .collect()
    };
    assert_eq!(counts(&per_stage), counts(&inflight(&one)), "{schedule}");
    for group in many["memory"]["groups"].as_array().unwrap() {
        assert!(group["peak_live_bytes"].as_u64().unwrap() > 0, "{group}");
    }
}

#[test]
fn four_ranks_train_the_gpt_as_one_process_does() {
    equal_to_one_process("1f1b", "4", "4");
    equal_to_one_process("zero-bubble", "4", "4");
}

/// A 2-rank job of `args` trains like one process of `args` and `alone_extra`, within 1e-5
/// over its 3 steps.
fn two_ranks_train_like_one_process_with(args: &[String], alone_extra: &[&str]) {
    let mut alone_args = args.to_vec();
    alone_args.extend(alone_extra.iter().map(|a| a.to_string()));
    let alone = run_alone(&alone_args);
    assert!(
        alone.status.success(),
        "{}",
        String::from_utf8_lossy(&alone.stderr)
    );
    let bin = tessera_bin();
    let mut launch = vec!["-n", "2", bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    let job = mpirun(&launch, &[], Duration::from_secs(300), None);
    assert!(job.status.success(), "{}", job.stderr);
    let (want, got) = (
        losses(&String::from_utf8_lossy(&alone.stdout)),
        losses(&job.stdout),
    );
    let steps = args
        .iter()
        .position(|a| a == "--steps")
        .map(|i| &args[i + 1]);
    let steps: usize = steps.and_then(|s| s.parse().ok()).unwrap_or(0);
    assert_eq!((got.len(), want.len()), (steps, steps));
    for (a, b) in got.iter().zip(&want) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs(),
            "job {got:?}, one process with {alone_extra:?} {want:?}"
        );
    }
}

/// Saved residuals under MPI (the default `--remat`): a 2-rank job, its forwards' residuals
/// kept on their groups for the backwards, trains like one process whose backwards recompute
/// their forwards (`--remat nothing_saveable`), within 1e-5; so does a job whose residuals wait
/// in `pinned_host` memory (`--remat-offload`).
#[test]
fn a_job_saving_residuals_trains_like_one_process_that_recomputes() {
    let mut args = train_args("1f1b", "2", "2", "3");
    two_ranks_train_like_one_process_with(&args, &["--remat", "nothing_saveable"]);
    args.extend(["--remat-offload".to_string(), "pinned_host".to_string()]);
    two_ranks_train_like_one_process_with(&args, &["--remat", "nothing_saveable"]);
}

/// Data-parallel groups reducing once per step under MPI (the default `--grad-reduce`): a
/// 2-rank job whose groups of four devices each keep partial gradients until the step's end
/// trains like one process reducing every micro-batch's gradient, within 1e-5 over 10 AdamW
/// steps, for GPT and Llama; with FSDP too.
#[test]
fn a_job_reducing_once_per_step_trains_like_one_process_reducing_every_micro_batch() {
    for model in ["gpt", "llama"] {
        let mut args = train_args("1f1b", "2", "2", "10");
        let at = args.iter().position(|a| a == "--model").unwrap();
        args[at + 1] = model.to_owned();
        let small = [
            "--optimizer",
            "adamw",
            "--lr",
            "0.003",
            "--layers",
            "2",
            "--d-model",
            "32",
            "--heads",
            "2",
            "--seq-len",
            "16",
        ];
        args.extend(small.map(str::to_owned));
        two_ranks_train_like_one_process_with(&args, &["--grad-reduce", "per-microbatch"]);
        // FSDP stages gathering once per step (the default) against one process gathering and
        // reducing in every task.
        let mut fsdp = args.clone();
        fsdp.push("--fsdp".to_owned());
        let per_task = [
            "--grad-reduce",
            "per-microbatch",
            "--fsdp-gather",
            "per-microbatch",
        ];
        two_ranks_train_like_one_process_with(&fsdp, &per_task);
    }
}

#[test]
fn two_ranks_with_two_stages_each_train_as_one_process_does() {
    equal_to_one_process("interleaved-1f1b", "4", "2");
    equal_to_one_process("dualpipev", "4", "2");
}

#[test]
fn two_ranks_train_a_tensor_parallel_fsdp_gpt_as_one_process_does() {
    // Each rank's group splits its stage over model (Megatron) and its parameters over data.
    let mut args = train_args("1f1b", "2", "2", "3");
    let sharded = [
        "--mesh",
        "stage=2,data=2,model=2",
        "--fsdp",
        "--layers",
        "2",
    ];
    let tiny = [
        "--d-model",
        "32",
        "--seq-len",
        "16",
        "--batch",
        "16",
        "--eval-every",
        "0",
    ];
    args.extend(sharded.iter().chain(&tiny).map(|a| a.to_string()));
    same_losses_in_a_job(&args, "2", "1f1b, TP x FSDP");
}

#[test]
fn two_ranks_clip_by_the_global_norm_as_one_process_does() {
    // The norm's parts cross the ranks; each rank updates its own stage's weights.
    // With AdamW, whose moments stay on their parameters' groups and ranks.
    let mut args = train_args("1f1b", "2", "2", "3");
    args.extend(
        [
            "--clip-grad-norm",
            "0.05",
            "--optimizer",
            "adamw",
            "--lr",
            "0.003",
        ]
        .map(String::from),
    );
    same_losses_in_a_job(&args, "2", "1f1b, clipped");
}

#[test]
fn two_ranks_train_a_tied_embedding_as_one_process_does() {
    // The token table is read by the first and the last stage: its gradient's parts meet on
    // rank 0, and the updated table goes back to rank 1.
    let mut args = train_args("1f1b", "2", "2", "3");
    args.push("--tie-embeddings".into());
    same_losses_in_a_job(&args, "2", "1f1b, tied");
    // And clipped by the global norm, whose parts include the tied table's summed gradient.
    args.extend(["--clip-grad-norm", "0.05"].map(String::from));
    same_losses_in_a_job(&args, "2", "1f1b, tied and clipped");
}

/// The lines of the job's error output in which a rank reports its error.
fn rank_reports(job: &Ended) -> Vec<&str> {
    job.stderr
        .lines()
        .filter(|l| l.starts_with("error (rank"))
        .collect()
}

fn faulty_job(env: &[(&str, &str)], limit: Duration, marker: Option<&str>) -> Ended {
    let bin = tessera_bin();
    let args = train_args("1f1b", "4", "4", "2");
    let mut launch = vec!["-n", "4", bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    mpirun(&launch, env, limit, marker)
}

#[test]
fn a_task_failing_on_rank_2_ends_the_job_naming_it() {
    let job = faulty_job(
        &[("TESSERA_FAULT", "fail@2")],
        Duration::from_secs(180),
        Some("injected failure"),
    );
    assert!(!job.status.success(), "{}", job.stderr);
    let reports = rank_reports(&job);
    assert_eq!(reports.len(), 1, "{}", job.stderr);
    assert!(
        reports[0].contains("rank 2 of 4") && reports[0].contains("on group 2 failed"),
        "{}",
        reports[0]
    );
    assert!(reports[0].contains("task '"), "{}", reports[0]);
    // Ended by the failure, not by a rank's deadline (600 s, past the test's limit of 180 s).
    assert!(!job.stderr.contains("deadline passed"), "{}", job.stderr);
}

/// A rank killed with SIGKILL ends the job: not at another rank's deadline (600 s, past the
/// test's limit of 180 s, which would fail the test), but as the launcher sees the rank die.
#[test]
fn a_rank_killed_with_sigkill_ends_the_job_before_any_deadline() {
    let job = faulty_job(
        &[("TESSERA_FAULT", "kill@2")],
        Duration::from_secs(180),
        Some("with SIGKILL"),
    );
    assert!(!job.status.success(), "{}", job.stderr);
    assert!(job.stderr.contains("with SIGKILL"), "{}", job.stderr);
    assert!(!job.stderr.contains("deadline passed"), "{}", job.stderr);
}

#[test]
fn a_stalled_rank_gives_the_deadline_error_naming_the_value() {
    let job = faulty_job(
        &[("TESSERA_FAULT", "stall@2"), ("TESSERA_TIMEOUT_S", "3")],
        Duration::from_secs(180),
        None,
    );
    assert!(!job.status.success(), "{}", job.stderr);
    // The first rank to give up reports its deadline; the others, told, say what they wait for.
    let report = job
        .stderr
        .lines()
        .find(|l| l.starts_with("error (rank") && l.contains("deadline passed"))
        .unwrap_or_else(|| panic!("no deadline reported: {}", job.stderr));
    assert!(report.contains("value"), "{report}");
}

/// Rank 2 never starts its second exchange (`TESSERA_FAULT=stall-exchange@2`): the other ranks,
/// waiting in that exchange, give up at the collectives' deadline (3 s here) with the typed
/// timeout naming the exchange, rank 2 and the fix, and the job ends (`MPI_Abort`) instead of
/// hanging.
#[test]
fn a_rank_stalled_before_an_exchange_times_the_others_out_naming_it() {
    let job = faulty_job(
        &[
            ("TESSERA_FAULT", "stall-exchange@2"),
            ("TESSERA_MPI_TIMEOUT_S", "3"),
        ],
        Duration::from_secs(120),
        Some("never starts its second exchange"),
    );
    assert!(!job.status.success(), "{}", job.stderr);
    let reports = rank_reports(&job);
    assert!(!reports.is_empty(), "no error reported: {}", job.stderr);
    for report in &reports {
        assert!(!report.starts_with("error (rank 2 "), "{report}");
        for part in [
            "the MPI collective 'exchange' did not complete",
            "within 3s",
            "rank 2 never reached it",
            "look at the output of rank 2",
            "TESSERA_MPI_TIMEOUT_S",
        ] {
            assert!(report.contains(part), "missing '{part}': {report}");
        }
    }
    // The others gave up at the deadline and the job ended (within the test's limit), rank 2
    // aborted with them.
}

#[test]
fn ranks_that_built_different_steps_refuse_to_start_naming_the_rank() {
    let bin = tessera_bin();
    let args = train_args("1f1b", "4", "4", "1");
    let mut other = args.clone();
    other[10] = "4".into(); // --microbatches 4 on the last rank
    let mut launch = vec!["-n", "3", bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    launch.extend([":", "-n", "1", bin.to_str().unwrap()]);
    launch.extend(other.iter().map(String::as_str));
    let job = mpirun(&launch, &[], Duration::from_secs(180), None);
    assert!(!job.status.success(), "{}", job.stderr);
    let reports = rank_reports(&job);
    assert_eq!(reports.len(), 1, "{}", job.stderr);
    // Found when the ranks compare their options, before the steps are built.
    assert!(
        reports[0].contains("rank 3 has --microbatches = 4 but rank 0 has 8"),
        "{}",
        reports[0]
    );
    // The same step compiled for another partitioner on the last rank is refused too.
    let mut launch = vec!["-n", "3", bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    launch.extend([":", "-n", "1", "env", "TESSERA_PARTITIONER=gspmd"]);
    launch.push(bin.to_str().unwrap());
    launch.extend(args.iter().map(String::as_str));
    let job = mpirun(&launch, &[], Duration::from_secs(180), None);
    assert!(!job.status.success(), "{}", job.stderr);
    assert!(
        job.stderr
            .contains("rank 3 differs from rank 0 in the partitioner"),
        "{}",
        job.stderr
    );
}

/// Ranks given another `--lr` (which no step program shows) or other `--data` are refused at
/// start-up, naming the first rank and option that differ.
#[test]
fn ranks_started_with_other_options_or_data_are_refused_naming_them() {
    let bin = tessera_bin();
    let args = train_args("1f1b", "2", "2", "1");
    let job_of = |mine: &[&str], theirs: &[&str]| {
        let mut launch = vec!["-n", "1", bin.to_str().unwrap()];
        launch.extend(args.iter().map(String::as_str).chain(mine.iter().copied()));
        launch.extend([":", "-n", "1", bin.to_str().unwrap()]);
        launch.extend(
            args.iter()
                .map(String::as_str)
                .chain(theirs.iter().copied()),
        );
        mpirun(&launch, &[], Duration::from_secs(120), None)
    };
    let job = job_of(&["--lr", "0.1"], &["--lr", "0.5"]);
    assert!(!job.status.success(), "{}", job.stderr);
    assert!(
        job.stderr
            .contains("rank 1 has --lr = 0.5 but rank 0 has 0.1"),
        "{}",
        job.stderr
    );
    let (a, same, b) = (scratch("a.txt"), scratch("same.txt"), scratch("b.txt"));
    let corpus =
        std::fs::read(tessera_tests::repo_root().join("examples/data/corpus.txt")).unwrap();
    std::fs::write(&a, &corpus).unwrap();
    std::fs::write(&same, &corpus).unwrap();
    let mut changed = corpus.clone();
    changed[7] ^= 1;
    std::fs::write(&b, &changed).unwrap();
    let path = |p: &PathBuf| p.to_str().unwrap().to_owned();
    let (a, same, b) = (path(&a), path(&same), path(&b));
    // The same bytes under two names pass the check; one changed byte does not.
    let job = job_of(&["--data", &a], &["--data", &same]);
    assert!(job.status.success(), "{}", job.stderr);
    let job = job_of(&["--data", &a], &["--data", &b]);
    assert!(!job.status.success(), "{}", job.stderr);
    assert!(
        job.stderr.contains("rank 1 has the --data file's SHA-256"),
        "{}",
        job.stderr
    );
}

/// A job's reference restarts from the parameters gathered from every rank (every
/// `RESTART_EVERY` = 10 steps; a tied table is held by two ranks), and with `--no-reference` the
/// job claims no comparison.
#[test]
fn a_job_restarts_its_reference_from_every_ranks_parameters() {
    let bin = tessera_bin();
    let mut args = train_args("1f1b", "2", "2", "12");
    args.extend(["--tie-embeddings", "--eval-every", "0"].map(String::from));
    let mut launch = vec!["-n", "2", bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    let job = mpirun(&launch, &[], Duration::from_secs(300), None);
    assert!(job.status.success(), "{}", job.stderr);
    let summary: serde_json::Value =
        serde_json::from_str(job.stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(summary["reference_losses"].as_array().unwrap().len(), 12);
    assert!(
        summary["max_relative_difference"].as_f64().unwrap() <= 1e-4,
        "{summary}"
    );
    launch.push("--no-reference");
    let job = mpirun(&launch, &[], Duration::from_secs(300), None);
    assert!(job.status.success(), "{}", job.stderr);
    let summary: serde_json::Value =
        serde_json::from_str(job.stdout.lines().last().unwrap_or_default()).unwrap();
    assert!(summary["max_relative_difference"].is_null(), "{summary}");
    assert!(summary["reference_loss"].is_null(), "{summary}");
}

#[test]
fn a_job_with_fewer_ranks_than_groups_is_refused() {
    let bin = tessera_bin();
    let args = train_args("1f1b", "4", "4", "1");
    let mut launch = vec!["-n", "2", bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    let job = mpirun(&launch, &[], Duration::from_secs(120), None);
    assert!(!job.status.success(), "{}", job.stderr);
    assert!(
        job.stderr
            .contains("the job has 2 ranks; launch one rank per group (mpirun -n 4)"),
        "{}",
        job.stderr
    );
}

/// The example program `name`, which `cargo xtask test` builds.
fn example(name: &str) -> PathBuf {
    let path = tessera_bin().parent().unwrap().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo xtask test` builds it (cargo build -p tessera-examples --example {name})",
        path.display()
    );
    path
}

#[test]
fn a_step_with_metrics_and_an_indexed_loop_trains_on_two_ranks_as_the_interpreter_does() {
    // The metrics reach rank 0 from the last stage's rank; the batch is read on the ranks of
    // the stages that use it.
    let example = example("pipeline_metrics");
    let job = mpirun(
        &["-n", "2", example.to_str().unwrap()],
        &[],
        Duration::from_secs(180),
        None,
    );
    assert!(job.status.success(), "{}\n{}", job.stdout, job.stderr);
    for rank in 0..2 {
        let done = format!("rank {rank}: every step equals the sequential loop");
        assert!(job.stdout.contains(&done), "{}", job.stdout);
        let step5 = format!("rank {rank}: step 5  losses");
        assert!(job.stdout.contains(&step5), "{}", job.stdout);
    }
}

#[test]
fn arrays_move_between_the_spmd_and_mpmd_layouts_across_processes() {
    let example = example("mpi_reshard");
    let job = mpirun(
        &["-n", "2", example.to_str().unwrap()],
        &[],
        Duration::from_secs(180),
        None,
    );
    assert!(job.status.success(), "{}\n{}", job.stdout, job.stderr);
    // Rank 1 holds group 1's array (half of it came from rank 0); both hold the array of both
    // groups; back in the SPMD layout each rank holds its own 4 devices' shards.
    for line in [
        "rank 1: group 1: group 1 holds the array in 4 shards",
        "rank 0: both groups: group 0 holds the array in 4 shards",
        "rank 1: both groups: group 1 holds the array in 4 shards",
        "rank 0: back to SPMD: 4 shards held here",
        "rank 1: back to SPMD: 4 shards held here",
        "rank 0: batched array 0: 4 shards held here",
        "rank 1: batched array 1: 4 shards held here",
        "rank 0: global threshold 1000",
        "rank 1: global threshold 1000",
    ] {
        assert!(
            job.stdout.contains(line),
            "missing '{line}':\n{}",
            job.stdout
        );
    }
    assert!(!job.stdout.contains("rank 0: group 1"), "{}", job.stdout);
    assert!(job.stdout.lines().any(|l| l == "ok"), "{}", job.stdout);
}

/// The `eval_losses` of a `--json` summary, as `(step, loss)`.
fn eval_losses(stdout: &str) -> Vec<(u64, f64)> {
    let last = stdout.lines().last().unwrap_or_default();
    let summary: serde_json::Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("the last line is not the JSON summary ({e}): {stdout}"));
    summary["eval_losses"]
        .as_array()
        .unwrap_or_else(|| panic!("no eval_losses: {summary}"))
        .iter()
        .map(|p| (p[0].as_u64().unwrap(), p[1].as_f64().unwrap()))
        .collect()
}

/// The eval losses of `tessera train --eval-every 2` over 3 steps, in one process and as a job
/// of `groups` ranks (the job's in text, with each loss's one-device check, unless `json`).
fn eval_in_a_job(schedule: &str, stages: &str, groups: &str, json: bool) {
    let mut args = train_args(schedule, stages, groups, "3");
    args.extend(["--eval-every", "2"].map(String::from));
    let alone = run_alone(&args);
    let alone_out = String::from_utf8_lossy(&alone.stdout);
    assert!(
        alone.status.success(),
        "{}",
        String::from_utf8_lossy(&alone.stderr)
    );
    let one = eval_losses(&alone_out);
    assert_eq!(
        one.iter().map(|e| e.0).collect::<Vec<_>>(),
        [2, 3],
        "{alone_out}"
    );
    if !json {
        args.retain(|a| a != "--json");
    }
    let bin = tessera_bin();
    let mut launch = vec!["-n", groups, bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    let job = mpirun(&launch, &[], Duration::from_secs(300), None);
    assert!(job.status.success(), "{}", job.stderr);
    let many: Vec<(u64, f64)> = match json {
        true => eval_losses(&job.stdout),
        // `step    2  eval loss 4.911213  (one device 4.911213)`: rank 0 checked it against the
        // unstaged loss on one device, on the parameters gathered from every rank.
        false => job
            .stdout
            .lines()
            .filter(|l| l.contains("eval loss"))
            .map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(words[5], "(one", "no one-device check: {l}");
                let step = words[1].parse().unwrap();
                let (loss, device): (f64, f64) = (
                    words[4].parse().unwrap(),
                    words[7].trim_end_matches(')').parse().unwrap(),
                );
                assert!((loss - device).abs() <= 1e-5 * device.abs(), "{l}");
                (step, loss)
            })
            .collect(),
    };
    assert_eq!(many.len(), one.len(), "{schedule}: {}", job.stdout);
    for ((step, a), (s, b)) in one.iter().zip(&many) {
        assert_eq!(step, s);
        let tolerance = match json {
            true => 1e-5,
            // The text has 6 decimals.
            false => 1e-5 + 5e-7 / a.abs(),
        };
        assert!(
            (a - b).abs() <= tolerance * a.abs(),
            "{schedule}: step {step}: one process {a}, {groups} ranks {b}"
        );
    }
}

#[test]
fn ranks_compute_the_eval_loss_where_the_model_lives_as_one_process_does() {
    // Each rank runs its stages' forwards on the parameters it holds.
    eval_in_a_job("1f1b", "4", "4", true);
    // Two stages per rank (round robin), the losses checked against one device on rank 0.
    eval_in_a_job("interleaved-1f1b", "4", "2", false);
}

/// Rank 1's sending thread cannot read the shards it sends
/// (`TESSERA_FAULT=unreadable-send@1`): it tells the receiver, whose wait fails at once naming
/// rank 1 and the value, instead of waiting for the task deadline (600 s by default, which
/// the test's own limit of 180 s would pass first).
#[test]
fn a_send_whose_shard_cannot_be_read_fails_its_receiver_naming_the_sender() {
    let job = faulty_job(
        &[("TESSERA_FAULT", "unreadable-send@1")],
        Duration::from_secs(180),
        None,
    );
    assert!(!job.status.success(), "{}", job.stderr);
    let report = job
        .stderr
        .lines()
        .find(|l| l.contains("was not sent"))
        .unwrap_or_else(|| panic!("no receiver named the failed send: {}", job.stderr));
    assert!(
        report.contains("rank 1 could not read a shard's memory"),
        "{report}"
    );
    assert!(!job.stderr.contains("deadline passed"), "{}", job.stderr);
}

/// Rank 2's second task panics (`TESSERA_FAULT=panic@2`): its worker's catch turns the panic
/// into the typed error a failed task gives, and the job ends with Tessera's report naming the
/// rank, instead of the panic hook aborting the job (exit 101, no report) before the catch could
/// run.
#[test]
fn a_panic_a_worker_catches_ends_the_job_with_its_report() {
    let job = faulty_job(
        &[("TESSERA_FAULT", "panic@2")],
        Duration::from_secs(180),
        Some("injected panic"),
    );
    assert!(!job.status.success(), "{}", job.stderr);
    let reports = rank_reports(&job);
    assert_eq!(reports.len(), 1, "{}", job.stderr);
    assert!(
        reports[0].contains("rank 2 of 4") && reports[0].contains("panicked"),
        "{}",
        reports[0]
    );
}

/// A `--data` file that no rank can read is refused at the options check, naming the rank, the
/// file and the reason (every rank hashed it as "no data" alike, so the check passed and the
/// run failed later).
#[test]
fn a_data_file_no_rank_can_read_is_refused_naming_it() {
    let bin = tessera_bin();
    let missing = std::env::temp_dir().join(format!("tessera-no-such-data-{}", std::process::id()));
    let mut args = train_args("1f1b", "2", "2", "1");
    args.extend(["--data".into(), missing.display().to_string()]);
    let mut launch = vec!["-n", "2", bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    let job = mpirun(&launch, &[], Duration::from_secs(120), None);
    assert!(!job.status.success(), "{}", job.stderr);
    let expected = format!("rank 0 cannot read the --data file {}", missing.display());
    assert!(job.stderr.contains(&expected), "{}", job.stderr);
    assert!(job.stderr.contains("No such file"), "{}", job.stderr);
}

/// Rank 2 stops (SIGSTOP) in the middle of a pipelined step, under `--timeout 10` (with both
/// variables at 600 s, which the option overrides): each other
/// rank, at its deadline or told by the first to give up, names the stalled process (group 2
/// is rank 2: one group per rank) and the value it waits for itself, and the job ends with a
/// failure. (Its messages and exit are checked; the seconds are not.)
#[test]
fn a_rank_stopped_mid_step_is_named_by_every_other_rank() {
    let bin = tessera_bin();
    let mut args = train_args("1f1b", "4", "4", "2");
    args.extend(["--timeout".into(), "10".into()]);
    let mut launch = vec!["-n", "4", bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    // --timeout takes precedence over both variables (which would wait 10 minutes).
    let job = mpirun(
        &launch,
        &[
            ("TESSERA_FAULT", "sigstop@2"),
            ("TESSERA_TIMEOUT_S", "600"),
            ("TESSERA_MPI_TIMEOUT_S", "600"),
        ],
        Duration::from_secs(240),
        None,
    );
    assert!(!job.status.success(), "{}", job.stderr);
    assert!(job.stderr.contains("stopping process"), "{}", job.stderr);
    assert!(
        job.stderr.contains("for longer than 10s"),
        "the deadline is --timeout's: {}",
        job.stderr
    );
    for rank in [0, 1, 3] {
        let header = format!("error (rank {rank} of 4)");
        let report = job
            .stderr
            .lines()
            .find(|l| l.starts_with(&header))
            .unwrap_or_else(|| panic!("rank {rank} said nothing: {}", job.stderr));
        assert!(
            report.contains(&format!("group {rank} waits for value")),
            "rank {rank} does not say what it waits for: {report}"
        );
        assert!(
            report.contains("the process of group 2 is stalled"),
            "rank {rank} does not name rank 2: {report}"
        );
    }
}
