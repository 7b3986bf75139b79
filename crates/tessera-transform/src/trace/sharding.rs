//! Sharding constraints while tracing: JAX's `with_sharding_constraint`. A bare
//! [`PartitionSpec`] is over the mesh set by [`use_mesh`] (JAX's `jax.sharding.use_mesh`);
//! [`Tensor::with_sharding_on`] names its mesh explicitly. The constraint is the identity on
//! values; it tells the SPMD partitioner how to lay the value out.
//!
//! On an `Explicit` mesh the sharding is part of the type instead: [`Tensor::reshard`] binds
//! JAX's `reshard`, the identity on values whose result is typed by the new sharding
//! (`f32[8@pp,4]`); the primitives' sharding rules (`prim/explicit.rs`) carry it on.

use tessera_sharding::{AbstractMesh, PartitionSpec};

use super::Tensor;
use crate::aval::ShapedArray;
use crate::params::Params;
use crate::prim::{ConstraintParams, Prim};

pub use crate::axis_env::{context_mesh, use_mesh};

impl Tensor {
    /// Constrains this value's layout to `spec` over the mesh of the enclosing [`use_mesh`]
    /// (`jax.lax.with_sharding_constraint(x, P(...))`). Outside [`use_mesh`] the result is a
    /// failed value whose error says to set a mesh.
    pub fn with_sharding(&self, spec: &PartitionSpec) -> Tensor {
        match context_mesh() {
            Some(mesh) => self.with_sharding_on(&mesh, spec),
            None => self.fail(
                Prim::ShardingConstraint.name(),
                format!(
                    "with_sharding({spec}) needs a mesh: trace inside tessera_ir::trace::use_mesh \
                     or call with_sharding_on(mesh, spec)"
                ),
            ),
        }
    }

    /// Constrains this value's layout to `spec` over `mesh`
    /// (`with_sharding_constraint(x, NamedSharding(mesh, spec))`).
    pub fn with_sharding_on(&self, mesh: &AbstractMesh, spec: &PartitionSpec) -> Tensor {
        Tensor::bind1(
            Prim::ShardingConstraint,
            ConstraintParams::new(mesh, spec).to_params(),
            &[self],
        )
    }

    /// Reshards this value to the explicit sharding `spec` (`jax.sharding.reshard(x, P(...))`
    /// on an `Explicit` mesh): the identity on values, typed `f32[8@pp,4]` for `P('pp')`;
    /// reduced and unreduced axes are dropped. Inside [`use_mesh`] each axis must be the mesh's
    /// and divide the dimension it splits.
    pub fn reshard(&self, spec: &PartitionSpec) -> Tensor {
        let name = Prim::Reshard.name();
        let mut target = match self.aval.with_explicit(spec) {
            Ok(t) => t,
            Err(e) => return self.fail(name, e.to_string()),
        };
        if let Some(mesh) = context_mesh() {
            for (d, axes) in target.explicit_dims().iter().enumerate() {
                let mut size = 1;
                for axis in axes {
                    match mesh.axis_size(axis) {
                        Some(n) => size *= n,
                        None => {
                            return self.fail(
                                name,
                                format!(
                                    "{spec} names mesh axis '{axis}', which the mesh ({}) lacks",
                                    mesh.axis_names().join(", ")
                                ),
                            );
                        }
                    }
                }
                if self.aval.shape[d] % size != 0 {
                    return self.fail(
                        name,
                        format!(
                            "{spec} splits dimension {d} of {} over {size} devices, which do \
                             not divide its size; choose axes whose sizes divide it",
                            self.aval
                        ),
                    );
                }
            }
        }
        target.set_reduced_unreduced(Default::default(), Default::default());
        self.reshard_to(&target)
    }

    /// Binds `reshard` to `target`'s explicit type (which must be of this value's shape).
    pub(crate) fn reshard_to(&self, target: &ShapedArray) -> Tensor {
        Tensor::bind_typed(Prim::Reshard, Params::new(), &[self], Some(target.clone())).remove(0)
    }
}
