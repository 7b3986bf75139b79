//! One StableHLO module per action: each task of a (possibly fused) action is a private function
//! and `main` calls them in order (see `tessera_stablehlo::compose_module`), so a fused action
//! compiles, and runs, as one program.

use tessera_stablehlo::{
    EmittedModule, KeyTypes, LowerError, ModuleHeader, Part, PartBody, Partitioner, compose_module,
};

use crate::pipeline::{ActionSignature, Key, PartSignature};

/// Builds the module of an action for a group of `num_partitions` devices, annotated for
/// `partitioner`; `part_body` emits each task's function body.
pub fn action_module(
    signature: &ActionSignature,
    types: &dyn KeyTypes<Key>,
    num_partitions: usize,
    partitioner: Partitioner,
    part_body: &dyn Fn(&PartSignature) -> PartBody<'static>,
) -> Result<EmittedModule, LowerError> {
    let parts: Vec<Part<'_, Key>> = signature
        .parts
        .iter()
        .map(|p| Part {
            inputs: p.inputs.clone(),
            outputs: p.outputs.clone(),
            body: part_body(p),
        })
        .collect();
    let header = ModuleHeader {
        name: "action",
        num_partitions,
        partitioner,
    };
    compose_module(header, &signature.inputs, &signature.outputs, &parts, types)
}
