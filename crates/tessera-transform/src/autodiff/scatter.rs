//! JVP and VJP of `scatter`, `scatter-mul`, `scatter-min` and `scatter-max`, as JAX defines
//! them, for any indices (duplicates included) and every mode:
//!
//! - `scatter`: JAX's ids trick. Each update gets an id, the ids are scattered, and gathering
//!   them back says which update won each place; the operand keeps its tangent where no update
//!   landed, and each winning update passes its own. The VJP is the transpose of that linear
//!   map (masks from the primal values).
//! - `scatter-mul`: `d out = scatter-mul(dx, i, u) + scatter-add(0, i, du * r)` with `r` the
//!   product of everything else at the update's place: the gathered operand for
//!   `unique_indices=True` (JAX's rule); with duplicates (JAX refuses that case) also the other
//!   updates there, from the product of the nonzero ones and the count of zeros.
//! - `scatter-min`/`scatter-max`: the tangent of a place is the mean of the tangents of the
//!   values that equal the result there (the operand's, and each update's), as in JAX.
//!
//! The gathers that read values back at the scattered places use the scatter's mode with a zero
//! fill, so dropped windows pass nothing.

use super::rules::zeros_like;
use crate::dtype::DType;
use crate::params::Params;
use crate::prim::{
    GatherDims, GatherParams, Prim, ScatterKind, ScatterParams, scatter_window_sizes,
};
use crate::trace::{Tensor, where_};

/// A scatter equation's typed parameters, and the operands' roles.
struct Scatter<'a> {
    kind: ScatterKind,
    p: ScatterParams,
    x: &'a Tensor,
    i: &'a Tensor,
    u: &'a Tensor,
}

impl Scatter<'_> {
    /// `prim'(operand, i, updates)` with this scatter's dimension numbers and mode.
    fn bind(&self, prim: Prim, operand: &Tensor, updates: &Tensor) -> Tensor {
        Tensor::bind1(prim, self.p.to_params(), &[operand, self.i, updates])
    }

    /// `scatter-add(0, i, updates)` in the operand's shape.
    fn add_into_zeros(&self, updates: &Tensor) -> Tensor {
        self.bind(Prim::ScatterAdd, &zeros_like(self.x), updates)
    }

    /// The values of `t` (operand-shaped) at each update's place; 0 for dropped windows.
    fn gather(&self, t: &Tensor) -> Tensor {
        let d = &self.p.dims;
        let params = GatherParams {
            dims: GatherDims {
                offset_dims: d.update_window_dims.clone(),
                collapsed_slice_dims: d.inserted_window_dims.clone(),
                start_index_map: d.scatter_dims_to_operand_dims.clone(),
                operand_batching_dims: d.operand_batching_dims.clone(),
                start_indices_batching_dims: d.scatter_indices_batching_dims.clone(),
            },
            slice_sizes: scatter_window_sizes(d, self.u.shape(), self.x.rank()),
            mode: self.p.mode,
            fill_value: Some(0.0),
            indices_are_sorted: self.p.indices_are_sorted,
            unique_indices: self.p.unique_indices,
        };
        Tensor::bind1(Prim::Gather, params.to_params(), &[t, self.i])
    }

    /// JAX's ids trick: (where the operand keeps its value, which updates won their place).
    fn winners(&self) -> (Tensor, Tensor) {
        let window = &self.p.dims.update_window_dims;
        let shape = self.u.shape().to_vec();
        let ids_shape: Vec<i64> = shape
            .iter()
            .enumerate()
            .map(|(d, &n)| if window.contains(&(d as i64)) { 1 } else { n })
            .collect();
        let count: i64 = ids_shape.iter().product();
        let ids = self.u.iota_along(&[count], 0).reshape(&ids_shape);
        let one = ids.literal_strong(1.0, DType::I32);
        let ids = Tensor::bind1(Prim::Add, Params::new(), &[&ids, &one]).broadcast_to(&shape);
        let zero = ids.literal_strong(0.0, DType::I32);
        let blank = zero.broadcast_in_dim(self.x.shape(), &[]);
        let placed = self.bind(Prim::Scatter, &blank, &ids);
        let kept = placed.eq(&zero.broadcast_in_dim(self.x.shape(), &[]));
        // The gather fills with 0 where a window was dropped, and ids start at 1.
        let won = ids.eq(&self.gather(&placed));
        (kept, won)
    }

    /// `scatter-mul`: the product of everything else at each update's place (the operand's
    /// value and the other updates there). With duplicate indices: the product of the nonzero
    /// updates at the place divided by this one when no update there is zero; for a zero
    /// update, the product of the others when it is the only zero; else 0.
    fn others(&self) -> Tensor {
        let at_place = self.gather(self.x);
        if self.p.unique_indices {
            return at_place;
        }
        let dtype = self.u.dtype();
        let zero = self.u.literal_strong(0.0, dtype);
        let is_zero = self.u.eq(&zero);
        let ones = &zeros_like(self.u) + 1.0;
        let nonzero = where_(&is_zero, &ones, self.u);
        let product = self.bind(Prim::ScatterMul, &(&zeros_like(self.x) + 1.0), &nonzero);
        let zeros_here = self.gather(&self.add_into_zeros(&is_zero.astype(dtype)));
        let base = &at_place * &self.gather(&product);
        let none = zeros_here.eq(&zero);
        let only_this = zeros_here.eq(&self.u.literal_strong(1.0, dtype));
        let when_zero = where_(&only_this, &base, &zeros_like(self.u));
        let when_nonzero = where_(&none, &(&base / &nonzero), &zeros_like(self.u));
        where_(&is_zero, &when_zero, &when_nonzero)
    }

    /// `scatter-min`/`-max`: (operand kept as 0/1, updates that won as 0/1, winners per place).
    fn extremal(&self, y: &Tensor) -> (Tensor, Tensor, Tensor) {
        let dtype = self.x.dtype();
        let kept = self.x.eq(y).astype(dtype);
        let won = self.u.eq(&self.gather(y)).astype(dtype);
        let count = &kept + &self.add_into_zeros(&won);
        (kept, won, count)
    }
}

