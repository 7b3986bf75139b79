//! Measured stage compositions: the times of a run of parts (the embedding, decoder layers, the
//! head) measured as one stage, which the planner's prediction uses in place of the sum of the
//! parts' times when it has them.
//!
//! The sum of parts measured one per stage misses what a stage of several parts does
//! differently: one program per task instead of several (fewer dispatches, fusion across the
//! parts), and a first stage whose input part has nothing to compute (its input is token ids),
//! so that its weight part does the whole split backward (measured at 1.7–1.9× the parts'
//! split backwards). [`crate::search::RowCosts::stages`] holds the compositions measured for a
//! micro-batch size; [`layouts_to_measure`] names the ones a ranking's first candidates use that
//! are not measured yet, so that a caller can measure them and search again.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::search::{Candidate, RowCosts};

/// One stage's measured times: parts `first_part..end_part` (0 the embedding, `1..=L` the
/// layers, `L + 1` the head) run as one stage.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageCosts {
    /// The stage's first part.
    pub first_part: usize,
    /// One past the stage's last part.
    pub end_part: usize,
    /// Forward seconds.
    pub forward: f64,
    /// Whole backward seconds.
    pub backward: f64,
    /// The split backward's input and weight parts together (`I + W`), in seconds.
    pub split: f64,
    /// The split backward's weight part (`W`), in seconds.
    pub weight: f64,
}

impl StageCosts {
    /// The parts it covers.
    pub fn parts(&self) -> Range<usize> {
        self.first_part..self.end_part
    }
}

/// The factors of a layout measured with its own stages as they run, in place of those of the
/// parts' measuring step ([`crate::search::RowCosts::contention`], `fused_chain`,
/// `fused_apart`) for that layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayoutFactors {
    /// Decoder layers per stage.
    pub stage_layers: Vec<usize>,
    /// Its measuring step on every group of the run at once against alone, over the fair share
    /// of the cores (see [`crate::shared`]).
    pub contention: f64,
    /// The same with two groups at once (`None`: not measured).
    #[serde(default)]
    pub contention_two: Option<f64>,
    /// Its last stage's forward fused with its backward: the share of the forward it pays
    /// beyond the backward ([`crate::Costs::fused_chain`]).
    pub fused_chain: f64,
    /// A forward of one micro-batch fused with another stage's backward of another, against the
    /// two apart ([`crate::Costs::fused_apart`]).
    pub fused_apart: f64,
}

impl RowCosts {
    /// The factors to simulate the layout `counts` with: its own, measured with its stages, or
    /// the parts' measuring step's.
    pub fn factors_of(&self, counts: &[usize]) -> LayoutFactors {
        self.layout_factors
            .iter()
            .find(|l| l.stage_layers == counts)
            .cloned()
            .unwrap_or_else(|| LayoutFactors {
                stage_layers: counts.to_vec(),
                contention: self.contention,
                contention_two: self.contention_two,
                fused_chain: self.fused_chain,
                fused_apart: self.fused_apart,
            })
    }

    /// Sets the factors measured with the stages of the layout `factors.stage_layers`.
    pub fn set_layout_factors(&mut self, factors: LayoutFactors) {
        self.layout_factors
            .retain(|l| l.stage_layers != factors.stage_layers);
        self.layout_factors.push(factors);
    }

    /// The measured composition of parts `range`, if measured.
    pub fn stage(&self, range: &Range<usize>) -> Option<&StageCosts> {
        self.stages.iter().find(|s| s.parts() == *range)
    }

    /// Whether every stage of the boundaries `counts` has a measured composition (a stage with
    /// no parts needs none).
    pub fn has_stages(&self, counts: &[usize]) -> bool {
        part_ranges(counts)
            .iter()
            .all(|r| r.is_empty() || self.stage(r).is_some())
    }

    /// Adds `measured`, replacing a composition of the same parts.
    pub fn add_stages(&mut self, measured: &[StageCosts]) {
        for stage in measured {
            self.stages.retain(|s| s.parts() != stage.parts());
            self.stages.push(*stage);
        }
    }
}

/// A layout whose stages a caller measures as compositions: boundaries at one micro-batch size
/// per device on groups of `data` devices.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StageLayout {
    /// Rows of one micro-batch on one device.
    pub rows: u32,
    /// Devices per group.
    pub data: u32,
    /// Decoder layers per stage.
    pub stage_layers: Vec<usize>,
}

/// The layouts of the first `first` candidates of `ranked` whose stages `costs` has not
/// measured as compositions, each once, in ranking order.
pub fn layouts_to_measure(
    ranked: &[Candidate],
    first: usize,
    costs: &dyn Fn(u32, u32) -> Option<RowCosts>,
) -> Vec<StageLayout> {
    let mut out: Vec<StageLayout> = Vec::new();
    for c in ranked.iter().take(first) {
        let layout = StageLayout {
            rows: c.rows_per_device,
            data: c.data,
            stage_layers: c.stage_layers.clone(),
        };
        let measured =
            costs(layout.rows, layout.data).is_some_and(|m| m.has_stages(&layout.stage_layers));
        if !measured && !out.contains(&layout) {
            out.push(layout);
        }
    }
    out
}

