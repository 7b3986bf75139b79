//! The planner's sections of docs/benchmarks.md: one per preset of `benches/plan_accuracy.py`
//! (`docs/runs/cpu-plan-PRESET.json`), the default `tessera plan` predicted against measured.

use std::fmt::Write as _;

use anyhow::anyhow;
use serde_json::Value;

use crate::runs;

/// Of the plan's first 7, at least this many must measure within 15% of their prediction.
pub const WITHIN_TARGET: u64 = 6;
/// The planner's regret must be at most this.
pub const REGRET_TARGET: f64 = 0.05;

/// One preset's section, from its run file.
pub fn render_run(md: &mut String, run: &Value) -> anyhow::Result<()> {
    let data = &run["data"];
    let text = |key: &str| data[key].as_str().unwrap_or("?").to_owned();
    let number = |key: &str| {
        data[key]
            .as_f64()
            .ok_or_else(|| anyhow!("a plan run has no {key}"))
    };
    let candidates = data["candidates"]
        .as_array()
        .ok_or_else(|| anyhow!("a plan run has no candidates"))?;
    let held_out = if data["held_out"].as_bool() == Some(true) {
        ", held out from the time model's tuning"
    } else {
        ", the time model was tuned on it"
    };
    let _ = writeln!(
        md,
        "## `tessera plan` on the preset `{}`{held_out}",
        text("preset")
    );
    let _ = writeln!(md);
    let within = number("within_15_percent")? as u64;
    let of = number("of")? as u64;
    let regret = number("regret")?;
    let loads: Vec<String> = data["load_average"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|r| {
                    format!(
                        "{:.1}–{:.1}",
                        r["start"].as_f64().unwrap_or(f64::NAN),
                        r["end"].as_f64().unwrap_or(f64::NAN)
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let _ = writeln!(
        md,
        "`{}` (the default {}), {} layouts considered, ranked in {:.0} s; then `tessera \
         train --plan FILE --steps {}` of each candidate below, {} rounds taking turns{} (load \
         average at the start and end of each round: {}). Measured at {}.",
        text("plan_command"),
        // Runs since the calibration record what it did to each candidate.
        match data["of_untimed"].is_u64() {
            true => "`--refine` and `--calibrate`",
            false => "`--refine`, before `--calibrate` existed",
        },
        number("layouts_considered")?,
        number("plan_seconds")?,
        number("steps")?,
        number("rounds")?,
        // Runs since the rotation start each round one candidate further along.
        match data["order"].as_str() {
            Some("rotating") => ", each round starting one candidate further along",
            _ => "",
        },
        loads.join(", "),
        runs::provenance(run)
    );
    let _ = writeln!(md);
    // Runs since the confirming rounds (the first choice and the fastest layouts measured
    // again) judge the regret on those; older runs on the first rounds alone.
    let how = match data["regret_unconfirmed"].as_f64() {
        Some(first_rounds) => format!(
            "the first choice's measured step over the best measured one, both from {} fresh \
             rounds of the first choice and the {} layouts that measured fastest; over the first \
             rounds alone {:.1}%",
            // Runs before `--confirm-rounds` confirmed in as many rounds as they measured.
            data["confirm_rounds"]
                .as_f64()
                .map_or_else(|| number("rounds"), Ok)?,
            number("confirmed")? - 1.0,
            first_rounds * 100.0
        ),
        None => "the first choice's measured step over the best measured one".to_owned(),
    };
    let _ = writeln!(
        md,
        "**{within} of the first {of} within 15% of their prediction** (target {WITHIN_TARGET} \
         of 7: {}); **regret {:.1}%** ({how}; target at most {:.0}%: {}).",
        verdict(within >= WITHIN_TARGET),
        regret * 100.0,
        REGRET_TARGET * 100.0,
        verdict(regret <= REGRET_TARGET)
    );
    if let (Some(untimed_within), Some(untimed)) = (
        data["within_15_percent_untimed"].as_u64(),
        data["of_untimed"].as_u64(),
    ) {
        let _ = writeln!(
            md,
            "The plan's calibration timed {} of those {of} itself (marked †: their prediction \
             comes from its timings of them); of the {untimed} it predicted from the time model \
             and its group shape's factor (times the machine's level the plan measured last, \
             where it did), {untimed_within} within 15%.",
            of.saturating_sub(untimed),
        );
        let _ = writeln!(md);
    }
    render_drift(md, candidates, number("rounds")? as usize, probe_text(data));
    if let Some(gate) = gate_text(data) {
        let _ = writeln!(md, "{gate}");
        let _ = writeln!(md);
    }
    // The first choices and the layouts measured again; the rest of the measured layouts are
    // in the run file.
    let shown: Vec<&Value> = candidates
        .iter()
        .filter(|c| {
            c["rank"].as_u64().is_some_and(|r| r <= of) || c["confirmed_rounds_ms"].is_array()
        })
        .collect();
    let _ = writeln!(
        md,
        "The first {of} and the layouts measured again below; the other {} layouts measured (the \
         regret's band) are in the run file.",
        candidates.len() - shown.len()
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| rank | groups × devices | stages (layers) | micro-batches | schedule | remat | \
         predicted ms | measured ms (rounds) | measured / predicted |"
    );
    let _ = writeln!(md, "|---:|---|---|---:|---|---|---:|---|---:|");
    for c in shown {
        let timed = if c["timed_by_plan_ms"].is_number() {
            " †"
        } else {
            ""
        };
        let predicted = c["predicted_ms"].as_f64().unwrap_or(f64::NAN);
        let measured = c["measured_ms"].as_f64().unwrap_or(f64::NAN);
        let listed = |key: &str| -> Vec<String> {
            c[key]
                .as_array()
                .map(|r| {
                    r.iter()
                        .map(|v| format!("{:.1}", v.as_f64().unwrap_or(f64::NAN)))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut rounds = listed("rounds_ms").join(", ");
        let again = listed("confirmed_rounds_ms");
        if !again.is_empty() {
            let _ = write!(rounds, "; again {}", again.join(", "));
        }
        let layers: Vec<String> = c["stage_layers"]
            .as_array()
            .map(|l| l.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "| {}{timed} | {} × {} | {} ({}) | {} | {} | {} | {predicted:.1} | {measured:.1} ({}) | {:.2}× |",
            c["rank"],
            c["groups"],
            c["data"],
            c["stages"],
            layers.join(","),
            c["microbatches"],
            c["schedule"].as_str().unwrap_or("?"),
            c["remat"].as_str().unwrap_or("-"),
            rounds,
            measured / predicted
        );
    }
    let _ = writeln!(md);
    Ok(())
}

/// Each of the first `count` rounds' pace in `key` (`rounds_ms` or `confirmed_rounds_ms`): its
/// steps over each layout's median of the first rounds, the median over the round's layouts.
fn paces(candidates: &[Value], key: &str, count: usize) -> Vec<f64> {
    round_ratios(candidates, key, count, "measured_ms")
}

/// Each of the first `count` rounds' speed against the machine's as the plan ended: its steps
/// over the same layouts' steps trained once right after the plan, the median over the layouts
/// the plan timed (empty for runs without that check). The paces compare rounds with each
/// other; this compares them with the plan, whose timings the predictions come from.
fn against_plan(candidates: &[Value], count: usize) -> Vec<f64> {
    round_ratios(candidates, "rounds_ms", count, "after_plan_ms")
}

/// For each of the first `count` rounds in `key`, the median over the layouts that have both of
/// the round's step over the layout's `base` step.
fn round_ratios(candidates: &[Value], key: &str, count: usize, base: &str) -> Vec<f64> {
    (0..count)
        .filter_map(|k| {
            let mut ratios: Vec<f64> = candidates
                .iter()
                .filter_map(|c| Some(c[key].get(k)?.as_f64()? / c[base].as_f64()?))
                .collect();
            ratios.sort_by(f64::total_cmp);
            ratios.get(ratios.len() / 2).copied()
        })
        .collect()
}

/// How many confirming rounds the run has (0 for none).
fn confirming_rounds(candidates: &[Value]) -> usize {
    candidates
        .iter()
        .filter_map(|c| c["confirmed_rounds_ms"].as_array().map(Vec::len))
        .max()
        .unwrap_or(0)
}

/// A target's verdict.
fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}

/// "1.00, 0.96, 1.03".
fn two_places(values: &[f64]) -> String {
    joined(values, 2)
}

/// `values` with `places` decimals each, joined by ", ".
fn joined(values: &[f64], places: usize) -> String {
    let text: Vec<String> = values.iter().map(|v| format!("{v:.places$}")).collect();
    text.join(", ")
}

/// The machine's speed over the run, which the load average cannot show on a shared host: each
/// round's pace ([`paces`]), and where the run has them, the plan's timed layouts trained again
/// right after the plan against the plan's own timings, and the host's probe ([`probe_text`]).
fn render_drift(md: &mut String, candidates: &[Value], rounds: usize, probe: Option<String>) {
    let confirming = confirming_rounds(candidates);
    let mut line = format!(
        "Each round's pace (its steps over each layout's median of the first rounds, the median \
         over the round's layouts): {}",
        two_places(&paces(candidates, "rounds_ms", rounds))
    );
    if confirming > 0 {
        let _ = write!(
            line,
            "; confirming rounds {} (those layouts were picked for measuring fastest, so a pace a \
             little above 1 is their luck; much above it, the machine ran slower)",
            two_places(&paces(candidates, "confirmed_rounds_ms", confirming))
        );
    }
    let again = repeated_after_plan(candidates);
    if !again.is_empty() {
        let _ = write!(
            line,
            ". Trained once more right after the plan, the layouts it timed measured {} its \
             timings; against those steps the rounds ran at {} (the median over those layouts; \
             below 1, the machine ran faster than as the plan ended, which no prediction can \
             know)",
            again.join(", "),
            two_places(&against_plan(candidates, rounds))
        );
    }
    if let Some(probe) = probe {
        let _ = write!(
            line,
            ". A fixed single-threaded probe that does not run Tessera (SHA-256 and a copy of 64 \
             MiB, the median of 3) took {probe}"
        );
    }
    let _ = writeln!(md, "{line}.");
    let _ = writeln!(md);
}

/// The host's probe (`benches/plan_accuracy.py`'s `probe()`): "160 ms before the plan, 170 ms
/// after it, 162, 158, 165 ms at the start of each round and 160, 161 ms at each confirming
/// round's"; none for runs before the probe.
fn probe_text(data: &Value) -> Option<String> {
    let before = data["probe_ms"]["before_plan"].as_f64()?;
    let after = data["probe_ms"]["after_plan"].as_f64()?;
    let (mut rounds, mut confirming) = (Vec::new(), Vec::new());
    for round in data["load_average"].as_array()? {
        if let Some(ms) = round["probe_ms"].as_f64() {
            if round["confirming"].as_bool() == Some(true) {
                confirming.push(ms);
            } else {
                rounds.push(ms);
            }
        }
    }
    let mut text = format!(
        "{before:.0} ms before the plan, {after:.0} ms after it, {} ms at the start of each round",
        joined(&rounds, 0)
    );
    if !confirming.is_empty() {
        let _ = write!(
            text,
            " and {} ms at each confirming round's",
            joined(&confirming, 0)
        );
    }
    Some(text)
}

/// The steady-host rule's waits (`benches/plan_accuracy.py`'s `steady()`): what it asked, and
/// per round how many trainings waited for the probe to come within its bound of the probe
/// after the plan; none for runs before the rule.
fn gate_text(data: &Value) -> Option<String> {
    let gate = &data["gate"];
    let within = gate["within"].as_f64()?;
    let wait = gate["wait_s"].as_f64()?;
    let after = data["probe_ms"]["after_plan"].as_f64()?;
    let rounds = data["load_average"].as_array()?;
    let waits = |confirming: bool| -> Vec<String> {
        rounds
            .iter()
            .filter(|r| r["confirming"].as_bool().unwrap_or(false) == confirming)
            .map(|r| format!("{} of {}", r["gate"]["waited"], r["gate"]["trainings"]))
            .collect()
    };
    // Every gated training: the rounds' and those right after the plan.
    let gates = rounds
        .iter()
        .map(|r| &r["gate"])
        .chain([&gate["after_plan"]]);
    let total = |key: &str| gates.clone().filter_map(|g| g[key].as_f64()).sum::<f64>();
    let confirming = waits(true);
    Some(format!(
        "The steady-host rule, fixed before this run: each training started once the probe, \
         timed right before it, was within {:.0}% of the {after:.0} ms after the plan, probing \
         again for at most {wait:.0} s while it was not. Trainings that waited, per round: {}{}; \
         {:.0} s of waiting in all; {:.0} of the {:.0} trainings (those right after the plan \
         included) started outside the bound after the wait.",
        within * 100.0,
        waits(false).join(", "),
        match confirming.is_empty() {
            true => String::new(),
            false => format!(" (confirming rounds: {})", confirming.join(", ")),
        },
        total("waited_s"),
        total("outside"),
        total("trainings"),
    ))
}

/// "1.07× (rank 1)" for each layout the plan timed and the run trained once more right after
/// the plan: that step over the plan's timing (none in runs before the check).
fn repeated_after_plan(candidates: &[Value]) -> Vec<String> {
    candidates
        .iter()
        .filter_map(|c| {
            let ratio = c["after_plan_ms"].as_f64()? / c["timed_by_plan_ms"].as_f64()?;
            Some(format!("{ratio:.2}× (rank {})", c["rank"]))
        })
        .collect()
}

/// The preset's earlier runs (replaced by the one above, kept in `docs/runs/earlier/`): each
/// one's verdicts and paces, so that a miss stays on the page after a rerun.
pub fn render_earlier(md: &mut String, runs: &[&Value]) {
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "Earlier runs of this preset, each replaced by a later one and kept whole in \
         `docs/runs/earlier/`:"
    );
    let _ = writeln!(md);
    for run in runs {
        let _ = writeln!(md, "- {}", earlier_line(run));
    }
    let _ = writeln!(md);
}

/// One earlier run, in a line.
fn earlier_line(run: &Value) -> String {
    let data = &run["data"];
    let empty = Vec::new();
    let candidates = data["candidates"].as_array().unwrap_or(&empty);
    let within = data["within_15_percent"].as_u64().unwrap_or(0);
    let regret = data["regret"].as_f64().unwrap_or(f64::NAN);
    let rounds = data["rounds"].as_u64().unwrap_or(0) as usize;
    let mut line = format!(
        "{}: **{within} of {} within 15%** ({}), **regret {:.1}%** ({}",
        runs::provenance(run),
        data["of"].as_u64().unwrap_or(0),
        verdict(within >= WITHIN_TARGET),
        regret * 100.0,
        verdict(regret <= REGRET_TARGET),
    );
    if let Some(first_rounds) = data["regret_unconfirmed"].as_f64() {
        let _ = write!(line, "; {:.1}% over the first rounds", first_rounds * 100.0);
    }
    let _ = write!(
        line,
        "); each round's pace {}",
        two_places(&paces(candidates, "rounds_ms", rounds))
    );
    let confirming = confirming_rounds(candidates);
    if confirming > 0 {
        let _ = write!(
            line,
            ", the confirming rounds' {}",
            two_places(&paces(candidates, "confirmed_rounds_ms", confirming))
        );
    }
    let again = repeated_after_plan(candidates);
    if !again.is_empty() {
        let _ = write!(
            line,
            "; the plan's timings repeated at {}; the rounds against those repeats {}",
            again.join(", "),
            two_places(&against_plan(candidates, rounds))
        );
    }
    if let Some(probe) = probe_text(data) {
        let _ = write!(line, "; the host's probe took {probe}");
    }
    line + "."
}

#[cfg(test)]
mod tests;
