//! `tessera oracle KIND FILE`: run a file of JAX-made test vectors.

use super::out::outln;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `tessera oracle`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    kind: Kind,
}

#[derive(Debug, clap::Subcommand)]
enum Kind {
    /// Sharding cases (`sharding_cases.json`).
    Sharding {
        /// The oracle file.
        file: PathBuf,
    },
    /// Jaxpr cases (`jaxpr_cases.json`).
    Jaxpr {
        /// The oracle file.
        file: PathBuf,
        /// The backend that evaluates the programs.
        #[arg(long, default_value = "interp")]
        backend: String,
        /// Also check input gradients.
        #[arg(long)]
        grads: bool,
    },
    /// Collective cases (`collectives_cases.json`).
    Collectives {
        /// The oracle file.
        file: PathBuf,
        /// The backend that evaluates the programs.
        #[arg(long, default_value = "interp")]
        backend: String,
        /// Also check input gradients.
        #[arg(long)]
        grads: bool,
    },
}

pub fn run(args: Args, plugin: Option<&str>) -> anyhow::Result<ExitCode> {
    match args.kind {
        Kind::Sharding { file } => {
            let report = tessera_sharding::oracle::run_file(&file)?;
            for line in &report.failures {
                outln!("{line}")?;
            }
            super::report_summary(report.passed, report.failed)
        }
        Kind::Jaxpr {
            file,
            backend,
            grads,
        } => run_jaxpr(&file, &backend, grads, plugin),
        Kind::Collectives {
            file,
            backend,
            grads,
        } => run_collectives(&file, &backend, grads, plugin),
    }
}

fn run_jaxpr(
    file: &std::path::Path,
    backend: &str,
    grads: bool,
    plugin: Option<&str>,
) -> anyhow::Result<ExitCode> {
    // Eight devices: a program with sharding constraints runs on its mesh (the sharded cases).
    let client = if backend == "pjrt" {
        Some(tessera_pjrt::Client::open(plugin, 8)?)
    } else {
        None
    };
    let interp = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| {
        tessera_ir::interp::eval_closed(program, inputs).map_err(|e| e.to_string())
    };
    let pjrt = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| match &client {
        Some(client) => match tessera::jit::program_mesh(program) {
            Ok(Some(_)) => tessera::jit::run_spmd(client, program, inputs),
            Ok(None) => tessera::jit::run_on_device(client, program, inputs, 0),
            Err(e) => return Err(e.to_string()),
        }
        .map_err(|e| e.to_string()),
        None => Err("no PJRT client".to_owned()),
    };
    let evaluate: &tessera_ir::oracle::Evaluate<'_> = match backend {
        "interp" => &interp,
        "pjrt" => &pjrt,
        other => anyhow::bail!("unknown backend `{other}`: use `interp` or `pjrt`"),
    };
    let report = if grads {
        tessera_ir::oracle::run_file_with_grads(file, evaluate)
    } else {
        tessera_ir::oracle::run_file_with(file, evaluate)
    }
    .map_err(anyhow::Error::msg)?;
    for (name, why) in &report.failures {
        outln!("FAILED {name}: {why}")?;
    }
    super::report_summary(report.passed, report.failures.len())
}

fn run_collectives(
    file: &std::path::Path,
    backend: &str,
    grads: bool,
    plugin: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let interp = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| {
        tessera_ir::interp::eval_closed(program, inputs).map_err(|e| e.to_string())
    };
    let client = if backend == "pjrt" {
        Some(tessera_pjrt::Client::open(plugin, 8)?)
    } else {
        None
    };
    let pjrt = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| match &client {
        Some(client) => tessera::jit::run_spmd(client, program, inputs).map_err(|e| e.to_string()),
        None => Err("no PJRT client".to_owned()),
    };
    let evaluate: &tessera_ir::oracle::Evaluate<'_> = match backend {
        "interp" => &interp,
        "pjrt" => &pjrt,
        other => anyhow::bail!("unknown backend `{other}`: use `interp` or `pjrt`"),
    };
    let report = tessera_ir::oracle_collectives::run_file(file, evaluate, grads)
        .map_err(anyhow::Error::msg)?;
    for (name, why) in &report.failures {
        outln!("FAILED {name}: {why}")?;
    }
    super::report_summary(report.passed, report.failures.len())
}
