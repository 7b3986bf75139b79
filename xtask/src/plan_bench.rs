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
    render_drift(md, candidates, number("rounds")? as usize);
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
    (0..count)
        .filter_map(|k| {
            let mut ratios: Vec<f64> = candidates
                .iter()
                .filter_map(|c| Some(c[key].get(k)?.as_f64()? / c["measured_ms"].as_f64()?))
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
    let text: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
    text.join(", ")
}

/// The machine's speed over the run, which the load average cannot show on a shared host: each
/// round's pace ([`paces`]), and where the run has them, the plan's timed layouts trained again
/// right after the plan against the plan's own timings.
fn render_drift(md: &mut String, candidates: &[Value], rounds: usize) {
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
             timings",
            again.join(", ")
        );
    }
    let _ = writeln!(md, "{line}.");
    let _ = writeln!(md);
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
            "; the plan's timings repeated at {}",
            again.join(", ")
        );
    }
    line + "."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_checks_both_targets() {
        let run = serde_json::json!({"meta": {"commit": "abc"}, "data": {
            "preset": "gpt-held-out", "held_out": true, "plan_command": "tessera plan",
            "plan_seconds": 100.0, "layouts_considered": 40, "steps": 10, "rounds": 3,
            "load_average": [{"start": 1.0, "end": 2.0}], "within_15_percent": 5, "of": 7,
            "regret": 0.031,
            "candidates": [{"rank": 1, "groups": 2, "data": 3, "stages": 2,
                "stage_layers": [3, 3], "microbatches": 2, "schedule": "1f1b",
                "remat": "dots_saveable", "predicted_ms": 50.0, "measured_ms": 55.0, "rounds_ms": [55.0, 54.0, 56.0]}]}});
        let mut md = String::new();
        render_run(&mut md, &run).unwrap();
        assert!(md.contains("held out from the time model's tuning"), "{md}");
        assert!(
            md.contains(
                "**5 of the first 7 within 15% of their prediction** (target 6 of 7: missed)"
            ),
            "{md}"
        );
        assert!(md.contains("**regret 3.1%**"), "{md}");
        assert!(md.contains("at most 5%: met"), "{md}");
        assert!(!md.contains("fresh"), "{md}");
        assert!(
            md.contains(
                "| 1 | 2 × 3 | 2 (3,3) | 2 | 1f1b | dots_saveable | 50.0 | 55.0 (55.0, 54.0, 56.0) | 1.10× |"
            ),
            "{md}"
        );
    }

    /// Each round's pace and the plan's timings repeated right after it, from the run's steps.
    #[test]
    fn the_machine_s_drift_is_read_from_the_rounds() {
        let candidate = |rank: u64, rounds: [f64; 3], confirmed: Value, again: Value| {
            serde_json::json!({"rank": rank, "measured_ms": rounds[0], "rounds_ms": rounds,
                "confirmed_rounds_ms": confirmed, "timed_by_plan_ms": rounds[0] - 1.0,
                "after_plan_ms": again})
        };
        let candidates = [
            candidate(
                1,
                [10.0, 20.0, 10.0],
                serde_json::json!([15.0, 15.0]),
                Value::Null,
            ),
            candidate(
                2,
                [20.0, 40.0, 20.0],
                serde_json::json!([30.0, 40.0]),
                Value::Null,
            ),
            candidate(3, [5.0, 10.0, 5.0], Value::Null, serde_json::json!(6.0)),
        ];
        let mut md = String::new();
        render_drift(&mut md, &candidates, 3);
        assert!(
            md.contains(
                "over the round's layouts): 1.00, 2.00, 1.00; confirming rounds 1.50, 2.00 ("
            ),
            "{md}"
        );
        assert!(md.contains("measured 1.50× (rank 3) its timings."), "{md}");
        // A run without confirming rounds or repeated timings says neither.
        let plain = [candidate(1, [10.0, 11.0, 12.0], Value::Null, Value::Null)];
        let mut md = String::new();
        render_drift(&mut md, &plain, 3);
        assert!(md.contains("layouts): 1.00, 1.10, 1.20."), "{md}");
        assert!(
            !md.contains("confirming") && !md.contains("right after"),
            "{md}"
        );
    }

    #[test]
    fn an_earlier_run_keeps_its_verdicts_and_paces() {
        let run = serde_json::json!({"meta": {"commit": "abc", "machine": "M", "date": "D"},
            "data": {"within_15_percent": 1, "of": 7, "regret": 0.151, "regret_unconfirmed": 0.05,
            "rounds": 2, "candidates": [{"rank": 1, "measured_ms": 10.0, "rounds_ms": [10.0, 12.0],
            "confirmed_rounds_ms": [18.0], "timed_by_plan_ms": 10.0, "after_plan_ms": 11.0}]}});
        let mut md = String::new();
        render_earlier(&mut md, &[&run]);
        assert!(
            md.contains(
                "- commit abc, M, D: **1 of 7 within 15%** (missed), **regret 15.1%** (missed; \
                 5.0% over the first rounds); each round's pace 1.00, 1.20, the confirming \
                 rounds' 1.80; the plan's timings repeated at 1.10× (rank 1)."
            ),
            "{md}"
        );
        let mut none = String::new();
        render_earlier(&mut none, &[]);
        assert!(none.is_empty());
    }

    /// A run with confirming rounds judges its regret on them and shows both.
    #[test]
    fn a_confirmed_regret_is_judged_and_the_first_rounds_one_shown() {
        let run = serde_json::json!({"meta": {"commit": "abc"}, "data": {
            "preset": "gpt", "held_out": false, "plan_command": "tessera plan",
            "plan_seconds": 100.0, "layouts_considered": 40, "steps": 10, "rounds": 3,
            "load_average": [{"start": 1.0, "end": 2.0}], "within_15_percent": 6, "of": 7,
            "within_15_percent_untimed": 4, "of_untimed": 5,
            "regret": 0.02, "regret_unconfirmed": 0.21, "confirmed": 4,
            "candidates": [{"rank": 1, "groups": 2, "data": 4, "stages": 2,
                "stage_layers": [2, 2], "microbatches": 1, "schedule": "1f1b",
                "predicted_ms": 30.0, "measured_ms": 33.0, "rounds_ms": [33.0, 32.0, 34.0],
                "confirmed_rounds_ms": [31.0, 30.5, 32.0], "timed_by_plan_ms": 30.0},
                {"rank": 40, "groups": 2, "data": 4, "stages": 2,
                "stage_layers": [2, 2], "microbatches": 2, "schedule": "gpipe",
                "predicted_ms": 40.0, "measured_ms": 41.0, "rounds_ms": [41.0, 41.0, 41.0]},
                {"rank": 41, "groups": 2, "data": 4, "stages": 2,
                "stage_layers": [2, 2], "microbatches": 4, "schedule": "gpipe",
                "predicted_ms": 45.0, "measured_ms": 44.0, "rounds_ms": [44.0, 44.0, 44.0],
                "confirmed_rounds_ms": [44.0, 44.0, 44.0]}]}});
        let mut md = String::new();
        render_run(&mut md, &run).unwrap();
        assert!(md.contains("**regret 2.0%**"), "{md}");
        assert!(
            md.contains("3 fresh rounds of the first choice and the 3 layouts"),
            "{md}"
        );
        assert!(md.contains("over the first rounds alone 21.0%"), "{md}");
        assert!(md.contains("at most 5%: met"), "{md}");
        assert!(
            md.contains("| 33.0 (33.0, 32.0, 34.0; again 31.0, 30.5, 32.0) |"),
            "{md}"
        );
        // Its calibration's share, the layout it timed marked; a layout neither among the
        // first 7 nor measured again is left to the run file.
        assert!(
            md.contains("timed 2 of those 7 itself") && md.contains("of the 5 it predicted"),
            "{md}"
        );
        assert!(md.contains("where it did), 4 within 15%"), "{md}");
        assert!(md.contains("| 1 † | 2 × 4 |"), "{md}");
        assert!(
            md.contains("| 41 | 2 × 4 |") && !md.contains("| 40 |"),
            "{md}"
        );
        assert!(md.contains("the other 1 layouts measured"), "{md}");
    }
}
