//! The primitive table. Every primitive is a variant of [`Prim`]; its shape rule is reached
//! through the exhaustive match of [`Prim::family`] and [`Prim::abstract_eval`], each delegating
//! to the family module that defines the primitive (`elementwise`, `structural`, `reduce`,
//! `linalg`, `indexing`, `control`, `callback`, ...), so a primitive without a rule does not
//! compile. The evaluation rules live in `tessera-interp` (one exhaustive match over
//! [`Family`]); the family modules with helpers the evaluation shares are public.

pub mod attention;
pub mod attention_shards;
pub mod branch;
pub mod callback;
mod collective;
mod collective_params;
mod constraint;
mod control;
pub mod conv;
pub mod cumulative;
pub mod elementwise;
mod explicit;
mod explicit_reduced;
mod explicit_reshape;
mod flow;
pub mod index_modes;
pub mod index_params;
pub mod indexing;
pub mod linalg;
pub mod numeric;
mod ops;
mod p2p;
mod pending;
mod ragged;
pub mod random;
pub mod random_params;
mod reduce;
mod reduce_params;
mod reduced;
mod rounding;
pub mod scan;
mod scatter;
pub mod shard_map;
pub mod sort;
mod structural;
pub mod structural_params;
pub mod threefry;
pub mod treduce;
pub mod window;

pub use attention::{AttentionImpl, AttentionParams};
pub use attention_shards::AttentionShards;
pub use branch::{WhileParams, branch_index, cond_branches, cond_params, while_params};
pub use callback::{
    CallbackOp, CallbackParams, VmapMethod, call_host_callback, callback_name,
    differentiation_refusal, is_effectful, is_ordered, jaxpr_has_callbacks, jaxpr_has_effects,
    jaxpr_has_ordered_effects,
};
pub use collective::simulate;
pub use collective_params::{CollectiveKind, CollectiveParams};
pub use constraint::ConstraintParams;
pub use conv::ConvParams;
pub use cumulative::CumulativeOp;
pub use elementwise::UnaryParams;
pub use flow::{CustomRule, call_name, custom_rule};
pub use index_modes::{GatherScatterMode, scatter_window_sizes};
pub use index_params::{GatherParams, ScatterParams};
pub use indexing::{GatherDims, ScatterDims, gather_dims, scatter_dims};
pub use linalg::{DotDims, dot_dims, free_dims};
pub use numeric::NumericOp;
pub use ops::{
    AttentionOp, BinaryOp, CollectiveOp, CompareOp, ControlOp, ElementwiseOp, IndexingOp,
    ReduceKind, ReductionOp, StructuralOp, UnaryOp,
};
pub use p2p::{out_shape_param, token_misuse};
pub use pending::pending_misuse;
pub use random::RandomOp;
pub use random_params::{PrngImpl, RandomParams};
pub use reduce_params::ReductionParams;
pub use rounding::RoundingMethod;
pub use scan::{ScanParams, scan_params, stacked, unstacked};
pub use scatter::ScatterKind;
pub use shard_map::{
    ShardMapParams, block_aval, context_mesh, global_aval, shard_map_params, split_factors,
};
pub use shard_map::{on_explicit_mesh, unreduced_out_claim};
pub use sort::{SortOp, SortParams, sort_order, top_k_params};
pub use structural_params::StructuralParams;
pub use threefry::{PARITY, counter, pack_key, threefry2x32, unpack_key};
pub use treduce::{ReduceOp, TreduceParams, combine_micro_batches, combined_aval, treduce_params};
pub use window::{WindowOp, WindowParams, highest, lowest, reduce_window_jaxpr, select_is_ge};

