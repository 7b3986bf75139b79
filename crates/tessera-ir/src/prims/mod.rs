//! The primitives: one enum, with the rules of each family in its own file.
//!
//! [`Primitive`] carries the params of each primitive. Every rule is an exhaustive `match` on it
//! (here: [`Primitive::name`], [`abstract_eval`] and [`eval`]; in [`crate::text`]: params
//! printing and parsing), so adding a primitive without a rule is a compile error. Each family
//! file holds its shape rule and its interpretation; JVP, transpose and batching rules go beside
//! them.

pub mod call;
pub mod dot;
pub mod elementwise;
pub mod gather;
pub mod indexing;
pub mod reduce;
pub mod structural;

pub use elementwise::{BinaryOp, UnaryOp};
pub use gather::{GatherDims, IndexMode, ScatterDims};
pub use reduce::{ArgOp, ReduceOp};

use crate::interp::{Array, EvalError};
use crate::ir::ClosedJaxpr;
use crate::types::{DType, Shape, ShapedArray};

/// `(low, high, interior)` padding of one dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PadDim {
    /// Elements added before (may be negative).
    pub low: i64,
    /// Elements added after (may be negative).
    pub high: i64,
    /// Elements added between neighbours.
    pub interior: i64,
}

/// A primitive with its params.
#[derive(Clone, Debug, PartialEq)]
pub enum Primitive {
    /// Elementwise unary op.
    Unary(UnaryOp),
    /// Elementwise binary op (rank-0 operands broadcast).
    Binary(BinaryOp),
    /// `x ** y` for a constant integer `y`.
    IntegerPow {
        /// The exponent.
        y: i32,
    },
    /// `select_n(which, *cases)`: picks `cases[which]` elementwise.
    SelectN,
    /// `clamp(lo, x, hi)`.
    Clamp,
    /// Dtype conversion.
    ConvertElementType {
        /// The target dtype.
        new_dtype: DType,
        /// Whether the result is weakly typed.
        weak_type: bool,
    },
    /// Indices along one dimension.
    Iota {
        /// The element type.
        dtype: DType,
        /// The result shape.
        shape: Shape,
        /// The dimension that counts.
        dimension: usize,
    },
    /// Broadcast: operand dimension `i` becomes result dimension `broadcast_dimensions[i]`.
    BroadcastInDim {
        /// The result shape.
        shape: Shape,
        /// Where each operand dimension goes.
        broadcast_dimensions: Vec<usize>,
    },
    /// Row-major reshape.
    Reshape {
        /// The result shape.
        new_sizes: Shape,
    },
    /// Removes size-1 dimensions.
    Squeeze {
        /// The dimensions removed.
        dimensions: Vec<usize>,
    },
    /// Inserts size-1 dimensions.
    ExpandDims {
        /// The result positions of the new dimensions.
        dimensions: Vec<usize>,
    },
    /// Permutes dimensions.
    Transpose {
        /// Result dimension `i` is operand dimension `permutation[i]`.
        permutation: Vec<usize>,
    },
    /// A reduction over `axes`.
    Reduce {
        /// Which reduction.
        op: ReduceOp,
        /// The axes reduced.
        axes: Vec<usize>,
    },
    /// `argmax`/`argmin` along one axis.
    ArgReduce {
        /// Which one.
        op: ArgOp,
        /// The axis (JAX keeps a one-element tuple).
        axis: usize,
        /// The index dtype.
        index_dtype: DType,
    },
    /// Generalised matrix product.
    DotGeneral {
        /// Contracting dims of the lhs.
        lhs_contracting: Vec<usize>,
        /// Contracting dims of the rhs.
        rhs_contracting: Vec<usize>,
        /// Batch dims of the lhs.
        lhs_batch: Vec<usize>,
        /// Batch dims of the rhs.
        rhs_batch: Vec<usize>,
        /// The result dtype (`None`: the operands').
        preferred_element_type: Option<DType>,
    },
    /// Static strided slice.
    Slice {
        /// Start per dimension.
        start_indices: Vec<usize>,
        /// Exclusive limit per dimension.
        limit_indices: Vec<usize>,
        /// Strides (`None`: all 1).
        strides: Option<Vec<usize>>,
    },
    /// Slice at runtime offsets (clamped into bounds): `dynamic_slice x *starts`.
    DynamicSlice {
        /// The result shape.
        slice_sizes: Vec<usize>,
    },
    /// `dynamic_update_slice x update *starts` (starts clamped into bounds).
    DynamicUpdateSlice,
    /// Concatenation along one dimension.
    Concatenate {
        /// The dimension.
        dimension: usize,
    },
    /// `pad x padding_value`.
    Pad {
        /// One entry per dimension.
        padding_config: Vec<PadDim>,
    },
    /// XLA gather (`operand indices`), index vectors in the last dimension of `indices`.
    Gather {
        /// The dimension numbers.
        dimension_numbers: GatherDims,
        /// The slice taken at each index.
        slice_sizes: Vec<usize>,
        /// Out-of-bounds handling.
        mode: IndexMode,
        /// The value of out-of-bounds elements in `FillOrDrop` mode (`None`: JAX's default).
        fill_value: Option<f64>,
        /// A promise that indices are sorted.
        indices_are_sorted: bool,
        /// A promise that indices are unique.
        unique_indices: bool,
    },
    /// XLA scatter with addition (`operand indices updates`).
    ScatterAdd {
        /// The dimension numbers.
        dimension_numbers: ScatterDims,
        /// Out-of-bounds handling.
        mode: IndexMode,
        /// A promise that indices are sorted.
        indices_are_sorted: bool,
        /// A promise that indices are unique.
        unique_indices: bool,
    },
    /// Cumulative sum along an axis.
    Cumsum {
        /// The axis.
        axis: usize,
        /// Whether it runs from the end.
        reverse: bool,
    },
    /// Identity that blocks gradients.
    StopGradient,
    /// Addition of gradient contributions.
    AddAny,
    /// Identity copy.
    Copy,
    /// A nested call (`jit`/`pjit`/`closed_call`).
    Jit {
        /// The function's name.
        name: String,
        /// The body.
        jaxpr: Box<ClosedJaxpr>,
    },
    /// JAXPP's stage boundary marker: identity on its operands.
    PipelineEnterStage {
        /// The stage that begins here.
        stage: u32,
    },
}

