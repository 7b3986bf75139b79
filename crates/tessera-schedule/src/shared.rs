//! Simulation on shared processors: the actors' devices share a few host cores (the CPU
//! plugin's virtual devices), so actions of different actors that run at the same time slow each
//! other down.
//!
//! [`crate::simulate()`] gives every actor a processor of its own. Here the actions progress
//! together (processor sharing): while `k` actors run an action, each advances at
//! `1 / slowdown(k)` of its own speed. [`Sharing::slowdown`] starts from the slowdown with
//! every actor busy, which `tessera plan` measures by running the groups' work at once: the
//! fair share of the cores (an action keeps up to [`Sharing::demand`] cores busy, so all `n`
//! of them need `n × demand`) times [`Sharing::contention`], the measured factor beyond it
//! (cache and thread switches, collectives whose devices wait for each other; below 1 where
//! short actions leave some of their cores idle: the CPU plugin's one-row tasks on 4 groups of 2
//! devices took 2.5× their time alone, not 4×). Each action is then taken to keep that
//! slowdown's share of the cores busy, so `k` running actions slow each other `k / n` of it:
//! the slowdown grows in proportion to the actions running, and an action never runs faster
//! than alone.
//!
//! The proportional rule replaced (2026-11-29) one that applied the fair share of `k × demand`
//! cores and interpolated the contention linearly from 1: it assumed a one-device action keeps
//! one core busy, but XLA's CPU client runs an action's operations on threads over every core,
//! so two one-device actions on 2 cores each took 1.85× their time alone, where that rule said
//! 1.1×. On the held-out 6-device GPT (`benches/plan_accuracy.py --preset gpt-held-out`) the
//! plan's 7 first choices then measured 1.04–1.14× their predicted steps, against 1.4–1.65×
//! before.
//!
//! That rule keeps the cores' throughput (the work of the running actions done per second, in
//! seconds of each alone) at its level with every actor busy whenever two or more run. It is not
//! so on the CPU plugin: actions running together fill each other's idle cores better the more
//! of them run. On the held-out 6-device GPT (2026-11-30), two one-device groups' steps at once
//! took 1.85× their time alone where the rule said 1.34×; the rule's pipelines, whose actors
//! are busy about half the time, measured 1.15–1.25× their predicted steps. Where `tessera
//! plan` also measures two groups at once ([`Sharing::contention_two`]), the throughput is
//! interpolated between the two measured levels (two running, all running) in the number of
//! actions running, and each running action's slowdown follows from it.
//!
//! Dependencies, transfer latency and each actor's order are as in [`crate::simulate()`]; with
//! no shared cores (`cores == 0`) the makespan equals its.

use crate::error::SimulateError;
use crate::schedule::Plan;
use crate::simulate::Costs;
use crate::validate::{Index, deps, run};

/// How the actors share the host's cores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sharing {
    /// Host cores every actor's devices share (0: each actor has processors of its own).
    pub cores: u32,
    /// Cores one running action keeps busy (one per device of its group, at most `cores`).
    pub demand: u32,
    /// Measured slowdown against the fair share when every actor runs at once (above 1: worse
    /// than fair; below 1: the actions leave cores idle alone and overlap better); fewer actors
    /// running slow each other in proportion ([`Sharing::slowdown`]).
    pub contention: f64,
    /// The same measured with two actors running at once (`None`: not measured; then every
    /// count of running actors slows in proportion, as above).
    pub contention_two: Option<f64>,
}

impl Sharing {
    /// How many times longer an action takes while `running` actors (itself included) run one.
    pub fn slowdown(&self, running: usize, actors: usize) -> f64 {
        if self.cores == 0 || running <= 1 {
            return 1.0;
        }
        let all = actors.max(running) as f64;
        // The slowdown with every actor busy, as measured.
        let all_busy = self.fair(all) * valid(self.contention);
        let Some(two) = self.contention_two.filter(|_| all > 2.0) else {
            // Each action keeps `all_busy * cores / actors` cores busy, and `running` of them
            // share the cores.
            return (running as f64 * all_busy / all).max(1.0);
        };
        // The throughput with two running and with all, interpolated in between.
        let at_two = 2.0 / (self.fair(2.0) * valid(two)).max(1.0);
        let at_all = all / all_busy.max(1.0);
        let throughput = at_two + (at_all - at_two) * (running as f64 - 2.0) / (all - 2.0);
        (running as f64 / throughput).max(1.0)
    }

    /// The slowdown of `running` actions each keeping [`Sharing::demand`] cores busy when the
    /// cores are shared fairly (1 while they fit).
    fn fair(&self, running: f64) -> f64 {
        let demand = f64::from(self.demand.clamp(1, self.cores.max(1)));
        (running * demand / f64::from(self.cores.max(1))).max(1.0)
    }
}

/// A measured contention factor, or 1 where it is not a positive number.
fn valid(contention: f64) -> f64 {
    match contention.is_finite() && contention > 0.0 {
        true => contention,
        false => 1.0,
    }
}

