//! The ASCII timeline: one row per actor, time to the right.
//!
//! Each action is its label (`F3`, `B3`, `I3`, `W3`, fused `F3+B3`; `F3s5` names stage 5 when
//! actors run several stages) padded to its duration; `.` is idle time. Above the rows a time
//! axis marks every fifth unit, where a unit is the shortest action (or a thousandth of the
//! makespan, where that is longer).

use std::fmt::Write;

use super::{action_label, needs_stage};
use crate::schedule::Plan;
use crate::simulate::Simulation;

/// The most time units a timeline is drawn with (wider ones get a longer unit).
const MAX_UNITS: f64 = 1000.0;

/// The timeline of `plan` as simulated in `sim`.
pub fn ascii(plan: &Plan, sim: &Simulation) -> String {
    if !sim.makespan.is_finite() {
        return format!(
            "(no timeline: the makespan {} is not a finite time; give smaller costs)\n",
            sim.makespan
        );
    }
    let with_stage = needs_stage(plan);
    // A unit is the shortest action, or longer where that would need over MAX_UNITS columns.
    let unit = shortest(sim).max(sim.makespan / MAX_UNITS);
    let width = column_width(plan, sim, unit, with_stage);
    let x = |t: f64| ((t / unit) * width as f64).round() as usize;
    let total = x(sim.makespan);
    let mut out = String::new();
    let _ = writeln!(out, "{:<8}{}", "time", axis(total, width, unit));
    for (a, (list, spans)) in plan.actors.iter().zip(&sim.spans).enumerate() {
        let mut row = vec!['.'; total];
        for (action, span) in list.iter().zip(spans) {
            let (x0, x1) = (x(span.start), x(span.end).min(total));
            if x1 <= x0 {
                continue;
            }
            let label: Vec<char> = action_label(action, with_stage).chars().collect();
            for (i, cell) in row[x0..x1].iter_mut().enumerate() {
                *cell = if i + 1 == x1 - x0 && x1 - x0 > 1 {
                    ' '
                } else {
                    label.get(i).copied().unwrap_or(' ')
                };
            }
        }
        let _ = writeln!(
            out,
            "{:<8}{}",
            format!("actor {a}"),
            row.into_iter().collect::<String>().trim_end()
        );
    }
    out
}

/// The statistics of a simulation, one per line.
pub fn stats(plan: &Plan, sim: &Simulation) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {}, {}",
        plan.name,
        placement_summary(plan),
        plural(plan.num_microbatches, "microbatch", "microbatches")
    );
    let _ = writeln!(out, "makespan:         {}", num(sim.makespan));
    let _ = writeln!(out, "bubble ratio:     {:.4}", sim.bubble_ratio);
    let idle: Vec<String> = sim.idle.iter().map(|&t| num(t)).collect();
    let _ = writeln!(out, "idle per actor:   [{}]", idle.join(", "));
    let peak: Vec<String> = sim.peak_activations.iter().map(u32::to_string).collect();
    let _ = writeln!(out, "peak activations: [{}]", peak.join(", "));
    out
}

/// `n thing` or `n things`.
pub(crate) fn plural(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `S stages on D actors`.
pub(crate) fn placement_summary(plan: &Plan) -> String {
    let stages = plural(plan.num_stages, "stage", "stages");
    format!(
        "{stages} on {}",
        plural(plan.num_actors(), "actor", "actors")
    )
}

/// A number without a trailing `.0`, or with up to three decimals.
pub(crate) fn num(t: f64) -> String {
    if t.fract() == 0.0 {
        format!("{t:.0}")
    } else if t.abs() < 5e-4 {
        // Below what three decimals show: `1e-320`, not `0.`.
        format!("{t:.0e}")
    } else {
        // Three decimals without trailing zeros, nor a bare point (`3.0001` is `3`, not `3.`).
        let text = format!("{t:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

fn shortest(sim: &Simulation) -> f64 {
    let min = sim
        .spans
        .iter()
        .flatten()
        .map(|s| s.end - s.start)
        .filter(|&d| d > 0.0)
        .fold(f64::INFINITY, f64::min);
    if min.is_finite() { min } else { 1.0 }
}

/// Characters per time unit: enough for every label plus a space, at most 8.
fn column_width(plan: &Plan, sim: &Simulation, unit: f64, with_stage: bool) -> usize {
    let mut width = 2;
    for (list, spans) in plan.actors.iter().zip(&sim.spans) {
        for (action, span) in list.iter().zip(spans) {
            let units = ((span.end - span.start) / unit).max(1.0);
            let need = (action_label(action, with_stage).len() + 1) as f64 / units;
            width = width.max(need.ceil() as usize);
        }
    }
    width.min(8)
}

fn axis(total: usize, width: usize, unit: f64) -> String {
    let mut line = vec![' '; total + 8];
    let mut k = 0;
    while k * width <= total {
        let text = num(k as f64 * unit);
        for (i, c) in text.chars().enumerate() {
            if let Some(cell) = line.get_mut(k * width + i) {
                *cell = c;
            }
        }
        k += 5;
    }
    line.into_iter().collect::<String>().trim_end().to_owned()
}
