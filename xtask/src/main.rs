//! Project automation for Tessera: `cargo xtask setup | test | demo | bench`.
//!
//! Every command says what it is doing. `setup` is idempotent: a second run checks what is
//! installed and skips it.

mod cmd;
mod jax;
#[allow(dead_code)]
#[path = "../../crates/tessera-pjrt/src/known_plugins.rs"]
mod known_plugins;
mod mpi_demo;
mod plugin;
mod setup;
mod synthetic;
mod test;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Tessera's build and test automation.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install what the build and the tests need (MLIR 22 from Debian, the PJRT CPU plugins).
    Setup(setup::Args),
    /// Run `setup`, then every test of the workspace, ending with `N passed, M failed`.
    Test {
        /// Extra arguments passed to `cargo test` (e.g. a test name filter after `--`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run `setup`, then the main job.
    Demo,
    /// Run `setup`, then the criterion benchmarks.
    Bench {
        /// Also run JAX on the same machine and write docs/benchmarks.md.
        #[arg(long)]
        compare_jax: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Setup(args) => setup::run_with(&args).map(|_| ExitCode::SUCCESS),
        Command::Test { args } => test::run(&args),
        Command::Demo => demo(),
        Command::Bench { compare_jax } => bench(compare_jax),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The main job: pipelined training of a byte-level GPT over 4 MPMD groups x 2 devices, checked
/// step by step against the unpipelined run; before it, the devices of the PJRT CPU plugin,
/// JAX's programs lowered, compiled and differentiated on PJRT, JAX's collectives inside
/// shard_map on 8 devices, and the sharding oracle.
fn demo() -> anyhow::Result<ExitCode> {
    setup::run()?;
    let shared = cmd::workspace_root()
        .join("..")
        .join("shared")
        .join("oracle");
    let tessera = |args: &[&str]| {
        let mut all = vec!["run", "--quiet", "--package", "tessera", "--"];
        all.extend_from_slice(args);
        cmd::cargo(&all)
    };
    cmd::step("demo: the devices of the PJRT CPU plugin");
    tessera(&["devices", "--cpu-devices", "8"])?;
    if shared.is_dir() {
        let jaxpr = shared.join("jaxpr_cases.json");
        let sharding = shared.join("sharding_cases.json");
        cmd::step(
            "demo: JAX's jaxprs, lowered to StableHLO, compiled by XLA and differentiated, on PJRT",
        );
        tessera(&[
            "oracle",
            "jaxpr",
            "--backend",
            "pjrt",
            "--grads",
            &jaxpr.to_string_lossy(),
        ])?;
        cmd::step("demo: JAX's shard_map collectives with gradients, SPMD on 8 PJRT devices");
        let collectives = shared.join("collectives_cases.json");
        tessera(&[
            "oracle",
            "collectives",
            "--backend",
            "pjrt",
            "--grads",
            &collectives.to_string_lossy(),
        ])?;
        cmd::step("demo: the sharding algebra against JAX");
        tessera(&["oracle", "sharding", &sharding.to_string_lossy()])?;
    } else {
        cmd::step(&format!(
            "demo: {} is missing; skipping the oracle runs",
            shared.display()
        ));
    }
    cmd::step(
        "demo: the model library (examples/nn.rs): a Llama-style decoder with AdamW and warm-up + \
         cosine under jit, a checkpoint halfway, a resumed run equal to the uninterrupted one, \
         the loss curve as SVG",
    );
    cmd::cargo(&[
        "run",
        "--quiet",
        "--package",
        "tessera-examples",
        "--example",
        "nn",
    ])?;
    cmd::step(
        "demo: training a byte-level GPT pipelined over 4 MPMD groups x 2 devices with the 1F1B schedule",
    );
    tessera(&[
        "train",
        "--model",
        "gpt",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--devices",
        "8",
        "--steps",
        "30",
    ])?;
    mpi_demo::run()?;
    Ok(ExitCode::SUCCESS)
}

fn bench(compare_jax: bool) -> anyhow::Result<ExitCode> {
    setup::run()?;
    if compare_jax {
        cmd::step("bench: comparing with JAX on the same machine (docs/benchmarks.md)");
        jax::compare()?;
        return Ok(ExitCode::SUCCESS);
    }
    cmd::step("bench: running the criterion benchmarks");
    cmd::cargo(&["bench", "--package", "tessera-benches"])?;
    Ok(ExitCode::SUCCESS)
}
