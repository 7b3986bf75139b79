//! The typed parameters of `gather` and `scatter-add`, read and checked once ([`GatherParams`],
//! [`ScatterParams`]): the shape rule, the interpreter, the lowering and the transposes read
//! fields, and equations the IR builds are made from these values (`to_params`, as JAX prints
//! them), never from defaults.

use super::index_modes::{GatherScatterMode, default_fill};
use super::indexing::{GatherDims, ScatterDims, gather_dims, scatter_dims};
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::program::params::{ParamValue, Params};

/// A gather's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct GatherParams {
    /// Dimension numbers.
    pub dims: GatherDims,
    /// The slice size in each operand dimension.
    pub slice_sizes: Vec<i64>,
    /// What out-of-bounds indices do.
    pub mode: GatherScatterMode,
    /// The FILL_OR_DROP fill value (`None`: JAX's default for the dtype).
    pub fill_value: Option<f64>,
    /// JAX's `indices_are_sorted` hint.
    pub indices_are_sorted: bool,
    /// JAX's `unique_indices` hint.
    pub unique_indices: bool,
}

/// A scatter-add's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ScatterParams {
    /// Dimension numbers.
    pub dims: ScatterDims,
    /// What out-of-bounds indices do.
    pub mode: GatherScatterMode,
    /// JAX's `indices_are_sorted` hint.
    pub indices_are_sorted: bool,
    /// JAX's `unique_indices` hint.
    pub unique_indices: bool,
}

fn flag(prim: &str, params: &Params, name: &str) -> Result<bool> {
    if let Some(ParamValue::Bool(b)) = params.get(name) {
        Ok(*b)
    } else {
        Err(IrError::Param {
            prim: prim.to_owned(),
            param: name.to_owned(),
            expected: "True or False".to_owned(),
        })
    }
}

fn ints(values: &[i64]) -> ParamValue {
    ParamValue::ints(values)
}

impl GatherParams {
    /// Reads and checks a gather's parameters (once: the value is kept with the parameters).
    pub fn read(params: &Params) -> Result<Self> {
        params.typed([0, 0], Self::read_printed)
    }

    fn read_printed(params: &Params) -> Result<Self> {
        Ok(GatherParams {
            dims: gather_dims(params)?,
            slice_sizes: params.ints("gather", "slice_sizes")?,
            mode: GatherScatterMode::from_params("gather", params)?,
            fill_value: fill_value(params)?,
            indices_are_sorted: flag("gather", params, "indices_are_sorted")?,
            unique_indices: flag("gather", params, "unique_indices")?,
        })
    }

    /// The value a FILL_OR_DROP gather of `dtype` gives out of bounds.
    pub fn fill(&self, dtype: DType) -> f64 {
        dtype.round(self.fill_value.unwrap_or_else(|| default_fill(dtype)))
    }

    /// The parameters as JAX prints them.
    pub fn to_params(&self) -> Params {
        let d = &self.dims;
        let dims = ParamValue::Record(
            "GatherDimensionNumbers".into(),
            vec![
                ("offset_dims".into(), ints(&d.offset_dims)),
                ("collapsed_slice_dims".into(), ints(&d.collapsed_slice_dims)),
                ("start_index_map".into(), ints(&d.start_index_map)),
                (
                    "operand_batching_dims".into(),
                    ints(&d.operand_batching_dims),
                ),
                (
                    "start_indices_batching_dims".into(),
                    ints(&d.start_indices_batching_dims),
                ),
            ],
        );
        let fill = match self.fill_value {
            None => ParamValue::Name("None".into()),
            Some(v) if v.is_nan() => ParamValue::Name("nan".into()),
            Some(v) if v == f64::INFINITY => ParamValue::Name("inf".into()),
            Some(v) => ParamValue::Float(v, crate::program::print::python_float(v)),
        };
        Params::new()
            .with("dimension_numbers", dims)
            .with("fill_value", fill)
            .with(
                "indices_are_sorted",
                ParamValue::Bool(self.indices_are_sorted),
            )
            .with("mode", self.mode.param())
            .with("slice_sizes", ints(&self.slice_sizes))
            .with("unique_indices", ParamValue::Bool(self.unique_indices))
    }
}

impl ScatterParams {
    /// Reads and checks a scatter-add's parameters (once: the value is kept with the
    /// parameters).
    pub fn read(params: &Params) -> Result<Self> {
        params.typed([0, 0], Self::read_printed)
    }

    fn read_printed(params: &Params) -> Result<Self> {
        Ok(ScatterParams {
            dims: scatter_dims(params)?,
            mode: GatherScatterMode::from_params("scatter-add", params)?,
            indices_are_sorted: flag("scatter-add", params, "indices_are_sorted")?,
            unique_indices: flag("scatter-add", params, "unique_indices")?,
        })
    }

    /// The parameters as JAX prints them (the add combiner is implied by the primitive).
    pub fn to_params(&self) -> Params {
        let d = &self.dims;
        let dims = ParamValue::Record(
            "ScatterDimensionNumbers".into(),
            vec![
                ("update_window_dims".into(), ints(&d.update_window_dims)),
                ("inserted_window_dims".into(), ints(&d.inserted_window_dims)),
                (
                    "scatter_dims_to_operand_dims".into(),
                    ints(&d.scatter_dims_to_operand_dims),
                ),
                (
                    "operand_batching_dims".into(),
                    ints(&d.operand_batching_dims),
                ),
                (
                    "scatter_indices_batching_dims".into(),
                    ints(&d.scatter_indices_batching_dims),
                ),
            ],
        );
        Params::new()
            .with("dimension_numbers", dims)
            .with(
                "indices_are_sorted",
                ParamValue::Bool(self.indices_are_sorted),
            )
            .with("mode", self.mode.param())
            .with("unique_indices", ParamValue::Bool(self.unique_indices))
    }
}

/// `fill_value`: `None` (or absent) for JAX's default, else a number, `nan` or `inf`.
fn fill_value(params: &Params) -> Result<Option<f64>> {
    Ok(match params.get("fill_value") {
        None => None,
        Some(v) if v.is_none() => None,
        Some(ParamValue::Int(v) | ParamValue::NpInt(v)) => Some(*v as f64),
        Some(ParamValue::Float(v, _)) => Some(*v),
        Some(ParamValue::Bool(b)) => Some(f64::from(u8::from(*b))),
        Some(ParamValue::Name(n)) if n == "nan" => Some(f64::NAN),
        Some(ParamValue::Name(n)) if n == "inf" => Some(f64::INFINITY),
        Some(other) => {
            return Err(IrError::Param {
                prim: "gather".into(),
                param: "fill_value".into(),
                expected: format!("None, a number, nan or inf, got {other}"),
            });
        }
    })
}
