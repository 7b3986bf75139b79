//! `gather` and `scatter-add` with XLA's dimension numbers (enough for embedding lookups and
//! their gradients). Batching dimensions (`operand_batching_dims`) are not supported yet: the
//! shape rules reject them.

use super::{Primitive, TypeError, type_err};
use crate::interp::{Array, EvalError, Wide, prim_err};
use crate::types::ShapedArray;
use ndarray::{ArrayD, Dimension, IxDyn};

/// How out-of-bounds indices are treated (JAX's `GatherScatterMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexMode {
    /// Starts are clamped into bounds.
    Clip,
    /// Out-of-bounds gathers give the fill value; out-of-bounds scatters are dropped.
    FillOrDrop,
    /// The caller promises in-bounds indices (clamped for gather, dropped for scatter, as XLA).
    PromiseInBounds,
}

impl IndexMode {
    /// JAX's spelling (`GatherScatterMode.CLIP`).
    pub fn name(self) -> &'static str {
        match self {
            IndexMode::Clip => "GatherScatterMode.CLIP",
            IndexMode::FillOrDrop => "GatherScatterMode.FILL_OR_DROP",
            IndexMode::PromiseInBounds => "GatherScatterMode.PROMISE_IN_BOUNDS",
        }
    }

    /// Parses JAX's spelling.
    pub fn from_name(s: &str) -> Option<IndexMode> {
        [
            IndexMode::Clip,
            IndexMode::FillOrDrop,
            IndexMode::PromiseInBounds,
        ]
        .into_iter()
        .find(|m| m.name() == s || m.name().trim_start_matches("GatherScatterMode.") == s)
    }
}

/// `GatherDimensionNumbers`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct GatherDims {
    /// Result dimensions that index into the slice.
    pub offset_dims: Vec<usize>,
    /// Operand dimensions of slice size 1 dropped from the result.
    pub collapsed_slice_dims: Vec<usize>,
    /// Operand dimension each index component starts.
    pub start_index_map: Vec<usize>,
    /// Operand batching dimensions (must be empty).
    pub operand_batching_dims: Vec<usize>,
    /// Index batching dimensions (must be empty).
    pub start_indices_batching_dims: Vec<usize>,
}

/// `ScatterDimensionNumbers`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ScatterDims {
    /// Update dimensions that index into the window.
    pub update_window_dims: Vec<usize>,
    /// Operand dimensions of window size 1 absent from the updates.
    pub inserted_window_dims: Vec<usize>,
    /// Operand dimension each index component starts.
    pub scatter_dims_to_operand_dims: Vec<usize>,
    /// Operand batching dimensions (must be empty).
    pub operand_batching_dims: Vec<usize>,
    /// Index batching dimensions (must be empty).
    pub scatter_indices_batching_dims: Vec<usize>,
}

/// The result shape of a gather, or why not.
fn gather_shape(
    d: &GatherDims,
    slice_sizes: &[usize],
    op: &[usize],
    idx: &[usize],
) -> Result<Vec<usize>, String> {
    if !d.operand_batching_dims.is_empty() || !d.start_indices_batching_dims.is_empty() {
        return Err("batching dimensions are not supported yet".into());
    }
    let Some((&k, batch)) = idx.split_last() else {
        return Err("indices need a last dimension holding the index vectors".into());
    };
    let ok = k == d.start_index_map.len()
        && d.start_index_map.iter().all(|&x| x < op.len())
        && slice_sizes.len() == op.len()
        && slice_sizes.iter().zip(op).all(|(s, o)| s <= o)
        && d.collapsed_slice_dims
            .iter()
            .all(|&c| slice_sizes.get(c).is_some_and(|&s| s <= 1));
    let offsets: Vec<usize> = (0..op.len())
        .filter(|x| !d.collapsed_slice_dims.contains(x))
        .map(|x| slice_sizes[x.min(slice_sizes.len().saturating_sub(1))])
        .collect();
    let rank = batch.len() + offsets.len();
    if !ok
        || offsets.len() != d.offset_dims.len()
        || d.offset_dims.iter().any(|&o| o >= rank)
        || !d.offset_dims.windows(2).all(|w| w[0] < w[1])
    {
        return Err(format!(
            "dimension numbers {d:?} and slice_sizes {slice_sizes:?} do not fit"
        ));
    }
    let (mut bi, mut oi) = (batch.iter(), offsets.iter());
    Ok((0..rank)
        .map(|r| {
            if d.offset_dims.contains(&r) {
                oi.next()
            } else {
                bi.next()
            }
            .copied()
            .unwrap_or(0)
        })
        .collect())
}

