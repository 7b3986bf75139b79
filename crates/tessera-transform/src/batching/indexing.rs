//! Batching rules of the indexing primitives. The IR's `gather`/`scatter-add` have no batching
//! dimensions, so where both the array and the indices are batched the rules prepend an `iota`
//! column to the indices that selects each batch element (as JAX did before batching dimensions
//! existed). `dynamic_slice` with batched indices becomes a `gather`; `dynamic_update_slice` with
//! batched indices becomes two `scatter-add`s (the update and a mask of where it lands) and a
//! `select_n`, with the indices clamped first as `dynamic_update_slice` clamps them.

use super::rules::unsupported;
use super::{Batched, shifted, to_front, with_param};
use crate::dtype::DType;
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, StructuralParams};
use crate::trace::Tensor;

/// `dynamic_slice`: a leading zero index when the indices are shared, else a `gather`.
pub(super) fn dynamic_slice(params: &Params, args: &[Batched], size: i64) -> Tensor {
    let sizes = match StructuralParams::of(Prim::DynamicSlice, params) {
        Ok(StructuralParams::DynamicSlice { slice_sizes }) => slice_sizes,
        Ok(other) => {
            return args[0]
                .0
                .fail("dynamic_slice", format!("read as {other:?}"));
        }
        Err(e) => return super::rules::malformed(args, Prim::DynamicSlice, &e),
    };
    let x = to_front(&args[0], size);
    let idx = &args[1..];
    if idx.iter().all(|(_, d)| d.is_none()) {
        let zero = leading_zero(&x, idx);
        let mut ops: Vec<&Tensor> = vec![&x, &zero];
        ops.extend(idx.iter().map(|(t, _)| t));
        let p = with_param(params, "slice_sizes", lead(size, &sizes));
        return Tensor::bind1(Prim::DynamicSlice, p, &ops);
    }
    let rank = sizes.len() as i64;
    let column = index_matrix(&x, idx, size, None);
    let window: Vec<i64> = (1..=rank).collect();
    let map: Vec<i64> = (0..=rank).collect();
    let dims = record(
        "GatherDimensionNumbers",
        &[
            ("offset_dims", &window),
            ("collapsed_slice_dims", &[0]),
            ("start_index_map", &map),
            ("operand_batching_dims", &[]),
            ("start_indices_batching_dims", &[]),
        ],
    );
    let p = Params::new()
        .with("dimension_numbers", dims)
        .with("fill_value", ParamValue::Name("None".into()))
        .with("indices_are_sorted", ParamValue::Bool(false))
        .with("mode", ParamValue::Name("GatherScatterMode.CLIP".into()))
        .with("slice_sizes", lead(1, &sizes))
        .with("unique_indices", ParamValue::Bool(false));
    Tensor::bind1(Prim::Gather, p, &[&x, &column])
}

/// `dynamic_update_slice`: a leading zero index when the indices are shared, else
/// `select_n(mask, x, scatter_add(0, u))` at the clamped indices.
pub(super) fn dynamic_update_slice(params: &Params, args: &[Batched], size: i64) -> Tensor {
    let x = to_front(&args[0], size);
    let u = to_front(&args[1], size);
    let idx = &args[2..];
    if idx.iter().all(|(_, d)| d.is_none()) {
        let zero = leading_zero(&x, idx);
        let mut ops: Vec<&Tensor> = vec![&x, &u, &zero];
        ops.extend(idx.iter().map(|(t, _)| t));
        return Tensor::bind1(Prim::DynamicUpdateSlice, params.clone(), &ops);
    }
    let dtype = x.dtype();
    if dtype == DType::Bool {
        return unsupported(
            args,
            Prim::DynamicUpdateSlice,
            "boolean arrays with batched indices",
        );
    }
    let limits: Vec<i64> = x.shape()[1..]
        .iter()
        .zip(&u.shape()[1..])
        .map(|(&n, &w)| (n - w).max(0))
        .collect();
    let column = index_matrix(&x, idx, size, Some(&limits));
    let rank = limits.len() as i64;
    let window: Vec<i64> = (1..=rank).collect();
    let map: Vec<i64> = (0..=rank).collect();
    let dims = record(
        "ScatterDimensionNumbers",
        &[
            ("update_window_dims", &window),
            ("inserted_window_dims", &[0]),
            ("scatter_dims_to_operand_dims", &map),
            ("operand_batching_dims", &[]),
            ("scatter_indices_batching_dims", &[]),
        ],
    );
    let p = Params::new()
        .with("dimension_numbers", dims)
        .with("indices_are_sorted", ParamValue::Bool(true))
        .with(
            "mode",
            ParamValue::Name("GatherScatterMode.FILL_OR_DROP".into()),
        )
        .with("unique_indices", ParamValue::Bool(true));
    let zeros = x
        .literal_strong(0.0, dtype)
        .broadcast_in_dim(x.shape(), &[]);
    let ones = x
        .literal_strong(1.0, dtype)
        .broadcast_in_dim(u.shape(), &[]);
    let placed = Tensor::bind1(Prim::ScatterAdd, p.clone(), &[&zeros, &column, &u]);
    let mask = Tensor::bind1(Prim::ScatterAdd, p, &[&zeros, &column, &ones]);
    let zero = x.literal_strong(0.0, dtype);
    let inside = Tensor::bind1(Prim::Gt, Params::new(), &[&mask, &zero]);
    Tensor::bind1(Prim::SelectN, Params::new(), &[&inside, &x, &placed])
}

