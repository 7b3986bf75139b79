//! Calibration of the ranking against whole steps: for each group shape (MPMD groups × devices
//! per group) among the `--calibrate` fastest layouts, the plan trains the fastest few layouts
//! of that shape as `tessera train --plan` runs them (a child `tessera train` process of twice
//! `--repeats` steps, the median after the first); each of those then ranks by its measured step, and every
//! other layout of the shape by its prediction scaled by the median of their measured over
//! predicted steps. It ranks again until the `--calibrate` fastest are all of calibrated shapes,
//! then times the 3 leading timed layouts twice more, taking turns, and ranks them by the median
//! of their three timings.
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

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tessera_schedule::search::Candidate;

use super::costs::{plugin_label, read_cache};
use super::{Args, PlanContext, plan_file};

/// Layouts of a shape timed to calibrate it: the fastest few, so that one layout's own error
/// (a noisy fused-action factor, a lucky boundary) does not set the whole shape's level.
const SAMPLES: usize = 3;

/// Timed layouts that lead the calibrated ranking, timed again to settle their order.
const LEADERS: usize = 3;

/// Timings of each leader, the median of which ranks it.
const TIMINGS: usize = 3;

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
    let mut factors: BTreeMap<Shape, f64> = BTreeMap::new();
    // Per timed layout (its index in `ranked`), its measured step in milliseconds.
    let mut timed: BTreeMap<usize, f64> = BTreeMap::new();
    loop {
        let current = scaled(&ranked, &factors, &timed);
        let mut todo: Vec<Shape> = Vec::new();
        for (_, c) in current.iter().take(args.calibrate) {
            let shape = (c.groups, c.data);
            if !factors.contains_key(&shape) && !todo.contains(&shape) {
                todo.push(shape);
            }
        }
        if todo.is_empty() {
            let order: Vec<usize> = current.iter().map(|(i, _)| *i).collect();
            settle_leaders(&order, &mut timed, |i, timing| {
                let (ms, note) = whole_step(args, plugin, &ranked[i], context, dir, timing)?;
                notes.push(note);
                Ok(ms)
            })?;
            let settled = scaled(&ranked, &factors, &timed);
            return Ok(settled.into_iter().map(|(_, c)| c).collect());
        }
        for shape in todo {
            let mut ratios = Vec::new();
            for (i, c) in ranked
                .iter()
                .enumerate()
                .filter(|(_, c)| (c.groups, c.data) == shape)
                .take(SAMPLES)
            {
                let (measured_ms, note) = whole_step(args, plugin, c, context, dir, 0)?;
                notes.push(note);
                timed.insert(i, measured_ms);
                ratios.push(measured_ms / (c.step_seconds * 1000.0));
            }
            ratios.sort_by(f64::total_cmp);
            let factor = ratios.get(ratios.len() / 2).copied().unwrap_or(1.0);
            notes.push(format!(
                "calibration of {} group(s) of {} device(s): measured over predicted steps {}, \
                 factor {factor:.3}",
                shape.0,
                shape.1,
                ratios
                    .iter()
                    .map(|r| format!("{r:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            factors.insert(shape, factor);
        }
    }
}

/// Times the `LEADERS` fastest timed layouts of `order` (indices in `ranked`, fastest first)
/// `TIMINGS - 1` times more, taking
/// turns, and sets each one's measured step to the median of its timings. One child process's
/// step spreads by 5-10% on a busy CPU, so ranking near ties by one timing each picks whichever
/// was timed luckiest (the GPT preset's first choice: timed at 49.8 ms, then measured 49-57 ms;
/// the layouts behind it 48-52 ms, 2026-11-30).
/// `time(i, timing)` times the layout at `i` in `ranked` for the `timing`-th time.
fn settle_leaders(
    order: &[usize],
    timed: &mut BTreeMap<usize, f64>,
    mut time: impl FnMut(usize, usize) -> anyhow::Result<f64>,
) -> anyhow::Result<()> {
    let leaders: Vec<usize> = order
        .iter()
        .copied()
        .filter(|i| timed.contains_key(i))
        .take(LEADERS)
        .collect();
    if leaders.len() < 2 {
        return Ok(());
    }
    let mut timings: BTreeMap<usize, Vec<f64>> =
        leaders.iter().map(|&i| (i, vec![timed[&i]])).collect();
    for timing in 1..TIMINGS {
        for &i in &leaders {
            let ms = time(i, timing)?;
            timings.entry(i).or_default().push(ms);
        }
    }
    for (i, mut times) in timings {
        times.sort_by(f64::total_cmp);
        timed.insert(i, times[times.len() / 2]);
    }
    Ok(())
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
mod tests {
    use super::*;

    #[test]
    fn the_leaders_rank_by_the_median_of_their_timings() {
        // Layouts 4, 2, 7 lead (7 untimed is skipped, 9 is the third timed one); 4 was timed
        // luckily once and measures slower twice more.
        let mut timed = BTreeMap::from([(4, 10.0), (2, 11.0), (9, 12.0), (5, 20.0)]);
        let again = BTreeMap::from([(4, [13.0, 14.0]), (2, [11.5, 10.5]), (9, [12.0, 12.5])]);
        let mut calls = Vec::new();
        settle_leaders(&[4, 2, 7, 9, 5], &mut timed, |i, timing| {
            calls.push((i, timing));
            Ok(again[&i][timing - 1])
        })
        .unwrap();
        // Taking turns: each leader once, then each again; the fourth timed layout untouched.
        assert_eq!(calls, [(4, 1), (2, 1), (9, 1), (4, 2), (2, 2), (9, 2)]);
        assert_eq!(
            timed,
            BTreeMap::from([(4, 13.0), (2, 11.0), (9, 12.0), (5, 20.0)])
        );
    }

    #[test]
    fn a_single_timed_layout_is_not_timed_again() {
        let mut timed = BTreeMap::from([(0, 10.0)]);
        settle_leaders(&[0, 1, 2], &mut timed, |_, _| bail!("timed again")).unwrap();
        assert_eq!(timed[&0], 10.0);
    }
}
