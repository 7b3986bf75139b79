//! The planner's boundary search: where to cut a stack of layers into pipeline stages.
//!
//! Given each decoder layer's measured forward and backward time (seconds, per micro-batch) and
//! its activation and parameter bytes, plus the same for the embedding (always on the first
//! stage) and for the final norm, head and loss (always on the last), [`partition`] returns the
//! contiguous split into a given number of stages that minimizes the slowest stage's
//! forward + backward time: in a pipeline's steady state every stage waits for the slowest one,
//! so it sets the pace. This is the inter-operator pass of Alpa (Zheng et al. 2022, "Alpa:
//! Automating Inter- and Intra-Operator Parallelism for Distributed Deep Learning") over a chain
//! of layers: dynamic programming over prefix sums, `O(stages × layers²)` time.
//!
//! A stage's bytes are its parameters times [`MemoryLimit::parameter_copies`] (the parameters,
//! their gradients or accumulators, the optimizer state) plus its activations per micro-batch
//! times the micro-batches the schedule keeps in flight there ([`MemoryLimit::in_flight`], e.g.
//! [`crate::memory::peak_inflight`] of a schedule's plan); with a [`MemoryLimit`], splits with a
//! stage over the limit are never chosen, and when every split has one, the error names the
//! smallest limit some split fits ([`PartitionError::NothingFits`]).
//!
//! With [`PartitionOptions::empty_ends`], the first stage may hold the embedding alone and the
//! last the head and the loss alone (0 layers), as `tessera_nn::StagePlan::from_counts` accepts;
//! stages in between always hold at least one layer.
//!
//! Pure and cheap: this is what `tessera plan` calls for every stage count and schedule it tries.
//!
//! ```
//! use tessera_schedule::plan::{Part, PartitionOptions, Profile, partition};
//!
//! let layer = Part::time(1.0, 2.0);
//! let profile = Profile {
//!     embedding: Part::time(0.5, 0.5),
//!     layers: vec![layer; 8],
//!     head: Part::time(2.0, 4.0), // the head and the loss cost two layers
//! };
//! let split = partition(&profile, 4, &PartitionOptions::default())?;
//! assert_eq!(split.counts, vec![2, 2, 3, 1]); // 7, 6, 9 and 9 seconds
//! assert_eq!(split.slowest_seconds, 9.0);
//! # Ok::<(), tessera_schedule::plan::PartitionError>(())
//! ```

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One part of the model: the embedding, a decoder layer, or the final norm with the head and
/// the loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// Forward time per micro-batch, in seconds.
    pub forward: f64,
    /// Backward time per micro-batch, in seconds.
    pub backward: f64,
    /// Bytes kept from its forward for its backward, per micro-batch.
    pub activation_bytes: u64,
    /// Bytes of its parameters.
    pub parameter_bytes: u64,
}

impl Part {
    /// A part with times and no bytes.
    pub fn time(forward: f64, backward: f64) -> Self {
        Part {
            forward,
            backward,
            ..Part::default()
        }
    }

    fn seconds(&self) -> f64 {
        self.forward + self.backward
    }
}

/// The measured parts of a model, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The embedding, on the first stage.
    pub embedding: Part,
    /// The decoder layers, in order.
    pub layers: Vec<Part>,
    /// The final norm, the head and the loss, on the last stage.
    pub head: Part,
}

/// The bytes a stage may hold.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryLimit {
    /// The most bytes a stage may hold.
    pub bytes: u64,
    /// Copies of the parameters a stage keeps: 1 for the parameters, 1 more for gradient
    /// accumulators, and the optimizer's state (2 more for AdamW).
    pub parameter_copies: u64,
    /// Per stage, the micro-batches in flight at its peak (their activations are live at once).
    pub in_flight: Vec<u32>,
}

/// How to split.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PartitionOptions {
    /// Let the first stage hold the embedding alone and the last the head and the loss alone.
    pub empty_ends: bool,
    /// Drop splits with a stage over this.
    pub memory: Option<MemoryLimit>,
}

/// One stage of a split.
#[derive(Clone, Debug, PartialEq)]
pub struct StageLoad {
    /// Its decoder layers.
    pub layers: usize,
    /// Its forward + backward time per micro-batch, in seconds.
    pub seconds: f64,
    /// Its activation bytes per micro-batch.
    pub activation_bytes: u64,
    /// Its parameter bytes.
    pub parameter_bytes: u64,
}

/// The chosen split.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    /// Decoder layers per stage, in order (what `tessera train --stage-layers` takes).
    pub counts: Vec<usize>,
    /// Each stage's time and bytes.
    pub stages: Vec<StageLoad>,
    /// The slowest stage's forward + backward time, in seconds: what the split minimizes.
    pub slowest_seconds: f64,
}

