//! Where a decoder's pipeline stages begin ([`StagePlan`]): even splits, given layer indices or
//! layer counts per stage, and the errors that name the smallest fix for counts that do not
//! split the model.

use tessera_ir::autodiff::RematPolicy;

use crate::error::{NnError, Result};

/// Where pipeline stages begin: the index of the first layer of each stage after the first.
/// Stage 0 holds the embeddings and the layers before `starts[0]`; the last stage also holds
/// the final norm, the head and the loss. A start of 0 leaves the first stage the embeddings
/// alone (its marker comes right after them); a start equal to the number of layers leaves the
/// last stage the final norm, the head and the loss alone (its marker comes before the norm).
/// Stages between the first and the last hold at least one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagePlan {
    starts: Vec<usize>,
    /// Each decoder block traced in a `checkpoint` region under this remat policy (JAX's
    /// `jax.checkpoint` around each block), for a step compiled as one program; `None`: plain.
    block_remat: Option<RematPolicy>,
}

/// Stage layer counts that do not describe a split of the model's layers; each message names
/// the smallest fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StagePlanError {
    /// No counts at all.
    #[error("no stages: give one layer count per stage, e.g. {layers}")]
    NoStages {
        /// The model's layers.
        layers: usize,
    },
    /// The counts do not add up to the model's layers.
    #[error(
        "{} sums to {sum} layers but the model has {layers}: {} {}, e.g. {}",
        join(counts), if sum < layers { "add" } else { "take" }, fix_words(*sum, *layers),
        join(suggestion)
    )]
    Sum {
        /// The counts given.
        counts: Vec<usize>,
        /// Their sum.
        sum: usize,
        /// The model's layers.
        layers: usize,
        /// The counts with the difference added to the smallest stages or taken from the
        /// largest ones.
        suggestion: Vec<usize>,
    },
    /// A stage between the first and the last has no layers.
    #[error(
        "stage {stage} of {} has no layers: only the first stage (the embedding alone) or the \
         last (the head and the loss alone) may be empty; move a layer into it, e.g. {}",
        join(counts),
        join(suggestion)
    )]
    EmptyMiddle {
        /// The counts given.
        counts: Vec<usize>,
        /// The empty stage (from 0).
        stage: usize,
        /// The counts with a layer moved into the stage from its largest neighbour-side stage.
        suggestion: Vec<usize>,
    },
}

fn join(counts: &[usize]) -> String {
    let parts: Vec<String> = counts.iter().map(|c| c.to_string()).collect();
    parts.join(",")
}

fn fix_words(sum: usize, layers: usize) -> String {
    let (d, word) = if sum < layers {
        (layers - sum, "to")
    } else {
        (sum - layers, "from")
    };
    match d {
        1 => format!("1 {word} a stage"),
        _ => format!("{d} {word} the stages"),
    }
}

/// `counts` with `sum(counts) - layers` taken one at a time from the largest stage, or
/// `layers - sum(counts)` added one at a time to the smallest one (the later stage on ties).
/// Whole levels move at once, so any counts balance in `O(stages²)` steps (a count near
/// `usize::MAX` neither overflows nor takes that many steps).
fn balance_to(counts: &[usize], layers: usize) -> Vec<usize> {
    let mut out: Vec<u128> = counts.iter().map(|&c| c as u128).collect();
    let sum: u128 = out.iter().sum();
    let target = layers as u128;
    let adding = sum < target;
    let mut left = sum.abs_diff(target);
    while left > 0 && !out.is_empty() {
        // The stages at the extreme level (the smallest when adding, the largest when
        // taking) and the next level towards the others.
        let extreme = if adding {
            out.iter().copied().min()
        } else {
            out.iter().copied().max()
        }
        .unwrap_or(0);
        let at: Vec<usize> = (0..out.len()).filter(|&i| out[i] == extreme).collect();
        let next = out
            .iter()
            .copied()
            .filter(|&c| c != extreme)
            .reduce(|a, b| if adding { a.min(b) } else { a.max(b) });
        let k = at.len() as u128;
        let step = match next {
            Some(next) if next.abs_diff(extreme) * k <= left => next.abs_diff(extreme),
            _ => left / k,
        };
        if step == 0 {
            // Fewer units than stages at the level: one each to the later stages.
            for &i in at.iter().rev().take(left as usize) {
                out[i] = if adding { out[i] + 1 } else { out[i] - 1 };
            }
            break;
        }
        for &i in &at {
            out[i] = if adding { out[i] + step } else { out[i] - step };
        }
        left -= step * k;
    }
    out.into_iter()
        .map(|c| usize::try_from(c).unwrap_or(usize::MAX))
        .collect()
}

