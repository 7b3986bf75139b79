//! The parameters of the collectives (`psum`, `pmax`, `pmin`, `pvary`, `all_gather`,
//! `reduce_scatter`, `ppermute`, `all_to_all`, `axis_index`, `pbroadcast`), read and checked
//! once into one typed value per equation ([`CollectiveParams::read`]): the mesh axes, the
//! `axis_index_groups` and each primitive's own fields, with its dimensions normalised. The
//! shape rule, the SPMD interpreter, the JVP and transpose rules, batching and the lowering read
//! its fields, never the printed parameters.
//!
//! What JAX prints (`lax.parallel`'s `bind` calls): `axes` and `axis_index_groups` on
//! `psum`/`pmax`/`pmin`; `all_gather_dimension`, `axis_index_groups`, `axis_name`, `axis_size`
//! and `tiled` on `all_gather`; `axis_index_groups`, `axis_name`, `axis_size`,
//! `scatter_dimension` and `tiled` on `reduce_scatter`; `axis_index_groups`, `axis_name`,
//! `concat_axis`, `split_axis` and `tiled` on `all_to_all`; `axis_name` and `perm` on
//! `ppermute`; `axis_name` and `source` on `pbroadcast`; `axis_name` on `axis_index`; `axes` on
//! `pvary`; `axis_index_groups` and `axis_name` on `ragged_all_to_all` (whose offsets and sizes
//! are operands, not parameters); `axis_name` and `perm` on `psend`, and `axis_name`,
//! `out_shape` and `perm` on `precv`. Every parameter JAX prints is required here.
//!
//! The collectives of `check_vma=True` bodies read as the kinds they share semantics with:
//! `psum_invariant` (`axes`) is a [`CollectiveKind::Psum`] and `all_gather_invariant`
//! (`all_gather_dimension`, `axis_name`, `axis_size`, `tiled`) an [`CollectiveKind::AllGather`],
//! without groups; their results are invariant over the axes. The casts of JAX's
//! reduced/unreduced types take `axes`: `preduced` ([`CollectiveKind::Preduced`]),
//! `vary_unreduced_cast_p` ([`CollectiveKind::VaryUnreducedCast`]), `reduced_vary_cast_p`
//! ([`CollectiveKind::ReducedVaryCast`]) and `unreduced_psum`
//! ([`CollectiveKind::UnreducedPsum`]). `all_gather_reduced` (`all_gather_dimension`,
//! `axis_name`, `axis_size`, `tiled`) reads as an [`CollectiveKind::AllGather`] and
//! `unreduced_reduce_scatter` (`axis_name`, `scatter_dimension`, `axis_size`, `tiled`) as a
//! [`CollectiveKind::ReduceScatter`], both without groups; their rules tell them apart by
//! [`CollectiveOp`] (the value's reduced/unreduced type changes, not the values).

use tessera_sharding::{AbstractMesh, groups};

use super::{CollectiveOp, Prim};
use crate::error::{IrError, Result, type_error};
use crate::program::params::{ParamValue, Params};

/// The typed parameters of one collective: the axes it communicates over, its groups, and the
/// fields of its kind.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveParams {
    /// The mesh axes, in the order named (`axes` for `psum`/`pmax`/`pmin`/`pvary`,
    /// `axis_name` for the others); devices are indexed row-major over them (a `ppermute`'s in
    /// mesh order within each group, as JAX's lowering numbers them).
    pub axes: Vec<String>,
    /// `axis_index_groups`: groups of indices along the axes combined, each communicating on
    /// its own; `None` where the parameter is `None` (or, for the primitives JAX prints
    /// without it, absent).
    pub groups: Option<Vec<Vec<i64>>>,
    /// The primitive and its own fields.
    pub kind: CollectiveKind,
}

