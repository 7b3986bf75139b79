//! Params of each primitive: reading them from parsed values and writing them as JAX does.

use crate::ir::{ClosedJaxpr, Jaxpr};
use crate::prims::elementwise::{BINARY_OPS, UNARY_OPS};
use crate::prims::{
    ArgOp, BinaryOp, GatherDims, IndexMode, PadDim, Primitive, ReduceOp, ScatterDims, UnaryOp,
};
use crate::types::{DType, Shape};
use std::fmt::Write;

/// A parsed param value.
#[derive(Clone, Debug, PartialEq)]
pub enum PValue {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A bare name (`None`, `True`, `float32`, `tril`).
    Name(String),
    /// A call such as `np.int64(0)`.
    Call(String, Box<PValue>),
    /// `( … )`.
    Tuple(Vec<PValue>),
    /// A named record such as `GatherDimensionNumbers(offset_dims=(1,), …)`.
    Struct(String, Vec<(String, PValue)>),
    /// `[ … ]`.
    List(Vec<PValue>),
    /// `{ lambda … }`.
    Jaxpr(Box<Jaxpr>),
}

struct Params {
    prim: String,
    items: Vec<(String, PValue)>,
}

impl Params {
    fn take(&mut self, key: &str) -> Result<PValue, String> {
        match self.items.iter().position(|(k, _)| k == key) {
            Some(i) => Ok(self.items.remove(i).1),
            None => Err(format!("{}: missing param `{key}`", self.prim)),
        }
    }

    fn take_opt(&mut self, key: &str) -> Option<PValue> {
        self.items
            .iter()
            .position(|(k, _)| k == key)
            .map(|i| self.items.remove(i).1)
    }

    fn bad(&self, key: &str, want: &str) -> String {
        format!("{}: param `{key}` must be {want}", self.prim)
    }

    fn int(&mut self, key: &str) -> Result<i64, String> {
        match self.take(key)? {
            PValue::Int(i) => Ok(i),
            PValue::Call(_, v) => match *v {
                PValue::Int(i) => Ok(i),
                _ => Err(self.bad(key, "an integer")),
            },
            _ => Err(self.bad(key, "an integer")),
        }
    }

    fn usize(&mut self, key: &str) -> Result<usize, String> {
        usize::try_from(self.int(key)?).map_err(|_| self.bad(key, "a non-negative integer"))
    }

    fn ints(&mut self, key: &str) -> Result<Vec<usize>, String> {
        let v = self.take(key)?;
        as_ints(&v).ok_or_else(|| self.bad(key, "a tuple of non-negative integers like `(0, 1)`"))
    }

    fn opt_ints(&mut self, key: &str) -> Result<Option<Vec<usize>>, String> {
        match self.take_opt(key) {
            None | Some(PValue::Name(_)) => Ok(None),
            Some(v) => as_ints(&v)
                .map(Some)
                .ok_or_else(|| self.bad(key, "None or a tuple of integers")),
        }
    }

    fn dtype(&mut self, key: &str) -> Result<Option<DType>, String> {
        match self.take(key)? {
            PValue::Name(n) if n == "None" => Ok(None),
            PValue::Name(n) => DType::from_name(&n)
                .map(Some)
                .ok_or_else(|| self.bad(key, "a dtype name like `float32`")),
            _ => Err(self.bad(key, "a dtype name like `float32`")),
        }
    }

    fn req_dtype(&mut self, key: &str) -> Result<DType, String> {
        self.dtype(key)?.ok_or_else(|| self.bad(key, "a dtype"))
    }

    fn bool(&mut self, key: &str) -> Result<bool, String> {
        match self.take(key)? {
            PValue::Name(n) if n == "True" => Ok(true),
            PValue::Name(n) if n == "False" => Ok(false),
            _ => Err(self.bad(key, "True or False")),
        }
    }
}

fn as_int(v: &PValue) -> Option<i64> {
    match v {
        PValue::Int(i) => Some(*i),
        PValue::Call(_, inner) => as_int(inner),
        _ => None,
    }
}

