//! Transposition of linear programs, and JAX's two-program VJP built from it: `linearize` splits
//! a program into a primal program (results and residuals) and a tangent program linear in its
//! tangents; transposing the tangent program gives the backward program, from residuals and
//! result cotangents to argument cotangents.
//!
//! The transpose of a program `L(r, t)` linear in `t` is the VJP of `L` with respect to `t`,
//! which for a linear map does not depend on where it is taken; it is taken at `t = 0`.

use super::{linearize, vjp};
use crate::error::{IrError, Result};
use crate::jaxpr::ClosedJaxpr;
use crate::passes::{eliminate_dead_code, inline_calls};
use crate::trace::{Tensor, call_closed, trace};

/// The transpose of `linear`, whose first `num_nonlinear` arguments are constants (residuals)
/// and whose other arguments it is linear in: a program from `(constants..., cotangents of the
/// results...)` to the cotangents of the linear arguments.
pub fn transpose(linear: &ClosedJaxpr, num_nonlinear: usize) -> Result<ClosedJaxpr> {
    let in_avals = linear.jaxpr.in_avals();
    if num_nonlinear > in_avals.len() {
        return Err(IrError::Type {
            prim: "transpose".into(),
            message: format!(
                "{num_nonlinear} constant arguments, but the program takes {}",
                in_avals.len()
            ),
        });
    }
    let backward = vjp(linear)?;
    let mut avals = in_avals[..num_nonlinear].to_vec();
    avals.extend(linear.jaxpr.out_avals());
    let linear_avals = in_avals[num_nonlinear..].to_vec();
    let out = trace(&avals, |args| {
        let Some(anchor) = args.first() else {
            return Vec::new();
        };
        let (constants, cts) = args.split_at(num_nonlinear);
        let zeros: Vec<Tensor> = linear_avals
            .iter()
            .map(|a| {
                anchor
                    .literal_strong(0.0, a.dtype)
                    .broadcast_in_dim(&a.shape, &[])
            })
            .collect();
        let operands: Vec<&Tensor> = constants.iter().chain(&zeros).chain(cts).collect();
        call_closed(&backward, &operands)
            .into_iter()
            .skip(num_nonlinear)
            .collect()
    })?;
    Ok(eliminate_dead_code(&inline_calls(&out)))
}

/// JAX's `vjp` as two programs: `forward` from the arguments to `(results..., residuals...)`,
/// and `backward` from `(residuals..., cotangents of the results...)` to the arguments'
/// cotangents. `num_residuals` says how many residuals `forward` appends.
#[derive(Debug, Clone)]
pub struct VjpSplit {
    /// Arguments to results and residuals.
    pub forward: ClosedJaxpr,
    /// Residuals and result cotangents to argument cotangents.
    pub backward: ClosedJaxpr,
    /// How many residuals `forward` appends to the results.
    pub num_residuals: usize,
}

/// Splits the VJP of `program` into a forward and a backward program (linearize, then
/// transpose the tangent program).
pub fn vjp_split(program: &ClosedJaxpr) -> Result<VjpSplit> {
    let lin = linearize(program)?;
    let backward = transpose(&lin.tangent, lin.num_residuals)?;
    Ok(VjpSplit {
        forward: lin.primal,
        backward,
        num_residuals: lin.num_residuals,
    })
}
