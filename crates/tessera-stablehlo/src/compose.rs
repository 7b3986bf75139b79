//! Composing a module from functions: each part is a private function, and `main` calls them in
//! order, threading named values between them. The MPMD layer uses it to compile a fused action
//! (several pipeline tasks) as one program.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;

use melior::ir::Value;
use tessera_sharding::NamedSharding;

use crate::context::LowerError;
use crate::emit::{ArgSpec, Body, EmittedModule, ModuleEmitter, ResultSpec};
use crate::sharding::Partitioner;

/// Emits the body of one part's function: given its arguments, returns its results.
pub type PartBody<'a> = Box<
    dyn for<'c, 'b> Fn(&Body<'c, 'b>, &[Value<'c, 'b>]) -> Result<Vec<Value<'c, 'b>>, LowerError>
        + 'a,
>;

/// One part: the values it reads and writes (by key), and how to emit its body.
pub struct Part<'a, K> {
    /// The keys of its arguments, in order.
    pub inputs: Vec<K>,
    /// The keys of its results, in order.
    pub outputs: Vec<K>,
    /// Its body.
    pub body: PartBody<'a>,
}

/// The MLIR type and optional sharding of each key.
pub trait KeyTypes<K> {
    /// The MLIR type text (global shape), e.g. `tensor<4xf32>`; an error where the key has no
    /// known type (the module is not built rather than built with a wrong signature).
    fn mlir_type(&self, key: &K) -> Result<String, LowerError>;
    /// The sharding of the value in `main`'s signature, if any (emitted for the module's
    /// partitioner); an error where the key's layout cannot be made on the module's mesh (never
    /// a silent fallback to another layout).
    fn sharding(&self, key: &K) -> Result<Option<NamedSharding>, LowerError>;
    /// The result of `main` (an index into `outputs`) that input `key` is donated to
    /// (`tf.aliasing_output`: its buffer is reused for that result), if any. None by default.
    fn aliased_output(&self, key: &K, outputs: &[K]) -> Option<usize> {
        let _ = (key, outputs);
        None
    }
}

/// The module's name, partition count and partitioner.
#[derive(Debug, Clone, Copy)]
pub struct ModuleHeader<'a> {
    /// The module's symbol name.
    pub name: &'a str,
    /// SPMD partitions (devices) it is compiled for.
    pub num_partitions: usize,
    /// The partitioner its annotations are for.
    pub partitioner: Partitioner,
}

/// Builds a module whose public `main(inputs) -> outputs` calls `parts` in order.
pub fn compose_module<K: Copy + Eq + Hash + Debug>(
    header: ModuleHeader<'_>,
    inputs: &[K],
    outputs: &[K],
    parts: &[Part<'_, K>],
    types: &dyn KeyTypes<K>,
) -> Result<EmittedModule, LowerError> {
    crate::with_context(|context| compose_in(context, header, inputs, outputs, parts, types))
}

fn compose_in<K: Copy + Eq + Hash + Debug>(
    context: &melior::Context,
    header: ModuleHeader<'_>,
    inputs: &[K],
    outputs: &[K],
    parts: &[Part<'_, K>],
    types: &dyn KeyTypes<K>,
) -> Result<EmittedModule, LowerError> {
    let emitter = ModuleEmitter::new(
        context,
        header.name,
        header.num_partitions,
        1,
        header.partitioner,
    )?;
    for (i, part) in parts.iter().enumerate() {
        let args = part
            .inputs
            .iter()
            .map(|k| Ok(ArgSpec::new(types.mlir_type(k)?)))
            .collect::<Result<Vec<_>, LowerError>>()?;
        let results = part
            .outputs
            .iter()
            .map(|k| Ok(ResultSpec::new(types.mlir_type(k)?)))
            .collect::<Result<Vec<_>, LowerError>>()?;
        emitter.add_function(&format!("part{i}"), &args, &results, false, |b, params| {
            (part.body)(b, params)
        })?;
    }
    let args = inputs
        .iter()
        .map(|k| {
            let mut arg = ArgSpec::new(types.mlir_type(k)?).with_sharding(types.sharding(k)?);
            arg.aliased_output = types.aliased_output(k, outputs);
            Ok(arg)
        })
        .collect::<Result<Vec<_>, LowerError>>()?;
    let results = outputs
        .iter()
        .map(|k| Ok(ResultSpec::new(types.mlir_type(k)?).with_sharding(types.sharding(k)?)))
        .collect::<Result<Vec<_>, LowerError>>()?;
    let part_result_types = parts
        .iter()
        .map(|part| part.outputs.iter().map(|k| types.mlir_type(k)).collect())
        .collect::<Result<Vec<Vec<String>>, LowerError>>()?;
    emitter.add_function("main", &args, &results, true, |body, params| {
        let mut env: HashMap<K, Value<'_, '_>> =
            inputs.iter().copied().zip(params.iter().copied()).collect();
        for (i, part) in parts.iter().enumerate() {
            let operands = part
                .inputs
                .iter()
                .map(|k| lookup(&env, k))
                .collect::<Result<Vec<_>, _>>()?;
            let result_refs: Vec<&str> = part_result_types[i].iter().map(String::as_str).collect();
            let outs = body.op(
                "func.call",
                &operands,
                &result_refs,
                &[("callee", format!("@part{i}"))],
            )?;
            env.extend(part.outputs.iter().copied().zip(outs));
        }
        outputs.iter().map(|k| lookup(&env, k)).collect()
    })?;
    emitter.finish()
}

fn lookup<'c, 'b, K: Eq + Hash + Debug>(
    env: &HashMap<K, Value<'c, 'b>>,
    key: &K,
) -> Result<Value<'c, 'b>, LowerError> {
    env.get(key).copied().ok_or_else(|| {
        LowerError::Build(format!(
            "no value for {key:?}: no input or earlier part provides it"
        ))
    })
}