/// The makespan of `plan` with `costs` when its actors share cores as `sharing` says, and each
/// actor's busy time (its actions' durations as they ran, slowed).
pub fn simulate_shared(
    plan: &Plan,
    costs: &Costs,
    sharing: &Sharing,
) -> Result<(f64, Vec<f64>), SimulateError> {
    costs.check(plan.placement.num_stages())?;
    let index = Index::build(plan)?;
    // Validates the order (deadlocks are reported as the plain simulation reports them).
    run(plan, &index, |a| costs.action(a), costs.latency)?;
    let actors = plan.actors.len();
    let mut state = State {
        now: 0.0,
        next: vec![0; actors],
        running: vec![None; actors],
        free: vec![0.0; actors],
        busy: vec![0.0; actors],
        done: vec![None; index.slots()],
    };
    loop {
        let waiting = state.start_ready(plan, &index, costs);
        let running: Vec<usize> = (0..actors)
            .filter(|&a| state.running[a].is_some())
            .collect();
        if running.is_empty() && waiting.is_none() {
            break;
        }
        let rate = 1.0 / sharing.slowdown(running.len(), actors);
        let finish = running
            .iter()
            .filter_map(|&a| state.running[a].map(|r| r.left / rate))
            .fold(f64::INFINITY, f64::min);
        let step = finish.min(waiting.map_or(f64::INFINITY, |t| t - state.now));
        if !step.is_finite() {
            break;
        }
        state.advance(step.max(0.0), rate, plan, &index);
    }
    let makespan = state.free.iter().copied().fold(0.0, f64::max);
    Ok((makespan, state.busy))
}

/// An action in progress: the work left (in seconds of its own speed) and when it began.
#[derive(Clone, Copy, Debug)]
struct Running {
    left: f64,
    began: f64,
}

struct State {
    now: f64,
    /// Per actor, the index of its next action not yet started.
    next: Vec<usize>,
    running: Vec<Option<Running>>,
    /// Per actor, when its last action ended.
    free: Vec<f64>,
    busy: Vec<f64>,
    /// Per index slot, when that part of the work ended.
    done: Vec<Option<f64>>,
}

impl State {
    /// Starts every idle actor's next action whose inputs have arrived; returns the earliest
    /// time an idle actor's inputs will have arrived, if some are only in transit.
    fn start_ready(&mut self, plan: &Plan, index: &Index, costs: &Costs) -> Option<f64> {
        let mut waiting: Option<f64> = None;
        for (a, list) in plan.actors.iter().enumerate() {
            if self.running[a].is_some() {
                continue;
            }
            let Some(action) = list.get(self.next[a]) else {
                continue;
            };
            let mut arrives = self.free[a];
            let mut ready = true;
            for task in action.tasks() {
                for (stage, mb, part) in deps(task, index.stages()) {
                    let loc = index.loc(stage, mb, part);
                    if loc.at.actor as usize == a && loc.at.index == self.next[a] {
                        continue; // inside the same fused action
                    }
                    match self.done[index.slot(stage, mb, part)] {
                        Some(end) => {
                            let hop = match loc.at.actor as usize == a {
                                true => 0.0,
                                false => costs.latency,
                            };
                            arrives = arrives.max(end + hop);
                        }
                        None => ready = false,
                    }
                }
            }
            if !ready {
                continue;
            }
            match arrives <= self.now + 1e-15 {
                true => {
                    self.running[a] = Some(Running {
                        left: costs.action(action),
                        began: self.now,
                    });
                }
                false => waiting = Some(waiting.map_or(arrives, |w: f64| w.min(arrives))),
            }
        }
        waiting
    }

