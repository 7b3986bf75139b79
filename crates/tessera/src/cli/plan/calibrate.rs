//! Calibration of the ranking against whole steps: for each group shape (MPMD groups × devices
//! per group) among the `--calibrate` fastest layouts, or whose fastest layout is predicted
//! within [`SHAPE_MARGIN`] of the first one's step, the plan trains the fastest few layouts
//! of that shape as `tessera train --plan` runs them (a child `tessera train` process of twice
//! `--repeats` steps, the median after the first); each of those then ranks by its measured step, and every
//! other layout of the shape by its prediction scaled by the median of their measured over
//! predicted steps. It ranks again until no other shape qualifies and every layout predicted
//! within [`NEAR_MARGIN`] of the first has been timed once (at most [`NEAR_MAX`] of those),
//! then times the 3 leading timed layouts twice more, taking turns, and ranks them by the median
//! of their three timings. Last, with that order kept, it times those 3 twice more and predicts
//! each one's step by the mean of these fresh timings (the ranking's own timings are biased
//! fast for whichever won a near tie), and scales every other layout's step by the median of
//! the leaders' fresh over ranked steps (the machine's speed as the plan ends).
//!
//! Why: the part costs are measured on one group running alone or beside copies of itself, and
//! on the CPU plugin a pipeline's groups slow each other differently from those stand-ins (the
//! held-out presets' groups of one device ran 1.15–1.3× their predictions, 2026-11-30), so
//! shapes were ranked against each other with errors of different sizes. One factor per shape
//! keeps the order the simulator gives its untimed layouts (schedules, micro-batches,
//! boundaries) and corrects the shape's level; a timed layout's own step also corrects what is
//! its own (a fused action's factor measured far off: the held-out GPT's first choice, 6 groups
//! of one device at 2 micro-batches, predicted 62.6 ms, measured 78-93 ms). Each measured step
//! is cached as the costs are.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tessera_schedule::search::Candidate;

use super::costs::{plugin_label, read_cache};
use super::{Args, PlanContext, plan_file};

/// Layouts of a shape timed to calibrate it: the fastest few, so that one layout's own error
/// (a noisy fused-action factor, a lucky boundary) does not set the whole shape's level.
const SAMPLES: usize = 3;

/// A shape whose fastest layout is predicted within this factor of the first layout's step is
/// calibrated even when none of its layouts is among the `--calibrate` fastest: the time
/// model's error differs between shapes by as much (the module docs), so such a shape may
/// measure fastest. Without it, the held-out GPT's seven fastest were one shape's schedules
/// (6 groups of one device, 2026-11-30); one group of 6 devices, predicted 1.09× slower and
/// never timed, measured 15% faster.
const SHAPE_MARGIN: f64 = 1.3;

/// An untimed layout predicted, once calibrated, within this factor of the first layout's
/// step is timed too, up to [`NEAR_MAX`] of them: within one shape the time model's error
/// differs between layouts (schedules, micro-batches, remat policies) by about as much, so
/// such a layout may measure fastest. Without it, in the held-out Llama (2026-11-30), a layout
/// predicted 12% slower than the first choice and never timed confirmed 7% faster.
const NEAR_MARGIN: f64 = 1.15;

/// At most this many near ties ([`NEAR_MARGIN`]) are timed, besides each shape's samples.
const NEAR_MAX: usize = 8;

/// Timed layouts that lead the calibrated ranking, timed again to settle their order.
const LEADERS: usize = 3;

/// Timings of each leader, the median of which ranks it.
const TIMINGS: usize = 3;

/// Timings of each leader once the ranking is settled, the mean of which predicts its step.
const FRESH: usize = 2;

/// A group shape: MPMD groups and devices per group.
type Shape = (u32, u32);

#[derive(Serialize, Deserialize)]
struct CachedStep {
    key: String,
    measured_ms: f64,
}

impl super::costs::Cached for CachedStep {
    fn key(&self) -> &str {
        &self.key
    }
}

