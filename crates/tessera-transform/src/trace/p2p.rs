//! The tracing API of JAX's `lax.psend` and `lax.precv`: [`Tensor::psend`] binds a `psend` and
//! returns a [`SendToken`], which only [`precv`] takes (consuming it), binding the matching
//! `precv`. A `SendToken` is not a `Tensor`, so a traced program receives each send at most once
//! and uses its token nowhere else; one dropped without its `precv` leaves a send the verifier
//! refuses (see `prim/p2p.rs` for the rules applied to parsed programs).

use super::Tensor;
use super::collectives::names;
use crate::aval::ShapedArray;
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, out_shape_param};

/// The token of a traced `psend` (JAX's `abstract_token`, printed `Tok`): what its `precv`
/// takes.
#[must_use = "a send's token must be received by `precv`, or the traced program is refused"]
#[derive(Debug)]
pub struct SendToken {
    /// The `psend`'s result, of type `Tok`.
    token: Tensor,
}

impl SendToken {
    /// The token's type (`Tok`).
    pub fn aval(&self) -> ShapedArray {
        self.token.aval().clone()
    }
}

fn perm_value(perm: &[(i64, i64)]) -> ParamValue {
    ParamValue::Tuple(
        perm.iter()
            .map(|&(s, t)| ParamValue::ints(&[s, t]))
            .collect(),
    )
}

impl Tensor {
    /// Sends this device's value to the device `perm` pairs it with (`(source, target)`
    /// indices along `axis_name`, as [`Tensor::ppermute`]'s); the value is received by the
    /// [`precv`] given the returned token. JAX's `lax.psend`.
    pub fn psend(&self, axis_name: &str, perm: &[(i64, i64)]) -> SendToken {
        self.psend_over(&[axis_name], perm)
    }

    /// [`Tensor::psend`] over several axes (indices number each group's devices in mesh
    /// order, as [`Tensor::ppermute_over`]'s).
    pub fn psend_over(&self, axes: &[&str], perm: &[(i64, i64)]) -> SendToken {
        let params = Params::new()
            .with("axis_name", names(axes))
            .with("perm", perm_value(perm));
        SendToken {
            token: Tensor::bind1(Prim::Psend, params, &[&self.pvary(axes)]),
        }
    }
}

/// Receives what the `psend` of `token` sent: each target of `perm` gets its source's value,
/// every other device zeros, of type `out_aval` (the sent value's shape and dtype). `axis_name`
/// and `perm` must be the send's. JAX's `lax.precv(token, out_shape, axis_name, perm)`.
pub fn precv(
    token: SendToken,
    out_aval: &ShapedArray,
    axis_name: &str,
    perm: &[(i64, i64)],
) -> Tensor {
    precv_over(token, out_aval, &[axis_name], perm)
}

/// [`precv`] over several axes.
pub fn precv_over(
    token: SendToken,
    out_aval: &ShapedArray,
    axes: &[&str],
    perm: &[(i64, i64)],
) -> Tensor {
    let params = Params::new()
        .with("axis_name", names(axes))
        .with("out_shape", out_shape_param(out_aval))
        .with("perm", perm_value(perm));
    Tensor::bind1(Prim::Precv, params, &[&token.token])
}
