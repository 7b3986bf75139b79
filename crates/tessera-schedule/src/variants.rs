//! One ranking from the searches of several measured variants of a model: the same model under
//! different remat policies (`tessera plan --remat`) and, for fully sharded (FSDP) stages, the
//! two ways of gathering their parameters (`tessera plan --fsdp`), each with its own measured
//! costs (a policy changes a part's forward and backward time and the residual bytes it keeps; a
//! gather mode changes the bytes a device holds and the collectives each task runs), searched
//! apart and merged into one order, each candidate named by the variant it was predicted under.
//!
//! ```
//! use tessera_schedule::plan::{Part, Profile};
//! use tessera_schedule::search::{RowCosts, Space, search};
//! use tessera_schedule::variants::{Variant, merge_rankings};
//!
//! // Saving residuals: a shorter backward, more bytes per micro-batch in flight.
//! let costs = |backward: f64, activation_bytes: u64| {
//!     move |rows: u32, _data: u32| {
//!         let part = Part { forward: 0.001, backward, activation_bytes, parameter_bytes: 4000 };
//!         Some(RowCosts::uniform_bytes(rows, Profile {
//!             embedding: part,
//!             layers: vec![part; 2],
//!             head: part,
//!         }))
//!     }
//! };
//! let space = Space { devices: 2, batch: 8, layers: 2, ..Space::default() };
//! let saving = search(&costs(0.002, 100_000), &space);
//! let recomputing = search(&costs(0.003, 1_000), &space);
//! let ranked = merge_rankings(vec![
//!     (Variant::remat("everything_saveable"), saving),
//!     (Variant::remat("nothing_saveable"), recomputing),
//! ])?;
//! assert_eq!(ranked[0].remat.as_deref(), Some("everything_saveable"));
//! # Ok::<(), tessera_schedule::search::SearchError>(())
//! ```

use crate::search::{Candidate, SearchError, rank_order};

/// What names a variant of the model: its remat policy and, where its stages are fully sharded,
/// how their parameters are gathered. Each candidate of its search carries both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Variant {
    /// The remat policy (`None`: not said).
    pub remat: Option<String>,
    /// The FSDP gather mode (`None`: the stages are not fully sharded).
    pub fsdp_gather: Option<String>,
}

impl Variant {
    /// The variant of remat policy `name`, not fully sharded.
    pub fn remat(name: &str) -> Variant {
        Variant {
            remat: Some(name.to_string()),
            fsdp_gather: None,
        }
    }

    /// This variant with its stages fully sharded, their parameters gathered `when`.
    pub fn with_fsdp_gather(mut self, when: &str) -> Variant {
        self.fsdp_gather = Some(when.to_string());
        self
    }

    /// Whether `candidate` was predicted under this variant.
    pub fn made(&self, candidate: &Candidate) -> bool {
        (&candidate.remat, &candidate.fsdp_gather) == (&self.remat, &self.fsdp_gather)
    }
}

/// The candidates of every variant's ranking (each tagged with its variant) in the
/// search's order. A variant whose search found nothing is left out while another ranked some;
/// when none did, the error is that of the variant whose least peak is smallest where every one
/// is over the memory limit (so the message names the least any variant needs), else the first
/// variant's.
pub fn merge_rankings(
    rankings: Vec<(Variant, Result<Vec<Candidate>, SearchError>)>,
) -> Result<Vec<Candidate>, SearchError> {
    let mut merged: Vec<Candidate> = Vec::new();
    let mut errors: Vec<SearchError> = Vec::new();
    for (variant, ranking) in rankings {
        match ranking {
            Ok(list) => merged.extend(list.into_iter().map(|mut c| {
                c.remat.clone_from(&variant.remat);
                c.fsdp_gather.clone_from(&variant.fsdp_gather);
                c
            })),
            Err(mut error) => {
                if let SearchError::NothingFits {
                    remat, fsdp_gather, ..
                } = &mut error
                {
                    *remat = variant.remat;
                    *fsdp_gather = variant.fsdp_gather;
                }
                errors.push(error);
            }
        }
    }
    if !merged.is_empty() {
        merged.sort_by(rank_order);
        return Ok(merged);
    }
    let least_fitting = errors
        .iter()
        .filter_map(|e| match e {
            SearchError::NothingFits { least, .. } => Some(*least),
            _ => None,
        })
        .min();
    let all_too_large = errors
        .iter()
        .all(|e| matches!(e, SearchError::NothingFits { .. }));
    let pick = match (all_too_large, least_fitting) {
        (true, Some(min)) => errors
            .iter()
            .position(|e| matches!(e, SearchError::NothingFits { least, .. } if *least == min)),
        _ => None,
    };
    let index = pick.unwrap_or(0);
    match errors.into_iter().nth(index) {
        Some(e) => Err(e),
        None => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Part, Profile};
    use crate::search::{RowCosts, Space, search};

    fn costs(backward: f64, bytes: u64) -> impl Fn(u32, u32) -> Option<RowCosts> {
        move |rows, _| {
            let part = Part {
                forward: 0.001 * f64::from(rows),
                backward: backward * f64::from(rows),
                activation_bytes: bytes * u64::from(rows),
                parameter_bytes: 4000,
            };
            Some(RowCosts::uniform_bytes(
                rows,
                Profile {
                    embedding: part,
                    layers: vec![part; 4],
                    head: part,
                },
            ))
        }
    }

    fn space(limit: Option<u64>) -> Space {
        Space {
            devices: 2,
            batch: 8,
            layers: 4,
            device_memory: limit,
            ..Space::default()
        }
    }

    fn rankings(limit: Option<u64>) -> Vec<(Variant, Result<Vec<Candidate>, SearchError>)> {
        vec![
            (
                Variant::remat("saving"),
                search(&costs(0.002, 50_000), &space(limit)),
            ),
            (
                Variant::remat("recomputing").with_fsdp_gather("per-microbatch"),
                search(&costs(0.003, 500), &space(limit)),
            ),
        ]
    }

    #[test]
    fn merged_in_the_search_order_each_named() {
        let ranked = merge_rankings(rankings(None)).expect("ranked");
        assert!(ranked.windows(2).all(|w| rank_order(&w[0], &w[1]).is_le()));
        assert_eq!(ranked[0].remat.as_deref(), Some("saving"));
        assert_eq!(ranked[0].fsdp_gather, None);
        let lean = Variant::remat("recomputing").with_fsdp_gather("per-microbatch");
        assert!(ranked.iter().any(|c| lean.made(c)));
    }

    #[test]
    fn a_limit_only_the_smaller_variant_fits_picks_it() {
        let least = |name: &str| {
            let all = merge_rankings(rankings(None)).expect("ranked");
            all.iter()
                .filter(|c| c.remat.as_deref() == Some(name))
                .map(|c| c.peak_bytes)
                .min()
                .expect("some")
        };
        let (small, large) = (least("recomputing"), least("saving"));
        assert!(small < large, "{small} vs {large}");
        let ranked = merge_rankings(rankings(Some(small))).expect("fits");
        assert!(
            ranked
                .iter()
                .all(|c| c.remat.as_deref() == Some("recomputing") && c.peak_bytes <= small)
        );
        match merge_rankings(rankings(Some(small - 1))) {
            Err(SearchError::NothingFits {
                least,
                remat,
                fsdp_gather,
                ..
            }) => {
                assert_eq!((least, remat.as_deref()), (small, Some("recomputing")));
                assert_eq!(fsdp_gather.as_deref(), Some("per-microbatch"));
            }
            other => panic!("{other:?}"),
        }
    }
}
