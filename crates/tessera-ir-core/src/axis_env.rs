//! The named-axis environment: which mesh axes the enclosing `shard_map`s bind while a program
//! is traced, checked or transformed. Collectives look their axes up here, so a collective over
//! an axis no `shard_map` binds is refused when it is built ("unbound axis name"), as in JAX.
//!
//! The environment is a per-thread stack of meshes: [`with_mesh`] pushes one for the duration of
//! a closure (the body of a `shard_map`) and pops it even if the closure unwinds. The stack
//! nests as JAX's axis environment does: inside a `shard_map` (or `pmap`) nested in another, the
//! frame pushed is the enclosing frame's axes followed by the inner mesh's ([`stacked`]), so a
//! collective in the inner body may name the outer axes, the inner ones or both.

use std::cell::RefCell;
use std::thread::LocalKey;

use tessera_sharding::AbstractMesh;

use crate::error::{IrError, Result};

/// A per-thread stack of meshes, pushed for the duration of a closure and popped even if the
/// closure unwinds (the manual axes and the context mesh of [`use_mesh`]).
pub(crate) struct MeshStack(pub(crate) &'static LocalKey<RefCell<Vec<AbstractMesh>>>);

thread_local! {
    static MESHES: RefCell<Vec<AbstractMesh>> = const { RefCell::new(Vec::new()) };
}

const CONTEXT: MeshStack = MeshStack(&MESHES);

/// Runs `f` with `mesh` as the context mesh: the mesh of bare sharding specs while tracing
/// (JAX's `jax.sharding.use_mesh`) and of explicit sharding types while verifying.
pub fn use_mesh<T>(mesh: &AbstractMesh, f: impl FnOnce() -> T) -> T {
    CONTEXT.with(mesh, f)
}

/// The mesh set by the innermost [`use_mesh`], if any.
pub fn context_mesh() -> Option<AbstractMesh> {
    CONTEXT.top()
}

impl MeshStack {
    /// Runs `f` with `mesh` on top of the stack.
    pub(crate) fn with<T>(&self, mesh: &AbstractMesh, f: impl FnOnce() -> T) -> T {
        struct Pop(&'static LocalKey<RefCell<Vec<AbstractMesh>>>);
        impl Drop for Pop {
            fn drop(&mut self) {
                self.0.with(|s| s.borrow_mut().pop());
            }
        }
        self.0.with(|s| s.borrow_mut().push(mesh.clone()));
        let _pop = Pop(self.0);
        f()
    }

    /// The innermost mesh, if any.
    pub(crate) fn top(&self) -> Option<AbstractMesh> {
        self.0.with(|s| s.borrow().last().cloned())
    }
}

thread_local! {
    static FRAMES: RefCell<Vec<AbstractMesh>> = const { RefCell::new(Vec::new()) };
    /// The `check_vma` of each frame of `FRAMES`, pushed and popped with it.
    static CHECKED: RefCell<Vec<bool>> = const { RefCell::new(Vec::new()) };
}

const MANUAL: MeshStack = MeshStack(&FRAMES);

/// Runs `f` with the axes of `mesh` bound (inside a `shard_map` over `mesh` whose values are
/// typed by the axes they vary over, `check_vma=True`).
pub fn with_mesh<T>(mesh: &AbstractMesh, f: impl FnOnce() -> T) -> T {
    with_manual(mesh, true, f)
}

/// Runs `f` with the axes of `mesh` bound, inside a `shard_map` with this `check_vma`.
pub fn with_manual<T>(mesh: &AbstractMesh, check_vma: bool, f: impl FnOnce() -> T) -> T {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            CHECKED.with(|s| s.borrow_mut().pop());
        }
    }
    CHECKED.with(|s| s.borrow_mut().push(check_vma));
    let _pop = Pop;
    let frame = match current_mesh() {
        Some(outer) => merged(&outer, mesh),
        None => mesh.clone(),
    };
    MANUAL.with(&frame, f)
}

/// The axes of `outer` followed by those of `inner` it lacks (an axis of both, as a named
/// `vmap` re-binds the enclosing axes, is kept once, at its outer place and size).
fn merged(outer: &AbstractMesh, inner: &AbstractMesh) -> AbstractMesh {
    let mut names = outer.axis_names().to_vec();
    let mut sizes = outer.axis_sizes().to_vec();
    let mut types = outer.axis_types().to_vec();
    for (k, name) in inner.axis_names().iter().enumerate() {
        if !names.contains(name) {
            names.push(name.clone());
            sizes.push(inner.axis_sizes()[k]);
            types.push(inner.axis_types()[k]);
        }
    }
    AbstractMesh::from_parts(names, sizes, types).unwrap_or_else(|_| inner.clone())
}

/// The mesh of a `shard_map` over `inner` nested in one over `outer`: the outer axes then the
/// inner ones, row-major (position `o * inner.size() + q` is outer position `o`, inner `q`).
/// An axis name of both levels is refused: the inner one would shadow the outer one.
pub fn stacked(outer: &AbstractMesh, inner: &AbstractMesh) -> Result<AbstractMesh> {
    if let Some(axis) = inner
        .axis_names()
        .iter()
        .find(|a| outer.axis_index(a).is_some())
    {
        return Err(reused_axis("shard_map", axis));
    }
    Ok(merged(outer, inner))
}

/// The error of a nested `shard_map` or `pmap` naming an axis the enclosing one binds.
pub fn reused_axis(prim: &str, axis: &str) -> IrError {
    IrError::Type {
        prim: prim.to_owned(),
        message: format!(
            "the axis name '{axis}' is already bound by an enclosing shard_map or pmap; a nested \
             {prim} must name its axes differently (e.g. 'i' outside, 'j' inside)"
        ),
    }
}

/// The first axis of `mesh` that an enclosing `shard_map` already binds, if any.
pub fn rebound_axis(mesh: &AbstractMesh) -> Option<String> {
    let outer = current_mesh()?;
    mesh.axis_names()
        .iter()
        .find(|a| outer.axis_index(a).is_some())
        .cloned()
}

/// Whether the innermost `shard_map` types values by the axes they vary over (`check_vma`;
/// true outside any).
pub fn check_vma() -> bool {
    CHECKED.with(|s| s.borrow().last().copied().unwrap_or(true))
}

/// The innermost mesh, if any `shard_map` is being traced or checked.
pub fn current_mesh() -> Option<AbstractMesh> {
    MANUAL.top()
}

/// The innermost mesh binding every axis of `axes`, or the "unbound axis name" error naming
/// the first axis no enclosing `shard_map` binds.
pub fn mesh_for<S: AsRef<str>>(prim: &str, axes: &[S]) -> Result<AbstractMesh> {
    let mesh = current_mesh();
    for axis in axes {
        let axis = axis.as_ref();
        if mesh.as_ref().and_then(|m| m.axis_index(axis)).is_none() {
            let bound = mesh
                .as_ref()
                .map(|m| m.axis_names().join(", "))
                .unwrap_or_default();
            return Err(IrError::Type {
                prim: prim.to_owned(),
                message: format!(
                    "unbound axis name: '{axis}' (bound axes: [{bound}]); collectives must run \
                     inside a shard_map whose mesh has an axis named '{axis}'"
                ),
            });
        }
    }
    mesh.ok_or_else(|| IrError::Type {
        prim: prim.to_owned(),
        message: "needs an enclosing shard_map".into(),
    })
}
