//! Evaluation rules of the `window` family (moved from the core crate's `prim/window.rs`).

use ndarray::{ArrayD, Dimension, IxDyn};
use tessera_ir_core::array::{Array, Elem, is_exact_int};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::dtype::DType;
use tessera_ir_core::error::{Result, type_error};
use tessera_ir_core::jaxpr::ClosedJaxpr;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::Prim;
use tessera_ir_core::prim::window::{
    WindowOp, WindowParams, highest, lowest, reduce_window_jaxpr, select_is_ge,
};

/// Every window position of the result shape, and the window's offsets in row-major order.
fn positions(shape: &[i64]) -> Vec<Vec<usize>> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    ArrayD::<u8>::zeros(IxDyn(&dims))
        .indexed_iter()
        .map(|(i, _)| i.slice().to_vec())
        .collect()
}

/// The initial value and combiner of a windowed reduction.
fn reducer(op: WindowOp, params: &Params, inputs: &[Array]) -> Result<(Elem, Combine)> {
    let dtype = inputs[0].dtype();
    Ok(match op {
        WindowOp::Sum => (Elem::ZERO, Combine::Sum),
        WindowOp::Max => (Elem::from_f64(dtype, lowest(dtype)), Combine::Max),
        WindowOp::Min => (Elem::from_f64(dtype, highest(dtype)), Combine::Min),
        WindowOp::Generic => (
            inputs[1].first_elem().unwrap_or(Elem::ZERO),
            Combine::Jaxpr(reduce_window_jaxpr(params)?.clone()),
        ),
        WindowOp::SelectAndScatterAdd | WindowOp::Conv => {
            return Err(type_error("reduce_window", "is not a windowed reduction"));
        }
    })
}

pub(crate) fn eval(
    prim: Prim,
    op: WindowOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    if op == WindowOp::Conv {
        return super::conv::eval(params, inputs, outputs);
    }
    if op == WindowOp::SelectAndScatterAdd {
        return Ok(vec![select_and_scatter_add(params, inputs)?]);
    }
    let x = &inputs[0];
    let shape = x.shape();
    let w = WindowParams::read(prim.name(), params, shape.len())?;
    let (init, combine) = reducer(op, params, inputs)?;
    let offsets = positions(&w.dimensions);
    let out = &outputs[0];
    let elems = x.elems();
    let mut values = Vec::new();
    for o in positions(&out.shape) {
        let mut acc = init;
        for k in &offsets {
            let v = w.source(&shape, &o, k).map_or(init, |at| elems[IxDyn(&at)]);
            acc = combine.apply(acc, v, x.dtype())?;
        }
        values.push(acc);
    }
    Ok(vec![Array::from_elem_vec(out.dtype, &out.shape, values)?])
}

fn select_and_scatter_add(params: &Params, inputs: &[Array]) -> Result<Array> {
    let (source, operand) = (&inputs[0], &inputs[1]);
    let shape = operand.shape();
    let w = WindowParams::read("select_and_scatter_add", params, shape.len())?;
    let ge = select_is_ge(params)?;
    let offsets = positions(&w.dimensions);
    let dtype = operand.dtype();
    let (elems, source_elems) = (operand.elems(), source.elems());
    let mut out = ArrayD::from_elem(elems.raw_dim(), Elem::ZERO);
    // Integers compare exactly; floats as f64 (a NaN is never kept over a later candidate).
    let kept_over = |c: Elem, v: Elem| {
        if is_exact_int(dtype) {
            let (c, v) = (c.to_int(dtype), v.to_int(dtype));
            if ge { c >= v } else { c <= v }
        } else {
            let (c, v) = (c.to_f64(dtype), v.to_f64(dtype));
            if ge { c >= v } else { c <= v }
        }
    };
    for o in positions(&source.shape()) {
        let mut chosen: Option<(Vec<usize>, Elem)> = None;
        for k in &offsets {
            let Some(at) = w.source(&shape, &o, k) else {
                continue;
            };
            let v = elems[IxDyn(&at)];
            if !chosen.as_ref().is_some_and(|&(_, c)| kept_over(c, v)) {
                chosen = Some((at, v));
            }
        }
        if let Some((at, _)) = chosen {
            // The source has the operand's dtype (the shape rule checks it).
            out[IxDyn(&at)] = out[IxDyn(&at)].add(source_elems[IxDyn(&o)], dtype);
        }
    }
    Ok(operand.with_elems(out))
}

/// How a windowed reduction combines two elements.
enum Combine {
    Sum,
    /// NaN wins, as in XLA.
    Max,
    Min,
    /// `reduce_window`'s own computation.
    Jaxpr(ClosedJaxpr),
}

impl Combine {
    /// `a` combined with `b` in `dtype` (integers exactly).
    fn apply(&self, a: Elem, b: Elem, dtype: DType) -> Result<Elem> {
        // A NaN wins max and min, as in XLA (`Elem::max`/`min` let it lose, as `f64`'s do).
        let nan = !is_exact_int(dtype) && (a.to_f64(dtype).is_nan() || b.to_f64(dtype).is_nan());
        Ok(match self {
            Combine::Sum => a.add(b, dtype),
            Combine::Max | Combine::Min if nan => Elem::from_f64(dtype, f64::NAN),
            Combine::Max => a.max(b, dtype),
            Combine::Min => a.min(b, dtype),
            Combine::Jaxpr(j) => {
                let scalar = |e: Elem| Array::from_elem_vec(dtype, &[], vec![e]);
                let out = crate::interp::eval_closed(j, &[scalar(a)?, scalar(b)?])?;
                out[0].first_elem().unwrap_or(Elem::ZERO)
            }
        })
    }
}