    /// Advances every running action by `step` seconds at `rate`, ending those that finish.
    fn advance(&mut self, step: f64, rate: f64, plan: &Plan, index: &Index) {
        self.now += step;
        for a in 0..plan.actors.len() {
            let Some(mut r) = self.running[a] else {
                continue;
            };
            r.left -= step * rate;
            if r.left > 1e-12 * (1.0 + self.now) {
                self.running[a] = Some(r);
                continue;
            }
            self.running[a] = None;
            self.busy[a] += self.now - r.began;
            self.free[a] = self.now;
            if let Some(action) = plan.actors[a].get(self.next[a]) {
                for task in action.tasks() {
                    for &part in task.kind.parts() {
                        self.done[index.slot(task.stage, task.mb, part)] = Some(self.now);
                    }
                }
            }
            self.next[a] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Registry, ScheduleParams, simulate};

    fn plan(name: &str, stages: u32, actors: u32, microbatches: u32) -> Plan {
        let params = ScheduleParams {
            stages,
            mpmd_dim: actors,
        };
        match Registry::with_builtins()
            .create(name, params)
            .and_then(|s| s.plan(microbatches))
        {
            Ok(p) => p,
            Err(e) => panic!("{name}: {e}"),
        }
    }

    fn shared(p: &Plan, costs: &Costs, sharing: Sharing) -> f64 {
        match simulate_shared(p, costs, &sharing) {
            Ok((m, _)) => m,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn without_shared_cores_it_is_the_plain_simulation() {
        for (name, stages) in [
            ("1f1b", 4),
            ("zero-bubble", 4),
            ("dualpipev", 8),
            ("gpipe", 4),
        ] {
            let p = plan(name, stages, 4, 8);
            let costs = Costs::uniform(stages, 1.0, 2.0, 0.7).with_latency(0.1);
            let plain = simulate(&p, &costs).map(|s| s.makespan).unwrap_or(f64::NAN);
            let none = Sharing {
                cores: 0,
                demand: 1,
                contention: 3.0,
                contention_two: None,
            };
            assert!((shared(&p, &costs, none) - plain).abs() < 1e-9, "{name}");
        }
    }

    #[test]
    fn actors_filling_the_cores_take_at_least_the_summed_work() {
        let p = plan("1f1b", 2, 2, 16);
        let costs = Costs::uniform(2, 1.0, 2.0, 0.0);
        let work = 2.0 * 16.0 * 3.0;
        let fair = Sharing {
            cores: 2,
            demand: 2,
            contention: 1.0,
            contention_two: None,
        };
        let m = shared(&p, &costs, fair);
        assert!(m >= work - 1e-9 && m < work * 1.1, "{m} against {work}");
        let contended = Sharing {
            contention: 1.5,
            ..fair
        };
        let c = shared(&p, &costs, contended);
        assert!(
            c > m * 1.3,
            "contention 1.5 slows the overlapped steady state: {c} vs {m}"
        );
    }

    #[test]
    fn work_that_never_overlaps_pays_no_contention() {
        // One micro-batch through two stages: one actor runs at a time.
        let p = plan("1f1b", 2, 2, 1);
        let costs = Costs::uniform(2, 1.0, 2.0, 0.0);
        let m = shared(
            &p,
            &costs,
            Sharing {
                cores: 2,
                demand: 2,
                contention: 2.0,
                contention_two: None,
            },
        );
        assert!((m - 6.0).abs() < 1e-9, "{m}");
    }

    #[test]
    fn slowdown_grows_with_the_actions_running_up_to_the_measured_one_with_all_busy() {
        let s = Sharing {
            cores: 2,
            demand: 1,
            contention: 1.6,
            contention_two: None,
        };
        assert_eq!(s.slowdown(1, 4), 1.0);
        // All four busy: the fair share of 4 one-core actions on 2 cores, 2×, times 1.6.
        assert!((s.slowdown(4, 4) - 2.0 * 1.6).abs() < 1e-12);
        // Two of them: half of it (each keeps 1.6 cores busy).
        assert!((s.slowdown(2, 4) - 1.6).abs() < 1e-12);
        assert!((s.slowdown(3, 4) - 0.75 * 3.2).abs() < 1e-12);
    }

    #[test]
    fn with_two_running_measured_the_throughput_is_interpolated_between_the_measured_levels() {
        // Six one-device groups on two cores: all six at once 3× fair times 1.4 (4.2× alone),
        // two at once 1.8× alone (their fair share is the whole of each core).
        let s = Sharing {
            cores: 2,
            demand: 1,
            contention: 1.4,
            contention_two: Some(1.8),
        };
        assert_eq!(s.slowdown(1, 6), 1.0);
        assert!((s.slowdown(2, 6) - 1.8).abs() < 1e-12);
        assert!((s.slowdown(6, 6) - 4.2).abs() < 1e-12);
        // Four running: halfway between the throughputs 2 / 1.8 and 6 / 4.2.
        let throughput = (2.0 / 1.8 + 6.0 / 4.2) / 2.0;
        assert!((s.slowdown(4, 6) - 4.0 / throughput).abs() < 1e-12);
        // The proportional rule's own value at two running changes nothing.
        let proportional = Sharing {
            contention_two: None,
            ..s
        };
        let same = Sharing {
            contention_two: Some(proportional.slowdown(2, 6)),
            ..s
        };
        for running in 1..=6 {
            let (a, b) = (proportional.slowdown(running, 6), same.slowdown(running, 6));
            assert!((a - b).abs() < 1e-12, "{running}: {a} against {b}");
        }
        // Two actors in all: the measurement with every actor busy is the one with two.
        let pair = Sharing {
            contention_two: Some(9.0),
            ..s
        };
        assert!((pair.slowdown(2, 2) - 1.4).abs() < 1e-12);
    }

    #[test]
    fn contention_below_one_overlaps_better_but_never_speeds_an_action_up() {
        let s = Sharing {
            cores: 2,
            demand: 2,
            contention: 0.625,
            contention_two: None,
        };
        assert_eq!(s.slowdown(1, 4), 1.0);
        // Four groups of two devices on two cores: 4× fair, 2.5× measured.
        assert!((s.slowdown(4, 4) - 2.5).abs() < 1e-12);
        assert!((s.slowdown(2, 4) - 1.25).abs() < 1e-12);
        let low = Sharing {
            contention: 0.1,
            ..s
        };
        assert_eq!(low.slowdown(4, 4), 1.0);
        assert_eq!(low.slowdown(2, 4), 1.0);
    }
}