/// Per stage, the range of its parts in the per-part lists (embedding 0, layers `1..=L`, head
/// `L + 1`): the first stage starts at the embedding, the last ends after the head.
pub fn part_ranges(counts: &[usize]) -> Vec<Range<usize>> {
    let last = counts.len().saturating_sub(1);
    let mut start = 1;
    counts
        .iter()
        .enumerate()
        .map(|(s, &c)| {
            let (mut i, mut j) = (start, start + c);
            start += c;
            if s == 0 {
                i = 0;
            }
            if s == last {
                j += 1;
            }
            i..j
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Part, Profile};
    use crate::search::{Shape, Space, predict};
    use crate::{Registry, ScheduleParams};

    #[test]
    fn a_measured_composition_replaces_the_sum_of_its_parts() -> Result<(), crate::ScheduleError> {
        let part = |f: f64| Part {
            forward: f,
            backward: 2.0 * f,
            activation_bytes: 0,
            parameter_bytes: 0,
        };
        let profile = Profile {
            embedding: part(0.001),
            layers: vec![part(0.004); 4],
            head: part(0.002),
        };
        let mut costs = RowCosts::uniform_bytes(1, profile);
        let space = Space {
            devices: 2,
            batch: 2,
            layers: 4,
            ..Space::default()
        };
        let shape = Shape {
            groups: 2,
            stages: 2,
            microbatches: 1,
            data: 1,
        };
        let params = ScheduleParams {
            stages: 2,
            mpmd_dim: 2,
        };
        let plan = Registry::with_builtins().create("1f1b", params)?.plan(1)?;
        // One micro-batch: the step is both forwards and both backwards in a row.
        let sums = predict(&costs, &space, shape, "1f1b", &plan, &[2, 2]).unwrap();
        assert!(!sums.measured_stages);
        assert!(
            (sums.step_seconds - (0.019 + 0.038)).abs() < 1e-12,
            "{sums:?}"
        );
        let first = StageCosts {
            first_part: 0,
            end_part: 3,
            forward: 0.005,
            backward: 0.011,
            split: 0.012,
            weight: 0.012,
        };
        costs.add_stages(&[first]);
        assert!(!costs.has_stages(&[2, 2]));
        let one = predict(&costs, &space, shape, "1f1b", &plan, &[2, 2]).unwrap();
        assert!(!one.measured_stages);
        assert!((one.step_seconds - (0.005 + 0.011 + 0.010 + 0.020)).abs() < 1e-12);
        costs.add_stages(&[StageCosts {
            first_part: 3,
            end_part: 6,
            forward: 0.007,
            backward: 0.013,
            split: 0.015,
            weight: 0.006,
        }]);
        let both = predict(&costs, &space, shape, "1f1b", &plan, &[2, 2]).unwrap();
        assert!(both.measured_stages);
        assert!((both.step_seconds - (0.005 + 0.011 + 0.007 + 0.013)).abs() < 1e-12);
        // A layout's own factors stand in for the parts' step's, for that layout only.
        costs.contention = 1.5;
        let own = |contention: f64| LayoutFactors {
            stage_layers: vec![2, 2],
            contention,
            contention_two: Some(contention * 1.2),
            fused_chain: 0.25,
            fused_apart: 0.9,
        };
        costs.set_layout_factors(own(0.8));
        assert_eq!(costs.factors_of(&[2, 2]), own(0.8));
        assert_eq!(costs.factors_of(&[1, 3]).contention, 1.5);
        assert_eq!(costs.factors_of(&[1, 3]).fused_chain, 1.0);
        costs.set_layout_factors(own(0.9));
        assert_eq!(costs.layout_factors.len(), 1);
        assert_eq!(costs.factors_of(&[2, 2]).contention, 0.9);
        costs.layout_factors.clear();
        // Other boundaries keep their parts' sums.
        let other = predict(&costs, &space, shape, "1f1b", &plan, &[1, 3]).unwrap();
        assert!(!other.measured_stages);
        assert!((other.step_seconds - sums.step_seconds).abs() < 1e-12);
        Ok(())
    }

    #[test]
    fn a_plan_the_simulator_refuses_is_an_error_not_a_slow_candidate()
    -> Result<(), crate::ScheduleError> {
        let part = Part {
            forward: 0.001,
            backward: 0.002,
            activation_bytes: 0,
            parameter_bytes: 0,
        };
        let profile = Profile {
            embedding: part,
            layers: vec![part; 2],
            head: part,
        };
        let costs = RowCosts::uniform_bytes(1, profile);
        let space = Space {
            devices: 2,
            batch: 2,
            layers: 2,
            ..Space::default()
        };
        let shape = Shape {
            groups: 2,
            stages: 2,
            microbatches: 2,
            data: 1,
        };
        let params = ScheduleParams {
            stages: 2,
            mpmd_dim: 2,
        };
        let mut plan = Registry::with_builtins().create("1f1b", params)?.plan(2)?;
        // The last stage's actions backwards: its first backward waits for a forward it runs
        // later, a deadlock the simulator reports.
        plan.actors[1].reverse();
        let err = predict(&costs, &space, shape, "1f1b", &plan, &[1, 1]).unwrap_err();
        assert!(
            matches!(&err, crate::search::SearchError::Simulation { schedule, microbatches: 2, .. } if schedule == "1f1b"),
            "{err}"
        );
        assert!(err.to_string().contains("--schedules"), "{err}");
        Ok(())
    }

    #[test]
    fn part_ranges_cover_every_part_once() {
        assert_eq!(part_ranges(&[2, 0, 1]), vec![0..3, 3..3, 3..5]);
        assert_eq!(part_ranges(&[0, 3, 0]), vec![0..1, 1..4, 4..5]);
        assert_eq!(part_ranges(&[4]), vec![0..6]);
    }
}
