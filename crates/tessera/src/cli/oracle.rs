//! `tessera oracle KIND FILE`: run a file of JAX-made test vectors.

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

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.kind {
        Kind::Sharding { file } => {
            let report = tessera_sharding::oracle::run_file(&file)?;
            for line in &report.failures {
                println!("{line}");
            }
            Ok(super::report_summary(report.passed, report.failed))
        }
        Kind::Jaxpr {
            file,
            backend,
            grads,
        } => {
            if grads {
                anyhow::bail!("--grads: gradients need the autodiff work item");
            }
            let backend = match backend.as_str() {
                "interp" => tessera_ir::oracle::Backend::Interp,
                other => anyhow::bail!("unknown backend `{other}` for jaxpr cases; use `interp`"),
            };
            let report = tessera_ir::oracle::run_file(&file, backend)?;
            for line in &report.failures {
                println!("{line}");
            }
            Ok(super::report_summary(report.passed, report.failures.len()))
        }
        Kind::Collectives { .. } => {
            super::not_built_yet("oracle collectives", "Collectives and shard_map")
        }
    }
}
