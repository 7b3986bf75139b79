//! Convolution helpers on traced values, shared by the convolution's derivatives (`autodiff`)
//! and its batching rule (`batching`): binding `conv_general_dilated` with new dimension
//! numbers, and JAX's reshapes that move a dimension into or out of another.

use crate::params::Params;
use crate::prim::{ConvParams, Prim};
use crate::trace::Tensor;

/// `conv_general_dilated` with `c`'s fields over `base`'s other parameters.
pub(crate) fn conv(base: &Params, c: &ConvParams, lhs: &Tensor, rhs: &Tensor) -> Tensor {
    Tensor::bind1(Prim::ConvGeneralDilated, c.write(base), &[lhs, rhs])
}

/// JAX's `_reshape_axis_out_of`: dimension `src` split into `(size, rest)`.
pub(crate) fn axis_out_of(src: usize, size: i64, x: &Tensor) -> Tensor {
    let mut shape = x.shape().to_vec();
    let rest = shape[src] / size;
    shape.splice(src..=src, [size, rest]);
    x.reshape(&shape)
}

/// JAX's `_reshape_axis_into`: dimension `src` merged into dimension `dst` (numbered after
/// `src` is removed) as its major part.
pub(crate) fn axis_into(src: usize, dst: usize, x: &Tensor) -> Tensor {
    let mut perm: Vec<i64> = (0..x.rank() as i64).filter(|&d| d != src as i64).collect();
    perm.insert(dst, src as i64);
    let mut shape: Vec<i64> = x.shape().to_vec();
    let moved = shape.remove(src);
    shape[dst] *= moved;
    let identity = perm.iter().enumerate().all(|(i, &p)| i as i64 == p);
    let t = if identity {
        x.clone()
    } else {
        x.transpose(&perm)
    };
    t.reshape(&shape)
}