fn scatter_ok(d: &ScatterDims, op: &[usize], idx: &[usize], upd: &[usize]) -> bool {
    let Some((&k, batch)) = idx.split_last() else {
        return false;
    };
    let window: Vec<usize> = (0..op.len())
        .filter(|x| !d.inserted_window_dims.contains(x))
        .collect();
    d.operand_batching_dims.is_empty()
        && d.scatter_indices_batching_dims.is_empty()
        && k == d.scatter_dims_to_operand_dims.len()
        && d.scatter_dims_to_operand_dims.iter().all(|&x| x < op.len())
        && upd.len() == batch.len() + window.len()
        && d.update_window_dims.len() == window.len()
        && d.update_window_dims.iter().all(|&w| w < upd.len())
        && d.update_window_dims
            .iter()
            .zip(&window)
            .all(|(&u, &o)| upd[u] <= op[o])
}

/// The shape rule of `gather` and `scatter-add`.
pub fn shape_rule(prim: &Primitive, ins: &[ShapedArray]) -> Result<ShapedArray, TypeError> {
    let err = |m: String| Err(type_err(prim, ins, m));
    match (prim, ins) {
        (Primitive::Gather { dimension_numbers, slice_sizes, .. }, [op, idx]) if idx.dtype.is_int() => {
            match gather_shape(dimension_numbers, slice_sizes, &op.shape, &idx.shape) {
                Ok(s) => Ok(op.with_shape(&s)),
                Err(m) => err(m),
            }
        }
        (Primitive::ScatterAdd { dimension_numbers, .. }, [op, idx, upd]) if idx.dtype.is_int() && upd.dtype == op.dtype => {
            if scatter_ok(dimension_numbers, &op.shape, &idx.shape, &upd.shape) {
                Ok(op.clone())
            } else {
                err(format!("dimension numbers {dimension_numbers:?} do not fit the shapes"))
            }
        }
        _ => err("takes (operand, integer indices) for gather, (operand, indices, updates of the operand's dtype) for scatter-add".into()),
    }
}

/// The operand start of the index vector at `batch` (unclamped).
fn start_at(idx: &ArrayD<i64>, batch: &[usize], map: &[usize], rank: usize) -> Vec<i64> {
    let mut start = vec![0i64; rank];
    let mut ix = batch.to_vec();
    ix.push(0);
    for (k, &d) in map.iter().enumerate() {
        if let Some(last) = ix.last_mut() {
            *last = k;
        }
        start[d] = idx.get(IxDyn(&ix)).copied().unwrap_or(0);
    }
    start
}

/// For each result element of a gather, the flat operand position (or `None`: fill).
fn gather_positions(
    prim: &Primitive,
    op: &[usize],
    idx: &ArrayD<i64>,
    out: &[usize],
) -> Vec<Option<usize>> {
    let Primitive::Gather {
        dimension_numbers: d,
        slice_sizes,
        mode,
        ..
    } = prim
    else {
        return vec![];
    };
    let strides: Vec<usize> = (0..op.len())
        .map(|i| op[i + 1..].iter().product())
        .collect();
    let window: Vec<usize> = (0..op.len())
        .filter(|x| !d.collapsed_slice_dims.contains(x))
        .collect();
    ArrayD::from_shape_fn(IxDyn(out), |ix| {
        let ix = ix.slice();
        let batch: Vec<usize> = (0..ix.len())
            .filter(|r| !d.offset_dims.contains(r))
            .map(|r| ix[r])
            .collect();
        let mut start = start_at(idx, &batch, &d.start_index_map, op.len());
        for (dim, s) in start.iter_mut().enumerate() {
            let hi = (op[dim] - slice_sizes[dim]) as i64;
            if *mode == IndexMode::FillOrDrop && (*s < 0 || *s > hi) {
                return None;
            }
            *s = (*s).clamp(0, hi);
        }
        let mut pos = 0;
        for (dim, &s) in start.iter().enumerate() {
            let off = window
                .iter()
                .position(|&w| w == dim)
                .map_or(0, |k| ix[d.offset_dims[k]]);
            pos += (s as usize + off) * strides[dim];
        }
        Some(pos)
    })
    .into_iter()
    .collect()
}

fn take<T: Clone>(
    a: &ArrayD<T>,
    pos: &[Option<usize>],
    fill: T,
    shape: &[usize],
) -> Option<ArrayD<T>> {
    let flat: Vec<T> = a.iter().cloned().collect();
    let v = pos
        .iter()
        .map(|p| {
            p.and_then(|i| flat.get(i).cloned())
                .unwrap_or_else(|| fill.clone())
        })
        .collect();
    ArrayD::from_shape_vec(IxDyn(shape), v).ok()
}

