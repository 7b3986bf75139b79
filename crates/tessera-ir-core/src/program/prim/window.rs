//! Windowed reductions: `reduce_window_sum`, `reduce_window_max`, `reduce_window_min`, the
//! generic `reduce_window` (a scalar `jaxpr` combiner and an init value), and
//! `select_and_scatter_add` (the gradient of max/min pooling: each window's source value added
//! where the window's first maximum, or minimum, is).
//!
//! Windows follow XLA: the operand is dilated by `base_dilation` (holes between elements),
//! padded by `padding`, and a window of `window_dimensions` with `window_dilation` slides by
//! `window_strides`; holes and padding hold the reduction's init value. `select_and_scatter_add`
//! has no dilations and never selects a padding position. `conv_general_dilated` is in this
//! family too (module `conv`).

use super::{Prim, arity};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::program::jaxpr::ClosedJaxpr;
use crate::program::params::{ParamValue, Params};

/// The windowed primitives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowOp {
    /// `reduce_window_sum`.
    Sum,
    /// `reduce_window_max`.
    Max,
    /// `reduce_window_min`.
    Min,
    /// `reduce_window` with a `jaxpr` combiner and an init value operand.
    Generic,
    /// `select_and_scatter_add`.
    SelectAndScatterAdd,
    /// `conv_general_dilated` (module `conv`).
    Conv,
}

/// The smallest value of `dtype` (max's identity).
pub fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::Bool | DType::U8 | DType::U16 | DType::U32 | DType::U64 => 0.0,
        DType::I8 => f64::from(i8::MIN),
        DType::I16 => f64::from(i16::MIN),
        DType::I32 => f64::from(i32::MIN),
        DType::I64 => i64::MIN as f64,
        DType::BF16 | DType::F16 | DType::F32 | DType::F64 => f64::NEG_INFINITY,
        // Keys and tokens have no order; windows over them are refused before an identity is
        // needed.
        DType::KeyFry | DType::Token => 0.0,
    }
}

/// The largest value of `dtype` (min's identity).
pub fn highest(dtype: DType) -> f64 {
    match dtype {
        DType::Bool => 1.0,
        DType::U8 => f64::from(u8::MAX),
        DType::U16 => f64::from(u16::MAX),
        DType::U32 => f64::from(u32::MAX),
        DType::U64 => u64::MAX as f64,
        DType::I8 => f64::from(i8::MAX),
        DType::I16 => f64::from(i16::MAX),
        DType::I32 => f64::from(i32::MAX),
        DType::I64 => i64::MAX as f64,
        DType::BF16 | DType::F16 | DType::F32 | DType::F64 => f64::INFINITY,
        // Keys and tokens have no order; windows over them are refused before an identity is
        // needed.
        DType::KeyFry | DType::Token => 0.0,
    }
}

/// A window's geometry, one entry per operand dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowParams {
    /// The window's size.
    pub dimensions: Vec<i64>,
    /// How far the window moves.
    pub strides: Vec<i64>,
    /// `(low, high)` padding.
    pub padding: Vec<(i64, i64)>,
    /// Holes between operand elements plus one.
    pub base_dilation: Vec<i64>,
    /// Holes between window elements plus one.
    pub window_dilation: Vec<i64>,
}

impl WindowParams {
    /// Reads them (dilations default to 1 where not printed, as for `select_and_scatter_add`).
    /// The value is read once and kept with the parameters.
    pub fn read(prim: &str, params: &Params, rank: usize) -> Result<Self> {
        params.typed([0, rank], |params| Self::read_printed(prim, params, rank))
    }

    fn read_printed(prim: &str, params: &Params, rank: usize) -> Result<Self> {
        let ones = vec![1; rank];
        let dilation = |name: &str| -> Result<Vec<i64>> {
            Ok(params.opt_ints(prim, name)?.unwrap_or_else(|| ones.clone()))
        };
        let padding = padding(prim, params)?;
        let w = WindowParams {
            dimensions: params.ints(prim, "window_dimensions")?,
            strides: params.ints(prim, "window_strides")?,
            padding,
            base_dilation: dilation("base_dilation")?,
            window_dilation: dilation("window_dilation")?,
        };
        let ok = [
            w.dimensions.len(),
            w.strides.len(),
            w.padding.len(),
            w.base_dilation.len(),
            w.window_dilation.len(),
        ]
        .iter()
        .all(|&n| n == rank)
            && w.dimensions.iter().all(|&d| d >= 0)
            && w.strides
                .iter()
                .chain(&w.base_dilation)
                .chain(&w.window_dilation)
                .all(|&d| d >= 1);
        if !ok {
            return Err(type_error(
                prim,
                format!("window {w:?} does not fit an operand of rank {rank}"),
            ));
        }
        Ok(w)
    }

    /// The parameters as JAX prints them for the `reduce_window_*` primitives.
    pub fn to_params(&self) -> Params {
        let pads = ParamValue::Tuple(
            self.padding
                .iter()
                .map(|&(lo, hi)| ParamValue::ints(&[lo, hi]))
                .collect(),
        );
        Params::new()
            .with("base_dilation", ParamValue::ints(&self.base_dilation))
            .with("padding", pads)
            .with("window_dilation", ParamValue::ints(&self.window_dilation))
            .with("window_dimensions", ParamValue::ints(&self.dimensions))
            .with("window_strides", ParamValue::ints(&self.strides))
    }

