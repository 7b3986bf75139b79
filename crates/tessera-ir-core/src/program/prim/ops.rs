//! Typed kinds of the elementwise and reduction primitives. [`Prim::family`](super::Prim)
//! classifies each primitive once, by an exhaustive match, into these enums; the rules
//! (shape, evaluation, lowering) then match on the enum of their family, exhaustively, so a new
//! operation, comparison or reduction without its rule does not compile.

/// Unary elementwise operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the primitive of the same name
pub enum UnaryOp {
    Neg,
    Abs,
    Sign,
    Exp,
    Exp2,
    Log,
    Log1p,
    Expm1,
    Tanh,
    Logistic,
    Sin,
    Cos,
    Sqrt,
    Rsqrt,
    Floor,
    Ceil,
    Round,
    Not,
    IntegerPow,
}

/// Binary arithmetic and logical operations (with broadcasting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the primitive of the same name
pub enum BinaryOp {
    Add,
    AddAny,
    Sub,
    Mul,
    Div,
    Rem,
    Pow,
    Max,
    Min,
    And,
    Or,
    Xor,
}

/// Comparisons (boolean results).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the primitive of the same name
pub enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    /// StableHLO's `comparison_direction`.
    pub fn direction(self) -> &'static str {
        match self {
            CompareOp::Eq => "EQ",
            CompareOp::Ne => "NE",
            CompareOp::Lt => "LT",
            CompareOp::Le => "LE",
            CompareOp::Gt => "GT",
            CompareOp::Ge => "GE",
        }
    }

    /// Whether `a op b` holds.
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CompareOp::Eq => a == b,
            CompareOp::Ne => a != b,
            CompareOp::Lt => a < b,
            CompareOp::Le => a <= b,
            CompareOp::Gt => a > b,
            CompareOp::Ge => a >= b,
        }
    }
}

/// The elementwise family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementwiseOp {
    /// One operand.
    Unary(UnaryOp),
    /// Two operands of one dtype.
    Binary(BinaryOp),
    /// Two operands, a boolean result.
    Compare(CompareOp),
    /// `select_n`.
    SelectN,
    /// `clamp`.
    Clamp,
    /// `convert_element_type`.
    Convert,
}

/// How `reduce_*` combines values (also the combiner of `psum`/`pmax`/`pmin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is `reduce_` and its name
pub enum ReduceKind {
    Sum,
    Prod,
    Max,
    Min,
    And,
    Or,
}

/// The reduction family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReductionOp {
    /// `reduce_sum`, `reduce_max`, ...
    Reduce(ReduceKind),
    /// `argmax`.
    Argmax,
    /// `argmin`.
    Argmin,
    /// `cumsum`.
    Cumsum,
    /// `cumprod`, `cummax`, `cummin`, `cumlogsumexp`.
    Cumulative(super::CumulativeOp),
}

/// The structural family (shapes and layouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the primitive of the same name
pub enum StructuralOp {
    Iota,
    BroadcastInDim,
    Reshape,
    Squeeze,
    ExpandDims,
    Transpose,
    Slice,
    DynamicSlice,
    DynamicUpdateSlice,
    Concatenate,
    Pad,
}

/// The indexing family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the primitive of the same name
pub enum IndexingOp {
    Gather,
    ScatterAdd,
    /// `scatter` (replace), `scatter-mul`, `scatter-min`, `scatter-max`.
    Scatter(super::ScatterKind),
}

/// The attention family (`attention.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttentionOp {
    /// `dot_product_attention`.
    Forward,
    /// `dot_product_attention_bwd`: the cotangents of the forward's `q`, `k` and `v`.
    Backward,
}

/// The control family (identities and nested calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the primitive of the same name
pub enum ControlOp {
    StopGradient,
    Copy,
    /// `optimization_barrier`: the identity on any number of values, which the compiler may not
    /// move computations across or merge computations through (what keeps a `checkpoint`'s
    /// recomputation from being merged with its forward).
    OptimizationBarrier,
    Jit,
    Checkpoint,
    PipelineEnterStage,
    ShardingConstraint,
    /// `reshard`: the identity on values, a change of an explicit sharding.
    Reshard,
    /// `psum_done`, `all_gather_done`, ...: the end of an asynchronous collective, the
    /// identity on the value its start computed.
    AsyncDone,
}

/// The collectives (and `pvary`, `axis_index`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the primitive of the same name
pub enum CollectiveOp {
    Psum,
    Pmax,
    Pmin,
    AllGather,
    ReduceScatter,
    Ppermute,
    AllToAll,
    AxisIndex,
    Pvary,
    Pbroadcast,
    PsumInvariant,
    AllGatherInvariant,
    Preduced,
    VaryUnreducedCast,
    UnreducedPsum,
    /// `reduced_vary_cast_p`: a reduced value cast to a varying one (the identity on values).
    ReducedVaryCast,
    /// `all_gather_reduced`: an `all_gather` of a varying value whose result is reduced.
    AllGatherReduced,
    /// `unreduced_reduce_scatter` (`unreduced_psum_scatter`): a `psum_scatter` of an
    /// unreduced value whose result varies.
    UnreducedReduceScatter,
    RaggedAllToAll,
    Psend,
    Precv,
}
