//! One ranking from the searches of several measured variants of a model: the same model under
//! different remat policies (`tessera plan --remat`), each with its own measured costs (a
//! policy changes a part's forward and backward time and the residual bytes it keeps), searched
//! apart and merged into one order, each candidate named by the policy it was predicted under.
//!
//! ```
//! use tessera_schedule::plan::{Part, Profile};
//! use tessera_schedule::search::{RowCosts, Space, search};
//! use tessera_schedule::variants::merge_rankings;
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
//!     ("everything_saveable".to_string(), saving),
//!     ("nothing_saveable".to_string(), recomputing),
//! ])?;
//! assert_eq!(ranked[0].remat.as_deref(), Some("everything_saveable"));
//! # Ok::<(), tessera_schedule::search::SearchError>(())
//! ```

use crate::search::{Candidate, SearchError, rank_order};

/// The candidates of every variant's ranking (each tagged with its variant's name) in the
/// search's order. A variant whose search found nothing is left out while another ranked some;
/// when none did, the error is that of the variant whose least peak is smallest where every one
/// is over the memory limit (so the message names the least any variant needs), else the first
/// variant's.
pub fn merge_rankings(
    rankings: Vec<(String, Result<Vec<Candidate>, SearchError>)>,
) -> Result<Vec<Candidate>, SearchError> {
    let mut merged: Vec<Candidate> = Vec::new();
    let mut errors: Vec<SearchError> = Vec::new();
    for (name, ranking) in rankings {
        match ranking {
            Ok(list) => merged.extend(list.into_iter().map(|mut c| {
                c.remat = Some(name.clone());
                c
            })),
            Err(mut error) => {
                if let SearchError::NothingFits { remat, .. } = &mut error {
                    *remat = Some(name);
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

    fn rankings(limit: Option<u64>) -> Vec<(String, Result<Vec<Candidate>, SearchError>)> {
        vec![
            (
                "saving".into(),
                search(&costs(0.002, 50_000), &space(limit)),
            ),
            (
                "recomputing".into(),
                search(&costs(0.003, 500), &space(limit)),
            ),
        ]
    }

    #[test]
    fn merged_in_the_search_order_each_named() {
        let ranked = merge_rankings(rankings(None)).expect("ranked");
        assert!(ranked.windows(2).all(|w| rank_order(&w[0], &w[1]).is_le()));
        assert_eq!(ranked[0].remat.as_deref(), Some("saving"));
        assert!(
            ranked
                .iter()
                .any(|c| c.remat.as_deref() == Some("recomputing"))
        );
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
            Err(SearchError::NothingFits { least, remat, .. }) => {
                assert_eq!((least, remat.as_deref()), (small, Some("recomputing")));
            }
            other => panic!("{other:?}"),
        }
    }
}
