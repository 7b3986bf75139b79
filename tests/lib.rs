//! Helpers shared by the workspace-level integration tests.

use std::path::PathBuf;

pub mod mpi_launch;

/// The repository root (the parent of this package's directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The `shared/` folder beside the repository, holding the JAX oracle files.
pub fn shared_dir() -> PathBuf {
    repo_root().join("..").join("shared")
}

/// The path of the built `tessera` binary (built by `cargo xtask test` before the tests run).
pub fn tessera_bin() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("debug").join("tessera")
}

/// Runs the `tessera` program with `args`, checks that it succeeded, and returns the last line
/// it printed (the oracle runners' `N passed, M failed`).
pub fn tessera_last_line<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let out = std::process::Command::new(tessera_bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (build it with `cargo build -p tessera`)",
                tessera_bin().display()
            )
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().last().unwrap_or_default().to_owned()
}

/// Asserts that an oracle report has no failures (listing them otherwise) and `cases` passes.
pub fn assert_all_pass(report: &tessera_ir::oracle::Report, cases: usize) {
    let failures: Vec<String> = report
        .failures
        .iter()
        .map(|(n, w)| format!("{n}: {w}"))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(report.passed, cases);
}

/// Runs the named cases of `jaxpr_real_cases.json` (the file another issue brings into the
/// oracle runners whole) with their gradients on the interpreter and on PJRT; returns how many
/// (case, backend) pairs passed, panicking with the first failure.
pub fn named_real_cases(names: &[&str]) -> usize {
    let path = shared_dir().join("oracle").join("jaxpr_real_cases.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let file: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let client = tessera_pjrt::Client::cpu(1).unwrap_or_else(|e| panic!("no PJRT CPU client: {e}"));
    let interp = |p: &tessera_ir::ClosedJaxpr, x: &[tessera_ir::Array]| {
        tessera_ir::interp::eval_closed(p, x).map_err(|e| e.to_string())
    };
    let on_pjrt = |p: &tessera_ir::ClosedJaxpr, x: &[tessera_ir::Array]| {
        tessera::jit::run_on_device(&client, p, x, 0).map_err(|e| e.to_string())
    };
    let backends: [(&str, &tessera_ir::oracle::Evaluate<'_>); 2] =
        [("interpreter", &interp), ("pjrt", &on_pjrt)];
    let cases = file["cases"].as_array().cloned().unwrap_or_default();
    let mut passed = 0;
    for name in names {
        let case = cases
            .iter()
            .find(|c| c["name"] == *name)
            .unwrap_or_else(|| panic!("no case {name} in {}", path.display()));
        let case: tessera_ir::oracle::Case =
            serde_json::from_value(case.clone()).unwrap_or_else(|e| panic!("case {name}: {e}"));
        for (backend, evaluate) in backends {
            tessera_ir::oracle::run_case_with(&case, evaluate)
                .and_then(|()| tessera_ir::oracle::check_grads(&case, evaluate))
                .unwrap_or_else(|e| panic!("{name} on the {backend}: {e}"));
            passed += 1;
        }
    }
    passed
}

/// The built-in schedules' names, as `tessera schedule --list` prints them (at least ten).
pub fn schedule_names() -> Vec<String> {
    let list = std::process::Command::new(tessera_bin())
        .args(["schedule", "--list"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tessera_bin().display()));
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    names
}

/// Runs `tessera train` with `args` (XLA's info logging off).
pub fn tessera_train<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    std::process::Command::new(tessera_bin())
        .arg("train")
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "2")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tessera_bin().display()))
}

/// The JSON summary (last line) of a `tessera train --json` run that must succeed.
pub fn train_summary(out: &std::process::Output, what: &str) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{what}: no JSON summary ({e}): {last}"))
}

/// A list of numbers from a training summary.
pub fn summary_numbers(summary: &serde_json::Value, key: &str) -> Vec<f64> {
    summary[key]
        .as_array()
        .unwrap_or_else(|| panic!("no list `{key}` in {summary}"))
        .iter()
        .map(|v| v.as_f64().unwrap_or(f64::NAN))
        .collect()
}

/// Asserts that host results equal the interpreter's `want`, result by result: the same shape,
/// and values within 1e-5 relative (1e-5 absolute below 1) for floats, exactly for integers.
pub fn assert_close(got: &[tessera_pjrt::HostArray], want: &[tessera_ir::Array]) {
    assert_eq!(got.len(), want.len(), "the number of results");
    for (k, (got, want)) in got.iter().zip(want).enumerate() {
        let got = tessera::jit::from_host(got, want.dtype())
            .unwrap_or_else(|e| panic!("result {k} does not convert to {}: {e}", want.dtype()));
        assert_eq!(got.shape(), want.shape(), "result {k}");
        for (a, b) in got.to_vec().iter().zip(want.to_vec()) {
            let tolerance = match want.dtype().is_float() {
                true => 1e-5 * b.abs().max(1.0),
                false => 0.0,
            };
            assert!(
                (a - b).abs() <= tolerance,
                "result {k}: {a} vs interpreter {b}"
            );
        }
    }
}

/// `program` compiled for the devices of `mesh` on `client`, its arguments and results
/// replicated, run on `args`: each result's values.
pub fn run_replicated(
    client: &tessera_pjrt::Client,
    mesh: &tessera_sharding::Mesh,
    program: &tessera_ir::ClosedJaxpr,
    args: &[tessera_ir::Array],
) -> Vec<Vec<f64>> {
    use tessera_sharding::{NamedSharding, PartitionSpec};
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! { panic!("{what}: {e}") };
    let whole = NamedSharding::new(mesh, PartitionSpec::replicated())
        .unwrap_or_else(|e| fail("the replicated sharding", &e));
    let (n_in, n_out) = (program.jaxpr.invars.len(), program.jaxpr.outvars.len());
    let compiled = tessera::jit::Jit::new(
        program.clone(),
        vec![whole.clone(); n_in],
        vec![whole.clone(); n_out],
    )
    .and_then(|jit| jit.lower())
    .and_then(|lowered| lowered.compile(client))
    .unwrap_or_else(|e| fail("compiling", &e));
    let placed: Vec<tessera_pjrt::Array> = args
        .iter()
        .map(|a| {
            tessera_pjrt::Array::device_put(client, a, &whole)
                .unwrap_or_else(|e| fail("placing an argument", &e))
        })
        .collect();
    let refs: Vec<&tessera_pjrt::Array> = placed.iter().collect();
    let out = compiled.call(&refs).unwrap_or_else(|e| fail("running", &e));
    out.iter()
        .map(|a| {
            a.to_host()
                .unwrap_or_else(|e| fail("reading a result", &e))
                .to_vec()
        })
        .collect()
}

/// The variable naming the file where tests that cannot run here record themselves: `cargo
/// xtask test` sets it and counts them as skipped, not passed.
pub const SKIPS_ENV: &str = "TESSERA_TEST_SKIPS";

/// Records that the calling test cannot run on this machine (`why`: no GPU, too few devices),
/// for the harness's count of skipped tests, and says so on stderr. The test then returns
/// without asserting anything.
pub fn skip(why: &str) {
    let name = std::thread::current().name().unwrap_or("?").to_owned();
    eprintln!("skipped: {name}: {why}");
    if let Some(path) = std::env::var_os(SKIPS_ENV) {
        use std::io::Write;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut file) = file {
            let _ = writeln!(file, "{name}: {why}");
        }
    }
}
