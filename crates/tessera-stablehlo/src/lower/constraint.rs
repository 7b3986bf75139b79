//! `sharding_constraint` lowered as JAX lowers it, in the module's partitioner's form: under
//! Shardy an `sdy.sharding_constraint` with `#sdy.sharding<@mesh, [...]>` (an unconstrained
//! dimension open, `{?}`); under GSPMD a `stablehlo.custom_call @Sharding` carrying the
//! constraint's `mhlo.sharding` (and, for unconstrained dimensions, a `backend_config` of
//! `unspecified_dims=[...]`). In a module for one partition, or inside a `shard_map` body (whose
//! axes are all manual), the constraint has nothing to say and lowers to its operand.

use melior::ir::Value;
use tessera_ir::prim::ConstraintParams;
use tessera_ir::{Params, axis_env};

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
    let partitions = ctx.body.num_partitions();
    if partitions <= 1 || axis_env::current_mesh().is_some() {
        return Ok(inputs.to_vec());
    }
    let devices = p.mesh.size();
    if usize::try_from(devices).ok() != Some(partitions) {
        return Err(LowerError::Build(format!(
            "the constraint's mesh {} has {devices} devices but the module is compiled for \
             {partitions}; constrain over the mesh the program runs on",
            p.mesh
        )));
    }
    let aval = &ctx.in_avals[0];
    // A key array is lowered with a trailing dimension for its two words (left unsharded).
    let rank = aval.rank() + usize::from(aval.dtype.is_key());
    let sharding = super::parallel::named(&p.mesh, &p.spec)?;
    let (name, attrs) = match ctx.body.partitioner() {
        Partitioner::Shardy => {
            let sdy = ctx
                .body
                .sdy_sharding(&sharding, rank, &p.unconstrained_dims)?;
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
            if !p.unconstrained_dims.is_empty() {
                let dims: Vec<String> = p.unconstrained_dims.iter().map(usize::to_string).collect();
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
