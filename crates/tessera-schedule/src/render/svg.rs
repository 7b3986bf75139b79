//! The SVG timeline: one row per actor, one box per task coloured by kind, fused actions outlined
//! together, a time axis with grid lines, a legend, and per-actor statistics.
//!
//! When actors run several stages, later stages on an actor are drawn in lighter shades of
//! their kind's colour and each box names its stage under the microbatch.

use std::fmt::Write;

use super::ascii::{num, placement_summary, plural};
use super::needs_stage;
use crate::schedule::Plan;
use crate::simulate::{Costs, Simulation};
use crate::task::{Task, TaskKind};
use crate::validate::Span;

const LEFT: f64 = 110.0;
const RIGHT: f64 = 90.0;
const TOP: f64 = 58.0;
const ROW: f64 = 34.0;
const GAP: f64 = 8.0;
const FONT: &str = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"";

fn colour(kind: TaskKind) -> (u8, u8, u8) {
    match kind {
        TaskKind::Fwd => (0x2f, 0x6f, 0xb3),
        TaskKind::Bwd => (0x3a, 0x9a, 0x4a),
        TaskKind::BwdI => (0xe0, 0x7b, 0x1a),
        TaskKind::BwdW => (0x8e, 0x5a, 0xa8),
    }
}

/// `kind`'s colour, lightened for the `local`-th of `count` stages on an actor, and a text
/// colour that reads on it.
fn fill(kind: TaskKind, local: usize, count: usize) -> (String, &'static str) {
    let (r, g, b) = colour(kind);
    let t = if count > 1 {
        0.55 * local as f64 / (count - 1) as f64
    } else {
        0.0
    };
    let mix = |c: u8| (c as f64 + (255.0 - c as f64) * t).round() as u8;
    let (r, g, b) = (mix(r), mix(g), mix(b));
    let luminance = (0.299 * r as f64 + 0.587 * g as f64 + 0.114 * b as f64) / 255.0;
    let text = if luminance > 0.6 { "#111" } else { "white" };
    (format!("#{r:02x}{g:02x}{b:02x}"), text)
}

/// Scale and geometry of the picture.
struct Frame {
    px_per_unit: f64,
    width: f64,
    rows_bottom: f64,
}

impl Frame {
    fn new(plan: &Plan, sim: &Simulation) -> Frame {
        let makespan = sim.makespan.max(1e-9);
        let shortest = sim
            .spans
            .iter()
            .flatten()
            .map(|s| s.end - s.start)
            .filter(|&d| d > 0.0)
            .fold(f64::INFINITY, f64::min);
        let shortest = if shortest.is_finite() {
            shortest
        } else {
            makespan
        };
        let px_per_unit = (30.0 / shortest)
            .max(900.0 / makespan)
            .min(4000.0 / makespan);
        let rows_bottom = TOP + plan.actors.len() as f64 * (ROW + GAP);
        Frame {
            px_per_unit,
            width: LEFT + makespan * px_per_unit + RIGHT,
            rows_bottom,
        }
    }

    fn x(&self, t: f64) -> f64 {
        LEFT + t * self.px_per_unit
    }

    fn y(&self, actor: usize) -> f64 {
        TOP + actor as f64 * (ROW + GAP)
    }
}

/// The timeline of `plan` as simulated in `sim`, as a standalone SVG document.
pub fn svg(plan: &Plan, costs: &Costs, sim: &Simulation) -> String {
    let frame = Frame::new(plan, sim);
    let height = frame.rows_bottom + 100.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {:.0} {height:.0}\" {FONT}>",
        frame.width, frame.width
    );
    let _ = writeln!(out, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    title(&mut out, plan, sim);
    axis(&mut out, &frame, sim.makespan);
    for a in 0..plan.actors.len() {
        row(&mut out, &frame, plan, costs, sim, a);
    }
    legend(&mut out, &frame, plan);
    out.push_str("</svg>\n");
    out
}

fn title(out: &mut String, plan: &Plan, sim: &Simulation) {
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"24\" font-size=\"16\" font-weight=\"bold\">{}: {}, {}</text>",
        plan.name,
        placement_summary(plan),
        plural(plan.num_microbatches, "microbatch", "microbatches")
    );
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"43\" font-size=\"12\" fill=\"#444\">makespan {}, bubble ratio {:.1}%</text>",
        num(sim.makespan),
        100.0 * sim.bubble_ratio
    );
}

/// A tick step of 1, 2 or 5 × 10^k giving at most about 20 ticks.
fn tick_step(makespan: f64) -> f64 {
    let raw = (makespan / 20.0).max(1e-9);
    let pow = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * pow)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * pow)
}

fn axis(out: &mut String, frame: &Frame, makespan: f64) {
    let step = tick_step(makespan);
    let (top, bottom) = (TOP - 4.0, frame.rows_bottom);
    let mut k = 0;
    while k as f64 * step <= makespan + 1e-9 {
        let t = k as f64 * step;
        let x = frame.x(t);
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{bottom}\" stroke=\"#ddd\"/>"
        );
        let _ = writeln!(
            out,
            "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
            bottom + 14.0,
            num(t)
        );
        k += 1;
    }
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{bottom}\" x2=\"{:.1}\" y2=\"{bottom}\" stroke=\"#333\"/>",
        frame.x(makespan)
    );
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\" fill=\"#444\">time →</text>",
        frame.x(makespan),
        bottom + 28.0
    );
}