impl StagePlan {
    /// `self` with each decoder block in a `checkpoint` region under `policy`: inside one
    /// compiled program, the backward then recomputes what the policy does not save, block by
    /// block (a pipeline applies its policy per stage task instead: `tessera_mpmd::Remat`).
    pub fn with_block_remat(mut self, policy: RematPolicy) -> Self {
        self.block_remat = Some(policy);
        self
    }

    /// The remat policy of each decoder block, if they are checkpointed.
    pub fn block_remat(&self) -> Option<RematPolicy> {
        self.block_remat
    }

    /// One stage: no boundaries.
    pub fn single() -> Self {
        StagePlan {
            starts: Vec::new(),
            block_remat: None,
        }
    }

    /// Stages beginning at the layers `starts` (increasing, each in `0..=layers`: 0 leaves the
    /// first stage the embeddings alone, `layers` the last stage the head and the loss alone).
    pub fn at_layers(starts: &[usize]) -> Self {
        StagePlan {
            starts: starts.to_vec(),
            block_remat: None,
        }
    }

    /// Stages of `counts[s]` decoder layers each, in order, over a model of `layers` layers.
    /// The first stage also holds the embeddings and the last the final norm, the head and
    /// the loss, so either may hold 0 layers (`[4, 4, 0]`: the head and the loss alone on the
    /// last stage; `[0, 4, 4]`: the embedding alone on the first); stages between them hold at
    /// least one. The counts must sum to `layers`.
    pub fn from_counts(counts: &[usize], layers: usize) -> Result<Self, StagePlanError> {
        if counts.is_empty() {
            return Err(StagePlanError::NoStages { layers });
        }
        // Summed without overflow: a count near `usize::MAX` is a wrong sum, not a panic.
        let sum: u128 = counts.iter().map(|&c| c as u128).sum();
        if sum != layers as u128 {
            return Err(StagePlanError::Sum {
                counts: counts.to_vec(),
                sum: usize::try_from(sum).unwrap_or(usize::MAX),
                layers,
                suggestion: balance_to(counts, layers),
            });
        }
        let last = counts.len() - 1;
        if let Some(stage) = (1..last).find(|&s| counts[s] == 0) {
            // Take the layer from the largest stage (the nearest on ties), so the move is one.
            let donor = (0..counts.len())
                .filter(|&s| s != stage)
                .max_by_key(|&s| (counts[s], std::cmp::Reverse(s.abs_diff(stage))))
                .unwrap_or(stage);
            let mut suggestion = counts.to_vec();
            if counts[donor] > 1 || ((donor == 0 || donor == last) && counts[donor] > 0) {
                suggestion[donor] -= 1;
                suggestion[stage] += 1;
            }
            return Err(StagePlanError::EmptyMiddle {
                counts: counts.to_vec(),
                stage,
                suggestion,
            });
        }
        let starts = counts[..last]
            .iter()
            .scan(0, |start, &c| {
                *start += c;
                Some(*start)
            })
            .collect();
        Ok(StagePlan {
            starts,
            block_remat: None,
        })
    }

    /// The decoder layers of each stage of a model of `layers` layers, in order (what
    /// [`StagePlan::from_counts`] takes).
    pub fn counts(&self, layers: usize) -> Vec<usize> {
        let mut bounds = vec![0];
        bounds.extend(&self.starts);
        bounds.push(layers);
        bounds
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
            .collect()
    }

    /// `stages` stages of as equal a number of layers as can be: stage `s` begins at layer
    /// `ceil(s × layers / stages)`, so the extra layers spread over the stages (6 layers on 4
    /// stages are 2, 1, 2, 1).
    pub fn even(stages: usize, layers: usize) -> Result<Self> {
        if stages == 0 || stages > layers {
            return Err(NnError::Config(format!(
                "{stages} stages cannot split {layers} layers; use 1 to {layers} stages"
            )));
        }
        Ok(StagePlan {
            starts: (1..stages).map(|s| (s * layers).div_ceil(stages)).collect(),
            block_remat: None,
        })
    }

    /// The number of stages.
    pub fn stages(&self) -> usize {
        self.starts.len() + 1
    }

    pub(crate) fn check(&self, layers: usize) -> Result<()> {
        let increasing = self.starts.windows(2).all(|w| w[0] < w[1]);
        let inside = self.starts.iter().all(|&l| l <= layers);
        if increasing && inside {
            Ok(())
        } else {
            Err(NnError::Config(format!(
                "stage boundaries {:?} must be increasing layer indices in 0..={layers} (0: the \
                 embedding alone on the first stage; {layers}: the head and the loss alone on \
                 the last)",
                self.starts
            )))
        }
    }

    pub(crate) fn stage_starting_at(&self, layer: usize) -> Option<usize> {
        self.starts.iter().position(|&l| l == layer).map(|i| i + 1)
    }
}
