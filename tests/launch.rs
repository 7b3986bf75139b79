//! `tessera launch`: a 4-rank `tessera train` job whose rank 2 is killed with SIGKILL at two
//! random steps is restarted from its newest checkpoint each time, and its final losses equal
//! an uninterrupted job's bit for bit. (`mpirun` only: no Slurm is installed here, so the
//! `srun` form is untested.)

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use tessera_tests::mpi_launch::{JOBS, mpirun, scratch};
use tessera_tests::tessera_bin;

const STEPS: u64 = 8;

fn train_args(checkpoints: &std::path::Path) -> Vec<String> {
    let steps = STEPS.to_string();
    [
        "train",
        "--model",
        "gpt",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--mpmd-dim",
        "4",
        "--microbatches",
        "8",
        "--devices",
        "8",
        "--steps",
        &steps,
        "--checkpoint-every",
        "1",
        "--checkpoint-dir",
        &checkpoints.display().to_string(),
        "--json",
    ]
    .map(String::from)
    .to_vec()
}

/// The `(steps, losses)` of a `--json` summary, the last line of `stdout`.
fn steps_and_losses(stdout: &str) -> (Vec<u64>, Vec<f64>) {
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"));
    let steps = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap());
    let losses = v["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap());
    (steps.collect(), losses.collect())
}

/// Two distinct steps in 2..STEPS, drawn from the clock (printed with any failure).
fn random_steps() -> (u64, u64) {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let first = 2 + nanos % 3; // 2..=4
    let second = first + 2 + (nanos / 7) % (STEPS - first - 2); // first+2..STEPS
    (first, second)
}

#[test]
fn a_job_whose_rank_dies_twice_is_restarted_and_ends_as_an_uninterrupted_one() {
    let (first, second) = random_steps();
    let kills = format!("2:{first},2:{second}");
    // The uninterrupted job.
    let whole_dir = scratch("launch-whole");
    let _ = std::fs::remove_dir_all(&whole_dir);
    let bin = tessera_bin();
    let args = train_args(&whole_dir);
    let mut launch = vec!["-n", "4", bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    let whole = mpirun(&launch, &[], std::time::Duration::from_secs(600), None);
    assert!(whole.status.success(), "{}", whole.stderr);
    let (steps, losses) = steps_and_losses(&whole.stdout);
    assert_eq!(steps, (1..=STEPS).collect::<Vec<_>>());

    // The same under `tessera launch`, rank 2 killed at the two steps.
    let dir = scratch("launch-restarted");
    let markers = scratch("launch-markers");
    let _ = (
        std::fs::remove_dir_all(&dir),
        std::fs::remove_dir_all(&markers),
    );
    std::fs::create_dir_all(&markers).unwrap();
    let launched = {
        let _one = JOBS.lock().unwrap_or_else(|e| e.into_inner());
        // `timeout` bounds the whole launch (three attempts at most).
        Command::new("timeout")
            .arg("900")
            .arg(&bin)
            .args(["launch", "-n", "4", "--max-restarts", "3", "--"])
            .args(train_args(&dir))
            .env_remove("TESSERA_PJRT_PLUGIN")
            .env("TESSERA_KILL_AT", &kills)
            .env("TESSERA_KILL_ONCE_DIR", &markers)
            .output()
            .unwrap()
    };
    let stderr = String::from_utf8_lossy(&launched.stderr);
    let stdout = String::from_utf8_lossy(&launched.stdout);
    assert!(launched.status.success(), "kills {kills}: {stderr}");
    let restarts: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("tessera launch: the job failed"))
        .collect();
    assert_eq!(restarts.len(), 2, "kills {kills}: {stderr}");
    assert!(
        restarts[0].contains("restart 1 of 3 from checkpoint"),
        "{}",
        restarts[0]
    );
    assert!(
        restarts[1].contains("restart 2 of 3 from checkpoint"),
        "{}",
        restarts[1]
    );
    // The last attempt resumed after the second kill's step - 1 and ran to the end; its losses
    // are the uninterrupted job's at the same steps, bit for bit.
    let (got_steps, got_losses) = steps_and_losses(&stdout);
    assert_eq!(
        got_steps,
        (second..=STEPS).collect::<Vec<_>>(),
        "kills {kills}"
    );
    let want: Vec<u64> = losses[(second - 1) as usize..]
        .iter()
        .map(|l| l.to_bits())
        .collect();
    let got: Vec<u64> = got_losses.iter().map(|l| l.to_bits()).collect();
    assert_eq!(got, want, "kills {kills}");
    for d in [&whole_dir, &dir, &markers] {
        let _ = std::fs::remove_dir_all(d);
    }
}
