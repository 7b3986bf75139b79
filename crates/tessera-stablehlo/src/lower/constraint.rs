//! `sharding_constraint` lowered as JAX lowers it for GSPMD: a `stablehlo.custom_call
//! @Sharding` carrying the constraint's `mhlo.sharding` (and, for unconstrained dimensions, a
//! `backend_config` of `unspecified_dims=[...]`). In a module for one partition, or inside a
//! `shard_map` body (whose axes are all manual), the constraint has nothing to say and lowers to
//! its operand.

use melior::ir::Value;
use tessera_ir::prim::ConstraintParams;
use tessera_ir::{Params, axis_env};
use tessera_sharding::{Mesh, NamedSharding};

use super::{Ctx, ir, mlir_type};
use crate::context::LowerError;
use crate::emit::quote;

/// Lowers one `sharding_constraint`.
pub(super) fn sharding_constraint<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let p = ConstraintParams::read(params).map_err(ir)?;
    let partitions = ctx.body.num_partitions();
    if partitions <= 1 || axis_env::current_mesh().is_some() {
        return Ok(inputs.to_vec());
    }
    let devices = p.mesh.size();
    if usize::try_from(devices).ok() != Some(partitions) {
        return Err(LowerError::Build(format!(
            "the constraint's mesh ({}) has {devices} devices but the module is compiled for \
             {partitions}; constrain over the mesh the program runs on",
            describe(&p)
        )));
    }
    let aval = &ctx.in_avals[0];
    let sharding = NamedSharding::new(&Mesh::iota(p.mesh.clone()), p.spec.clone())
        .and_then(|s| s.to_hlo_sharding(aval.rank()))
        .map_err(|e| LowerError::Build(e.to_string()))?;
    let mut attrs = vec![
        ("call_target_name", quote("Sharding")),
        ("mhlo.sharding", quote(&sharding.to_string())),
    ];
    if !p.unconstrained_dims.is_empty() {
        let dims: Vec<String> = p.unconstrained_dims.iter().map(usize::to_string).collect();
        attrs.push((
            "backend_config",
            quote(&format!("unspecified_dims=[{}]", dims.join(","))),
        ));
    }
    ctx.body
        .op("stablehlo.custom_call", inputs, &[&mlir_type(aval)], &attrs)
}

fn describe(p: &ConstraintParams) -> String {
    p.mesh
        .axis_names()
        .iter()
        .zip(p.mesh.axis_sizes())
        .map(|(n, s)| format!("{n}={s}"))
        .collect::<Vec<_>>()
        .join(", ")
}