/// A collective's own fields (the variant names the primitive).
#[derive(Debug, Clone, PartialEq)]
pub enum CollectiveKind {
    /// `psum`.
    Psum,
    /// `pmax`.
    Pmax,
    /// `pmin`.
    Pmin,
    /// `pvary` (a cast: no groups).
    Pvary,
    /// `axis_index` (no operand, no groups).
    AxisIndex,
    /// `all_gather`.
    AllGather {
        /// `all_gather_dimension`: a position in the result (a new dimension when untiled, a
        /// grown one when tiled), normalised.
        dimension: usize,
        /// Whether the blocks are concatenated (`True`) or stacked.
        tiled: bool,
        /// `axis_size`: the number of devices gathered (checked against the mesh by the shape
        /// rule).
        axis_size: i64,
    },
    /// `reduce_scatter` (`psum_scatter`).
    ReduceScatter {
        /// `scatter_dimension`: a position in the operand, normalised.
        dimension: usize,
        /// Whether each device keeps a block of the dimension (`True`) or one index of it.
        tiled: bool,
        /// `axis_size`: the number of devices summed over (checked against the mesh by the
        /// shape rule).
        axis_size: i64,
    },
    /// `ppermute`.
    Ppermute {
        /// `perm`: `(source, target)` indices along the axes, no source or target twice.
        perm: Vec<(i64, i64)>,
    },
    /// `all_to_all`.
    AllToAll {
        /// `split_axis`, a position in the operand, normalised.
        split_axis: usize,
        /// `concat_axis`, a position in the operand, normalised.
        concat_axis: usize,
        /// `tiled`, which JAX prints but which does not change the primitive: its wrapper
        /// inserts and removes the dimensions of an untiled exchange around it.
        tiled: bool,
    },
    /// `preduced`: the identity on values; the result is reduced (`R:`) over the axes, over
    /// which the operand must be invariant.
    Preduced,
    /// `vary_unreduced_cast_p`: the identity on values; the operand varies over the axes, the
    /// result is unreduced (`U:`) over them: its value is the sum of the devices' values.
    VaryUnreducedCast,
    /// `unreduced_psum`: the sum over the axes of an operand unreduced over them; the result
    /// is invariant over them.
    UnreducedPsum,
    /// `reduced_vary_cast_p`: the identity on values; the operand is reduced over the axes,
    /// the result varies over them.
    ReducedVaryCast,
    /// `ragged_all_to_all`: each device sends slices of its operand's leading dimension (at
    /// `input_offsets`, `send_sizes`) to the devices of its group and writes the slices it
    /// receives into a copy of `output` (where the senders' `output_offsets` say, `recv_sizes`
    /// long). Its six operands carry all of this; the kind has no fields of its own.
    RaggedAllToAll,
    /// `psend`: each source sends its operand to its target (`perm`, as `ppermute`'s); the
    /// result is a token (`Tok`) for the matching `precv` (see `p2p.rs`).
    Psend {
        /// `perm`: `(source, target)` indices along the axes, no source or target twice.
        perm: Vec<(i64, i64)>,
    },
    /// `precv`: takes a `psend`'s token; each target receives its source's value, the other
    /// devices zeros, of type `out_shape`.
    Precv {
        /// `perm`: `(source, target)` indices along the axes, no source or target twice.
        perm: Vec<(i64, i64)>,
        /// `out_shape`: the type of the received value (`ShapedArray(float32[4])`).
        out_shape: crate::aval::ShapedArray,
    },
    /// `pbroadcast`.
    Pbroadcast {
        /// `source`: the index (within each group) of the device whose value everyone gets.
        source: i64,
    },
}

impl CollectiveParams {
    /// The typed parameters of `prim`, a collective whose operand has rank `rank` (ignored for
    /// `axis_index`). A missing or malformed parameter, a dimension out of range or a
    /// permutation naming an index twice is an error naming the parameter; what needs the mesh
    /// (group sizes, `axis_size`, indices in range) is checked by the shape rule.
    ///
    /// The value is read once and kept with the parameters.
    pub fn read(prim: Prim, params: &Params, rank: usize) -> Result<Self> {
        params.typed([prim as usize, rank], |params| {
            Self::read_printed(prim, params, rank)
        })
    }

    fn read_printed(prim: Prim, params: &Params, rank: usize) -> Result<Self> {
        use CollectiveOp::*;
        let op = prim.collective().ok_or_else(|| not_collective(prim))?;
        let axes_key = match op {
            Psum | Pmax | Pmin | Pvary | PsumInvariant | Preduced | VaryUnreducedCast
            | UnreducedPsum | ReducedVaryCast => "axes",
            AllGather
            | AllGatherInvariant
            | ReduceScatter
            | Ppermute
            | AllToAll
            | AxisIndex
            | Pbroadcast
            | RaggedAllToAll
            | AllGatherReduced
            | UnreducedReduceScatter
            | Psend
            | Precv => "axis_name",
        };
        Ok(CollectiveParams {
            axes: axis_names(prim, params, axes_key)?,
            groups: index_groups(prim, op, params)?,
            kind: kind(prim, op, params, rank)?,
        })
    }