fn row(out: &mut String, frame: &Frame, plan: &Plan, costs: &Costs, sim: &Simulation, a: usize) {
    let y = frame.y(a);
    let stages = plan.placement.stages_of(a as u32);
    let names: Vec<String> = stages.iter().map(|s| format!("s{s}")).collect();
    let _ = writeln!(
        out,
        "<text x=\"8\" y=\"{:.1}\" font-size=\"13\" font-weight=\"bold\">actor {a}</text>",
        y + 15.0
    );
    let _ = writeln!(
        out,
        "<text x=\"8\" y=\"{:.1}\" font-size=\"10\" fill=\"#555\">{}</text>",
        y + 28.0,
        names.join(" ")
    );
    let _ = writeln!(
        out,
        "<rect x=\"{LEFT}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{ROW}\" fill=\"#f4f4f4\"/>",
        frame.x(sim.makespan) - LEFT
    );
    let with_stage = needs_stage(plan);
    for (action, span) in plan.actors[a].iter().zip(&sim.spans[a]) {
        let total = costs.action(action);
        let mut t0 = span.start;
        let dur = span.end - span.start;
        for task in action.tasks() {
            let share = if total > 0.0 {
                costs.task(task) / total
            } else {
                0.0
            };
            let part = Span {
                start: t0,
                end: t0 + dur * share,
            };
            let local = stages.iter().position(|&s| s == task.stage).unwrap_or(0);
            task_box(
                out,
                frame,
                y,
                part,
                task,
                fill(task.kind, local, stages.len()),
                with_stage,
            );
            t0 = part.end;
        }
        if action.is_fused() && dur > 0.0 {
            let _ = writeln!(
                out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#111\" stroke-width=\"2.5\"/>",
                frame.x(span.start) + 1.0,
                y + 1.0,
                (dur * frame.px_per_unit - 2.0).max(0.5),
                ROW - 2.0
            );
        }
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"#555\">peak {} · idle {}</text>",
        frame.x(sim.makespan) + 6.0,
        y + 21.0,
        sim.peak_activations[a],
        num(sim.idle[a])
    );
}

fn task_box(
    out: &mut String,
    frame: &Frame,
    y: f64,
    span: Span,
    task: &Task,
    colours: (String, &str),
    with_stage: bool,
) {
    let (fill, ink) = colours;
    let (x, w) = (
        frame.x(span.start),
        (span.end - span.start) * frame.px_per_unit,
    );
    if w <= 0.0 {
        return;
    }
    let _ = writeln!(
        out,
        "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{ROW}\" fill=\"{fill}\" stroke=\"white\" stroke-width=\"1\"><title>{task} [{}, {}]</title></rect>",
        num(span.start),
        num(span.end)
    );
    let label = format!("{}{}", task.kind.letter(), task.mb);
    let fits = |text: &str, size: f64| text.len() as f64 * size * 0.62 + 2.0 <= w;
    let cx = x + w / 2.0;
    let (size, text) = if fits(&label, 12.0) {
        (12.0, label)
    } else if fits(&task.mb.to_string(), 10.0) {
        (10.0, task.mb.to_string())
    } else {
        return;
    };
    let ty = if with_stage {
        y + 15.0
    } else {
        y + ROW / 2.0 + size * 0.36
    };
    let _ = writeln!(
        out,
        "<text x=\"{cx:.1}\" y=\"{ty:.1}\" font-size=\"{size}\" font-weight=\"bold\" text-anchor=\"middle\" fill=\"{ink}\">{text}</text>"
    );
    let stage = format!("s{}", task.stage);
    if with_stage && fits(&stage, 9.0) {
        let _ = writeln!(
            out,
            "<text x=\"{cx:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"middle\" fill=\"{ink}\">{stage}</text>",
            y + 28.0
        );
    }
}

fn legend(out: &mut String, frame: &Frame, plan: &Plan) {
    let y = frame.rows_bottom + 44.0;
    let used: Vec<TaskKind> = TaskKind::ALL
        .into_iter()
        .filter(|k| {
            plan.actors
                .iter()
                .flatten()
                .any(|a| a.tasks().iter().any(|t| t.kind == *k))
        })
        .collect();
    let shades = plan.placement.max_stages_per_actor().max(1) as usize;
    let mut x = LEFT;
    for kind in used {
        for local in 0..shades {
            let (colour, _) = fill(kind, local, shades);
            let _ = writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"14\" height=\"14\" fill=\"{colour}\"/>"
            );
            x += 14.0;
        }
        let text = format!("{} {}", kind.letter(), kind.description());
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\">{text}</text>",
            x + 6.0,
            y + 11.5
        );
        x += 30.0 + text.len() as f64 * 7.0;
    }
    if plan.actors.iter().flatten().any(|a| a.is_fused()) {
        let _ = writeln!(
            out,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"18\" height=\"14\" fill=\"none\" stroke=\"#111\" stroke-width=\"2.5\"/>"
        );
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\">fused action</text>",
            x + 24.0,
            y + 11.5
        );
    }
    let note = if needs_stage(plan) {
        "Labels: kind + microbatch, stage below; lighter shade = later stage on the actor. Right: peak live activations, idle time."
    } else {
        "Labels: kind + microbatch. Right: peak live activations, idle time."
    };
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"{:.1}\" font-size=\"11\" fill=\"#444\">{note}</text>",
        y + 34.0
    );
}