    /// The result shape for an operand of `shape`.
    pub fn out_shape(&self, prim: &str, shape: &[i64]) -> Result<Vec<i64>> {
        (0..shape.len())
            .map(|d| {
                let (lo, hi) = self.padding[d];
                // In i128: padding and dilations of a hostile program must not overflow.
                let wide = |n: i64, dil: i64| {
                    if n == 0 {
                        0
                    } else {
                        1 + i128::from(dil) * (i128::from(n) - 1)
                    }
                };
                let padded =
                    wide(shape[d], self.base_dilation[d]) + i128::from(lo) + i128::from(hi);
                let window = wide(self.dimensions[d], self.window_dilation[d]);
                if padded > i128::from(i64::MAX) || window > i128::from(i64::MAX) {
                    return Err(type_error(
                        prim,
                        format!(
                            "padding {:?} and dilations make dimension {d} larger than any array",
                            self.padding[d]
                        ),
                    ));
                }
                let (padded, window) = (padded as i64, window as i64);
                if padded < 0 {
                    return Err(type_error(
                        prim,
                        format!(
                            "padding {:?} removes more than dimension {d}",
                            self.padding[d]
                        ),
                    ));
                }
                Ok(if padded < window {
                    0
                } else {
                    (padded - window) / self.strides[d] + 1
                })
            })
            .collect()
    }

    /// With a leading dimension the window does not reduce (for batching).
    pub fn with_leading(&self) -> WindowParams {
        let lead = |v: &[i64]| std::iter::once(1).chain(v.iter().copied()).collect();
        WindowParams {
            dimensions: lead(&self.dimensions),
            strides: lead(&self.strides),
            padding: std::iter::once((0, 0))
                .chain(self.padding.iter().copied())
                .collect(),
            base_dilation: lead(&self.base_dilation),
            window_dilation: lead(&self.window_dilation),
        }
    }

    /// The operand index a window element reads (`None`: padding or a dilation hole).
    pub fn source(&self, shape: &[i64], out: &[usize], offset: &[usize]) -> Option<Vec<usize>> {
        let mut at = Vec::with_capacity(shape.len());
        for d in 0..shape.len() {
            let p = out[d] as i64 * self.strides[d] + offset[d] as i64 * self.window_dilation[d]
                - self.padding[d].0;
            let b = self.base_dilation[d];
            if p < 0 || p % b != 0 || p / b >= shape[d] {
                return None;
            }
            at.push((p / b) as usize);
        }
        Some(at)
    }
}

/// The `padding` parameter: a `(low, high)` pair per dimension.
pub fn padding(prim: &str, params: &Params) -> Result<Vec<(i64, i64)>> {
    let bad = || IrError::Param {
        prim: prim.to_owned(),
        param: "padding".into(),
        expected: "a tuple of (low, high) pairs".into(),
    };
    let seq = params
        .get("padding")
        .and_then(ParamValue::as_seq)
        .ok_or_else(bad)?;
    seq.iter()
        .map(|p| match p.as_ints().as_deref() {
            Some(&[lo, hi]) => Ok((lo, hi)),
            Some(_) | None => Err(bad()),
        })
        .collect()
}

/// The generic `reduce_window`'s scalar combiner.
pub fn reduce_window_jaxpr(params: &Params) -> Result<&ClosedJaxpr> {
    params.jaxpr("reduce_window", "jaxpr")
}

/// `ge` or `le`: how `select_and_scatter_add` picks a window's element.
pub fn select_is_ge(params: &Params) -> Result<bool> {
    match params.get("select_prim") {
        Some(ParamValue::Name(n)) if n == "ge" => Ok(true),
        Some(ParamValue::Name(n)) if n == "le" => Ok(false),
        Some(_) | None => Err(IrError::Param {
            prim: "select_and_scatter_add".into(),
            param: "select_prim".into(),
            expected: "ge or le".into(),
        }),
    }
}

pub(super) fn abstract_eval(
    prim: Prim,
    op: WindowOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let name = prim.name();
    match op {
        WindowOp::Sum | WindowOp::Max | WindowOp::Min | WindowOp::Generic => {
            arity(
                prim,
                inputs.len(),
                if op == WindowOp::Generic { 2 } else { 1 },
            )?;
            let x = &inputs[0];
            if op == WindowOp::Generic {
                let jaxpr = reduce_window_jaxpr(params)?;
                let scalar = ShapedArray::scalar(x.dtype);
                let ins = jaxpr.jaxpr.in_avals();
                let fits = inputs[1].rank() == 0
                    && inputs[1].dtype == x.dtype
                    && ins.len() == 2
                    && ins.iter().all(|a| a.dtype == scalar.dtype && a.rank() == 0);
                if !fits {
                    return Err(type_error(
                        name,
                        format!(
                            "takes one operand, a scalar init value of its dtype and a jaxpr of two scalars, got {} and {}",
                            x, inputs[1]
                        ),
                    ));
                }
            }
            let w = WindowParams::read(name, params, x.rank())?;
            Ok(vec![ShapedArray::new(
                x.dtype,
                &w.out_shape(name, &x.shape)?,
            )])
        }
        WindowOp::SelectAndScatterAdd => {
            arity(prim, inputs.len(), 2)?;
            let (source, operand) = (&inputs[0], &inputs[1]);
            select_is_ge(params)?;
            let w = WindowParams::read(name, params, operand.rank())?;
            let out = w.out_shape(name, &operand.shape)?;
            if out != source.shape || source.dtype != operand.dtype {
                return Err(type_error(
                    name,
                    format!("source {source} does not match the windows of operand {operand}"),
                ));
            }
            Ok(vec![operand.clone()])
        }
        WindowOp::Conv => super::conv::abstract_eval(params, inputs),
    }
}