fn as_ints(v: &PValue) -> Option<Vec<usize>> {
    match v {
        PValue::Tuple(xs) | PValue::List(xs) => xs
            .iter()
            .map(|x| as_int(x).and_then(|i| usize::try_from(i).ok()))
            .collect(),
        _ => None,
    }
}

fn pair(v: &PValue) -> Option<(&PValue, &PValue)> {
    match v {
        PValue::Tuple(xs) | PValue::List(xs) if xs.len() == 2 => Some((&xs[0], &xs[1])),
        _ => None,
    }
}

fn dot_dims(p: &mut Params) -> Result<[Vec<usize>; 4], String> {
    let v = p.take("dimension_numbers")?;
    let parse = || {
        let (c, b) = pair(&v)?;
        let (lc, rc) = pair(c)?;
        let (lb, rb) = pair(b)?;
        Some([as_ints(lc)?, as_ints(rc)?, as_ints(lb)?, as_ints(rb)?])
    };
    parse().ok_or_else(|| {
        p.bad(
            "dimension_numbers",
            "`((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))`",
        )
    })
}

fn pad_config(p: &mut Params) -> Result<Vec<PadDim>, String> {
    let v = p.take("padding_config")?;
    let parse = || match &v {
        PValue::Tuple(xs) | PValue::List(xs) => xs
            .iter()
            .map(|t| match t {
                PValue::Tuple(e) if e.len() == 3 => Some(PadDim {
                    low: as_int(&e[0])?,
                    high: as_int(&e[1])?,
                    interior: as_int(&e[2])?,
                }),
                _ => None,
            })
            .collect::<Option<Vec<_>>>(),
        _ => None,
    };
    parse().ok_or_else(|| p.bad("padding_config", "a tuple of (low, high, interior) triples"))
}

