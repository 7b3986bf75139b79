//! `treduce`: JAXPP's temporal reduction. The body runs once per micro-batch `i` on the slices
//! `xs[i]` (taken along `axis`) and on loop invariants, and its results are combined over the
//! micro-batches by one operation per result: `Concat(a)` stacks them along a new dimension `a`,
//! `Add` sums them, `Max` takes their elementwise maximum. Unpipelined, it means the sequential
//! loop of JAXPP's API doc; `mpmd_jit` runs the body pipelined under the recorded schedule.
//!
//! Parameters: `jaxpr` (the body: invariants, then slices), `axis`, `length` (the number of
//! micro-batches), `num_invariants`, `operation` (one per result: `Concat(axis=a)`, `Add`,
//! `Max`) and `schedule` (a schedule name of tessera-schedule's registry).

use ndarray::{Axis, concatenate};

use crate::array::Array;
use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::program::jaxpr::ClosedJaxpr;
use crate::program::params::{ParamValue, Params};

/// The primitive's printed name.
pub const NAME: &str = "treduce";

/// How the values of one result are combined over the micro-batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Stacked along a new dimension at this position.
    Concat(i64),
    /// Summed.
    Add,
    /// Elementwise maximum.
    Max,
}

impl ReduceOp {
    fn param(self) -> ParamValue {
        match self {
            ReduceOp::Concat(a) => {
                ParamValue::Record("Concat".into(), vec![("axis".into(), ParamValue::Int(a))])
            }
            ReduceOp::Add => ParamValue::Name("Add".into()),
            ReduceOp::Max => ParamValue::Name("Max".into()),
        }
    }

    fn read(value: &ParamValue) -> Result<ReduceOp> {
        match value {
            ParamValue::Name(n) if n == "Add" => Ok(ReduceOp::Add),
            ParamValue::Name(n) if n == "Max" => Ok(ReduceOp::Max),
            ParamValue::Record(n, _) if n == "Concat" => value
                .field("axis")
                .and_then(ParamValue::as_int)
                .map(ReduceOp::Concat)
                .ok_or_else(|| type_error(NAME, format!("{value} needs an integer `axis`"))),
            other => Err(type_error(
                NAME,
                format!("unknown operation {other}; use Concat(axis=a), Add or Max"),
            )),
        }
    }
}

/// The typed view of a `treduce` equation's parameters.
#[derive(Debug, Clone)]
pub struct TreduceParams<'a> {
    /// The loop body: invariants, then one slice per `xs` operand.
    pub body: &'a ClosedJaxpr,
    /// The micro-batch axis of every `xs` operand.
    pub axis: usize,
    /// The number of micro-batches.
    pub length: i64,
    /// How many leading operands are loop invariants.
    pub num_invariants: usize,
    /// One combining operation per result.
    pub ops: Vec<ReduceOp>,
    /// The schedule's name.
    pub schedule: String,
}

impl<'a> TreduceParams<'a> {
    /// Reads the parameters of a `treduce` equation.
    pub fn read(params: &'a Params) -> Result<Self> {
        let ops = params
            .get("operation")
            .and_then(ParamValue::as_seq)
            .ok_or_else(|| type_error(NAME, "parameter `operation` must be a tuple"))?
            .iter()
            .map(ReduceOp::read)
            .collect::<Result<_>>()?;
        let schedule = match params.get("schedule") {
            Some(ParamValue::Name(n)) => n.clone(),
            Some(other) => {
                return Err(type_error(
                    NAME,
                    format!("parameter `schedule` must name a schedule, got {other}"),
                ));
            }
            None => return Err(type_error(NAME, "parameter `schedule` is missing")),
        };
        Ok(TreduceParams {
            body: params.jaxpr(NAME, "jaxpr")?,
            axis: usize::try_from(params.int(NAME, "axis")?)
                .map_err(|_| type_error(NAME, "axis must be >= 0"))?,
            length: params.int(NAME, "length")?,
            num_invariants: usize::try_from(params.int(NAME, "num_invariants")?)
                .map_err(|_| type_error(NAME, "num_invariants must be >= 0"))?,
            ops,
            schedule,
        })
    }
}

