//! `sharding_constraint` lowered as JAX lowers it, in the module's partitioner's form: under
//! Shardy an `sdy.sharding_constraint` with `#sdy.sharding<@mesh, [...]>` (an unconstrained
//! dimension open, `{?}`); under GSPMD a `stablehlo.custom_call @Sharding` carrying the
//! constraint's `mhlo.sharding` (and, for unconstrained dimensions, a `backend_config` of
//! `unspecified_dims=[...]`). In a module for one partition, or inside a `shard_map` body (whose
//! axes are all manual), the constraint has nothing to say and lowers to its operand.
//!
//! `reshard` (explicit sharding) lowers as JAX's `_reshard_lowering` does: its operand wrapped
//! with the destination sharding (`mlir.wrap_with_sharding_op`), the same constraint as above,
//! its spec the result type's explicit sharding (`f32[8@pp,4]`: `P('pp', None)`) over the mesh
//! the program was traced on (the enclosing `jit`'s `ctx_mesh`, or `trace::use_mesh` around the
//! lowering). Where no such mesh is known, or in a module for one partition or a `shard_map`
//! body, it lowers to its operand.

use melior::ir::Value;
use tessera_ir::prim::ConstraintParams;
use tessera_ir::{Params, axis_env};
use tessera_sharding::{AbstractMesh, PartitionSpec};

use super::{Ctx, ir, mlir_type};
use crate::context::LowerError;
use crate::emit::quote;
use crate::sharding::Partitioner;

/// Lowers one `sharding_constraint`.
pub(super) fn sharding_constraint<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let p = ConstraintParams::read(params).map_err(ir)?;
    constrain(ctx, inputs, &p.mesh, &p.spec, &p.unconstrained_dims)
}

/// Lowers one `reshard`: its operand constrained to the result type's explicit sharding over
/// the context mesh.
pub(super) fn reshard<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let Some(mesh) = tessera_ir::trace::context_mesh() else {
        return Ok(inputs.to_vec());
    };
    let spec = ctx.out_avals[0].explicit_spec();
    constrain(ctx, inputs, &mesh, &spec, &[])
}

/// `inputs[0]` constrained to `spec` (dimensions `unconstrained_dims` left open) over `mesh`.
fn constrain<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    inputs: &[Value<'c, 'b>],
    mesh: &AbstractMesh,
    spec: &PartitionSpec,
    unconstrained_dims: &[usize],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let partitions = ctx.body.num_partitions();
    if partitions <= 1 || axis_env::current_mesh().is_some() {
        return Ok(inputs.to_vec());
    }
    let devices = mesh.size();
    if usize::try_from(devices).ok() != Some(partitions) {
        return Err(LowerError::Build(format!(
            "the constraint's mesh {} has {devices} devices but the module is compiled for \
             {partitions}; constrain over the mesh the program runs on",
            mesh
        )));
    }
    let aval = &ctx.in_avals[0];
    // A key array is lowered with a trailing dimension for its two words (left unsharded).
    let rank = aval.rank() + usize::from(aval.dtype.is_key());
    let sharding = super::parallel::named(mesh, spec)?;
    let (name, attrs) = match ctx.body.partitioner() {
        Partitioner::Shardy => {
            let sdy = ctx.body.sdy_sharding(&sharding, rank, unconstrained_dims)?;
            (
                "sdy.sharding_constraint",
                vec![("sharding", format!("#sdy.sharding{sdy}"))],
            )
        }
        Partitioner::Gspmd => {
            let hlo = sharding.to_hlo_sharding(rank)?;
            let mut attrs = vec![
                ("call_target_name", quote("Sharding")),
                ("mhlo.sharding", quote(&hlo.to_string())),
            ];
            if !unconstrained_dims.is_empty() {
                let dims: Vec<String> = unconstrained_dims.iter().map(usize::to_string).collect();
                attrs.push((
                    "backend_config",
                    quote(&format!("unspecified_dims=[{}]", dims.join(","))),
                ));
            }
            ("stablehlo.custom_call", attrs)
        }
    };
    ctx.body.op(name, inputs, &[&mlir_type(aval)], &attrs)
}