fn read<'a>(prim: Prim, params: &Params, x: &'a [Tensor]) -> Result<Scatter<'a>, String> {
    let p = ScatterParams::read(params).map_err(|e| e.to_string())?;
    let kind = ScatterKind::of(prim).ok_or_else(|| "is not a scatter".to_owned())?;
    Ok(Scatter {
        kind,
        p,
        x: &x[0],
        i: &x[1],
        u: &x[2],
    })
}

fn zero_where_not(mask: &Tensor, t: &Tensor) -> Tensor {
    where_(mask, t, &zeros_like(t))
}

/// The tangent of a scatter's result.
pub(super) fn scatter_jvp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let (tx, tu) = (ts[0].clone(), ts.get(2).cloned().flatten());
    if tx.is_none() && tu.is_none() {
        return vec![None];
    }
    let s = match read(prim, params, x) {
        Ok(s) => s,
        Err(e) => return vec![Some(y[0].fail(prim.name(), format!("in its JVP: {e}")))],
    };
    let tx = tx.unwrap_or_else(|| zeros_like(s.x));
    let tu = tu.unwrap_or_else(|| zeros_like(s.u));
    let out = match s.kind {
        ScatterKind::Mul => {
            let through = s.bind(Prim::ScatterMul, &tx, s.u);
            &through + &s.add_into_zeros(&(&tu * &s.others()))
        }
        ScatterKind::Min | ScatterKind::Max => {
            let (kept, won, count) = s.extremal(&y[0]);
            &(&(&kept * &tx) + &s.add_into_zeros(&(&won * &tu))) / &count
        }
        ScatterKind::Replace => {
            let (kept, won) = s.winners();
            s.bind(
                Prim::ScatterAdd,
                &zero_where_not(&kept, &tx),
                &zero_where_not(&won, &tu),
            )
        }
    };
    vec![Some(out)]
}

/// The cotangents of a scatter's operand and updates (none for the indices).
pub(super) fn scatter_vjp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    g: &Tensor,
) -> Vec<Option<Tensor>> {
    let s = match read(prim, params, x) {
        Ok(s) => s,
        Err(e) => return vec![Some(g.fail(prim.name(), format!("in its VJP: {e}"))); 3],
    };
    let (dx, du) = match s.kind {
        ScatterKind::Mul => (s.bind(Prim::ScatterMul, g, s.u), &s.others() * &s.gather(g)),
        ScatterKind::Min | ScatterKind::Max => {
            let (kept, won, count) = s.extremal(&y[0]);
            let share = g / &count;
            (&kept * &share, &won * &s.gather(&share))
        }
        ScatterKind::Replace => {
            let (kept, won) = s.winners();
            (zero_where_not(&kept, g), zero_where_not(&won, &s.gather(g)))
        }
    };
    let float = |t: &Tensor| t.dtype().is_float();
    vec![float(s.x).then_some(dx), None, float(s.u).then_some(du)]
}