/// `ranked` with the shapes of its `args.calibrate` fastest layouts calibrated against whole
/// steps (see the module docs); notes say what was timed or reused.
pub(super) fn calibrate(
    args: &Args,
    plugin: Option<&str>,
    ranked: Vec<Candidate>,
    context: &PlanContext,
    dir: &Path,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<Candidate>> {
    if args.calibrate > 0 && tessera_mpmd::mpi_job::launched().is_some() {
        // A child `tessera train` would take the launcher's environment for its own and join
        // the job as this rank.
        notes.push(
            "calibration: skipped inside an MPI job (plan outside it, then train with --plan \
             FILE)"
                .to_string(),
        );
        return Ok(ranked);
    }
    // Shapes calibrated so far; each one's factor follows from its layouts' timings.
    let mut calibrated: BTreeSet<Shape> = BTreeSet::new();
    // Per timed layout (its index in `ranked`), its measured steps in milliseconds.
    let mut timings: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let mut time = |i: usize, timing: usize| -> anyhow::Result<f64> {
        let (ms, note) = whole_step(args, plugin, &ranked[i], context, dir, timing)?;
        notes.push(note);
        Ok(ms)
    };
    // Near ties timed so far (at most NEAR_MAX).
    let mut near_timed = 0;
    loop {
        let timed = medians(&timings);
        let factors = shape_factors(&ranked, &timed, &calibrated);
        let current = scaled(&ranked, &factors, &timed);
        let todo = shapes_to_time(&current, args.calibrate, &calibrated);
        // Near ties are looked for once no shape is left to calibrate.
        let near = if todo.is_empty() {
            near_ties_to_time(&current, args.calibrate, &timings, NEAR_MAX - near_timed)
        } else {
            Vec::new()
        };
        if todo.is_empty() && near.is_empty() {
            let order: Vec<usize> = current.iter().map(|(i, _)| *i).collect();
            if !settle_leaders(&order, &mut timings, &mut time)? {
                // Nothing was timed since `timed`: it holds the settled steps.
                let fresh = retime_leaders(&order, &timings, &mut time)?;
                notes.extend(calibrated.iter().map(|&s| factor_note(&ranked, &timed, s)));
                let level = machine_level(&timed, &fresh);
                if let Some(level) = level {
                    notes.push(level_note(&timed, &fresh, level));
                }
                return Ok(with_fresh_steps(current, &fresh, level));
            }
        }
        for shape in todo {
            let of_shape = ranked
                .iter()
                .enumerate()
                .filter(|(_, c)| (c.groups, c.data) == shape)
                .take(SAMPLES);
            for (i, _) in of_shape {
                timings.insert(i, vec![time(i, 0)?]);
            }
            calibrated.insert(shape);
        }
        near_timed += near.len();
        for i in near {
            timings.insert(i, vec![time(i, 0)?]);
        }
    }
}

/// The shapes not yet calibrated that `current` (fastest first) asks for: those among its
/// `calibrate` fastest layouts, and those whose fastest layout is predicted within
/// [`SHAPE_MARGIN`] of the first one's step; none when `calibrate` is 0.
fn shapes_to_time(
    current: &[(usize, Candidate)],
    calibrate: usize,
    calibrated: &BTreeSet<Shape>,
) -> Vec<Shape> {
    let Some(within) = bound(current, calibrate, SHAPE_MARGIN) else {
        return Vec::new();
    };
    let mut todo: Vec<Shape> = Vec::new();
    for (k, (_, c)) in current.iter().enumerate() {
        if k >= calibrate && c.step_seconds > within {
            break;
        }
        let shape = (c.groups, c.data);
        if !calibrated.contains(&shape) && !todo.contains(&shape) {
            todo.push(shape);
        }
    }
    todo
}

/// The untimed layouts of `current` (fastest first; indices in `ranked`) predicted within
/// [`NEAR_MARGIN`] of the first one's step, fastest first and at most `room` of them; none
/// when `calibrate` is 0.
fn near_ties_to_time(
    current: &[(usize, Candidate)],
    calibrate: usize,
    timings: &BTreeMap<usize, Vec<f64>>,
    room: usize,
) -> Vec<usize> {
    let Some(within) = bound(current, calibrate, NEAR_MARGIN) else {
        return Vec::new();
    };
    current
        .iter()
        .take_while(|(_, c)| c.step_seconds <= within)
        .map(|(i, _)| *i)
        .filter(|i| !timings.contains_key(i))
        .take(room)
        .collect()
}

/// `margin` times the step of `current`'s first layout: the slowest step that still counts as
/// near it. `None` when `calibrate` is 0 (the plan times nothing) or nothing is ranked.
fn bound(current: &[(usize, Candidate)], calibrate: usize, margin: f64) -> Option<f64> {
    let (_, first) = current.first().filter(|_| calibrate > 0)?;
    Some(margin * first.step_seconds)
}

/// Each timed layout's measured step: the median of its timings.
fn medians(timings: &BTreeMap<usize, Vec<f64>>) -> BTreeMap<usize, f64> {
    timings
        .iter()
        .filter_map(|(&i, t)| Some((i, median(t.clone())?)))
        .collect()
}

/// The middle of `values` once sorted (the upper one of an even count; `None` if empty).
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// The measured over predicted steps of the timed layouts of `shape`, in order.
fn ratios(ranked: &[Candidate], timed: &BTreeMap<usize, f64>, shape: Shape) -> Vec<f64> {
    let mut ratios: Vec<f64> = timed
        .iter()
        .filter(|(i, _)| (ranked[**i].groups, ranked[**i].data) == shape)
        .map(|(i, ms)| ms / (ranked[*i].step_seconds * 1000.0))
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios
}

/// Each calibrated shape's factor (see [`shape_factor`]).
fn shape_factors(
    ranked: &[Candidate],
    timed: &BTreeMap<usize, f64>,
    calibrated: &BTreeSet<Shape>,
) -> BTreeMap<Shape, f64> {
    calibrated
        .iter()
        .map(|&shape| (shape, shape_factor(ranked, timed, shape)))
        .collect()
}

/// The median of measured over predicted steps of the timed layouts of `shape` (1 if none).
fn shape_factor(ranked: &[Candidate], timed: &BTreeMap<usize, f64>, shape: Shape) -> f64 {
    median(ratios(ranked, timed, shape)).unwrap_or(1.0)
}

/// What the calibration of `shape` measured, for the plan's notes.
fn factor_note(ranked: &[Candidate], timed: &BTreeMap<usize, f64>, shape: Shape) -> String {
    let ratios: Vec<String> = ratios(ranked, timed, shape)
        .iter()
        .map(|r| format!("{r:.3}"))
        .collect();
    format!(
        "calibration of {} group(s) of {} device(s): measured over predicted steps {}, factor \
         {:.3}",
        shape.0,
        shape.1,
        ratios.join(", "),
        shape_factor(ranked, timed, shape)
    )
}

/// Times the `LEADERS` fastest timed layouts of `order` (indices in `ranked`, fastest first)
/// until each has `TIMINGS` timings, taking turns (`time(i, timing)` times the layout at `i`
/// for the `timing`-th time, from 0); whether it timed any. One child process's step spreads
/// by 5-10% on a busy CPU, so ranking near ties by one timing each picks whichever was timed
/// luckiest (the GPT preset's first choice: timed at 49.8 ms, then measured 49-57 ms; the
/// layouts behind it 48-52 ms, 2026-11-30).
fn settle_leaders(
    order: &[usize],
    timings: &mut BTreeMap<usize, Vec<f64>>,
    mut time: impl FnMut(usize, usize) -> anyhow::Result<f64>,
) -> anyhow::Result<bool> {
    let leaders = leaders(order, timings);
    if leaders.len() < 2 {
        return Ok(false);
    }
    let mut any = false;
    for timing in 1..TIMINGS {
        for &i in &leaders {
            let times = timings.entry(i).or_default();
            if times.len() == timing {
                times.push(time(i, timing)?);
                any = true;
            }
        }
    }
    Ok(any)
}

/// The `LEADERS` fastest timed layouts of `order` (indices in `ranked`, fastest first).
fn leaders(order: &[usize], timings: &BTreeMap<usize, Vec<f64>>) -> Vec<usize> {
    order
        .iter()
        .copied()
        .filter(|i| timings.contains_key(i))
        .take(LEADERS)
        .collect()
}

/// Times the settled leaders of `order` `FRESH` times more, taking turns (`time(i, timing)`
/// as for [`settle_leaders`], numbering on after their `TIMINGS`), and gives each one's mean
/// (none where fewer than 2 lead, as those were not settled either). The ranking picked its
/// first choice as the fastest of near ties by these leaders' timings, so those timings are
/// biased fast for whichever won (its measured over predicted step in the plan benchmark's
/// rounds: 1.12, 0.94, 1.06, 1.00, 1.24, 0.83, 1.16, 1.08; median 1.06, 2026-11-30); timings
/// that chose nothing are not, and being the plan's last they are also the nearest to the
/// training that follows it.
fn retime_leaders(
    order: &[usize],
    timings: &BTreeMap<usize, Vec<f64>>,
    mut time: impl FnMut(usize, usize) -> anyhow::Result<f64>,
) -> anyhow::Result<BTreeMap<usize, f64>> {
    let leaders = leaders(order, timings);
    if leaders.len() < 2 {
        return Ok(BTreeMap::new());
    }
    let mut fresh: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for timing in TIMINGS..TIMINGS + FRESH {
        for &i in &leaders {
            fresh.entry(i).or_default().push(time(i, timing)?);
        }
    }
    Ok(fresh
        .into_iter()
        .map(|(i, t)| (i, t.iter().sum::<f64>() / t.len() as f64))
        .collect())
}

/// The machine's speed when the plan ended against while it ranked: the median over the
/// leaders of their fresh steps over their settled ones (`None` without fresh timings). It
/// scales the layouts not timed afresh: on a shared host the step speed moved by 10-25%
/// within one plan (the plan benchmark's leaders, trained again a minute after the plan,
/// measured 0.79-0.83x, 1.00x and 1.07-1.13x the plan's timings in three runs, 2026-11-30).
fn machine_level(settled: &BTreeMap<usize, f64>, fresh: &BTreeMap<usize, f64>) -> Option<f64> {
    median(
        settled_and_fresh(settled, fresh)
            .map(|(s, ms)| ms / s)
            .collect(),
    )
}

/// Each leader timed afresh: its settled step and its fresh mean, in milliseconds.
fn settled_and_fresh<'a>(
    settled: &'a BTreeMap<usize, f64>,
    fresh: &'a BTreeMap<usize, f64>,
) -> impl Iterator<Item = (f64, f64)> + 'a {
    fresh
        .iter()
        .filter_map(|(i, &ms)| settled.get(i).map(|&s| (s, ms)))
}