use crate::aval::ShapedArray;
use crate::error::{IrError, Result};
use crate::program::params::Params;

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
    OptimizationBarrier => "optimization_barrier",
    PipelineEnterStage => "pipeline_enter_stage", ShardingConstraint => "sharding_constraint",
    Psum => "psum", Pmax => "pmax", Pmin => "pmin", AllGather => "all_gather",
    ReduceScatter => "reduce_scatter", Ppermute => "ppermute", AllToAll => "all_to_all",
    AxisIndex => "axis_index", Pvary => "pvary", Pbroadcast => "pbroadcast",
    PsumInvariant => "psum_invariant", AllGatherInvariant => "all_gather_invariant",
    Preduced => "preduced", VaryUnreducedCast => "vary_unreduced_cast_p",
    UnreducedPsum => "unreduced_psum", RaggedAllToAll => "ragged_all_to_all",
    // Point-to-point sends and receives (see `p2p.rs`).
    Psend => "psend", Precv => "precv",
    ReducedVaryCast => "reduced_vary_cast_p", AllGatherReduced => "all_gather_reduced",
    UnreducedReduceScatter => "unreduced_reduce_scatter",
    // Asynchronous collectives (see `pending.rs`).
    PsumStart => "psum_start", AllGatherStart => "all_gather_start",
    ReduceScatterStart => "reduce_scatter_start", AllToAllStart => "all_to_all_start",
    PbroadcastStart => "pbroadcast_start", PpermuteStart => "ppermute_start",
    PsumInvariantStart => "psum_invariant_start", UnreducedPsumStart => "unreduced_psum_start",
    UnreducedReduceScatterStart => "unreduced_reduce_scatter_start",
    AllGatherReducedStart => "all_gather_reduced_start",
    PsumDone => "psum_done", AllGatherDone => "all_gather_done",
    ReduceScatterDone => "reduce_scatter_done", AllToAllDone => "all_to_all_done",
    PbroadcastDone => "pbroadcast_done", PpermuteDone => "ppermute_done",
    Reshard => "reshard",
    ShardMap => "shard_map", Checkpoint => "checkpoint", Treduce => "treduce",
    // Special functions, bit operations, random numbers, sorting.
    Erf => "erf", Erfc => "erfc", ErfInv => "erf_inv", Lgamma => "lgamma", Digamma => "digamma",
    Polygamma => "polygamma", Tan => "tan", Asin => "asin", Acos => "acos", Atan => "atan",
    Sinh => "sinh", Cosh => "cosh", Asinh => "asinh", Acosh => "acosh", Atanh => "atanh",
    Cbrt => "cbrt", Square => "square", IsFinite => "is_finite", Atan2 => "atan2",
    ShiftLeft => "shift_left", ShiftRightLogical => "shift_right_logical",
    ShiftRightArithmetic => "shift_right_arithmetic",
    BitcastConvertType => "bitcast_convert_type", PopulationCount => "population_count",
    RandomSeed => "random_seed", RandomWrap => "random_wrap", RandomUnwrap => "random_unwrap",
    RandomBits => "random_bits", RandomSplit => "random_split", RandomFoldIn => "random_fold_in",
    Threefry2x32 => "threefry2x32", Sort => "sort", TopK => "top_k",
    // Cumulative ops, scatters, windows, convolution.
    Cumprod => "cumprod", Cummax => "cummax", Cummin => "cummin",
    Cumlogsumexp => "cumlogsumexp",
    Scatter => "scatter", ScatterMul => "scatter-mul", ScatterMin => "scatter-min",
    ScatterMax => "scatter-max",
    ReduceWindowSum => "reduce_window_sum", ReduceWindowMax => "reduce_window_max",
    ReduceWindowMin => "reduce_window_min", ReduceWindow => "reduce_window",
    SelectAndScatterAdd => "select_and_scatter_add",
    ConvGeneralDilated => "conv_general_dilated",
    DotProductAttention => "dot_product_attention",
    DotProductAttentionBwd => "dot_product_attention_bwd",
    // Control flow and custom derivatives.
    CustomJvpCall => "custom_jvp_call", CustomVjpCall => "custom_vjp_call", Scan => "scan",
    Cond => "cond", While => "while",
    // Host callbacks (see `callback.rs`).
    PureCallback => "pure_callback", IoCallback => "io_callback",
    DebugCallback => "debug_callback",
}

/// The primitives of module `flow`: control flow and custom derivatives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowOp {
    /// `custom_jvp_call`.
    CustomJvp,
    /// `custom_vjp_call`.
    CustomVjp,
    /// `scan`.
    Scan,
    /// `cond`.
    Cond,
    /// `while`.
    While,
}

