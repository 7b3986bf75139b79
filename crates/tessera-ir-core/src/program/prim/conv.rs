//! `conv_general_dilated`: XLA's convolution with JAX's parameters (`dimension_numbers` as
//! `ConvDimensionNumbers(lhs_spec, rhs_spec, out_spec)`, each `(batch or out-feature, feature or
//! in-feature, spatial...)`; `window_strides`, `padding`, `lhs_dilation`, `rhs_dilation`,
//! `feature_group_count`, `batch_group_count`, `precision`, `preferred_element_type`), read once
//! into [`ConvParams`]. The interpreter sums products directly.

use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::program::params::{ParamValue, Params};

const NAME: &str = "conv_general_dilated";

/// A convolution's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvParams {
    /// Output stride per spatial dimension.
    pub window_strides: Vec<i64>,
    /// `(low, high)` padding per spatial dimension.
    pub padding: Vec<(i64, i64)>,
    /// Input dilation (transposed convolutions).
    pub lhs_dilation: Vec<i64>,
    /// Kernel dilation (atrous convolutions).
    pub rhs_dilation: Vec<i64>,
    /// `(batch, feature, spatial...)` dimensions of the input.
    pub lhs_spec: Vec<usize>,
    /// `(out feature, in feature, spatial...)` dimensions of the kernel.
    pub rhs_spec: Vec<usize>,
    /// `(batch, feature, spatial...)` dimensions of the output.
    pub out_spec: Vec<usize>,
    /// Groups of input features.
    pub feature_group_count: i64,
    /// Groups of the batch.
    pub batch_group_count: i64,
    /// The result dtype when not the operands'.
    pub preferred_element_type: Option<DType>,
}

fn bad(param: &str, expected: &str) -> IrError {
    IrError::Param {
        prim: NAME.into(),
        param: param.into(),
        expected: expected.into(),
    }
}

fn spec(dn: &ParamValue, field: &str, rank: usize) -> Result<Vec<usize>> {
    if dn.is_none() {
        return Ok((0..rank).collect());
    }
    dn.field(field)
        .and_then(ParamValue::as_ints)
        .map(|v| v.into_iter().map(|d| d as usize).collect())
        .ok_or_else(|| {
            bad(
                "dimension_numbers",
                "ConvDimensionNumbers(lhs_spec=.., rhs_spec=.., out_spec=..)",
            )
        })
}

fn dilate(n: i64, d: i64) -> i64 {
    if n == 0 { 0 } else { 1 + d * (n - 1) }
}

impl ConvParams {
    /// Reads and checks the parameters for operands of rank `rank` (once: the value is kept
    /// with the parameters).
    pub fn read(params: &Params, rank: usize) -> Result<Self> {
        params.typed([0, rank], |params| Self::read_printed(params, rank))
    }

    fn read_printed(params: &Params, rank: usize) -> Result<Self> {
        let n = rank.saturating_sub(2);
        let ones = vec![1; n];
        let opt = |name: &str| -> Result<Vec<i64>> {
            Ok(params.opt_ints(NAME, name)?.unwrap_or_else(|| ones.clone()))
        };
        let padding = match params.get("padding").and_then(ParamValue::as_seq) {
            Some(seq) => seq
                .iter()
                .map(|p| match p.as_ints().as_deref() {
                    Some(&[lo, hi]) => Ok((lo, hi)),
                    Some(_) | None => Err(bad("padding", "a tuple of (low, high) pairs")),
                })
                .collect::<Result<Vec<_>>>()?,
            None => return Err(bad("padding", "a tuple of (low, high) pairs")),
        };
        // `dimension_numbers=None` is the default layout; a missing parameter is an error.
        let dn = params.get("dimension_numbers").ok_or_else(|| {
            bad(
                "dimension_numbers",
                "ConvDimensionNumbers(lhs_spec=.., rhs_spec=.., out_spec=..) or None",
            )
        })?;
        // JAX always prints both group counts; a missing one is a malformed equation.
        let group = |name: &str| params.int(NAME, name);
        let c = ConvParams {
            window_strides: opt("window_strides")?,
            padding,
            lhs_dilation: opt("lhs_dilation")?,
            rhs_dilation: opt("rhs_dilation")?,
            lhs_spec: spec(dn, "lhs_spec", rank)?,
            rhs_spec: spec(dn, "rhs_spec", rank)?,
            out_spec: spec(dn, "out_spec", rank)?,
            feature_group_count: group("feature_group_count")?,
            batch_group_count: group("batch_group_count")?,
            preferred_element_type: params.opt_dtype(NAME, "preferred_element_type")?,
        };
        let lengths_ok = [
            c.window_strides.len(),
            c.padding.len(),
            c.lhs_dilation.len(),
            c.rhs_dilation.len(),
        ]
        .iter()
        .all(|&l| l == n)
            && [&c.lhs_spec, &c.rhs_spec, &c.out_spec]
                .iter()
                .all(|s| s.len() == rank && s.iter().all(|&d| d < rank));
        let positive = c
            .window_strides
            .iter()
            .chain(&c.lhs_dilation)
            .chain(&c.rhs_dilation)
            .all(|&v| v >= 1)
            && c.feature_group_count >= 1
            && c.batch_group_count >= 1;
        if !lengths_ok || !positive || rank < 2 {
            return Err(type_error(
                NAME,
                format!("parameters {c:?} do not fit operands of rank {rank}"),
            ));
        }
        Ok(c)
    }

