//! Sharding constraints while tracing: JAX's `with_sharding_constraint`. A bare
//! [`PartitionSpec`] is over the mesh set by [`use_mesh`] (JAX's `jax.sharding.use_mesh`);
//! [`Tensor::with_sharding_on`] names its mesh explicitly. The constraint is the identity on
//! values; it tells the SPMD partitioner how to lay the value out.

use std::cell::RefCell;

use tessera_sharding::{AbstractMesh, PartitionSpec};

use super::Tensor;
use crate::axis_env::MeshStack;
use crate::prim::{ConstraintParams, Prim};

thread_local! {
    static MESHES: RefCell<Vec<AbstractMesh>> = const { RefCell::new(Vec::new()) };
}

const CONTEXT: MeshStack = MeshStack(&MESHES);

/// Runs `f` with `mesh` as the mesh of bare specs given to [`Tensor::with_sharding`].
pub fn use_mesh<T>(mesh: &AbstractMesh, f: impl FnOnce() -> T) -> T {
    CONTEXT.with(mesh, f)
}

/// The mesh set by the innermost [`use_mesh`], if any.
pub fn context_mesh() -> Option<AbstractMesh> {
    CONTEXT.top()
}

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
}