/// Input the search cannot split; each message names the fix.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum PartitionError {
    /// Zero stages.
    #[error("0 stages: a pipeline has at least 1 stage")]
    NoStages,
    /// More stages than the layers can fill.
    #[error(
        "{stages} stages cannot split {layers} layers: use at most {most} stages{}",
        if *empty_ends { "" } else { " (or let the first and last stage hold the embedding and the head alone)" }
    )]
    TooManyStages {
        /// The stages asked for.
        stages: usize,
        /// The layers.
        layers: usize,
        /// The most stages a split can have.
        most: usize,
        /// Whether empty end stages were allowed.
        empty_ends: bool,
    },
    /// A time that is negative, NaN or infinite.
    #[error("{what} = {value}: times must be finite and ≥ 0 seconds")]
    BadTime {
        /// Which part and time, e.g. `layer 3 forward`.
        what: String,
        /// The value.
        value: f64,
    },
    /// The memory limit names another number of stages.
    #[error(
        "the memory limit gives {got} in-flight counts but the split has {stages} stages; give \
         one per stage"
    )]
    InFlightLength {
        /// The counts given.
        got: usize,
        /// The stages.
        stages: usize,
    },
    /// Every split has a stage over the memory limit.
    #[error(
        "every split into {stages} stages has a stage over {limit} bytes; the smallest limit a \
         split fits is {least} bytes: raise the limit to {least}, or use more stages"
    )]
    NothingFits {
        /// The stages.
        stages: usize,
        /// The limit.
        limit: u64,
        /// The smallest peak any split reaches on its fullest stage.
        least: u64,
    },
}