impl Primitive {
    /// The name JAX prints.
    pub fn name(&self) -> &'static str {
        match self {
            Primitive::Unary(op) => op.name(),
            Primitive::Binary(op) => op.name(),
            Primitive::IntegerPow { .. } => "integer_pow",
            Primitive::SelectN => "select_n",
            Primitive::Clamp => "clamp",
            Primitive::ConvertElementType { .. } => "convert_element_type",
            Primitive::Iota { .. } => "iota",
            Primitive::BroadcastInDim { .. } => "broadcast_in_dim",
            Primitive::Reshape { .. } => "reshape",
            Primitive::Squeeze { .. } => "squeeze",
            Primitive::ExpandDims { .. } => "expand_dims",
            Primitive::Transpose { .. } => "transpose",
            Primitive::Reduce { op, .. } => op.name(),
            Primitive::ArgReduce { op, .. } => op.name(),
            Primitive::DotGeneral { .. } => "dot_general",
            Primitive::Slice { .. } => "slice",
            Primitive::DynamicSlice { .. } => "dynamic_slice",
            Primitive::DynamicUpdateSlice => "dynamic_update_slice",
            Primitive::Concatenate { .. } => "concatenate",
            Primitive::Pad { .. } => "pad",
            Primitive::Gather { .. } => "gather",
            Primitive::ScatterAdd { .. } => "scatter-add",
            Primitive::Cumsum { .. } => "cumsum",
            Primitive::StopGradient => "stop_gradient",
            Primitive::AddAny => "add_any",
            Primitive::Copy => "copy",
            Primitive::Jit { .. } => "jit",
            Primitive::PipelineEnterStage { .. } => "pipeline_enter_stage",
        }
    }
}