/// Which family module holds a primitive's rules, with the typed kind of the elementwise and
/// reduction primitives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // Each variant is the family module of the same name.
pub enum Family {
    Elementwise(ElementwiseOp),
    Indexing(IndexingOp),
    Structural(StructuralOp),
    Reduce(ReductionOp),
    Linalg,
    Control(ControlOp),
    Collective(CollectiveOp),
    ShardMap,
    Treduce,
    Numeric(NumericOp),
    Random(RandomOp),
    Sort(SortOp),
    Window(WindowOp),
    Flow(FlowOp),
    Callback(CallbackOp),
    Attention(AttentionOp),
}

impl Prim {
    /// The family module holding the primitive's rules, with its typed kind.
    pub fn family(self) -> Family {
        use Prim::*;
        use ops::{
            BinaryOp as B, CompareOp as C, ElementwiseOp as E, ReduceKind as K, UnaryOp as U,
        };
        let unary = |u| Family::Elementwise(E::Unary(u));
        let binary = |b| Family::Elementwise(E::Binary(b));
        let compare = |c| Family::Elementwise(E::Compare(c));
        let reduce = |k| Family::Reduce(ReductionOp::Reduce(k));
        match self {
            Neg => unary(U::Neg),
            Abs => unary(U::Abs),
            Sign => unary(U::Sign),
            Exp => unary(U::Exp),
            Exp2 => unary(U::Exp2),
            Log => unary(U::Log),
            Log1p => unary(U::Log1p),
            Expm1 => unary(U::Expm1),
            Tanh => unary(U::Tanh),
            Logistic => unary(U::Logistic),
            Sin => unary(U::Sin),
            Cos => unary(U::Cos),
            Sqrt => unary(U::Sqrt),
            Rsqrt => unary(U::Rsqrt),
            Floor => unary(U::Floor),
            Ceil => unary(U::Ceil),
            Round => unary(U::Round),
            Not => unary(U::Not),
            IntegerPow => unary(U::IntegerPow),
            Add => binary(B::Add),
            AddAny => binary(B::AddAny),
            Sub => binary(B::Sub),
            Mul => binary(B::Mul),
            Div => binary(B::Div),
            Rem => binary(B::Rem),
            Pow => binary(B::Pow),
            Max => binary(B::Max),
            Min => binary(B::Min),
            And => binary(B::And),
            Or => binary(B::Or),
            Xor => binary(B::Xor),
            Eq => compare(C::Eq),
            Ne => compare(C::Ne),
            Lt => compare(C::Lt),
            Le => compare(C::Le),
            Gt => compare(C::Gt),
            Ge => compare(C::Ge),
            SelectN => Family::Elementwise(E::SelectN),
            Clamp => Family::Elementwise(E::Clamp),
            ConvertElementType => Family::Elementwise(E::Convert),
            Iota => Family::Structural(StructuralOp::Iota),
            BroadcastInDim => Family::Structural(StructuralOp::BroadcastInDim),
            Reshape => Family::Structural(StructuralOp::Reshape),
            Squeeze => Family::Structural(StructuralOp::Squeeze),
            ExpandDims => Family::Structural(StructuralOp::ExpandDims),
            Transpose => Family::Structural(StructuralOp::Transpose),
            Slice => Family::Structural(StructuralOp::Slice),
            DynamicSlice => Family::Structural(StructuralOp::DynamicSlice),
            DynamicUpdateSlice => Family::Structural(StructuralOp::DynamicUpdateSlice),
            Concatenate => Family::Structural(StructuralOp::Concatenate),
            Pad => Family::Structural(StructuralOp::Pad),
            ReduceSum => reduce(K::Sum),
            ReduceMax => reduce(K::Max),
            ReduceMin => reduce(K::Min),
            ReduceProd => reduce(K::Prod),
            ReduceAnd => reduce(K::And),
            ReduceOr => reduce(K::Or),
            Argmax => Family::Reduce(ReductionOp::Argmax),
            Argmin => Family::Reduce(ReductionOp::Argmin),
            Cumsum => Family::Reduce(ReductionOp::Cumsum),
            DotGeneral => Family::Linalg,
            Gather => Family::Indexing(IndexingOp::Gather),
            ScatterAdd => Family::Indexing(IndexingOp::ScatterAdd),
            StopGradient => Family::Control(ControlOp::StopGradient),
            Copy => Family::Control(ControlOp::Copy),
            OptimizationBarrier => Family::Control(ControlOp::OptimizationBarrier),
            Jit => Family::Control(ControlOp::Jit),
            Checkpoint => Family::Control(ControlOp::Checkpoint),
            PipelineEnterStage => Family::Control(ControlOp::PipelineEnterStage),
            ShardingConstraint => Family::Control(ControlOp::ShardingConstraint),
            Psum => Family::Collective(CollectiveOp::Psum),
            Pmax => Family::Collective(CollectiveOp::Pmax),
            Pmin => Family::Collective(CollectiveOp::Pmin),
            AllGather => Family::Collective(CollectiveOp::AllGather),
            ReduceScatter => Family::Collective(CollectiveOp::ReduceScatter),
            Ppermute => Family::Collective(CollectiveOp::Ppermute),
            AllToAll => Family::Collective(CollectiveOp::AllToAll),
            AxisIndex => Family::Collective(CollectiveOp::AxisIndex),
            Pvary => Family::Collective(CollectiveOp::Pvary),
            Pbroadcast => Family::Collective(CollectiveOp::Pbroadcast),
            PsumInvariant => Family::Collective(CollectiveOp::PsumInvariant),
            AllGatherInvariant => Family::Collective(CollectiveOp::AllGatherInvariant),
            Preduced => Family::Collective(CollectiveOp::Preduced),
            VaryUnreducedCast => Family::Collective(CollectiveOp::VaryUnreducedCast),
            UnreducedPsum => Family::Collective(CollectiveOp::UnreducedPsum),
            RaggedAllToAll => Family::Collective(CollectiveOp::RaggedAllToAll),
            Psend => Family::Collective(CollectiveOp::Psend),
            Precv => Family::Collective(CollectiveOp::Precv),
            ReducedVaryCast => Family::Collective(CollectiveOp::ReducedVaryCast),
            AllGatherReduced => Family::Collective(CollectiveOp::AllGatherReduced),
            UnreducedReduceScatter => Family::Collective(CollectiveOp::UnreducedReduceScatter),
            // A start has its collective's parameters, type and values; a done is the
            // identity on values (`pending.rs`).
            PsumStart => Family::Collective(CollectiveOp::Psum),
            AllGatherStart => Family::Collective(CollectiveOp::AllGather),
            ReduceScatterStart => Family::Collective(CollectiveOp::ReduceScatter),
            AllToAllStart => Family::Collective(CollectiveOp::AllToAll),
            PbroadcastStart => Family::Collective(CollectiveOp::Pbroadcast),
            PpermuteStart => Family::Collective(CollectiveOp::Ppermute),
            PsumInvariantStart => Family::Collective(CollectiveOp::PsumInvariant),
            UnreducedPsumStart => Family::Collective(CollectiveOp::UnreducedPsum),
            UnreducedReduceScatterStart => Family::Collective(CollectiveOp::UnreducedReduceScatter),
            AllGatherReducedStart => Family::Collective(CollectiveOp::AllGatherReduced),
            PsumDone | AllGatherDone | ReduceScatterDone | AllToAllDone | PbroadcastDone
            | PpermuteDone => Family::Control(ControlOp::AsyncDone),
            Reshard => Family::Control(ControlOp::Reshard),
            ShardMap => Family::ShardMap,
            Treduce => Family::Treduce,
            Erf => Family::Numeric(NumericOp::Erf),
            Erfc => Family::Numeric(NumericOp::Erfc),
            ErfInv => Family::Numeric(NumericOp::ErfInv),
            Lgamma => Family::Numeric(NumericOp::Lgamma),
            Digamma => Family::Numeric(NumericOp::Digamma),
            Polygamma => Family::Numeric(NumericOp::Polygamma),
            Tan => Family::Numeric(NumericOp::Tan),
            Asin => Family::Numeric(NumericOp::Asin),
            Acos => Family::Numeric(NumericOp::Acos),
            Atan => Family::Numeric(NumericOp::Atan),
            Sinh => Family::Numeric(NumericOp::Sinh),
            Cosh => Family::Numeric(NumericOp::Cosh),
            Asinh => Family::Numeric(NumericOp::Asinh),
            Acosh => Family::Numeric(NumericOp::Acosh),
            Atanh => Family::Numeric(NumericOp::Atanh),
            Cbrt => Family::Numeric(NumericOp::Cbrt),
            Square => Family::Numeric(NumericOp::Square),
            IsFinite => Family::Numeric(NumericOp::IsFinite),
            Atan2 => Family::Numeric(NumericOp::Atan2),
            ShiftLeft => Family::Numeric(NumericOp::ShiftLeft),
            ShiftRightLogical => Family::Numeric(NumericOp::ShiftRightLogical),
            ShiftRightArithmetic => Family::Numeric(NumericOp::ShiftRightArithmetic),
            BitcastConvertType => Family::Numeric(NumericOp::BitcastConvertType),
            PopulationCount => Family::Numeric(NumericOp::PopulationCount),
            RandomSeed => Family::Random(RandomOp::Seed),
            RandomWrap => Family::Random(RandomOp::Wrap),
            RandomUnwrap => Family::Random(RandomOp::Unwrap),
            RandomBits => Family::Random(RandomOp::Bits),
            RandomSplit => Family::Random(RandomOp::Split),
            RandomFoldIn => Family::Random(RandomOp::FoldIn),
            Threefry2x32 => Family::Random(RandomOp::Threefry2x32),
            Sort => Family::Sort(SortOp::Sort),
            TopK => Family::Sort(SortOp::TopK),
            // Cumulative ops, scatters, windows, convolution.
            Cumprod => Family::Reduce(ReductionOp::Cumulative(CumulativeOp::Prod)),
            Cummax => Family::Reduce(ReductionOp::Cumulative(CumulativeOp::Max)),
            Cummin => Family::Reduce(ReductionOp::Cumulative(CumulativeOp::Min)),
            Cumlogsumexp => Family::Reduce(ReductionOp::Cumulative(CumulativeOp::LogSumExp)),
            Scatter => Family::Indexing(IndexingOp::Scatter(ScatterKind::Replace)),
            ScatterMul => Family::Indexing(IndexingOp::Scatter(ScatterKind::Mul)),
            ScatterMin => Family::Indexing(IndexingOp::Scatter(ScatterKind::Min)),
            ScatterMax => Family::Indexing(IndexingOp::Scatter(ScatterKind::Max)),
            ReduceWindowSum => Family::Window(WindowOp::Sum),
            ReduceWindowMax => Family::Window(WindowOp::Max),
            ReduceWindowMin => Family::Window(WindowOp::Min),
            ReduceWindow => Family::Window(WindowOp::Generic),
            SelectAndScatterAdd => Family::Window(WindowOp::SelectAndScatterAdd),
            ConvGeneralDilated => Family::Window(WindowOp::Conv),
            DotProductAttention => Family::Attention(AttentionOp::Forward),
            DotProductAttentionBwd => Family::Attention(AttentionOp::Backward),
            CustomJvpCall => Family::Flow(FlowOp::CustomJvp),
            CustomVjpCall => Family::Flow(FlowOp::CustomVjp),
            Scan => Family::Flow(FlowOp::Scan),
            Cond => Family::Flow(FlowOp::Cond),
            While => Family::Flow(FlowOp::While),
            PureCallback => Family::Callback(CallbackOp::Pure),
            IoCallback => Family::Callback(CallbackOp::Io),
            DebugCallback => Family::Callback(CallbackOp::Debug),
        }
    }

