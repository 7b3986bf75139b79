//! Project automation for Tessera: `cargo xtask setup | test | demo | bench | gpu-bundle`.
//!
//! Every command says what it is doing. `setup` is idempotent: a second run checks what is
//! installed and skips it.

mod alloc;
mod checkpoint_bench;
mod cmd;
mod compile_bench;
mod compile_count;
mod demo;
mod doc_check;
mod dp_bench;
mod generate_bench;
mod gpu_bundle;
mod gpu_run;
mod jax;
#[allow(dead_code)]
#[path = "../../crates/tessera-pjrt/src/known_plugins.rs"]
mod known_plugins;
mod llama;
mod mpi_bench;
mod mpi_demo;
mod plan_bench;
mod plugin;
mod ratio;
mod remat_bench;
mod runs;
mod setup;
mod synthetic;
mod tensorboard;
mod test;
mod venv;

use std::path::PathBuf;
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
    /// Install what the build and the tests need (MLIR 22 from Debian, the PJRT CPU plugins,
    /// a pinned TensorBoard in target/tb-venv).
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
        /// Also run JAX on the same machine: the run files docs/runs/cpu-*.json it measures,
        /// then docs/benchmarks.md generated from docs/runs/.
        #[arg(long)]
        compare_jax: bool,
        /// With --compare-jax: only the "Llama train step, 1 device" rows
        /// (docs/runs/cpu-llama.json), then the page.
        #[arg(long, requires = "compare_jax")]
        llama_only: bool,
        /// Only what saving a checkpoint every step costs (background and synchronous saves
        /// against none): docs/runs/cpu-checkpoints.json, then the page.
        #[arg(long, conflicts_with = "compare_jax")]
        checkpoints: bool,
        /// Only a pipelined step saving its residuals against recomputing them
        /// (docs/runs/cpu-remat.json), then the page.
        #[arg(long, conflicts_with_all = ["compare_jax", "checkpoints"])]
        remat: bool,
        /// Only data-parallel and FSDP stages reducing once per step against once per
        /// micro-batch, and the demo's exposed transfer wait (docs/runs/cpu-data-parallel.json),
        /// then the page.
        #[arg(long, conflicts_with_all = ["compare_jax", "checkpoints", "remat"])]
        data_parallel: bool,
        /// Only greedy generation against transformers (PyTorch on the CPU; needs
        /// TESSERA_TORCH_PYTHON, see benches/hf/generate_speed.py): docs/runs/cpu-generate.json,
        /// then the page.
        #[arg(long, conflicts_with_all = ["compare_jax", "checkpoints", "remat", "data_parallel"])]
        generate: bool,
        /// Only the MPI transport against raw MPI (`mpirun -n 2 tessera-bench-mpi`, 5 runs):
        /// docs/runs/cpu-mpi-transport.json, then the page.
        #[arg(long, conflicts_with_all = ["compare_jax", "checkpoints", "remat", "data_parallel", "generate"])]
        mpi_transport: bool,
        /// Only the compile times of a `treduce` step and a scanned stack of layers against
        /// their unrolled forms (criterion): docs/runs/cpu-treduce-compile.json and
        /// cpu-scan-compile.json, then the page.
        #[arg(long, conflicts_with_all = ["compare_jax", "checkpoints", "remat", "data_parallel", "generate", "mpi_transport"])]
        compile: bool,
        /// Measure nothing: regenerate docs/benchmarks.md from the run files in docs/runs/.
        #[arg(long, conflicts_with_all = ["compare_jax", "checkpoints", "remat", "data_parallel", "generate", "mpi_transport", "compile"])]
        render: bool,
    },
    /// Write DIR: the stripped release binary (xz), the shared libraries a GPU machine may lack,
    /// JAX's side of the Llama benchmark, JAX's oracle programs and DIR/run.sh, which runs them
    /// there against the machine's own JAX (at most 60 MiB).
    GpuBundle {
        /// The directory to write (empty, new, or an earlier bundle).
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Setup(args) => setup::run_with(&args).map(|_| ExitCode::SUCCESS),
        Command::Test { args } => test::run(&args),
        Command::Demo => demo::run(),
        Command::Bench {
            compare_jax,
            llama_only,
            checkpoints,
            remat,
            data_parallel,
            generate,
            mpi_transport,
            compile,
            render,
        } => {
            // One benchmark alone: set up, measure, write its run file and the page.
            let alone: Option<fn(&std::path::Path) -> anyhow::Result<()>> = if compile {
                Some(compile_bench::run)
            } else if mpi_transport {
                Some(mpi_bench::run)
            } else if generate {
                Some(generate_bench::run)
            } else if data_parallel {
                Some(dp_bench::run)
            } else if remat {
                Some(remat_bench::run)
            } else {
                None
            };
            if render {
                runs::regenerate(&cmd::workspace_root()).map(|()| ExitCode::SUCCESS)
            } else if let Some(measure) = alone {
                setup::run()
                    .and_then(|_| measure(&cmd::workspace_root()))
                    .map(|()| ExitCode::SUCCESS)
            } else {
                bench(compare_jax, llama_only, checkpoints)
            }
        }
        Command::GpuBundle { dir } => gpu_bundle::run(&dir).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn bench(compare_jax: bool, llama_only: bool, checkpoints: bool) -> anyhow::Result<ExitCode> {
    setup::run()?;
    if checkpoints {
        cmd::step("bench: what a checkpoint every step costs (docs/benchmarks.md)");
        checkpoint_bench::run(&cmd::workspace_root())?;
        return Ok(ExitCode::SUCCESS);
    }
    if llama_only {
        cmd::step("bench: the Llama rows against JAX (docs/benchmarks.md)");
        jax::compare_llama_only()?;
        return Ok(ExitCode::SUCCESS);
    }
    if compare_jax {
        cmd::step("bench: comparing with JAX on the same machine (docs/benchmarks.md)");
        jax::compare()?;
        return Ok(ExitCode::SUCCESS);
    }
    cmd::step("bench: running the criterion benchmarks");
    cmd::cargo(&["bench", "--package", "tessera-benches"])?;
    Ok(ExitCode::SUCCESS)
}
