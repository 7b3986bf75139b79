//! Errors of the IR: types, parameters, parsing, evaluation.

/// Everything that can go wrong in `tessera-ir`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IrError {
    /// A parameter is missing or has the wrong form.
    #[error("{prim}: parameter `{param}` must be {expected}")]
    Param {
        /// The primitive.
        prim: String,
        /// The parameter.
        param: String,
        /// What it must be.
        expected: String,
    },
    /// Operand types do not fit the primitive.
    #[error("{prim}: {message}")]
    Type {
        /// The primitive.
        prim: String,
        /// What is wrong, with the shapes involved.
        message: String,
    },
    /// Explicit shardings (JAX's sharding in types) that a primitive's sharding rule refuses,
    /// or an explicit type that does not fit its value.
    #[error("{prim}: {message}")]
    Sharding {
        /// The primitive (or what was being typed).
        prim: String,
        /// What is wrong, with the types involved, and how to fix it.
        message: String,
    },
    /// A host callback failed, returned arrays of the wrong types, or cannot be used here.
    #[error("{prim}: {message}")]
    Callback {
        /// The callback primitive.
        prim: String,
        /// What went wrong and how to fix it.
        message: String,
    },
    /// An unknown primitive name.
    #[error("unknown primitive `{0}`")]
    UnknownPrimitive(String),
    /// Jaxpr text that does not parse.
    #[error("parse error at line {line}, column {column}: {message}")]
    Parse {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was expected.
        message: String,
    },
    /// The verifier found a broken invariant.
    #[error("invalid jaxpr: {message}\n{context}")]
    Verify {
        /// The broken invariant.
        message: String,
        /// The printed equations around the failure.
        context: String,
    },
    /// A program's constants and the values given for them disagree (jaxpr text carries no
    /// constant values: the caller gives them).
    #[error("constants: {0}")]
    Consts(String),
    /// Evaluation failed (wrong inputs, an out-of-range value).
    #[error("evaluation: {0}")]
    Eval(String),
    /// The reference interpreter would need more memory for an equation than its limit (see
    /// `tessera_interp::interp::memory`).
    #[error(
        "the interpreter would need about {needed} bytes for equation {index} (`{eqn}`), whose \
         results take {results} bytes, over its memory limit of {limit_from}; run the program \
         on a PJRT device (`tessera::jit`), or, if the host has the memory, raise the limit with \
         TESSERA_INTERP_MAX_BYTES=<bytes> (or a K, M, G, T suffix) or \
         interp::eval_closed_with_limit"
    )]
    InterpMemory {
        /// The equation's index in its jaxpr (a nested jaxpr's own numbering).
        index: usize,
        /// The equation, printed.
        eqn: String,
        /// Bytes of its results.
        results: u64,
        /// Bytes it needs: its results and the rule's decoded views of them.
        needed: u64,
        /// The limit, in bytes.
        limit: u64,
        /// The limit and where it came from.
        limit_from: String,
    },
    /// The host refused an allocation.
    #[error(
        "the host could not allocate {bytes} bytes for {what}; free memory, lower the \
         interpreter's memory limit (TESSERA_INTERP_MAX_BYTES) or run the program on a PJRT \
         device (`tessera::jit`)"
    )]
    HostAlloc {
        /// Bytes asked for.
        bytes: u64,
        /// What they were for.
        what: String,
    },
    /// `TESSERA_INTERP_MAX_BYTES` is not a byte count.
    #[error(
        "TESSERA_INTERP_MAX_BYTES={value:?} is not a byte count: set it to a whole number of \
         bytes, optionally with a K, M, G or T suffix (powers of 1024), e.g. 16G, or unset it \
         to use three quarters of the available memory"
    )]
    MemoryLimitSetting {
        /// The variable's value.
        value: String,
    },
    /// Host bytes do not match the shape and dtype they claim.
    #[error("a host array of {dtype:?}{dims:?} needs {expected} bytes but has {actual}")]
    HostSize {
        /// The dtype.
        dtype: crate::dtype::DType,
        /// The dimensions.
        dims: Vec<i64>,
        /// Bytes the shape needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A block does not lie inside the array.
    #[error("block {block:?} does not lie inside an array of shape {dims:?}")]
    BadBlock {
        /// The block, `[start, stop)` per dimension.
        block: Vec<(i64, i64)>,
        /// The array's dimensions.
        dims: Vec<i64>,
    },
}

/// Shorthand.
pub type Result<T, E = IrError> = std::result::Result<T, E>;

/// A type error of `prim`.
pub fn type_error(prim: &str, message: impl Into<String>) -> IrError {
    IrError::Type {
        prim: prim.to_owned(),
        message: message.into(),
    }
}