/// Builds the primitive `name` from its parsed params (unknown params are ignored, as JAX's
/// defaults like `sharding=None` are).
pub(crate) fn build_primitive(
    name: &str,
    items: Vec<(String, PValue)>,
) -> Result<Primitive, String> {
    let mut p = Params {
        prim: name.to_string(),
        items,
    };
    if name == "round" {
        let even = matches!(p.take_opt("rounding_method"), Some(PValue::Int(1)));
        return Ok(Primitive::Unary(if even {
            UnaryOp::RoundEven
        } else {
            UnaryOp::Round
        }));
    }
    if let Some(op) = UNARY_OPS.iter().find(|o| o.name() == name) {
        p.take_opt("accuracy");
        return Ok(Primitive::Unary(*op));
    }
    if let Some(op) = BINARY_OPS.iter().find(|o| o.name() == name) {
        return Ok(Primitive::Binary(*op));
    }
    let prim = match name {
        "integer_pow" => Primitive::IntegerPow {
            y: i32::try_from(p.int("y")?).map_err(|_| p.bad("y", "a 32-bit integer"))?,
        },
        "select_n" => Primitive::SelectN,
        "clamp" => Primitive::Clamp,
        "convert_element_type" => Primitive::ConvertElementType {
            new_dtype: p.req_dtype("new_dtype")?,
            weak_type: p.bool("weak_type")?,
        },
        "iota" => Primitive::Iota {
            dtype: p.req_dtype("dtype")?,
            shape: Shape::from_vec(p.ints("shape")?),
            dimension: p.usize("dimension")?,
        },
        "broadcast_in_dim" => {
            return Err(
                "broadcast_in_dim: its shape is the result's; build it with `build_broadcast`"
                    .into(),
            );
        }
        "reshape" => Primitive::Reshape {
            new_sizes: Shape::from_vec(p.ints("new_sizes")?),
        },
        "squeeze" => Primitive::Squeeze {
            dimensions: p.ints("dimensions")?,
        },
        "expand_dims" => Primitive::ExpandDims {
            dimensions: p.ints("dimensions")?,
        },
        "transpose" => Primitive::Transpose {
            permutation: p.ints("permutation")?,
        },
        "reduce_sum" => Primitive::Reduce {
            op: ReduceOp::Sum,
            axes: p.ints("axes")?,
        },
        "reduce_max" => Primitive::Reduce {
            op: ReduceOp::Max,
            axes: p.ints("axes")?,
        },
        "reduce_min" => Primitive::Reduce {
            op: ReduceOp::Min,
            axes: p.ints("axes")?,
        },
        "reduce_prod" => Primitive::Reduce {
            op: ReduceOp::Prod,
            axes: p.ints("axes")?,
        },
        "reduce_and" => Primitive::Reduce {
            op: ReduceOp::And,
            axes: p.ints("axes")?,
        },
        "reduce_or" => Primitive::Reduce {
            op: ReduceOp::Or,
            axes: p.ints("axes")?,
        },
        "argmax" | "argmin" => {
            let axes = p.ints("axes")?;
            let [axis] = axes.as_slice() else {
                return Err(p.bad("axes", "a one-element tuple"));
            };
            let op = if name == "argmax" {
                ArgOp::Max
            } else {
                ArgOp::Min
            };
            Primitive::ArgReduce {
                op,
                axis: *axis,
                index_dtype: p.req_dtype("index_dtype")?,
            }
        }
        "dot_general" => {
            let [lc, rc, lb, rb] = dot_dims(&mut p)?;
            let pref = match p.take_opt("preferred_element_type") {
                Some(v) => {
                    p.items.push(("preferred_element_type".into(), v));
                    p.dtype("preferred_element_type")?
                }
                None => None,
            };
            Primitive::DotGeneral {
                lhs_contracting: lc,
                rhs_contracting: rc,
                lhs_batch: lb,
                rhs_batch: rb,
                preferred_element_type: pref,
            }
        }
        "slice" => Primitive::Slice {
            start_indices: p.ints("start_indices")?,
            limit_indices: p.ints("limit_indices")?,
            strides: p.opt_ints("strides")?,
        },
        "dynamic_slice" => Primitive::DynamicSlice {
            slice_sizes: p.ints("slice_sizes")?,
        },
        "dynamic_update_slice" => Primitive::DynamicUpdateSlice,
        "concatenate" => Primitive::Concatenate {
            dimension: p.usize("dimension")?,
        },
        "pad" => Primitive::Pad {
            padding_config: pad_config(&mut p)?,
        },
        "gather" => build_gather(&mut p)?,
        "scatter-add" | "scatter_add" => build_scatter_add(&mut p)?,
        "cumsum" => Primitive::Cumsum {
            axis: p.usize("axis")?,
            reverse: p.bool("reverse")?,
        },
        "stop_gradient" => Primitive::StopGradient,
        "add_any" => Primitive::AddAny,
        "copy" | "copy_p" => Primitive::Copy,
        "jit" | "pjit" | "closed_call" | "core_call" => {
            let body = match p.take("jaxpr")? {
                PValue::Jaxpr(j) => j,
                _ => return Err(p.bad("jaxpr", "a nested `{ lambda ; ... }`")),
            };
            let name = match p.take_opt("name") {
                Some(PValue::Name(n)) => n,
                _ => name.to_string(),
            };
            if !body.constvars.is_empty() {
                return Err(p.bad("jaxpr", "a closed jaxpr without constvars"));
            }
            Primitive::Jit {
                name,
                jaxpr: Box::new(ClosedJaxpr::new(*body)),
            }
        }
        "pipeline_enter_stage" => Primitive::PipelineEnterStage {
            stage: u32::try_from(p.int("stage")?).map_err(|_| p.bad("stage", "a u32"))?,
        },
        _ => return Err(format!("unknown primitive `{name}`")),
    };
    Ok(prim)
}