    /// `base` with this convolution's fields written as JAX prints them (other parameters,
    /// such as `precision`, kept).
    pub fn write(&self, base: &Params) -> Params {
        let ints = |v: &[usize]| ParamValue::ints(&v.iter().map(|&d| d as i64).collect::<Vec<_>>());
        let dn = ParamValue::Record(
            "ConvDimensionNumbers".into(),
            vec![
                ("lhs_spec".into(), ints(&self.lhs_spec)),
                ("rhs_spec".into(), ints(&self.rhs_spec)),
                ("out_spec".into(), ints(&self.out_spec)),
            ],
        );
        let pads = ParamValue::Tuple(
            self.padding
                .iter()
                .map(|&(lo, hi)| ParamValue::ints(&[lo, hi]))
                .collect(),
        );
        let preferred = match self.preferred_element_type {
            Some(d) => ParamValue::Name(d.numpy_name().into()),
            None => ParamValue::Name("None".into()),
        };
        base.clone()
            .with("batch_group_count", ParamValue::Int(self.batch_group_count))
            .with("dimension_numbers", dn)
            .with(
                "feature_group_count",
                ParamValue::Int(self.feature_group_count),
            )
            .with("lhs_dilation", ParamValue::ints(&self.lhs_dilation))
            .with("padding", pads)
            .with("preferred_element_type", preferred)
            .with("rhs_dilation", ParamValue::ints(&self.rhs_dilation))
            .with("window_strides", ParamValue::ints(&self.window_strides))
    }

    /// The result shape for operands of shapes `lhs` and `rhs`.
    pub fn out_shape(&self, lhs: &[i64], rhs: &[i64]) -> Result<Vec<i64>> {
        let (g, b) = (self.feature_group_count, self.batch_group_count);
        let (n, c) = (lhs[self.lhs_spec[0]], lhs[self.lhs_spec[1]]);
        let (o, i) = (rhs[self.rhs_spec[0]], rhs[self.rhs_spec[1]]);
        let ok = c == i * g && o % g == 0 && o % b == 0 && n % b == 0 && (g == 1 || b == 1);
        if !ok {
            return Err(type_error(
                NAME,
                format!(
                    "input {lhs:?} and kernel {rhs:?} do not fit feature_group_count {g} and batch_group_count {b}"
                ),
            ));
        }
        let mut out = vec![0; lhs.len()];
        out[self.out_spec[0]] = n / b;
        out[self.out_spec[1]] = o;
        for s in 0..lhs.len() - 2 {
            let input = dilate(lhs[self.lhs_spec[2 + s]], self.lhs_dilation[s]);
            let padded = input + self.padding[s].0 + self.padding[s].1;
            let window = dilate(rhs[self.rhs_spec[2 + s]], self.rhs_dilation[s]);
            out[self.out_spec[2 + s]] = if padded < window {
                0
            } else {
                (padded - window) / self.window_strides[s] + 1
            };
        }
        Ok(out)
    }
}

pub(super) fn abstract_eval(params: &Params, inputs: &[ShapedArray]) -> Result<Vec<ShapedArray>> {
    if inputs.len() != 2
        || inputs[0].rank() != inputs[1].rank()
        || inputs[0].dtype != inputs[1].dtype
    {
        return Err(type_error(
            NAME,
            format!("takes an input and a kernel of one rank and dtype, got {inputs:?}"),
        ));
    }
    let c = ConvParams::read(params, inputs[0].rank())?;
    let shape = c.out_shape(&inputs[0].shape, &inputs[1].shape)?;
    let dtype = c.preferred_element_type.unwrap_or(inputs[0].dtype);
    Ok(vec![ShapedArray::new(dtype, &shape)])
}