    /// The typed kind of an elementwise primitive (`None` for the other families).
    pub fn elementwise(self) -> Option<ElementwiseOp> {
        match self.family() {
            Family::Elementwise(op) => Some(op),
            Family::Indexing(_)
            | Family::Structural(_)
            | Family::Reduce(_)
            | Family::Linalg
            | Family::Control(_)
            | Family::Collective(_)
            | Family::ShardMap
            | Family::Treduce
            | Family::Numeric(_)
            | Family::Random(_)
            | Family::Sort(_)
            | Family::Window(_)
            | Family::Flow(_)
            | Family::Callback(_)
            | Family::Attention(_) => None,
        }
    }

    /// The typed kind of a reduction primitive (`None` for the other families).
    pub fn reduction(self) -> Option<ReductionOp> {
        match self.family() {
            Family::Reduce(op) => Some(op),
            Family::Elementwise(_)
            | Family::Indexing(_)
            | Family::Structural(_)
            | Family::Linalg
            | Family::Control(_)
            | Family::Collective(_)
            | Family::ShardMap
            | Family::Treduce
            | Family::Numeric(_)
            | Family::Random(_)
            | Family::Sort(_)
            | Family::Window(_)
            | Family::Flow(_)
            | Family::Callback(_)
            | Family::Attention(_) => None,
        }
    }