/// Builds the parameters of a `treduce` equation.
pub fn treduce_params(
    body: ClosedJaxpr,
    axis: usize,
    length: i64,
    num_invariants: usize,
    ops: &[ReduceOp],
    schedule: &str,
) -> Params {
    Params::new()
        .with("axis", ParamValue::Int(axis as i64))
        .with("jaxpr", ParamValue::Jaxpr(Box::new(body)))
        .with("length", ParamValue::Int(length))
        .with("num_invariants", ParamValue::Int(num_invariants as i64))
        .with(
            "operation",
            ParamValue::Tuple(ops.iter().map(|o| o.param()).collect()),
        )
        .with("schedule", ParamValue::Name(schedule.to_owned()))
}

/// The type of a result combined by `op` over `length` micro-batches.
pub fn combined_aval(value: &ShapedArray, op: ReduceOp, length: i64) -> Result<ShapedArray> {
    let mut out = ShapedArray::new(value.dtype, &value.shape);
    if let ReduceOp::Concat(a) = op {
        let at = usize::try_from(a)
            .ok()
            .filter(|&a| a <= value.rank())
            .ok_or_else(|| {
                type_error(NAME, format!("Concat axis {a} is out of range for {value}"))
            })?;
        out.shape.insert(at, length);
    }
    Ok(out)
}

pub(super) fn abstract_eval(params: &Params, inputs: &[ShapedArray]) -> Result<Vec<ShapedArray>> {
    let p = TreduceParams::read(params)?;
    let body_in = p.body.jaxpr.in_avals();
    if inputs.len() != body_in.len() || p.num_invariants > inputs.len() {
        return Err(type_error(
            NAME,
            format!(
                "{} operands for a body of {} parameters",
                inputs.len(),
                body_in.len()
            ),
        ));
    }
    for (i, (x, want)) in inputs.iter().zip(&body_in).enumerate() {
        let mut slice = ShapedArray::new(x.dtype, &x.shape);
        if i >= p.num_invariants {
            if x.shape.get(p.axis) != Some(&p.length) {
                return Err(type_error(
                    NAME,
                    format!(
                        "operand {i} of type {x} has no dimension {} of the {} micro-batches",
                        p.axis, p.length
                    ),
                ));
            }
            slice.shape.remove(p.axis);
        }
        if !slice.same_type(want) {
            return Err(type_error(
                NAME,
                format!("operand {i} gives the body {slice}, it takes {want}"),
            ));
        }
    }
    let outs = p.body.jaxpr.out_avals();
    if outs.len() != p.ops.len() {
        return Err(type_error(
            NAME,
            format!("{} results but {} operations", outs.len(), p.ops.len()),
        ));
    }
    outs.iter()
        .zip(&p.ops)
        .map(|(o, &op)| combined_aval(o, op, p.length))
        .collect()
}

/// One result's values over the micro-batches (in order), combined by `op` as the sequential
/// loop combines them.
pub fn combine_micro_batches(values: Vec<Array>, op: ReduceOp) -> Result<Array> {
    let first = values
        .first()
        .ok_or_else(|| type_error(NAME, "a treduce of no micro-batches"))?;
    let dtype = first.dtype();
    if let Some((k, v)) = values
        .iter()
        .enumerate()
        .find(|(_, v)| v.dims() != first.dims() || v.dtype() != dtype)
    {
        return Err(type_error(
            NAME,
            format!(
                "micro-batch {k} gives {}{:?} but micro-batch 0 gave {}{:?}; every micro-batch \
                 must give a result of one shape and dtype",
                v.dtype().numpy_name(),
                v.dims(),
                dtype.numpy_name(),
                first.dims()
            ),
        ));
    }
    let data = match op {
        ReduceOp::Concat(a) => {
            let rank = first.dims().len();
            let at = usize::try_from(a)
                .ok()
                .filter(|&a| a <= rank)
                .ok_or_else(|| {
                    type_error(
                        NAME,
                        format!(
                            "Concat axis {a} is out of range for results of rank {rank}; use an \
                             axis from 0 to {rank}"
                        ),
                    )
                })?;
            let elems: Vec<_> = values.iter().map(Array::elems).collect();
            let views: Vec<_> = elems
                .iter()
                .map(|v| v.view().insert_axis(Axis(at)))
                .collect();
            concatenate(Axis(at), &views).map_err(|e| type_error(NAME, e.to_string()))?
        }
        ReduceOp::Add | ReduceOp::Max => {
            let mut acc = first.elems();
            for v in &values[1..] {
                acc.zip_mut_with(&v.elems(), |s, &x| {
                    *s = if op == ReduceOp::Add {
                        s.add(x, dtype)
                    } else {
                        s.max(x, dtype)
                    }
                });
            }
            acc
        }
    };
    Ok(Array::from_elems(dtype, data))
}