/// What the leaders' fresh timings measured, for the plan's notes.
fn level_note(settled: &BTreeMap<usize, f64>, fresh: &BTreeMap<usize, f64>, level: f64) -> String {
    let pairs: Vec<String> = settled_and_fresh(settled, fresh)
        .map(|(s, ms)| format!("{s:.2} -> {ms:.2} ms"))
        .collect();
    format!(
        "leaders timed afresh once ranked (the ranking's timings -> the fresh mean that predicts \
         each): {}; the other layouts' steps scaled by the median ratio, {level:.3}",
        pairs.join(", ")
    )
}

/// `current` (indices in `ranked` with the calibrated candidates, in ranked order) with each
/// leader's step predicted by its fresh mean and every other layout's scaled by `level`. The
/// order stays the one the settled timings gave: ranking again by the fresh timings would
/// pick among near ties by luck again.
fn with_fresh_steps(
    current: Vec<(usize, Candidate)>,
    fresh: &BTreeMap<usize, f64>,
    level: Option<f64>,
) -> Vec<Candidate> {
    current
        .into_iter()
        .map(|(i, mut c)| {
            let before = c.step_seconds;
            match (fresh.get(&i), level) {
                (Some(&ms), _) => {
                    let predicted = before / c.calibration.unwrap_or(1.0);
                    c.step_seconds = ms / 1000.0;
                    c.calibration = Some(c.step_seconds / predicted);
                    c.timed_step_ms = Some(ms);
                }
                (None, Some(level)) => {
                    c.step_seconds *= level;
                    c.calibration = Some(c.calibration.unwrap_or(1.0) * level);
                }
                (None, None) => {}
            }
            c.tokens_per_second *= before / c.step_seconds;
            c
        })
        .collect()
}