/// `gather`: shift the dimension numbers for a batched operand or batched indices; with both
/// batched, an `iota` index column picks each element's own operand.
pub(super) fn gather(params: &Params, args: &[Batched], size: i64) -> Tensor {
    let typed = match crate::prim::GatherParams::read(params) {
        Ok(typed) => typed,
        Err(e) => return super::rules::malformed(args, Prim::Gather, &e),
    };
    let (dn, sizes) = (typed.dims, typed.slice_sizes);
    let (operand, indices) = (to_front(&args[0], size), to_front(&args[1], size));
    let (offset, collapsed, map);
    // Batching dimensions follow their operand's batch dimension moved in front.
    let (obd, sibd) = (&dn.operand_batching_dims, &dn.start_indices_batching_dims);
    let (operand_batching, indices_batching) = (
        match args[0].1 {
            Some(_) => shifted(obd, None),
            None => obd.clone(),
        },
        match args[1].1 {
            Some(_) => shifted(sibd, None),
            None => sibd.clone(),
        },
    );
    let (x, i, sizes) = match (args[0].1, args[1].1) {
        (Some(_), None) => {
            offset = shifted(&dn.offset_dims, Some(0));
            collapsed = shifted(&dn.collapsed_slice_dims, None);
            map = shifted(&dn.start_index_map, None);
            (operand, args[1].0.clone(), lead(size, &sizes))
        }
        (None, _) => {
            offset = shifted(&dn.offset_dims, None);
            collapsed = dn.collapsed_slice_dims.clone();
            map = dn.start_index_map.clone();
            (args[0].0.clone(), indices, ParamValue::ints(&sizes))
        }
        (Some(_), Some(_)) => {
            offset = shifted(&dn.offset_dims, None);
            collapsed = shifted(&dn.collapsed_slice_dims, Some(0));
            map = shifted(&dn.start_index_map, Some(0));
            (operand, with_iota_column(&indices), lead(1, &sizes))
        }
    };
    let p = with_dims(
        params,
        &[
            ("offset_dims", &offset),
            ("collapsed_slice_dims", &collapsed),
            ("start_index_map", &map),
            ("operand_batching_dims", &operand_batching),
            ("start_indices_batching_dims", &indices_batching),
        ],
    );
    Tensor::bind1(
        Prim::Gather,
        with_param(&p, "slice_sizes", sizes),
        &[&x, &i],
    )
}