/// The contiguous split of `profile`'s layers into `stages` stages with the fastest slowest
/// stage (forward + backward), skipping splits with a stage over `options.memory`; on ties, the
/// split whose last boundary comes earliest, then the one before it, and so on.
pub fn partition(
    profile: &Profile,
    stages: usize,
    options: &PartitionOptions,
) -> Result<Partition, PartitionError> {
    check(profile, stages, options)?;
    let n = profile.layers.len();
    let seconds = Prefix::new(profile, Part::seconds);
    let time = |s: usize, i: usize, j: usize| seconds.stage(s, stages, i, j);
    let prefix_bytes = PrefixBytes::new(profile);
    let bytes = |s: usize, i: usize, j: usize| {
        options.memory.as_ref().map_or(0, |memory| {
            prefix_bytes.peak(profile, memory, (s, stages), (i, j))
        })
    };
    let fits = |s: usize, i: usize, j: usize| {
        options
            .memory
            .as_ref()
            .is_none_or(|m| bytes(s, i, j) <= m.bytes)
    };
    let found = min_max_split(n, stages, options.empty_ends, |s, i, j| {
        fits(s, i, j).then(|| time(s, i, j))
    });
    let Some(counts) = found else {
        // Only a memory limit makes every split infeasible (check() ruled out the rest).
        let limit = options.memory.as_ref().map_or(0, |m| m.bytes);
        let least = min_max_split(n, stages, options.empty_ends, |s, i, j| {
            Some(bytes(s, i, j) as f64)
        })
        .map(|counts| {
            bounds(&counts)
                .enumerate()
                .map(|(s, (i, j))| bytes(s, i, j))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
        return Err(PartitionError::NothingFits {
            stages,
            limit,
            least,
        });
    };
    let loads = stage_loads(profile, &counts);
    let slowest_seconds = loads.iter().map(|l| l.seconds).fold(0.0, f64::max);
    Ok(Partition {
        counts,
        stages: loads,
        slowest_seconds,
    })
}

/// Each stage's time and bytes under the split `counts` (decoder layers per stage, summing to
/// the profile's layers), summed part by part.
pub fn stage_loads(profile: &Profile, counts: &[usize]) -> Vec<StageLoad> {
    let last = counts.len().saturating_sub(1);
    bounds(counts)
        .enumerate()
        .map(|(s, (i, j))| {
            let mut parts: Vec<&Part> = Vec::new();
            if s == 0 {
                parts.push(&profile.embedding);
            }
            parts.extend(profile.layers.get(i..j).unwrap_or(&[]));
            if s == last {
                parts.push(&profile.head);
            }
            StageLoad {
                layers: j - i,
                seconds: parts.iter().fold(0.0, |t, p| t + p.seconds()),
                activation_bytes: parts
                    .iter()
                    .fold(0, |t: u64, p| t.saturating_add(p.activation_bytes)),
                parameter_bytes: parts
                    .iter()
                    .fold(0, |t: u64, p| t.saturating_add(p.parameter_bytes)),
            }
        })
        .collect()
}

/// A stage's peak bytes under `memory`: parameters times their copies plus activations times
/// the micro-batches in flight.
pub fn stage_peak_bytes(load: &StageLoad, stage: usize, memory: &MemoryLimit) -> u64 {
    let in_flight = memory.in_flight.get(stage).copied().unwrap_or(0);
    load.parameter_bytes
        .saturating_mul(memory.parameter_copies)
        .saturating_add(load.activation_bytes.saturating_mul(u64::from(in_flight)))
}

fn check(
    profile: &Profile,
    stages: usize,
    options: &PartitionOptions,
) -> Result<(), PartitionError> {
    if stages == 0 {
        return Err(PartitionError::NoStages);
    }
    let layers = profile.layers.len();
    // Every stage but a single one holds a layer, except empty ends where allowed.
    let most = match (options.empty_ends, layers) {
        (true, _) => layers + 2,
        (false, 0) => 1,
        (false, _) => layers,
    };
    if stages > most {
        return Err(PartitionError::TooManyStages {
            stages,
            layers,
            most,
            empty_ends: options.empty_ends,
        });
    }
    let named = std::iter::once(("embedding".to_string(), &profile.embedding))
        .chain(
            profile
                .layers
                .iter()
                .enumerate()
                .map(|(l, p)| (format!("layer {l}"), p)),
        )
        .chain(std::iter::once(("head".to_string(), &profile.head)));
    for (name, part) in named {
        for (which, value) in [("forward", part.forward), ("backward", part.backward)] {
            if !value.is_finite() || value < 0.0 {
                return Err(PartitionError::BadTime {
                    what: format!("{name} {which}"),
                    value,
                });
            }
        }
    }
    if let Some(memory) = &options.memory
        && memory.in_flight.len() != stages
    {
        return Err(PartitionError::InFlightLength {
            got: memory.in_flight.len(),
            stages,
        });
    }
    Ok(())
}

/// Prefix sums of one quantity over the layers, with the embedding and head added to the first
/// and last stage.
struct Prefix {
    sums: Vec<f64>,
    embedding: f64,
    head: f64,
}

impl Prefix {
    fn new(profile: &Profile, of: fn(&Part) -> f64) -> Self {
        let mut sums = vec![0.0];
        for part in &profile.layers {
            let last = sums.last().copied().unwrap_or(0.0);
            sums.push(last + of(part));
        }
        Prefix {
            sums,
            embedding: of(&profile.embedding),
            head: of(&profile.head),
        }
    }

    /// Stage `s` of `stages` holding layers `i..j`.
    fn stage(&self, s: usize, stages: usize, i: usize, j: usize) -> f64 {
        let mut total = self.sums[j] - self.sums[i];
        if s == 0 {
            total += self.embedding;
        }
        if s + 1 == stages {
            total += self.head;
        }
        total
    }
}

/// Prefix sums of the activation and parameter bytes (in `u128`, which no sum of `u64`s
/// overflows), for each stage's peak bytes in constant time.
struct PrefixBytes {
    activation: Vec<u128>,
    parameter: Vec<u128>,
}

impl PrefixBytes {
    fn new(profile: &Profile) -> Self {
        let running = |of: fn(&Part) -> u64| {
            let mut sums = vec![0_u128];
            for part in &profile.layers {
                let last = sums.last().copied().unwrap_or(0);
                sums.push(last + u128::from(of(part)));
            }
            sums
        };
        PrefixBytes {
            activation: running(|p| p.activation_bytes),
            parameter: running(|p| p.parameter_bytes),
        }
    }

    /// Stage `s` of `stages` holding layers `i..j`: its peak bytes under `memory`.
    fn peak(
        &self,
        profile: &Profile,
        memory: &MemoryLimit,
        (s, stages): (usize, usize),
        (i, j): (usize, usize),
    ) -> u64 {
        let mut activation = self.activation[j] - self.activation[i];
        let mut parameter = self.parameter[j] - self.parameter[i];
        for (holds, part) in [
            (s == 0, &profile.embedding),
            (s + 1 == stages, &profile.head),
        ] {
            if holds {
                activation += u128::from(part.activation_bytes);
                parameter += u128::from(part.parameter_bytes);
            }
        }
        let load = StageLoad {
            layers: j - i,
            seconds: 0.0,
            activation_bytes: u64::try_from(activation).unwrap_or(u64::MAX),
            parameter_bytes: u64::try_from(parameter).unwrap_or(u64::MAX),
        };
        stage_peak_bytes(&load, s, memory)
    }
}

/// `(start, end)` layer indices of each stage of `counts`.
fn bounds(counts: &[usize]) -> impl Iterator<Item = (usize, usize)> + '_ {
    counts.iter().scan(0, |start, &c| {
        let i = *start;
        *start += c;
        Some((i, *start))
    })
}

/// The split of `n` layers into `stages` contiguous stages minimizing the largest
/// `cost(stage, start, end)` (`None`: the stage may not hold those layers), or `None` when no
/// split is allowed. Stages in the middle hold at least one layer; the first and last may hold
/// none when `empty_ends` (a single stage holds all `n`).
fn min_max_split(
    n: usize,
    stages: usize,
    empty_ends: bool,
    cost: impl Fn(usize, usize, usize) -> Option<f64>,
) -> Option<Vec<usize>> {
    // best[s][j]: the smallest largest cost of stages 0..=s holding layers 0..j, and where
    // stage s began.
    let mut best: Vec<Vec<Option<(f64, usize)>>> = vec![vec![None; n + 1]; stages];
    let last = stages - 1;
    let least = |s: usize| -> usize {
        match (stages, empty_ends) {
            (1, _) => 0,
            (_, true) if s == 0 || s == last => 0,
            _ => 1,
        }
    };
    for (j, cell) in best[0].iter_mut().enumerate() {
        if j >= least(0) && (stages > 1 || j == n) {
            *cell = cost(0, 0, j).map(|c| (c, 0));
        }
    }
    for s in 1..stages {
        let ends: Vec<usize> = if s == last {
            vec![n]
        } else {
            (0..=n).collect()
        };
        for j in ends {
            let mut found: Option<(f64, usize)> = None;
            let Some(latest) = j.checked_sub(least(s)) else {
                continue;
            };
            for (i, earlier) in best[s - 1][..=latest].iter().enumerate() {
                let Some((before, _)) = *earlier else {
                    continue;
                };
                let Some(here) = cost(s, i, j) else { continue };
                let worst = before.max(here);
                if found.is_none_or(|(f, _)| worst < f) {
                    found = Some((worst, i));
                }
            }
            best[s][j] = found;
        }
    }
    best[last][n]?;
    let mut counts = vec![0; stages];
    let mut end = n;
    for s in (0..stages).rev() {
        let (_, start) = best[s][end]?;
        counts[s] = end - start;
        end = start;
    }
    Some(counts)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every split of `n` layers into `stages` the options allow, by enumeration.
    fn all_splits(n: usize, stages: usize, empty_ends: bool) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        let mut counts = vec![0; stages];
        loop {
            let middle_empty = (1..stages.saturating_sub(1)).any(|s| counts[s] == 0);
            let end_empty = stages > 1 && (counts[0] == 0 || counts[stages - 1] == 0);
            if counts.iter().sum::<usize>() == n && !middle_empty && (empty_ends || !end_empty) {
                out.push(counts.clone());
            }
            let Some(i) = counts.iter().position(|&c| c < n) else {
                break;
            };
            counts[i] += 1;
            counts[..i].fill(0);
        }
        out
    }

    fn brute_force(
        profile: &Profile,
        stages: usize,
        options: &PartitionOptions,
    ) -> Option<(f64, Vec<usize>)> {
        all_splits(profile.layers.len(), stages, options.empty_ends)
            .into_iter()
            .filter(|counts| {
                let loads = stage_loads(profile, counts);
                options.memory.as_ref().is_none_or(|m| {
                    loads
                        .iter()
                        .enumerate()
                        .all(|(s, l)| stage_peak_bytes(l, s, m) <= m.bytes)
                })
            })
            .map(|counts| {
                let slowest = stage_loads(profile, &counts)
                    .iter()
                    .map(|l| l.seconds)
                    .fold(0.0, f64::max);
                (slowest, counts)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }

    fn part() -> impl Strategy<Value = Part> {
        // Whole numbers: sums are exact, so the search and the enumeration agree exactly.
        (0u32..8, 0u32..8, 0u64..6, 0u64..6).prop_map(|(f, b, a, p)| Part {
            forward: f64::from(f),
            backward: f64::from(b),
            activation_bytes: a * 100,
            parameter_bytes: p * 100,
        })
    }

    proptest! {
        #[test]
        fn the_search_finds_the_brute_force_optimum(
            embedding in part(),
            head in part(),
            layers in prop::collection::vec(part(), 0..7),
            stages in 1usize..6,
            empty_ends in any::<bool>(),
            limit in prop::option::of((0u64..3000, 1u64..4, prop::collection::vec(1u32..5, 5))),
        ) {
            let profile = Profile { embedding, layers, head };
            let options = PartitionOptions {
                empty_ends,
                memory: limit.map(|(bytes, parameter_copies, in_flight)| MemoryLimit {
                    bytes,
                    parameter_copies,
                    in_flight: in_flight[..stages].to_vec(),
                }),
            };
            let expected = brute_force(&profile, stages, &options);
            match (partition(&profile, stages, &options), expected) {
                (Ok(split), Some((slowest, _))) => {
                    prop_assert_eq!(split.slowest_seconds, slowest);
                    prop_assert!(all_splits(profile.layers.len(), stages, empty_ends)
                        .contains(&split.counts));
                    prop_assert_eq!(&split.stages, &stage_loads(&profile, &split.counts));
                    if let Some(m) = &options.memory {
                        for (s, load) in split.stages.iter().enumerate() {
                            prop_assert!(stage_peak_bytes(load, s, m) <= m.bytes);
                        }
                    }
                }
                (Err(PartitionError::TooManyStages { .. }), None) => {
                    prop_assert!(all_splits(profile.layers.len(), stages, empty_ends).is_empty());
                }
                (Err(PartitionError::NothingFits { least, limit, .. }), None) => {
                    prop_assert!(least > limit);
                    // The named limit is exactly the least any split needs.
                    let mut looser = options.clone();
                    if let Some(m) = &mut looser.memory {
                        m.bytes = least;
                    }
                    prop_assert!(brute_force(&profile, stages, &looser).is_some());
                    if let Some(m) = &mut looser.memory {
                        m.bytes = least - 1;
                    }
                    prop_assert!(brute_force(&profile, stages, &looser).is_none());
                }
                (got, expected) => {
                    prop_assert!(false, "search {got:?}, enumeration {expected:?}");
                }
            }
        }
    }

    #[test]
    fn a_heavy_head_takes_layers_off_the_last_stage() {
        let layer = Part::time(1.0, 2.0);
        let mut profile = Profile {
            embedding: Part::time(0.0, 0.0),
            layers: vec![layer; 8],
            head: Part::time(3.0, 6.0),
        };
        let even = stage_loads(&profile, &[2, 2, 2, 2]);
        assert_eq!(even[3].seconds, 15.0);
        let split = partition(&profile, 4, &PartitionOptions::default()).unwrap();
        assert_eq!(split.counts[3], 1);
        assert_eq!(split.slowest_seconds, 12.0);
        // A head as heavy as three layers alone on the last stage, allowed empty ends.
        profile.head = Part::time(3.0, 6.0);
        profile.layers = vec![layer; 9];
        let split = partition(
            &profile,
            4,
            &PartitionOptions {
                empty_ends: true,
                ..PartitionOptions::default()
            },
        )
        .unwrap();
        assert_eq!(split.slowest_seconds, 9.0);
        assert_eq!(split.counts, vec![3, 3, 3, 0]);
    }

    #[test]
    fn bad_input_names_the_fix() {
        let profile = Profile {
            layers: vec![Part::time(1.0, 1.0); 3],
            ..Profile::default()
        };
        let options = PartitionOptions::default();
        assert_eq!(
            partition(&profile, 0, &options),
            Err(PartitionError::NoStages)
        );
        let err = partition(&profile, 4, &options).unwrap_err();
        assert!(err.to_string().contains("use at most 3 stages"), "{err}");
        let mut bad = profile.clone();
        bad.layers[1].backward = f64::NAN;
        let err = partition(&bad, 2, &options).unwrap_err();
        assert!(
            err.to_string().starts_with("layer 1 backward = NaN"),
            "{err}"
        );
        let tight = PartitionOptions {
            empty_ends: false,
            memory: Some(MemoryLimit {
                bytes: 10,
                parameter_copies: 2,
                in_flight: vec![1, 1],
            }),
        };
        let mut heavy = profile.clone();
        for layer in &mut heavy.layers {
            layer.parameter_bytes = 10;
        }
        // Two stages of 2 + 1 layers: the larger holds 20 parameter bytes, 40 with copies.
        let err = partition(&heavy, 2, &tight).unwrap_err();
        assert_eq!(
            err,
            PartitionError::NothingFits {
                stages: 2,
                limit: 10,
                least: 40
            }
        );
        let err = partition(
            &heavy,
            3,
            &PartitionOptions {
                memory: tight.memory.clone(),
                ..options
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("2 in-flight counts"), "{err}");
    }
}