/// Evaluates `gather` or `scatter-add`.
pub fn eval(prim: &Primitive, args: &[Array]) -> Result<Array, EvalError> {
    let avals: Vec<ShapedArray> = args.iter().map(Array::aval).collect();
    let out = shape_rule(prim, &avals).map_err(|e| prim_err(prim, e.message))?;
    let (op, idx) = (&args[0], args[1].widen().to_i64());
    let w = op.widen();
    let r = match prim {
        Primitive::Gather { fill_value, .. } => {
            let pos = gather_positions(prim, op.shape(), &idx, &out.shape);
            let f = fill_value.unwrap_or(f64::NAN);
            let s = &out.shape;
            let bad = || prim_err(prim, "bad result shape");
            match &w {
                Wide::F(a) => Wide::F(take(a, &pos, f, s).ok_or_else(bad)?),
                Wide::I(a) => Wide::I(
                    take(a, &pos, if f.is_nan() { i64::MIN } else { f as i64 }, s)
                        .ok_or_else(bad)?,
                ),
                Wide::U(a) => Wide::U(
                    take(a, &pos, if f.is_nan() { u64::MAX } else { f as u64 }, s)
                        .ok_or_else(bad)?,
                ),
                Wide::B(a) => Wide::B(take(a, &pos, f.is_nan() || f != 0.0, s).ok_or_else(bad)?),
            }
        }
        Primitive::ScatterAdd {
            dimension_numbers: d,
            mode,
            ..
        } => scatter_add(d, *mode, &w, &idx, &args[2].widen()),
        _ => return Err(prim_err(prim, "not a gather or scatter")),
    };
    Ok(Array::from_wide(&r, out.dtype))
}

fn scatter_add(d: &ScatterDims, mode: IndexMode, op: &Wide, idx: &ArrayD<i64>, upd: &Wide) -> Wide {
    let shape = op.shape().to_vec();
    let window: Vec<usize> = (0..shape.len())
        .filter(|x| !d.inserted_window_dims.contains(x))
        .collect();
    let upd_shape = upd.shape().to_vec();
    let wsize = |dim: usize| {
        window
            .iter()
            .position(|&w| w == dim)
            .map_or(1, |k| upd_shape[d.update_window_dims[k]])
    };
    let target = |ix: &[usize]| -> Option<Vec<usize>> {
        let batch: Vec<usize> = (0..ix.len())
            .filter(|r| !d.update_window_dims.contains(r))
            .map(|r| ix[r])
            .collect();
        let mut start = start_at(idx, &batch, &d.scatter_dims_to_operand_dims, shape.len());
        let mut pos = Vec::with_capacity(shape.len());
        for (dim, s) in start.iter_mut().enumerate() {
            let hi = shape[dim] as i64 - wsize(dim) as i64;
            if mode == IndexMode::Clip {
                *s = (*s).clamp(0, hi.max(0));
            } else if *s < 0 || *s > hi {
                return None;
            }
            let off = window
                .iter()
                .position(|&w| w == dim)
                .map_or(0, |k| ix[d.update_window_dims[k]]);
            pos.push(*s as usize + off);
        }
        Some(pos)
    };
    fn add_into<T: Clone + std::ops::Add<Output = T>>(
        o: &ArrayD<T>,
        u: &ArrayD<T>,
        target: &dyn Fn(&[usize]) -> Option<Vec<usize>>,
    ) -> ArrayD<T> {
        let mut r = o.clone();
        for (ix, x) in u.indexed_iter() {
            if let Some(p) = target(ix.slice())
                && let Some(slot) = r.get_mut(IxDyn(&p))
            {
                *slot = slot.clone() + x.clone();
            }
        }
        r
    }
    match (op, upd) {
        (Wide::F(o), Wide::F(u)) => Wide::F(add_into(o, u, &target)),
        (Wide::I(o), Wide::I(u)) => Wide::I(
            add_into(
                &o.mapv(std::num::Wrapping),
                &u.mapv(std::num::Wrapping),
                &target,
            )
            .mapv(|w| w.0),
        ),
        (Wide::U(o), Wide::U(u)) => Wide::U(
            add_into(
                &o.mapv(std::num::Wrapping),
                &u.mapv(std::num::Wrapping),
                &target,
            )
            .mapv(|w| w.0),
        ),
        (Wide::B(o), Wide::B(u)) => Wide::B(
            add_into(
                &o.mapv(|b| std::num::Wrapping(u8::from(b))),
                &u.mapv(|b| std::num::Wrapping(u8::from(b))),
                &target,
            )
            .mapv(|x| x.0 != 0),
        ),
        _ => op.clone(),
    }
}
