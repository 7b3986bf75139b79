//! Evaluation rules of the `conv` family (moved from the core crate's `prim/conv.rs`).

use ndarray::{ArrayD, Dimension, IxDyn};
use tessera_ir_core::array::{Array, is_exact_int};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::conv::ConvParams;

pub(crate) fn eval(
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let (lhs, rhs) = (&inputs[0], &inputs[1]);
    let c = ConvParams::read(params, lhs.dims().len())?;
    let out = &outputs[0];
    let (ls, rs) = (lhs.shape(), rhs.shape());
    let (g, b) = (c.feature_group_count, c.batch_group_count);
    let o_total = rs[c.rhs_spec[0]];
    let i_per_group = rs[c.rhs_spec[1]];
    let n_out = out.shape[c.out_spec[0]];
    let spatial = ls.len() - 2;
    let kernel: Vec<i64> = (0..spatial).map(|s| rs[c.rhs_spec[2 + s]]).collect();
    let kernel_positions: Vec<Vec<usize>> = ArrayD::<u8>::zeros(IxDyn(
        &kernel.iter().map(|&k| k as usize).collect::<Vec<_>>(),
    ))
    .indexed_iter()
    .map(|(i, _)| i.slice().to_vec())
    .collect();
    let dims: Vec<usize> = out.shape.iter().map(|&d| d as usize).collect();
    // The (operand index, kernel index) pairs whose products sum to the output at `idx`.
    let terms = |idx: &[usize]| -> Vec<(Vec<usize>, Vec<usize>)> {
        let (n, o) = (idx[c.out_spec[0]] as i64, idx[c.out_spec[1]] as i64);
        let group = o / (o_total / g);
        let batch = (o / (o_total / b)) * n_out + n;
        let mut terms = Vec::new();
        for i in 0..i_per_group {
            let feature = group * i_per_group + i;
            'kernel: for k in &kernel_positions {
                let mut at_l = vec![0usize; ls.len()];
                let mut at_r = vec![0usize; ls.len()];
                at_l[c.lhs_spec[0]] = batch as usize;
                at_l[c.lhs_spec[1]] = feature as usize;
                at_r[c.rhs_spec[0]] = o as usize;
                at_r[c.rhs_spec[1]] = i as usize;
                for s in 0..spatial {
                    let p = idx[c.out_spec[2 + s]] as i64 * c.window_strides[s]
                        + k[s] as i64 * c.rhs_dilation[s]
                        - c.padding[s].0;
                    let d = c.lhs_dilation[s];
                    if p < 0 || p % d != 0 || p / d >= ls[c.lhs_spec[2 + s]] {
                        continue 'kernel;
                    }
                    at_l[c.lhs_spec[2 + s]] = (p / d) as usize;
                    at_r[c.rhs_spec[2 + s]] = k[s];
                }
                terms.push((at_l, at_r));
            }
        }
        terms
    };
    // Integers accumulate exactly and wrap; floats round to the accumulation dtype each step.
    // (An integer convolution with a float result accumulates in floats, as XLA's does.)
    if is_exact_int(lhs.dtype()) && is_exact_int(rhs.dtype()) && is_exact_int(out.dtype) {
        let (li, ri) = (lhs.ints(), rhs.ints());
        let data = ArrayD::from_shape_fn(IxDyn(&dims), |idx| {
            terms(idx.slice()).iter().fold(0_i128, |sum, (l, r)| {
                sum.wrapping_add(li[IxDyn(l)].wrapping_mul(ri[IxDyn(r)]))
            })
        });
        return Ok(vec![Array::from_ints(out.dtype, data)]);
    }
    let (lv, rv) = (lhs.values(), rhs.values());
    let acc = out.dtype.accumulation();
    let data = ArrayD::from_shape_fn(IxDyn(&dims), |idx| {
        terms(idx.slice()).iter().fold(0.0, |sum, (l, r)| {
            acc.round(sum + lv[IxDyn(l)] * rv[IxDyn(r)])
        })
    });
    Ok(vec![Array::from_values(out.dtype, data)])
}