/// `ranked` (each with its index there) with each timed layout's prediction scaled to its
/// measured step and every other layout of a calibrated shape's by the shape's factor, fastest
/// first (a stable sort: the untimed layouts of a shape keep their order).
fn scaled(
    ranked: &[Candidate],
    factors: &BTreeMap<Shape, f64>,
    timed: &BTreeMap<usize, f64>,
) -> Vec<(usize, Candidate)> {
    let mut out: Vec<(usize, Candidate)> = ranked
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, mut c)| {
            let own = timed.get(&i).map(|ms| ms / (c.step_seconds * 1000.0));
            if let Some(f) = own.or_else(|| factors.get(&(c.groups, c.data)).copied()) {
                c.step_seconds *= f;
                c.tokens_per_second /= f;
                c.calibration = Some(f);
                c.timed_step_ms = timed.get(&i).copied();
            }
            (i, c)
        })
        .collect();
    out.sort_by(|a, b| a.1.step_seconds.total_cmp(&b.1.step_seconds));
    out
}

/// The measured step of `candidate` trained as `tessera train --plan` trains it (from the cache
/// or timed now in a child process), and a note saying which; `timing` numbers the timings of
/// one layout (each cached apart).
fn whole_step(
    args: &Args,
    plugin: Option<&str>,
    candidate: &Candidate,
    context: &PlanContext,
    dir: &Path,
    timing: usize,
) -> anyhow::Result<(f64, String)> {
    let file = plan_file(candidate, context);
    let words = file.train_words();
    // Twice the steps of a cost measurement (10 at the default --repeats): a whole step spreads
    // more from step to step than a part does.
    let steps = 2 * args.repeats.max(1);
    let again = match timing {
        0 => String::new(),
        n => format!(" timing={n}"),
    };
    let key = format!(
        "step v1 steps={steps} plugin={}{again} {}",
        plugin_label(plugin),
        words.join(" ")
    );
    // The key is too long for a file name: a hash of it names the file, and the key inside
    // decides whether the entry is this one.
    let hash = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        h.finish()
    };
    let path = dir.join(format!("step-{hash:016x}.json"));
    let label = match timing {
        0 => format!("whole step of {}", file.command),
        n => format!("whole step of {} (timing {})", file.command, n + 1),
    };
    if let Some(c) = read_cache::<CachedStep>(&path, &key, args.remeasure) {
        return Ok((c.measured_ms, format!("{label}: reused {}", path.display())));
    }
    let plan_path = dir.join(format!("step-{hash:016x}.plan.json"));
    std::fs::write(&plan_path, serde_json::to_string(&file)?)
        .with_context(|| format!("writing {}", plan_path.display()))?;
    let exe = std::env::current_exe().context("finding the tessera binary to train with")?;
    let mut command = std::process::Command::new(exe);
    if let Some(p) = plugin {
        command.args(["--plugin", p]);
    }
    let out = command
        .arg("train")
        .arg("--plan")
        .arg(&plan_path)
        .args(["--steps", &steps.to_string()])
        .args(["--no-reference", "--eval-every", "0", "--json"])
        .output()
        .context("starting tessera train to time a planned layout")?;
    let _ = std::fs::remove_file(&plan_path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{label} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let measured_ms = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|s| s["plan_measured_step_ms"].as_f64())
        .with_context(|| format!("{label}: no plan_measured_step_ms in its summary"))?;
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&CachedStep { key, measured_ms })?,
    )?;
    Ok((
        measured_ms,
        format!("{label}: {measured_ms:.2} ms, cached in {}", path.display()),
    ))
}

#[cfg(test)]
mod tests;