    /// The typed kind of a shape-changing primitive (`None` for the other families).
    pub fn structural(self) -> Option<StructuralOp> {
        match self.family() {
            Family::Structural(op) => Some(op),
            Family::Elementwise(_)
            | Family::Indexing(_)
            | Family::Reduce(_)
            | Family::Linalg
            | Family::Control(_)
            | Family::Collective(_)
            | Family::ShardMap
            | Family::Treduce
            | Family::Numeric(_)
            | Family::Random(_)
            | Family::Sort(_)
            | Family::Window(_)
            | Family::Flow(_)
            | Family::Callback(_)
            | Family::Attention(_) => None,
        }
    }

    /// The typed kind of a collective (`None` for the other families).
    pub fn collective(self) -> Option<CollectiveOp> {
        match self.family() {
            Family::Collective(op) => Some(op),
            Family::Elementwise(_)
            | Family::Indexing(_)
            | Family::Structural(_)
            | Family::Reduce(_)
            | Family::Linalg
            | Family::Control(_)
            | Family::ShardMap
            | Family::Treduce
            | Family::Numeric(_)
            | Family::Random(_)
            | Family::Sort(_)
            | Family::Window(_)
            | Family::Flow(_)
            | Family::Callback(_)
            | Family::Attention(_) => None,
        }
    }

