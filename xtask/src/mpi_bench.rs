//! `cargo xtask bench --mpi-transport`: the runtime's MPI transport against a raw MPI ping-pong
//! of the same bytes, `mpirun -n 2 tessera-bench-mpi --json` run [`RUNS`] times; the run file
//! `docs/runs/cpu-mpi-transport.json` (every run's figures) and its section of
//! docs/benchmarks.md.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::cmd::{self, step};
use crate::ratio::{self, Bound};

/// The heading of the section in docs/benchmarks.md.
pub const HEADING: &str = "## MPI transport between processes (Tessera only)";
/// Runs of the benchmark program.
pub const RUNS: usize = 5;
/// The transport's bandwidth over raw MPI's at 64 MiB must be at least this (issue 15).
pub const TARGET: f64 = 0.8;
/// The size the target is for.
const TARGET_BYTES: u64 = 64 << 20;

/// One run: each size's figures, as the program prints them (a JSON line per size).
fn run_once(root: &Path) -> anyhow::Result<Vec<Value>> {
    let bin = root.join("target/release/tessera-bench-mpi");
    let out = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-n", "2"])
        .arg(&bin)
        .arg("--json")
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("could not start mpirun (cargo xtask setup installs Open MPI)")?;
    if !out.status.success() {
        bail!(
            "mpirun -n 2 tessera-bench-mpi failed ({}); its figures are not used",
            out.status
        );
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).context("a line of tessera-bench-mpi is not JSON"))
        .collect()
}

/// Runs the benchmark and writes its section into docs/benchmarks.md.
pub fn run(root: &Path) -> anyhow::Result<()> {
    cmd::cargo(&[
        "build",
        "--release",
        "-p",
        "tessera-benches",
        "--bin",
        "tessera-bench-mpi",
    ])?;
    let mut runs = Vec::new();
    for r in 1..=RUNS {
        step(&format!("bench: mpi transport: run {r}/{RUNS}"));
        runs.push(Value::from(run_once(root)?));
    }
    let mpi = cmd::output("mpirun", &["--version"])
        .and_then(|v| v.lines().next().map(str::to_owned))
        .unwrap_or_default();
    crate::runs::write(
        root,
        "cpu-mpi-transport",
        serde_json::json!({"mpirun": mpi, "runs": runs}),
    )?;
    crate::runs::regenerate(root)
}

fn size_label(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// The section, from its run file.
pub fn render_run(md: &mut String, run: &Value) -> anyhow::Result<()> {
    let runs = run["data"]["runs"]
        .as_array()
        .filter(|r| !r.is_empty())
        .context("cpu-mpi-transport.json has no runs")?;
    let rows = |r: &Value| r.as_array().cloned().unwrap_or_default();
    let sizes: Vec<u64> = rows(&runs[0])
        .iter()
        .filter_map(|s| s["bytes"].as_u64())
        .collect();
    let _ = writeln!(md, "{HEADING}\n");
    let _ = writeln!(
        md,
        "`cargo xtask bench --mpi-transport`: `mpirun --oversubscribe -n 2 tessera-bench-mpi \
         --json` ({}; one host, shared memory), {} runs. For each size, two ranks bounce a value \
         back and forth: through the runtime's `MpiTransport` (a float32 array on each rank's \
         one CPU device, sent by the endpoint's sending thread from the device buffer's memory, \
         received by the other rank's receiving thread into memory that becomes the new device \
         buffer), then as a raw `MPI_Send`/`MPI_Recv` ping-pong of the same bytes between the \
         main threads. One way is half the median round trip (50 round trips, 10 from 16 MiB on, \
         after 2 of warm-up); the table gives each column's median over the runs and the range \
         of the ratio. Measured at {}.\n",
        run["data"]["mpirun"].as_str().unwrap_or("mpirun"),
        runs.len(),
        crate::runs::provenance(run)
    );
    md.push_str("| bytes | transport one way | raw MPI one way | transport / raw bandwidth (median) | range over the runs |\n");
    md.push_str("|---:|---:|---:|---:|---:|\n");
    let mut target_ratios = Vec::new();
    for bytes in sizes {
        let pick = |key: &str| -> Vec<f64> {
            runs.iter()
                .flat_map(rows)
                .filter(|s| s["bytes"].as_u64() == Some(bytes))
                .filter_map(|s| s[key].as_f64())
                .collect()
        };
        let ratios = pick("transport_over_raw_bandwidth");
        let (low, high) = ratio::spread(&ratios);
        let _ = writeln!(
            md,
            "| {} | {:.1} µs | {:.1} µs | {:.2} | {low:.2}–{high:.2} |",
            size_label(bytes),
            ratio::median(&pick("transport_one_way_us")),
            ratio::median(&pick("raw_one_way_us")),
            ratio::median(&ratios)
        );
        if bytes == TARGET_BYTES {
            target_ratios = ratios;
        }
    }
    let _ = writeln!(
        md,
        "\nTarget (issue 15): {} of raw bandwidth at 64 MiB: {}.\n",
        ratio::target_cell(Bound::AtLeast, TARGET),
        ratio::check(&target_ratios, Bound::AtLeast, TARGET)
    );
    Ok(())
}