fn record_fields(p: &mut Params, key: &str, names: &[&str]) -> Result<Vec<Vec<usize>>, String> {
    let v = p.take(key)?;
    let PValue::Struct(_, fields) = &v else {
        return Err(p.bad(
            key,
            "a record like `GatherDimensionNumbers(offset_dims=(1,), ...)`",
        ));
    };
    names
        .iter()
        .map(|n| {
            fields
                .iter()
                .find(|(k, _)| k == n)
                .and_then(|(_, v)| as_ints(v))
                .ok_or_else(|| p.bad(key, &format!("a record with `{n}=(...)`")))
        })
        .collect()
}

fn mode(p: &mut Params) -> Result<IndexMode, String> {
    match p.take("mode")? {
        PValue::Name(n) => {
            IndexMode::from_name(&n).ok_or_else(|| p.bad("mode", "a GatherScatterMode"))
        }
        PValue::Int(1) => Ok(IndexMode::FillOrDrop),
        PValue::Int(0) => Ok(IndexMode::Clip),
        _ => Err(p.bad("mode", "a GatherScatterMode")),
    }
}

fn flag(p: &mut Params, key: &str) -> Result<bool, String> {
    match p.take_opt(key) {
        None => Ok(false),
        Some(v) => {
            p.items.push((key.into(), v));
            p.bool(key)
        }
    }
}

fn build_gather(p: &mut Params) -> Result<Primitive, String> {
    let f = record_fields(
        p,
        "dimension_numbers",
        &[
            "offset_dims",
            "collapsed_slice_dims",
            "start_index_map",
            "operand_batching_dims",
            "start_indices_batching_dims",
        ],
    )?;
    let [
        offset_dims,
        collapsed_slice_dims,
        start_index_map,
        operand_batching_dims,
        start_indices_batching_dims,
    ] = <[Vec<usize>; 5]>::try_from(f).map_err(|_| p.bad("dimension_numbers", "five fields"))?;
    let fill_value = match p.take_opt("fill_value") {
        None | Some(PValue::Name(_)) => None,
        Some(PValue::Float(x)) => Some(x),
        Some(PValue::Int(i)) => Some(i as f64),
        Some(_) => return Err(p.bad("fill_value", "None or a number")),
    };
    Ok(Primitive::Gather {
        dimension_numbers: GatherDims {
            offset_dims,
            collapsed_slice_dims,
            start_index_map,
            operand_batching_dims,
            start_indices_batching_dims,
        },
        slice_sizes: p.ints("slice_sizes")?,
        mode: mode(p)?,
        fill_value,
        indices_are_sorted: flag(p, "indices_are_sorted")?,
        unique_indices: flag(p, "unique_indices")?,
    })
}

fn build_scatter_add(p: &mut Params) -> Result<Primitive, String> {
    let f = record_fields(
        p,
        "dimension_numbers",
        &[
            "update_window_dims",
            "inserted_window_dims",
            "scatter_dims_to_operand_dims",
            "operand_batching_dims",
            "scatter_indices_batching_dims",
        ],
    )?;
    let [
        update_window_dims,
        inserted_window_dims,
        scatter_dims_to_operand_dims,
        operand_batching_dims,
        scatter_indices_batching_dims,
    ] = <[Vec<usize>; 5]>::try_from(f).map_err(|_| p.bad("dimension_numbers", "five fields"))?;
    Ok(Primitive::ScatterAdd {
        dimension_numbers: ScatterDims {
            update_window_dims,
            inserted_window_dims,
            scatter_dims_to_operand_dims,
            operand_batching_dims,
            scatter_indices_batching_dims,
        },
        mode: mode(p)?,
        indices_are_sorted: flag(p, "indices_are_sorted")?,
        unique_indices: flag(p, "unique_indices")?,
    })
}

/// A param as printed: plain text or a nested jaxpr (printed by the caller with its names).
pub(crate) enum ParamText<'a> {
    /// Already formatted.
    Text(String),
    /// A nested jaxpr.
    Jaxpr(&'a ClosedJaxpr),
    /// Scatter's `update_jaxpr`: `{ lambda ; x y. let z = add x y in (z,) }` on the result dtype.
    AddJaxpr,
}