    /// The typed kind of a special function or bit operation (`None` for the others).
    pub fn numeric(self) -> Option<NumericOp> {
        match self.family() {
            Family::Numeric(op) => Some(op),
            Family::Elementwise(_)
            | Family::Indexing(_)
            | Family::Structural(_)
            | Family::Reduce(_)
            | Family::Linalg
            | Family::Control(_)
            | Family::Collective(_)
            | Family::ShardMap
            | Family::Treduce
            | Family::Random(_)
            | Family::Sort(_)
            | Family::Window(_)
            | Family::Flow(_)
            | Family::Callback(_)
            | Family::Attention(_) => None,
        }
    }

    /// The typed kind of a windowed primitive (`None` for the other families).
    pub fn window(self) -> Option<WindowOp> {
        match self.family() {
            Family::Window(op) => Some(op),
            Family::Elementwise(_)
            | Family::Indexing(_)
            | Family::Structural(_)
            | Family::Reduce(_)
            | Family::Linalg
            | Family::Control(_)
            | Family::Collective(_)
            | Family::ShardMap
            | Family::Treduce
            | Family::Numeric(_)
            | Family::Random(_)
            | Family::Sort(_)
            | Family::Flow(_)
            | Family::Callback(_)
            | Family::Attention(_) => None,
        }
    }

    /// The typed kind of a PRNG primitive (`None` for the others).
    pub fn random(self) -> Option<RandomOp> {
        match self.family() {
            Family::Random(op) => Some(op),
            Family::Elementwise(_)
            | Family::Indexing(_)
            | Family::Structural(_)
            | Family::Reduce(_)
            | Family::Linalg
            | Family::Control(_)
            | Family::Collective(_)
            | Family::ShardMap
            | Family::Treduce
            | Family::Numeric(_)
            | Family::Sort(_)
            | Family::Window(_)
            | Family::Flow(_)
            | Family::Callback(_)
            | Family::Attention(_) => None,
        }
    }

