//! The MLIR context StableHLO modules are built in, and module verification.
//!
//! Creating a context with every dialect registered and loaded costs milliseconds, more than
//! lowering a small program, so each thread keeps one ([`with_context`]) and builds every module
//! in it. Modules are dropped after they are printed; what stays in the context is MLIR's
//! uniqued types and attributes, which programs of one model share.

use melior::Context;
use melior::dialect::DialectRegistry;
use melior::ir::Module;
use melior::ir::operation::OperationLike;
use melior::utility::register_all_dialects;

/// Errors of the lowering.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// MLIR's verifier rejected a module we built: a bug in the lowering.
    #[error("the emitted module does not verify in MLIR:\n{module}")]
    Verify {
        /// The module's text (generic form).
        module: String,
    },
    /// An operation could not be built.
    #[error("could not build an MLIR operation: {0}")]
    Build(String),
    /// Type or attribute text that MLIR could not parse (a bug in the lowering rule that made it).
    #[error("MLIR could not parse the {what} `{text}`")]
    Parse {
        /// `type` or `attribute`.
        what: &'static str,
        /// The text.
        text: String,
    },
    /// A sharding that cannot annotate the value it was given for (e.g. a spec longer than the
    /// value's rank).
    #[error("sharding annotation: {0}")]
    Sharding(#[from] tessera_sharding::ShardingError),
    /// A program JAX's lowering refuses too (e.g. an untiled
    /// `unreduced_reduce_scatter_start`).
    #[error("cannot lower {prim}: {reason}")]
    Unsupported {
        /// The primitive.
        prim: String,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A value of a composed module whose type or layout its caller cannot give (the message
    /// names the value and the fix).
    #[error("{0}")]
    ValueLayout(String),
    /// An unknown partitioner name.
    #[error(
        "unknown partitioner `{0}`: use `shardy` or `gspmd` (e.g. in {env})",
        env = crate::sharding::PARTITIONER_ENV
    )]
    Partitioner(String),
}

/// A context with the upstream dialects loaded and unregistered dialects (StableHLO) allowed.
pub fn new_context() -> Context {
    let registry = DialectRegistry::new();
    register_all_dialects(&registry);
    let context = Context::new();
    context.append_dialect_registry(&registry);
    context.load_all_available_dialects();
    context.set_allow_unregistered_dialects(true);
    context
}

thread_local! {
    static THREAD_CONTEXT: Context = new_context();
}

/// Runs `f` with this thread's MLIR context, created on first use and reused by every later
/// module built on the thread.
pub fn with_context<R>(f: impl FnOnce(&Context) -> R) -> R {
    THREAD_CONTEXT.with(f)
}

/// Verifies a module and returns its text.
pub fn verify_and_print(module: &Module<'_>) -> Result<String, LowerError> {
    let text = module.as_operation().to_string();
    if module.as_operation().verify() {
        Ok(text)
    } else {
        Err(LowerError::Verify { module: text })
    }
}

#[cfg(test)]
mod tests {
    use melior::dialect::func;
    use melior::ir::attribute::{StringAttribute, TypeAttribute};
    use melior::ir::operation::OperationBuilder;
    use melior::ir::r#type::{FunctionType, RankedTensorType};
    use melior::ir::{Block, BlockLike, Location, Module, Region, RegionLike, Type};

    use super::*;

    /// The thread's context is created once: a second call sees the same one.
    #[test]
    fn the_thread_context_is_reused() {
        let first = with_context(|c| c as *const Context as usize);
        let second = with_context(|c| c as *const Context as usize);
        assert_eq!(first, second);
        let other = std::thread::spawn(|| with_context(|c| c.allow_unregistered_dialects()))
            .join()
            .unwrap();
        assert!(
            other,
            "each thread's context allows StableHLO's unregistered operations"
        );
    }

    /// A module with one generic `stablehlo.add` verifies and prints as MLIR text.
    #[test]
    fn generic_stablehlo_module_verifies_and_prints() {
        let context = new_context();
        let loc = Location::unknown(&context);
        let module = Module::new(loc);
        let tensor: Type = RankedTensorType::new(&[2], Type::float32(&context), None).into();
        let block = Block::new(&[(tensor, loc), (tensor, loc)]);
        let (a, b) = (block.argument(0).unwrap(), block.argument(1).unwrap());
        let add = OperationBuilder::new("stablehlo.add", loc)
            .add_operands(&[a.into(), b.into()])
            .add_results(&[tensor])
            .build()
            .unwrap();
        let sum = block.append_operation(add).result(0).unwrap();
        block.append_operation(func::r#return(&[sum.into()], loc));
        let region = Region::new();
        region.append_block(block);
        let function_type = FunctionType::new(&context, &[tensor, tensor], &[tensor]);
        module.body().append_operation(func::func(
            &context,
            StringAttribute::new(&context, "main"),
            TypeAttribute::new(function_type.into()),
            region,
            &[],
            loc,
        ));
        let text = verify_and_print(&module).unwrap();
        assert!(
            text.contains(
                "\"stablehlo.add\"(%arg0, %arg1) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>"
            ),
            "{text}"
        );
        assert!(text.contains("func.func @main"), "{text}");
    }
}