    /// The replica groups (mesh positions) the collective communicates in, on `mesh`.
    pub fn replica_groups(&self, prim: Prim, mesh: &AbstractMesh) -> Result<Vec<Vec<i64>>> {
        groups::replica_groups(mesh, &self.axes, self.groups.as_deref())
            .map_err(|e| type_error(prim.name(), e.to_string()))
    }

    /// The axes as the tracing API takes them.
    pub fn axis_refs(&self) -> Vec<&str> {
        self.axes.iter().map(String::as_str).collect()
    }
}

pub(super) fn not_collective(prim: Prim) -> IrError {
    type_error(prim.name(), "is not a collective")
}

fn param_error(prim: Prim, key: &str, expected: impl Into<String>) -> IrError {
    IrError::Param {
        prim: prim.name().into(),
        param: key.into(),
        expected: expected.into(),
    }
}

/// The fields of `op`'s own kind.
fn kind(prim: Prim, op: CollectiveOp, params: &Params, rank: usize) -> Result<CollectiveKind> {
    Ok(match op {
        CollectiveOp::Psum | CollectiveOp::PsumInvariant => CollectiveKind::Psum,
        CollectiveOp::Preduced => CollectiveKind::Preduced,
        CollectiveOp::VaryUnreducedCast => CollectiveKind::VaryUnreducedCast,
        CollectiveOp::UnreducedPsum => CollectiveKind::UnreducedPsum,
        CollectiveOp::ReducedVaryCast => CollectiveKind::ReducedVaryCast,
        CollectiveOp::Pmax => CollectiveKind::Pmax,
        CollectiveOp::Pmin => CollectiveKind::Pmin,
        CollectiveOp::Pvary => CollectiveKind::Pvary,
        CollectiveOp::AxisIndex => CollectiveKind::AxisIndex,
        CollectiveOp::AllGather
        | CollectiveOp::AllGatherInvariant
        | CollectiveOp::AllGatherReduced => {
            let tiled = printed_bool(prim, params, "tiled")?;
            let result_rank = rank + usize::from(!tiled);
            CollectiveKind::AllGather {
                dimension: dimension(prim, params, "all_gather_dimension", result_rank)?,
                tiled,
                axis_size: axis_size(prim, params)?,
            }
        }
        CollectiveOp::ReduceScatter | CollectiveOp::UnreducedReduceScatter => {
            CollectiveKind::ReduceScatter {
                dimension: dimension(prim, params, "scatter_dimension", rank)?,
                tiled: printed_bool(prim, params, "tiled")?,
                axis_size: axis_size(prim, params)?,
            }
        }
        CollectiveOp::Ppermute => CollectiveKind::Ppermute {
            perm: permutation(prim, params)?,
        },
        CollectiveOp::AllToAll => CollectiveKind::AllToAll {
            split_axis: dimension(prim, params, "split_axis", rank)?,
            concat_axis: dimension(prim, params, "concat_axis", rank)?,
            tiled: printed_bool(prim, params, "tiled")?,
        },
        CollectiveOp::RaggedAllToAll => CollectiveKind::RaggedAllToAll,
        CollectiveOp::Psend => CollectiveKind::Psend {
            perm: permutation(prim, params)?,
        },
        CollectiveOp::Precv => CollectiveKind::Precv {
            perm: permutation(prim, params)?,
            out_shape: super::p2p::out_shape(prim, params)?,
        },
        CollectiveOp::Pbroadcast => CollectiveKind::Pbroadcast {
            source: match params.get("source").and_then(ParamValue::as_int) {
                Some(s) if s >= 0 => s,
                Some(s) => return Err(param_error(prim, "source", format!("≥ 0, got {s}"))),
                None => return Err(param_error(prim, "source", "an integer device index")),
            },
        },
    })
}