    /// The typed kind of `sort` and `top_k` (`None` for the others).
    pub fn sort_op(self) -> Option<SortOp> {
        match self.family() {
            Family::Sort(op) => Some(op),
            Family::Elementwise(_)
            | Family::Indexing(_)
            | Family::Structural(_)
            | Family::Reduce(_)
            | Family::Linalg
            | Family::Control(_)
            | Family::Collective(_)
            | Family::ShardMap
            | Family::Treduce
            | Family::Numeric(_)
            | Family::Random(_)
            | Family::Window(_)
            | Family::Flow(_)
            | Family::Callback(_)
            | Family::Attention(_) => None,
        }
    }

    /// The typed kind of a host callback (`None` for the others).
    pub fn callback_op(self) -> Option<CallbackOp> {
        match self.family() {
            Family::Callback(op) => Some(op),
            Family::Elementwise(_)
            | Family::Indexing(_)
            | Family::Structural(_)
            | Family::Reduce(_)
            | Family::Linalg
            | Family::Control(_)
            | Family::Collective(_)
            | Family::ShardMap
            | Family::Treduce
            | Family::Numeric(_)
            | Family::Random(_)
            | Family::Sort(_)
            | Family::Window(_)
            | Family::Flow(_)
            | Family::Attention(_) => None,
        }
    }

    /// Whether the primitive communicates over named mesh axes (runs only inside `shard_map`).
    pub fn is_collective(self) -> bool {
        matches!(self.family(), Family::Collective(_))
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
        explicit_reduced::check(self, inputs)?;
        let mut outs = match self.family() {
            Family::Elementwise(op) => elementwise::abstract_eval(self, op, params, inputs),
            Family::Structural(op) => structural::abstract_eval(self, op, params, inputs, outputs),
            Family::Reduce(op) => reduce::abstract_eval(self, op, params, inputs),
            Family::Linalg => linalg::abstract_eval(self, params, inputs),
            Family::Indexing(op) => indexing::abstract_eval(self, op, params, inputs),
            Family::Control(op) => control::abstract_eval(self, op, params, inputs),
            Family::Collective(op) => return collective::abstract_eval(self, op, params, inputs),
            Family::ShardMap => return shard_map::abstract_eval(params, inputs),
            Family::Treduce => treduce::abstract_eval(params, inputs),
            Family::Numeric(op) => numeric::abstract_eval(self, op, params, inputs),
            Family::Random(op) => random::abstract_eval(self, op, params, inputs),
            Family::Sort(op) => sort::abstract_eval(self, op, params, inputs),
            Family::Window(op) => window::abstract_eval(self, op, params, inputs),
            Family::Flow(op) => flow::abstract_eval(self, op, params, inputs),
            Family::Callback(op) => callback::abstract_eval(self, op, params, inputs),
            Family::Attention(op) => attention::abstract_eval(self, op, params, inputs),
        }?;
        // Which mesh axes split each dimension of an explicitly sharded result.
        explicit::apply(self, params, inputs, outputs, &mut outs)?;
        // Inside shard_map, a local computation varies over every axis an operand varies over.
        let vma: std::collections::BTreeSet<String> =
            inputs.iter().flat_map(|a| a.vma.iter().cloned()).collect();
        for out in &mut outs {
            out.vma.clone_from(&vma);
        }
        // The reduced and unreduced axes of the results (`explicit_reduced.rs`).
        explicit_reduced::carry(self, inputs, &mut outs)?;
        Ok(outs)
    }
}

/// Checks the operand count.
pub fn arity(prim: Prim, inputs: usize, expected: usize) -> Result<()> {
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
pub fn axis(prim: Prim, axis: i64, rank: usize) -> Result<usize> {
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

/// `axes` normalised against `rank` and sorted; an axis out of range, or one named twice
/// (counting negative and positive spellings alike), is an error naming `what` (JAX refuses
/// both).
pub fn distinct_axes(prim: Prim, axes: &[i64], rank: usize, what: &str) -> Result<Vec<usize>> {
    let mut sorted = axes
        .iter()
        .map(|&a| axis(prim, a, rank))
        .collect::<Result<Vec<_>>>()?;
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(crate::error::type_error(
            prim.name(),
            format!("{what} {axes:?} name an axis twice"),
        ));
    }
    Ok(sorted)
}
