//! `tessera schedule`: build, validate, simulate and draw a pipeline schedule.
//!
//! `tessera schedule NAME --stages S --microbatches M [--mpmd-dim D] [--costs F,B,W]
//! [--latency L] [--json] [--svg FILE] [--execute-synthetic --time-unit-ms U]`. NAME is any
//! schedule of the registry (`--list` shows them). Without `--json` it prints the ASCII
//! timeline and the statistics. `--execute-synthetic` also runs the plan through the MPMD
//! runtime with tasks that sleep for their costs (`U` milliseconds a unit) and a transport with
//! the latency, and reports `measured_makespan_ms` next to `simulated_makespan_ms`.

use super::out::{out, outln};
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
    /// Run the plan through the MPMD runtime with sleeping tasks and compare its makespan with
    /// the simulator's.
    #[arg(long)]
    execute_synthetic: bool,
    /// Milliseconds per cost unit in a synthetic run.
    #[arg(long, default_value_t = 1.0)]
    time_unit_ms: f64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let registry = Registry::with_builtins();
    let Some(name) = args.name.as_deref().filter(|_| !args.list) else {
        for (name, about) in registry.describe() {
            outln!("{name:<24} {about}")?;
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
    if args.execute_synthetic {
        return synthetic(&args, name, &plan, &costs);
    }
    if args.json {
        outln!("{}", render::json(&plan, &costs, &sim))?;
    } else {
        out!("{}", render::ascii(&plan, &sim))?;
        outln!()?;
        out!("{}", render::stats(&plan, &sim))?;
        if let Some(path) = &args.svg {
            outln!("svg:              {}", path.display())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--execute-synthetic`: the plan run with sleeping tasks, its makespan next to the
/// simulator's.
fn synthetic(
    args: &Args,
    name: &str,
    plan: &tessera_schedule::Plan,
    costs: &Costs,
) -> anyhow::Result<ExitCode> {
    if !(args.time_unit_ms.is_finite() && args.time_unit_ms > 0.0) {
        anyhow::bail!(
            "--time-unit-ms is {}; give a positive number of milliseconds",
            args.time_unit_ms
        );
    }
    // The tasks sleep in whole nanoseconds: a shorter unit would sleep 0 and report a ratio
    // against a makespan of (nearly) 0.
    if args.time_unit_ms < 1e-6 {
        anyhow::bail!(
            "--time-unit-ms {} is shorter than the 1 ns a task can sleep; give at least 1e-6 \
             (e.g. 1)",
            args.time_unit_ms
        );
    }
    // The run sleeps for the simulated makespan: refuse one that would take longer than an hour.
    let simulated = tessera_schedule::simulate(plan, costs)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .makespan;
    let wall_s = simulated * args.time_unit_ms / 1000.0;
    if !wall_s.is_finite() || wall_s > 3600.0 {
        anyhow::bail!(
            "--execute-synthetic would sleep for {wall_s:.0} s (makespan {simulated} × \
             --time-unit-ms {}); give a smaller --time-unit-ms, e.g. 1",
            args.time_unit_ms
        );
    }
    let unit = std::time::Duration::from_secs_f64(args.time_unit_ms / 1000.0);
    let options = tessera_mpmd::runtime::RunOptions::from_env()?;
    let run = tessera_mpmd::synthetic::run_synthetic(plan, costs, unit, &options)?;
    let ratio = run.measured_makespan_ms / run.simulated_makespan_ms;
    if args.json {
        let report = serde_json::json!({
            "schedule": name,
            "stages": plan.num_stages,
            "microbatches": plan.num_microbatches,
            "mpmd_dim": plan.num_actors(),
            "costs": args.costs,
            "latency": costs.latency,
            "time_unit_ms": args.time_unit_ms,
            "measured_makespan_ms": run.measured_makespan_ms,
            "simulated_makespan_ms": run.simulated_makespan_ms,
            "ratio": ratio,
        });
        outln!("{report}")?;
    } else {
        outln!(
            "{name}: {} stages on {} actors, {} microbatches, {} ms per unit",
            plan.num_stages,
            plan.num_actors(),
            plan.num_microbatches,
            args.time_unit_ms
        )?;
        outln!("measured makespan:  {:.3} ms", run.measured_makespan_ms)?;
        outln!("simulated makespan: {:.3} ms", run.simulated_makespan_ms)?;
        outln!("measured / simulated: {ratio:.4}")?;
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

    #[test]
    fn a_synthetic_run_goes_through_the_runtime_and_is_never_faster_than_the_simulator() {
        use tessera_schedule::{Costs, Registry, ScheduleParams};
        let params = ScheduleParams {
            stages: 4,
            mpmd_dim: 2,
        };
        let registry = Registry::with_builtins();
        for name in ["interleaved-1f1b", "dualpipev"] {
            let plan = registry
                .create(name, params)
                .and_then(|s| s.plan(8))
                .expect(name);
            let costs = Costs::uniform(4, 1.0, 2.0, 1.0).with_latency(0.5);
            let unit = std::time::Duration::from_micros(200);
            let run = tessera_mpmd::synthetic::run_synthetic(
                &plan,
                &costs,
                unit,
                &tessera_mpmd::runtime::RunOptions::default(),
            )
            .expect(name);
            // Every action ran, in the schedule's order on each group.
            let orders = run.timings.group_orders(2);
            for (got, want) in orders.iter().zip(&plan.actors) {
                let want: Vec<String> = want
                    .iter()
                    .map(tessera_mpmd::pipeline::action_name)
                    .collect();
                assert_eq!(got, &want, "{name}");
            }
            // Tasks sleep at least their cost and wait for their inputs, so the run cannot beat
            // the simulated critical path.
            assert!(
                run.measured_makespan_ms >= run.simulated_makespan_ms * 0.999,
                "{name}: {} < {}",
                run.measured_makespan_ms,
                run.simulated_makespan_ms
            );
        }
        let err = tessera(&[
            "schedule",
            "1f1b",
            "--execute-synthetic",
            "--time-unit-ms",
            "0",
        ])
        .expect_err("rejected");
        assert!(err.to_string().contains("--time-unit-ms"), "{err}");
    }
}
