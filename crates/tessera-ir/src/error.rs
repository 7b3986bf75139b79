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
pub(crate) fn type_error(prim: &str, message: impl Into<String>) -> IrError {
    IrError::Type {
        prim: prim.to_owned(),
        message: message.into(),
    }
}
