//! The primitive table. Every primitive is a variant of [`Prim`]; its rules are reached through
//! exhaustive matches here, each delegating to the family module that defines the primitive
//! (`elementwise`, `structural`, `reduce`, `linalg`, `indexing`, `control`), so a primitive without a rule
//! does not compile.

mod collective;
mod control;
mod elementwise;
mod index_modes;
mod indexing;
mod linalg;
mod reduce;
mod shard_map;
mod structural;
mod treduce;

pub use collective::{
    axis_names, collective_axes, index_groups, permutation, replica_groups, scatter_shape, simulate,
};
pub use index_modes::{
    GatherScatterMode, gather_fill_program, gather_fill_value, scatter_clip_program,
    scatter_window_sizes,
};
pub use indexing::{GatherDims, ScatterDims, gather_dims, scatter_dims};
pub use linalg::{DotDims, dot_dims, free_dims};
pub use shard_map::{ShardMapParams, block_aval, global_aval, shard_map_params, split_factors};
pub use treduce::{ReduceOp, TreduceParams, combined_aval, treduce_params};

use crate::array::Array;
use crate::aval::ShapedArray;
use crate::error::{IrError, Result};
use crate::params::Params;

macro_rules! prims {
    ($($variant:ident => $name:literal,)*) => {
        /// A primitive of the IR.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Prim {
            $(#[doc = concat!("`", $name, "`")] $variant,)*
        }

        impl Prim {
            /// Every primitive.
            pub const ALL: &'static [Prim] = &[$(Prim::$variant,)*];

            /// The name JAX prints.
            pub fn name(self) -> &'static str {
                match self {
                    $(Prim::$variant => $name,)*
                }
            }

            /// Looks a primitive up by its printed name.
            pub fn from_name(name: &str) -> Result<Prim> {
                match name {
                    $($name => Ok(Prim::$variant),)*
                    "pjit" | "closed_call" | "core_call" => Ok(Prim::Jit),
                    "psum_invariant" => Ok(Prim::Psum),
                    "remat" | "remat2" => Ok(Prim::Checkpoint),
                    other => Err(IrError::UnknownPrimitive(other.to_owned())),
                }
            }
        }
    };
}

prims! {
    Neg => "neg", Abs => "abs", Sign => "sign", Exp => "exp", Exp2 => "exp2", Log => "log",
    Log1p => "log1p", Expm1 => "expm1", Tanh => "tanh", Logistic => "logistic", Sin => "sin",
    Cos => "cos", Sqrt => "sqrt", Rsqrt => "rsqrt", Floor => "floor", Ceil => "ceil",
    Round => "round", Not => "not", IntegerPow => "integer_pow",
    Add => "add", Sub => "sub", Mul => "mul", Div => "div", Rem => "rem", Pow => "pow",
    Max => "max", Min => "min", And => "and", Or => "or", Xor => "xor",
    Eq => "eq", Ne => "ne", Lt => "lt", Le => "le", Gt => "gt", Ge => "ge", AddAny => "add_any",
    SelectN => "select_n", Clamp => "clamp", ConvertElementType => "convert_element_type",
    Iota => "iota", BroadcastInDim => "broadcast_in_dim", Reshape => "reshape",
    Squeeze => "squeeze", ExpandDims => "expand_dims", Transpose => "transpose",
    Slice => "slice", DynamicSlice => "dynamic_slice",
    DynamicUpdateSlice => "dynamic_update_slice", Concatenate => "concatenate", Pad => "pad",
    ReduceSum => "reduce_sum", ReduceMax => "reduce_max", ReduceMin => "reduce_min",
    ReduceProd => "reduce_prod", ReduceAnd => "reduce_and", ReduceOr => "reduce_or",
    Argmax => "argmax", Argmin => "argmin", Cumsum => "cumsum",
    DotGeneral => "dot_general", Gather => "gather", ScatterAdd => "scatter-add",
    StopGradient => "stop_gradient", Copy => "copy", Jit => "jit",
    PipelineEnterStage => "pipeline_enter_stage",
    Psum => "psum", Pmax => "pmax", Pmin => "pmin", AllGather => "all_gather",
    ReduceScatter => "reduce_scatter", Ppermute => "ppermute", AllToAll => "all_to_all",
    AxisIndex => "axis_index", Pvary => "pvary", Pbroadcast => "pbroadcast",
    ShardMap => "shard_map", Checkpoint => "checkpoint", Treduce => "treduce",
}

/// Which family module holds a primitive's rules.
enum Family {
    Elementwise,
    Indexing,
    Structural,
    Reduce,
    Linalg,
    Control,
    Collective,
    ShardMap,
    Treduce,
}