fn tuple(xs: &[usize]) -> String {
    match xs {
        [x] => format!("({x},)"),
        _ => format!(
            "({})",
            xs.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn list(xs: &[usize]) -> String {
    format!(
        "[{}]",
        xs.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn opt_tuple(xs: &Option<Vec<usize>>) -> String {
    xs.as_ref().map_or("None".into(), |x| tuple(x))
}

fn py_bool(b: bool) -> String {
    if b { "True" } else { "False" }.into()
}

/// The params of `prim` in JAX's order and format.
pub(crate) fn print_params(prim: &Primitive) -> Vec<(&'static str, ParamText<'_>)> {
    use ParamText::Text as T;
    let dt = |d: &DType| T(d.numpy_name().to_string());
    match prim {
        Primitive::Unary(UnaryOp::Round) => vec![("rounding_method", T("0".into()))],
        Primitive::Unary(UnaryOp::RoundEven) => vec![("rounding_method", T("1".into()))],
        Primitive::Unary(_) | Primitive::Binary(BinaryOp::Add) | Primitive::Binary(_) => vec![],
        Primitive::IntegerPow { y } => vec![("y", T(y.to_string()))],
        Primitive::SelectN | Primitive::Clamp | Primitive::DynamicUpdateSlice => vec![],
        Primitive::StopGradient | Primitive::AddAny | Primitive::Copy => vec![],
        Primitive::ConvertElementType {
            new_dtype,
            weak_type,
        } => vec![
            ("new_dtype", dt(new_dtype)),
            ("weak_type", T(py_bool(*weak_type))),
        ],
        Primitive::Iota {
            dtype,
            shape,
            dimension,
        } => vec![
            ("dimension", T(dimension.to_string())),
            ("dtype", dt(dtype)),
            ("shape", T(tuple(shape))),
            ("sharding", T("None".into())),
        ],
        Primitive::BroadcastInDim {
            broadcast_dimensions: bd,
            ..
        } if bd.is_empty() => vec![],
        Primitive::BroadcastInDim {
            broadcast_dimensions: bd,
            ..
        } => vec![("broadcast_dimensions", T(tuple(bd)))],
        Primitive::Reshape { new_sizes } => vec![
            ("dimensions", T("None".into())),
            ("new_sizes", T(tuple(new_sizes))),
            ("sharding", T("None".into())),
        ],
        Primitive::Squeeze { dimensions } | Primitive::ExpandDims { dimensions } => {
            vec![("dimensions", T(tuple(dimensions)))]
        }
        Primitive::Transpose { permutation } => vec![("permutation", T(tuple(permutation)))],
        Primitive::Reduce {
            op: ReduceOp::Sum,
            axes,
        } => vec![("axes", T(tuple(axes))), ("out_sharding", T("None".into()))],
        Primitive::Reduce { axes, .. } => vec![("axes", T(tuple(axes)))],
        Primitive::ArgReduce {
            axis, index_dtype, ..
        } => vec![
            ("axes", T(tuple(&[*axis]))),
            ("index_dtype", dt(index_dtype)),
        ],
        Primitive::DotGeneral {
            lhs_contracting,
            rhs_contracting,
            lhs_batch,
            rhs_batch,
            preferred_element_type,
        } => vec![
            (
                "dimension_numbers",
                T(format!(
                    "(({}, {}), ({}, {}))",
                    list(lhs_contracting),
                    list(rhs_contracting),
                    list(lhs_batch),
                    list(rhs_batch)
                )),
            ),
            (
                "preferred_element_type",
                T(preferred_element_type
                    .map_or("None", |d| d.numpy_name())
                    .into()),
            ),
        ],
        Primitive::Slice {
            start_indices,
            limit_indices,
            strides,
        } => vec![
            ("limit_indices", T(tuple(limit_indices))),
            ("start_indices", T(tuple(start_indices))),
            ("strides", T(opt_tuple(strides))),
        ],
        Primitive::DynamicSlice { slice_sizes } => vec![("slice_sizes", T(tuple(slice_sizes)))],
        Primitive::Concatenate { dimension } => vec![("dimension", T(dimension.to_string()))],
        Primitive::Pad { padding_config } => {
            let mut s = String::from("(");
            for (i, p) in padding_config.iter().enumerate() {
                let sep = if i > 0 { ", " } else { "" };
                let _ = write!(
                    s,
                    "{sep}(np.int64({}), np.int64({}), {})",
                    p.low, p.high, p.interior
                );
            }
            s.push_str(if padding_config.len() == 1 { ",)" } else { ")" });
            vec![("padding_config", T(s))]
        }
        Primitive::Gather {
            dimension_numbers: d,
            slice_sizes,
            mode,
            fill_value,
            indices_are_sorted,
            unique_indices,
        } => vec![
            (
                "dimension_numbers",
                T(format!(
                    "GatherDimensionNumbers(offset_dims={}, collapsed_slice_dims={}, start_index_map={}, operand_batching_dims={}, start_indices_batching_dims={})",
                    tuple(&d.offset_dims),
                    tuple(&d.collapsed_slice_dims),
                    tuple(&d.start_index_map),
                    tuple(&d.operand_batching_dims),
                    tuple(&d.start_indices_batching_dims)
                )),
            ),
            (
                "fill_value",
                T(fill_value.map_or("None".into(), super::print::format_float)),
            ),
            ("indices_are_sorted", T(py_bool(*indices_are_sorted))),
            ("mode", T(mode.name().into())),
            ("slice_sizes", T(tuple(slice_sizes))),
            ("unique_indices", T(py_bool(*unique_indices))),
        ],
        Primitive::ScatterAdd {
            dimension_numbers: d,
            mode,
            indices_are_sorted,
            unique_indices,
        } => vec![
            (
                "dimension_numbers",
                T(format!(
                    "ScatterDimensionNumbers(update_window_dims={}, inserted_window_dims={}, scatter_dims_to_operand_dims={}, operand_batching_dims={}, scatter_indices_batching_dims={})",
                    tuple(&d.update_window_dims),
                    tuple(&d.inserted_window_dims),
                    tuple(&d.scatter_dims_to_operand_dims),
                    tuple(&d.operand_batching_dims),
                    tuple(&d.scatter_indices_batching_dims)
                )),
            ),
            ("indices_are_sorted", T(py_bool(*indices_are_sorted))),
            ("mode", T(mode.name().into())),
            ("unique_indices", T(py_bool(*unique_indices))),
            ("update_consts", T("()".into())),
            ("update_jaxpr", ParamText::AddJaxpr),
        ],
        Primitive::Cumsum { axis, reverse } => vec![
            ("axis", T(axis.to_string())),
            ("reverse", T(py_bool(*reverse))),
        ],
        Primitive::Jit { name, jaxpr } => vec![
            ("name", T(name.clone())),
            ("jaxpr", ParamText::Jaxpr(jaxpr)),
        ],
        Primitive::PipelineEnterStage { stage } => vec![("stage", T(stage.to_string()))],
    }
}

/// Builds `broadcast_in_dim`, whose `shape` JAX leaves out of the text (it is the result's).
pub(crate) fn build_broadcast(
    items: Vec<(String, PValue)>,
    out_shape: Option<&[usize]>,
) -> Result<Primitive, String> {
    let mut p = Params {
        prim: "broadcast_in_dim".into(),
        items,
    };
    let broadcast_dimensions = match p.take_opt("broadcast_dimensions") {
        Some(v) => {
            as_ints(&v).ok_or_else(|| p.bad("broadcast_dimensions", "a tuple of integers"))?
        }
        None => Vec::new(),
    };
    let shape = match (p.opt_ints("shape")?, out_shape) {
        (Some(s), _) => s,
        (None, Some(s)) => s.to_vec(),
        (None, None) => {
            return Err("broadcast_in_dim: needs one result to take its shape from".into());
        }
    };
    Ok(Primitive::BroadcastInDim {
        shape: Shape::from_vec(shape),
        broadcast_dimensions,
    })
}
