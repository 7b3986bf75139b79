//! Errors of the model library; each says what was wrong and how to fix it.

/// Everything that can go wrong in `tessera-nn`.
#[derive(Debug, thiserror::Error)]
pub enum NnError {
    /// A model configuration that cannot be built.
    #[error("invalid model configuration: {0}")]
    Config(String),
    /// Leaves given for a tree do not fit its structure.
    #[error(
        "a parameter tree with {expected} leaves was given {actual} values; pass one per leaf, in `Tree::paths` order"
    )]
    LeafCount {
        /// Leaves in the tree.
        expected: usize,
        /// Values given.
        actual: usize,
    },
    /// A path that names no node of the tree.
    #[error("no parameter `{path}` in the tree (it has: {known})")]
    NoSuchPath {
        /// The path asked for.
        path: String,
        /// The tree's leaf paths, comma separated.
        known: String,
    },
    /// Two trees that should have the same structure do not.
    #[error("parameter trees differ: {0}")]
    Structure(String),
    /// Training data that cannot be used.
    #[error("{0}")]
    Data(String),
    /// A checkpoint could not be written or read.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// A checkpoint's tensor does not fit the model it is loaded into.
    #[error(
        "the checkpoint {file} does not fit this model: tensor `{tensor}` {problem}. Fix: resume \
         with the configuration the checkpoint was written with, or start a new checkpoint \
         directory"
    )]
    CheckpointMismatch {
        /// The file.
        file: std::path::PathBuf,
        /// The tensor's path.
        tensor: String,
        /// What is wrong.
        problem: String,
    },
    /// A parameter cannot be sharded as the parallel axes ask.
    #[error("cannot shard parameter `{param}`: {problem}; {fix}")]
    Parallel {
        /// The parameter's path (`*` for every block).
        param: String,
        /// What does not fit.
        problem: String,
        /// How to fix it.
        fix: String,
    },
    /// Stage layer counts that do not split the model's layers.
    #[error("invalid stage layers: {0}")]
    StagePlan(#[from] crate::stage_plan::StagePlanError),
    /// A Hugging Face model folder (or a file in it) that cannot be imported or written; the
    /// problem says what to do.
    #[error("Hugging Face model {}: {problem}", path.display())]
    HuggingFace {
        /// The folder or file.
        path: std::path::PathBuf,
        /// What is wrong, and the fix.
        problem: String,
    },
    /// Tracing or evaluating a program failed.
    #[error(transparent)]
    Ir(#[from] tessera_ir::IrError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = NnError> = std::result::Result<T, E>;