/// A named-axis parameter: a single name or a tuple of names.
fn axis_names(prim: Prim, params: &Params, key: &str) -> Result<Vec<String>> {
    let bad = || param_error(prim, key, "a mesh axis name or a tuple of them");
    match params.get(key).ok_or_else(bad)? {
        ParamValue::Name(n) | ParamValue::Str(n) => Ok(vec![n.clone()]),
        v => v
            .as_seq()
            .ok_or_else(bad)?
            .iter()
            .map(|a| match a {
                // JAX prints a tuple of axes quoted (`('data', 'model')`).
                ParamValue::Name(n) | ParamValue::Str(n) => Ok(n.clone()),
                other => Err(param_error(
                    prim,
                    key,
                    format!("a mesh axis name or a tuple of them, got {other} in it"),
                )),
            })
            .collect(),
    }
}

/// `axis_index_groups`. JAX prints it (often as `None`) on `psum`, `pmax`, `pmin`,
/// `all_gather`, `reduce_scatter`, `all_to_all` and `ragged_all_to_all`, so there it is
/// required. JAX's `pbroadcast` has no such parameter; one parsed on it is honoured by every rule
/// (each group broadcasts from its own `source`), absent means none. `ppermute`, `axis_index`
/// and `pvary` have none either, and their rules would not honour one, so anything but absent or
/// `None` is an error.
fn index_groups(prim: Prim, op: CollectiveOp, params: &Params) -> Result<Option<Vec<Vec<i64>>>> {
    const KEY: &str = "axis_index_groups";
    let value = params.get(KEY);
    match op {
        CollectiveOp::Psum
        | CollectiveOp::Pmax
        | CollectiveOp::Pmin
        | CollectiveOp::AllGather
        | CollectiveOp::ReduceScatter
        | CollectiveOp::AllToAll
        | CollectiveOp::RaggedAllToAll => {
            let Some(value) = value else {
                let why = format!(
                    "None or a tuple of index tuples (JAX prints it on every {})",
                    prim.name()
                );
                return Err(param_error(prim, KEY, why));
            };
            groups_value(prim, value)
        }
        CollectiveOp::Pbroadcast => value.map_or(Ok(None), |v| groups_value(prim, v)),
        CollectiveOp::Ppermute
        | CollectiveOp::Psend
        | CollectiveOp::Precv
        | CollectiveOp::AxisIndex
        | CollectiveOp::Pvary
        | CollectiveOp::PsumInvariant
        | CollectiveOp::AllGatherInvariant
        | CollectiveOp::Preduced
        | CollectiveOp::VaryUnreducedCast
        | CollectiveOp::UnreducedPsum
        | CollectiveOp::ReducedVaryCast
        | CollectiveOp::AllGatherReduced
        | CollectiveOp::UnreducedReduceScatter => match value {
            None => Ok(None),
            Some(v) if v.is_none() => Ok(None),
            Some(v) => Err(param_error(
                prim,
                KEY,
                format!("absent or None ({} takes no groups), got {v}", prim.name()),
            )),
        },
    }
}

/// `None`, or a non-empty tuple of non-empty integer tuples.
fn groups_value(prim: Prim, value: &ParamValue) -> Result<Option<Vec<Vec<i64>>>> {
    if value.is_none() {
        return Ok(None);
    }
    let groups = value.as_seq().and_then(|gs| {
        gs.iter()
            .map(ParamValue::as_ints)
            .collect::<Option<Vec<_>>>()
    });
    match groups {
        Some(gs) if !gs.is_empty() && gs.iter().all(|g| !g.is_empty()) => Ok(Some(gs)),
        Some(_) | None => Err(param_error(
            prim,
            "axis_index_groups",
            format!("None or a tuple of non-empty integer tuples, got {value}"),
        )),
    }
}

/// A required `True`/`False` that JAX prints on every equation of `prim`.
fn printed_bool(prim: Prim, params: &Params, key: &str) -> Result<bool> {
    match params.get(key) {
        Some(ParamValue::Bool(b)) => Ok(*b),
        Some(v) => Err(param_error(prim, key, format!("True or False, got {v}"))),
        None => Err(param_error(
            prim,
            key,
            format!("True or False (JAX prints it on every {})", prim.name()),
        )),
    }
}

/// A dimension parameter, a position among `rank` dimensions (a negative one counts from the
/// end, as `lax.all_gather`'s `axis`), normalised.
fn dimension(prim: Prim, params: &Params, key: &str, rank: usize) -> Result<usize> {
    let d = params.int(prim.name(), key)?;
    super::axis(prim, d, rank).map_err(|_| {
        param_error(
            prim,
            key,
            format!("a dimension in -{rank}..{rank}, got {d}"),
        )
    })
}

