//! `tessera schedule`: build, validate, simulate and draw a pipeline schedule.
//!
//! `tessera schedule NAME --stages S --microbatches M [--mpmd-dim D] [--costs F,B,W]
//! [--latency L] [--json] [--svg FILE]`. NAME is any schedule of the registry (`--list` shows
//! them). Without `--json` it prints the ASCII timeline and the statistics.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tessera_schedule::{Costs, Registry, ScheduleParams, render, simulate};

/// Arguments of `tessera schedule`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The schedule: gpipe, 1f1b, eager-1f1b, interleaved-1f1b, zero-bubble, dualpipev, … (see --list).
    #[arg(required_unless_present = "list")]
    name: Option<String>,
    /// Number of pipeline stages.
    #[arg(long, default_value_t = 4)]
    stages: u32,
    /// Number of microbatches.
    #[arg(long, default_value_t = 8)]
    microbatches: u32,
    /// Number of actors (MPMD groups); defaults to the number of stages.
    #[arg(long)]
    mpmd_dim: Option<u32>,
    /// Per-stage costs F,B,W: forward, whole backward, its weight-gradient part (BwdI costs B-W).
    #[arg(long, default_value = "1,2,1")]
    costs: String,
    /// Time for a value to cross from one actor to another.
    #[arg(long, default_value_t = 0.0)]
    latency: f64,
    /// Print a JSON report instead of the timeline.
    #[arg(long)]
    json: bool,
    /// Also write an SVG timeline to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// List the known schedules and exit.
    #[arg(long)]
    list: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let registry = Registry::with_builtins();
    let Some(name) = args.name.as_deref().filter(|_| !args.list) else {
        for (name, about) in registry.describe() {
            println!("{name:<24} {about}");
        }
        return Ok(ExitCode::SUCCESS);
    };
    super::check_pipeline_size(args.stages, args.microbatches)?;
    let params = ScheduleParams {
        stages: args.stages,
        mpmd_dim: args.mpmd_dim.unwrap_or(args.stages),
    };
    let plan = registry
        .create(name, params)
        .and_then(|s| s.plan(args.microbatches))?;
    let costs = Costs::parse(&args.costs, args.stages)?.with_latency(args.latency);
    let sim = simulate(&plan, &costs)?;
    if let Some(path) = &args.svg {
        std::fs::write(path, render::svg(&plan, &costs, &sim))
            .with_context(|| format!("writing the SVG timeline to {}", path.display()))?;
    }
    if args.json {
        println!("{}", render::json(&plan, &costs, &sim));
    } else {
        print!("{}", render::ascii(&plan, &sim));
        println!();
        print!("{}", render::stats(&plan, &sim));
        if let Some(path) = &args.svg {
            println!("svg:              {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use std::process::ExitCode;

    use clap::Parser;

    use crate::cli::{Cli, run};

    fn tessera(args: &[&str]) -> anyhow::Result<ExitCode> {
        let cli = Cli::try_parse_from(["tessera"].iter().chain(args))?;
        run(cli)
    }

    #[test]
    fn writes_the_svg_of_the_issue_example() {
        let path =
            std::env::temp_dir().join(format!("tessera-schedule-{}.svg", std::process::id()));
        let path_text = path.to_str().expect("a UTF-8 temp dir");
        let args = [
            "schedule",
            "interleaved-1f1b",
            "--stages",
            "8",
            "--mpmd-dim",
            "4",
            "--microbatches",
            "8",
        ];
        let code = tessera(&[&args[..], &["--svg", path_text]].concat()).expect("runs");
        assert_eq!(code, ExitCode::SUCCESS);
        let svg = std::fs::read_to_string(&path).expect("SVG written");
        std::fs::remove_file(&path).expect("remove the SVG");
        assert!(svg.contains("interleaved-1f1b: 8 stages on 4 actors, 8 microbatches"));
    }

    #[test]
    fn json_and_errors() {
        assert_eq!(
            tessera(&[
                "schedule",
                "1f1b",
                "--stages",
                "4",
                "--microbatches",
                "6",
                "--json"
            ])
            .expect("runs"),
            ExitCode::SUCCESS
        );
        let err = tessera(&[
            "schedule",
            "dualpipev",
            "--stages",
            "6",
            "--microbatches",
            "8",
        ])
        .expect_err("rejected");
        assert!(err.to_string().contains("--mpmd-dim 3"), "{err}");
        let err = tessera(&["schedule", "1f1b", "--costs", "1;2"]).expect_err("rejected");
        assert!(err.to_string().contains("is not F,B,W"), "{err}");
    }
}