impl Prim {
    fn family(self) -> Family {
        use Prim::*;
        match self {
            Neg | Abs | Sign | Exp | Exp2 | Log | Log1p | Expm1 | Tanh | Logistic | Sin | Cos
            | Sqrt | Rsqrt | Floor | Ceil | Round | Not | IntegerPow | Add | Sub | Mul | Div
            | Rem | Pow | Max | Min | And | Or | Xor | Eq | Ne | Lt | Le | Gt | Ge | AddAny
            | SelectN | Clamp | ConvertElementType => Family::Elementwise,
            Iota | BroadcastInDim | Reshape | Squeeze | ExpandDims | Transpose | Slice
            | DynamicSlice | DynamicUpdateSlice | Concatenate | Pad => Family::Structural,
            ReduceSum | ReduceMax | ReduceMin | ReduceProd | ReduceAnd | ReduceOr | Argmax
            | Argmin | Cumsum => Family::Reduce,
            DotGeneral => Family::Linalg,
            Gather | ScatterAdd => Family::Indexing,
            StopGradient | Copy | Jit | Checkpoint | PipelineEnterStage => Family::Control,
            Psum | Pmax | Pmin | AllGather | ReduceScatter | Ppermute | AllToAll | AxisIndex
            | Pvary | Pbroadcast => Family::Collective,
            ShardMap => Family::ShardMap,
            Treduce => Family::Treduce,
        }
    }

    /// Whether the primitive communicates over named mesh axes (runs only inside `shard_map`).
    pub fn is_collective(self) -> bool {
        matches!(self.family(), Family::Collective)
    }

    /// The shape/dtype rule: the result types for operands of types `inputs`. `outputs` are the
    /// result types written in the program, if any: a few printed forms elide parameters that
    /// the result type implies (e.g. `broadcast_in_dim`'s shape).
    pub fn abstract_eval(
        self,
        params: &Params,
        inputs: &[ShapedArray],
        outputs: Option<&[ShapedArray]>,
    ) -> Result<Vec<ShapedArray>> {
        let mut outs = match self.family() {
            Family::Elementwise => elementwise::abstract_eval(self, params, inputs),
            Family::Structural => structural::abstract_eval(self, params, inputs, outputs),
            Family::Reduce => reduce::abstract_eval(self, params, inputs),
            Family::Linalg => linalg::abstract_eval(self, params, inputs),
            Family::Indexing => indexing::abstract_eval(self, params, inputs),
            Family::Control => control::abstract_eval(self, params, inputs),
            Family::Collective => return collective::abstract_eval(self, params, inputs),
            Family::ShardMap => return shard_map::abstract_eval(params, inputs),
            Family::Treduce => treduce::abstract_eval(params, inputs),
        }?;
        // Inside shard_map, a local computation varies over every axis an operand varies over.
        let vma: std::collections::BTreeSet<String> =
            inputs.iter().flat_map(|a| a.vma.iter().cloned()).collect();
        for out in &mut outs {
            out.vma.clone_from(&vma);
        }
        Ok(outs)
    }

    /// Evaluates the primitive on host arrays; `outputs` are the result types.
    pub fn eval(
        self,
        params: &Params,
        inputs: &[Array],
        outputs: &[ShapedArray],
    ) -> Result<Vec<Array>> {
        match self.family() {
            Family::Elementwise => elementwise::eval(self, params, inputs, outputs),
            Family::Structural => structural::eval(self, params, inputs, outputs),
            Family::Reduce => reduce::eval(self, params, inputs, outputs),
            Family::Linalg => linalg::eval(self, params, inputs, outputs),
            Family::Indexing => indexing::eval(self, params, inputs, outputs),
            Family::Control => control::eval(self, params, inputs, outputs),
            Family::Collective => collective::eval(self),
            Family::ShardMap => shard_map::eval(params, inputs),
            Family::Treduce => treduce::eval(params, inputs),
        }
    }
}

/// Checks the operand count.
pub(crate) fn arity(prim: Prim, inputs: usize, expected: usize) -> Result<()> {
    if inputs == expected {
        Ok(())
    } else {
        Err(crate::error::type_error(
            prim.name(),
            format!("takes {expected} operands, got {inputs}"),
        ))
    }
}

/// Normalises a possibly negative axis.
pub(crate) fn axis(prim: Prim, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if (-r..r).contains(&axis) {
        Ok(if axis < 0 {
            (axis + r) as usize
        } else {
            axis as usize
        })
    } else {
        Err(crate::error::type_error(
            prim.name(),
            format!("axis {axis} is out of range for rank {rank}"),
        ))
    }
}