/// Every scatter (`scatter-add`, `scatter`, `scatter-mul`, ...): the operand and updates get the
/// batch dimension in front; shared indices treat it as a window dimension, batched ones get an
/// `iota` column.
pub(super) fn scatter(prim: Prim, params: &Params, args: &[Batched], size: i64) -> Tensor {
    let Ok(dn) = crate::prim::scatter_dims(params) else {
        return unsupported(args, prim, "unreadable dimension numbers");
    };
    let operand = to_front(&args[0], size);
    let updates = to_front(&args[2], size);
    let (window, inserted, map, indices) = match args[1].1 {
        None => (
            shifted(&dn.update_window_dims, Some(0)),
            shifted(&dn.inserted_window_dims, None),
            shifted(&dn.scatter_dims_to_operand_dims, None),
            args[1].0.clone(),
        ),
        Some(_) => (
            shifted(&dn.update_window_dims, None),
            shifted(&dn.inserted_window_dims, Some(0)),
            shifted(&dn.scatter_dims_to_operand_dims, Some(0)),
            with_iota_column(&to_front(&args[1], size)),
        ),
    };
    // The operand's batching dimensions follow its batch dimension in front, the indices'
    // theirs when they are batched.
    let operand_batching = shifted(&dn.operand_batching_dims, None);
    let indices_batching = match args[1].1 {
        Some(_) => shifted(&dn.scatter_indices_batching_dims, None),
        None => dn.scatter_indices_batching_dims.clone(),
    };
    let p = with_dims(
        params,
        &[
            ("update_window_dims", &window),
            ("inserted_window_dims", &inserted),
            ("scatter_dims_to_operand_dims", &map),
            ("operand_batching_dims", &operand_batching),
            ("scatter_indices_batching_dims", &indices_batching),
        ],
    );
    Tensor::bind1(prim, p, &[&operand, &indices, &updates])
}

/// `[size] ++ rest` as a parameter tuple.
fn lead(size: i64, rest: &[i64]) -> ParamValue {
    let v: Vec<i64> = std::iter::once(size).chain(rest.iter().copied()).collect();
    ParamValue::ints(&v)
}

/// A zero index of the other indices' dtype (the batch dimension's start).
fn leading_zero(x: &Tensor, idx: &[Batched]) -> Tensor {
    let dtype = idx.first().map_or(DType::I32, |(t, _)| t.dtype());
    x.literal_strong(0.0, dtype)
}

/// The `[size, 1 + n]` int32 start indices of a batched `dynamic_slice`/`_update_slice`: the batch
/// position, then each scalar index (clamped to `0..=limits[d]` when given).
fn index_matrix(x: &Tensor, idx: &[Batched], size: i64, limits: Option<&[i64]>) -> Tensor {
    let mut columns = vec![x.iota_along(&[size, 1], 0)];
    for (d, (t, bdim)) in idx.iter().enumerate() {
        let mut t = t.astype(DType::I32);
        if let Some(limits) = limits {
            let lo = x.literal_strong(0.0, DType::I32);
            let hi = x.literal_strong(limits.get(d).copied().unwrap_or(0) as f64, DType::I32);
            t = Tensor::bind1(Prim::Clamp, Params::new(), &[&lo, &t, &hi]);
        }
        columns.push(match bdim {
            Some(_) => t.reshape(&[size, 1]),
            None => t.broadcast_in_dim(&[size, 1], &[]),
        });
    }
    let refs: Vec<&Tensor> = columns.iter().collect();
    let p = Params::new().with("dimension", ParamValue::Int(1));
    Tensor::bind1(Prim::Concatenate, p, &refs)
}

/// Indices `[size, .., n]` with the batch position prepended to each index vector.
fn with_iota_column(indices: &Tensor) -> Tensor {
    let mut shape = indices.shape().to_vec();
    let last = shape.len() - 1;
    shape[last] = 1;
    let column = indices.iota_along(&shape, 0).astype(indices.dtype());
    let p = Params::new().with("dimension", ParamValue::Int(last as i64));
    Tensor::bind1(Prim::Concatenate, p, &[&column, indices])
}

fn record(name: &str, fields: &[(&str, &[i64])]) -> ParamValue {
    ParamValue::Record(
        name.into(),
        fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ParamValue::ints(v)))
            .collect(),
    )
}

/// `params` with some fields of `dimension_numbers` replaced.
fn with_dims(params: &Params, fields: &[(&str, &[i64])]) -> Params {
    let Some(ParamValue::Record(name, old)) = params.get("dimension_numbers") else {
        return params.clone();
    };
    let new: Vec<(String, ParamValue)> = old
        .iter()
        .map(|(k, v)| match fields.iter().find(|(f, _)| f == k) {
            Some((_, ints)) => (k.clone(), ParamValue::ints(ints)),
            None => (k.clone(), v.clone()),
        })
        .collect();
    with_param(
        params,
        "dimension_numbers",
        ParamValue::Record(name.clone(), new),
    )
}