/// A shape or dtype rule rejected the operands.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{prim}: {message} (operands: {operands})")]
pub struct TypeError {
    /// The primitive's name.
    pub prim: String,
    /// What was wrong and how to fix it.
    pub message: String,
    /// The operand avals, printed.
    pub operands: String,
}

/// Builds a [`TypeError`] for `prim` applied to `ins`.
pub(crate) fn type_err(prim: &Primitive, ins: &[ShapedArray], message: String) -> TypeError {
    let operands = ins
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    TypeError {
        prim: prim.name().to_string(),
        message,
        operands,
    }
}

/// The result avals of `prim` applied to operands of avals `ins` (the shape/dtype rule).
pub fn abstract_eval(prim: &Primitive, ins: &[ShapedArray]) -> Result<Vec<ShapedArray>, TypeError> {
    use Primitive as P;
    let one = |r: Result<ShapedArray, TypeError>| r.map(|a| vec![a]);
    match prim {
        P::Unary(_) | P::Binary(_) | P::IntegerPow { .. } | P::SelectN | P::Clamp => {
            one(elementwise::shape_rule(prim, ins))
        }
        P::ConvertElementType { .. }
        | P::Iota { .. }
        | P::BroadcastInDim { .. }
        | P::Reshape { .. }
        | P::Squeeze { .. }
        | P::ExpandDims { .. }
        | P::Transpose { .. }
        | P::StopGradient
        | P::AddAny
        | P::Copy => one(structural::shape_rule(prim, ins)),
        P::Reduce { .. } | P::ArgReduce { .. } | P::Cumsum { .. } => {
            one(reduce::shape_rule(prim, ins))
        }
        P::DotGeneral { .. } => one(dot::shape_rule(prim, ins)),
        P::Gather { .. } | P::ScatterAdd { .. } => one(gather::shape_rule(prim, ins)),
        P::Slice { .. }
        | P::DynamicSlice { .. }
        | P::DynamicUpdateSlice
        | P::Concatenate { .. }
        | P::Pad { .. } => one(indexing::shape_rule(prim, ins)),
        P::Jit { .. } | P::PipelineEnterStage { .. } => call::shape_rule(prim, ins),
    }
}

/// Evaluates `prim` on host arrays (the reference interpreter's rule).
pub fn eval(prim: &Primitive, args: &[Array]) -> Result<Vec<Array>, EvalError> {
    use Primitive as P;
    let one = |r: Result<Array, EvalError>| r.map(|a| vec![a]);
    match prim {
        P::Unary(_) | P::Binary(_) | P::IntegerPow { .. } | P::SelectN | P::Clamp => {
            one(elementwise::eval(prim, args))
        }
        P::ConvertElementType { .. }
        | P::Iota { .. }
        | P::BroadcastInDim { .. }
        | P::Reshape { .. }
        | P::Squeeze { .. }
        | P::ExpandDims { .. }
        | P::Transpose { .. }
        | P::StopGradient
        | P::AddAny
        | P::Copy => one(structural::eval(prim, args)),
        P::Reduce { .. } | P::ArgReduce { .. } | P::Cumsum { .. } => one(reduce::eval(prim, args)),
        P::DotGeneral { .. } => one(dot::eval(prim, args)),
        P::Gather { .. } | P::ScatterAdd { .. } => one(gather::eval(prim, args)),
        P::Slice { .. }
        | P::DynamicSlice { .. }
        | P::DynamicUpdateSlice
        | P::Concatenate { .. }
        | P::Pad { .. } => one(indexing::eval(prim, args)),
        P::Jit { .. } | P::PipelineEnterStage { .. } => call::eval(prim, args),
    }
}