/// `axis_size`, which JAX prints on `all_gather` and `reduce_scatter`: at least 1.
fn axis_size(prim: Prim, params: &Params) -> Result<i64> {
    match params.get("axis_size").and_then(ParamValue::as_int) {
        Some(n) if n >= 1 => Ok(n),
        Some(n) => Err(param_error(prim, "axis_size", format!("≥ 1, got {n}"))),
        None => Err(param_error(
            prim,
            "axis_size",
            format!("an integer (JAX prints it on every {})", prim.name()),
        )),
    }
}

/// `ppermute`'s `perm`: `(source, target)` pairs of indices ≥ 0, no source and no target
/// twice (JAX refuses those too); the shape rule checks them against the group size.
fn permutation(prim: Prim, params: &Params) -> Result<Vec<(i64, i64)>> {
    let bad = |why: String| param_error(prim, "perm", why);
    let pairs = params
        .get("perm")
        .and_then(ParamValue::as_seq)
        .ok_or_else(|| bad("a tuple of (source, target) pairs".into()))?
        .iter()
        .map(|p| match p.as_ints().as_deref() {
            Some(&[s, t]) if s >= 0 && t >= 0 => Ok((s, t)),
            Some(_) | None => Err(bad(format!("pairs of indices ≥ 0, got {p}"))),
        })
        .collect::<Result<Vec<_>>>()?;
    for (what, pick) in [("sources", 0), ("targets", 1)] {
        let mut seen: Vec<i64> = pairs.iter().map(|&(s, t)| [s, t][pick]).collect();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(bad(format!(
                "a permutation ({what} must be unique), but {} appears twice in {pairs:?}",
                w[0]
            )));
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, ParamValue)]) -> Params {
        pairs
            .iter()
            .fold(Params::new(), |p, (k, v)| p.with(k, v.clone()))
    }

    fn name(n: &str) -> ParamValue {
        ParamValue::Name(n.into())
    }

    /// The error of reading `pairs` for `prim`, which must name `param`.
    fn refused(prim: Prim, pairs: &[(&str, ParamValue)], rank: usize, param: &str) {
        match CollectiveParams::read(prim, &params(pairs), rank) {
            Err(IrError::Param { param: p, .. }) if p == param => {}
            other => panic!("{prim:?} {pairs:?}: expected an error naming {param}, got {other:?}"),
        }
    }

    fn gather(dim: i64, tiled: ParamValue) -> Vec<(&'static str, ParamValue)> {
        vec![
            ("all_gather_dimension", ParamValue::Int(dim)),
            ("axis_index_groups", name("None")),
            ("axis_name", ParamValue::Tuple(vec![name("x"), name("y")])),
            ("axis_size", ParamValue::Int(4)),
            ("tiled", tiled),
        ]
    }

    #[test]
    fn dimensions_are_normalised_against_the_right_rank() {
        let read = |dim, tiled| {
            CollectiveParams::read(Prim::AllGather, &params(&gather(dim, tiled)), 2).unwrap()
        };
        let untiled = read(-1, ParamValue::Bool(false));
        assert_eq!(untiled.axes, ["x", "y"]);
        assert_eq!(untiled.groups, None);
        assert_eq!(
            untiled.kind,
            CollectiveKind::AllGather {
                dimension: 2,
                tiled: false,
                axis_size: 4
            },
            "an untiled gather adds a dimension, so -1 is the new last one"
        );
        let tiled = read(-1, ParamValue::Bool(true));
        assert!(matches!(
            tiled.kind,
            CollectiveKind::AllGather { dimension: 1, .. }
        ));
        let a2a = params(&[
            (
                "axis_index_groups",
                ParamValue::Tuple(vec![ParamValue::ints(&[1, 0])]),
            ),
            ("axis_name", name("x")),
            ("concat_axis", ParamValue::Int(-3)),
            ("split_axis", ParamValue::Int(-1)),
            ("tiled", ParamValue::Bool(true)),
        ]);
        let p = CollectiveParams::read(Prim::AllToAll, &a2a, 3).unwrap();
        assert_eq!(p.groups, Some(vec![vec![1, 0]]));
        assert_eq!(
            p.kind,
            CollectiveKind::AllToAll {
                split_axis: 2,
                concat_axis: 0,
                tiled: true
            }
        );
    }

    #[test]
    fn missing_or_malformed_parameters_are_errors_naming_them() {
        let without = |key: &str| {
            let mut g = gather(0, ParamValue::Bool(true));
            g.retain(|(k, _)| *k != key);
            g
        };
        for key in ["tiled", "axis_size", "axis_index_groups", "axis_name"] {
            refused(Prim::AllGather, &without(key), 2, key);
        }
        refused(Prim::AllGather, &gather(0, ParamValue::Int(1)), 2, "tiled");
        refused(
            Prim::AllGather,
            &gather(3, ParamValue::Bool(false)),
            2,
            "all_gather_dimension",
        );
        refused(
            Prim::AllGather,
            &gather(-3, ParamValue::Bool(true)),
            2,
            "all_gather_dimension",
        );
        let mut zero = gather(0, ParamValue::Bool(true));
        zero[3].1 = ParamValue::Int(0);
        refused(Prim::AllGather, &zero, 2, "axis_size");
        let scatter = [
            ("axis_index_groups", name("None")),
            ("axis_name", name("x")),
            ("axis_size", ParamValue::Int(2)),
            ("scatter_dimension", ParamValue::Int(0)),
        ];
        refused(Prim::ReduceScatter, &scatter, 1, "tiled");
        refused(Prim::Psum, &[("axes", ParamValue::ints(&[0]))], 1, "axes");
        refused(Prim::Psum, &[("axes", name("x"))], 1, "axis_index_groups");
        let bad_groups = ("axis_index_groups", ParamValue::Tuple(vec![name("a")]));
        refused(
            Prim::Psum,
            &[("axes", name("x")), bad_groups],
            1,
            "axis_index_groups",
        );
        let empty = ("axis_index_groups", ParamValue::Tuple(vec![]));
        refused(
            Prim::Pmax,
            &[("axes", name("x")), empty],
            1,
            "axis_index_groups",
        );
        let groups = (
            "axis_index_groups",
            ParamValue::Tuple(vec![ParamValue::ints(&[0, 1])]),
        );
        refused(
            Prim::Pvary,
            &[("axes", name("x")), groups.clone()],
            1,
            "axis_index_groups",
        );
        refused(
            Prim::AxisIndex,
            &[("axis_name", name("x")), groups],
            0,
            "axis_index_groups",
        );
        // JAX prints axis_index_groups on every ragged_all_to_all.
        refused(
            Prim::RaggedAllToAll,
            &[("axis_name", name("x"))],
            2,
            "axis_index_groups",
        );
        let ragged = params(&[
            ("axis_index_groups", name("None")),
            ("axis_name", ParamValue::Tuple(vec![name("x"), name("y")])),
        ]);
        let p = CollectiveParams::read(Prim::RaggedAllToAll, &ragged, 2).unwrap();
        assert_eq!(
            (p.axes, p.groups, p.kind),
            (
                vec!["x".into(), "y".into()],
                None,
                CollectiveKind::RaggedAllToAll
            )
        );
        refused(Prim::Pbroadcast, &[("axis_name", name("x"))], 1, "source");
        let negative = ("source", ParamValue::Int(-1));
        refused(
            Prim::Pbroadcast,
            &[("axis_name", name("x")), negative],
            1,
            "source",
        );
    }

    #[test]
    fn a_permutation_names_each_source_and_target_once() {
        let perm = |pairs: &[[i64; 2]]| {
            let perm = ParamValue::Tuple(pairs.iter().map(|p| ParamValue::ints(p)).collect());
            vec![("axis_name", name("x")), ("perm", perm)]
        };
        let ok = CollectiveParams::read(Prim::Ppermute, &params(&perm(&[[0, 1], [1, 0]])), 1);
        assert_eq!(
            ok.unwrap().kind,
            CollectiveKind::Ppermute {
                perm: vec![(0, 1), (1, 0)]
            }
        );
        refused(Prim::Ppermute, &perm(&[[0, 1], [0, 2]]), 1, "perm");
        refused(Prim::Ppermute, &perm(&[[0, 1], [2, 1]]), 1, "perm");
        refused(Prim::Ppermute, &perm(&[[0, -1]]), 1, "perm");
        refused(Prim::Ppermute, &[("axis_name", name("x"))], 1, "perm");
    }
}
