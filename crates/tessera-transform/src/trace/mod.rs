//! Tracing: build jaxprs by running Rust code on [`Tensor`]s.
//!
//! ```
//! use tessera_transform::trace::{trace, Tensor};
//! use tessera_ir_core::{DType, ShapedArray};
//!
//! let x = ShapedArray::new(DType::F32, &[2, 3]);
//! let w = ShapedArray::new(DType::F32, &[3, 4]);
//! let program = trace(&[x, w], |args| {
//!     let (x, w) = (&args[0], &args[1]);
//!     vec![(x.matmul(w) + 1.0).tanh()]
//! })?;
//! assert_eq!(program.jaxpr.out_avals()[0].shape, vec![2, 4]);
//! # Ok::<(), tessera_ir_core::IrError>(())
//! ```
//!
//! Operations record equations in the trace that owns their operands. A misuse (shapes that do
//! not broadcast, an unknown axis, a failed nested function, loop or transform, a `Tensor` of
//! another trace) is remembered as the trace's first error and returned by [`trace`]; later
//! operations on the failed trace record nothing but still return as many results as expected
//! (module `failure`). Operator overloads follow
//! numpy broadcasting (ranks aligned on the right) and JAX's dtype promotion (Rust numbers are
//! weakly typed and take their partner's dtype).

mod callback;
mod collectives;
pub(crate) mod failure;
mod flow;
mod invariant;
mod loops;
mod nn;
mod numeric;
mod ops;
mod p2p;
mod pending;
mod pmap;
pub mod random;
mod sharding;
mod sort;
mod stages;
mod windowed;

pub use callback::{debug_callback, io_callback, pure_callback};
pub use collectives::{shard_map, shard_map_program, shard_map_unchecked};
pub use flow::{
    Branch, cond, custom_jvp, custom_vjp, fori_loop, fori_loop_dynamic, scan, switch, while_loop,
};
pub use invariant::PcastTo;
pub use loops::{default_ops, treduce, treduce_i};
pub use nn::{dot_product_attention, dot_product_attention_with_stats, where_};
pub use p2p::{SendToken, precv, precv_over};
pub use pending::Pending;
pub use pmap::{PmapAxes, pmap, pmap_with};
pub use sharding::{context_mesh, use_mesh};
pub use sort::sort;
pub use stages::{mark_stage_end, pipeline_yield};

use std::cell::RefCell;
use std::rc::Rc;

use crate::aval::ShapedArray;
use crate::error::{IrError, Result};
use crate::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal};
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

/// The state of one trace.
#[derive(Debug, Default)]
pub(crate) struct Builder {
    jaxpr: Jaxpr,
    error: Option<IrError>,
    /// The highest pipeline stage entered so far (module `stages`).
    stage: i64,
}

/// A traced value.
#[derive(Debug, Clone)]
pub struct Tensor {
    builder: Rc<RefCell<Builder>>,
    atom: Atom,
    aval: ShapedArray,
}

impl Tensor {
    /// The value's type.
    pub fn aval(&self) -> &ShapedArray {
        &self.aval
    }

    /// The shape.
    pub fn shape(&self) -> &[i64] {
        &self.aval.shape
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.aval.rank()
    }

    /// The dtype.
    pub fn dtype(&self) -> crate::dtype::DType {
        self.aval.dtype
    }

    /// A weakly typed scalar literal in this tensor's trace.
    pub(crate) fn literal(&self, value: f64, dtype: crate::dtype::DType) -> Tensor {
        let aval = ShapedArray {
            dtype,
            shape: vec![],
            weak_type: true,
            vma: Default::default(),
            sharding: None,
            explicit: None,
        };
        let lit = Literal::new(value, ShapedArray::scalar(dtype));
        Tensor {
            builder: self.builder.clone(),
            atom: Atom::Lit(lit),
            aval,
        }
    }

    /// The scalar 1 of `dtype` in this tensor's trace (a loss's cotangent seed).
    pub fn literal_one(&self, dtype: crate::dtype::DType) -> Tensor {
        self.literal_strong(1.0, dtype)
    }

    /// The scalar 0 of `dtype` in this tensor's trace (the cotangent seed of a result that is not
    /// differentiated, e.g. a metric next to the loss).
    pub fn literal_zero(&self, dtype: crate::dtype::DType) -> Tensor {
        self.literal_strong(0.0, dtype)
    }

    /// A literal of a program, recorded as it is (its value exact).
    pub(crate) fn literal_exact(&self, lit: &Literal) -> Tensor {
        Tensor {
            builder: self.builder.clone(),
            atom: Atom::Lit(lit.clone()),
            aval: lit.aval.clone(),
        }
    }

    /// A strongly typed scalar literal of `value` rounded to `dtype`.
    pub(crate) fn literal_strong(&self, value: f64, dtype: crate::dtype::DType) -> Tensor {
        let aval = ShapedArray::scalar(dtype);
        let lit = Literal::new(value, aval.clone());
        Tensor {
            builder: self.builder.clone(),
            atom: Atom::Lit(lit),
            aval,
        }
    }

    /// Records `prim[params](inputs)` in the trace and returns its results. On an error (now or
    /// earlier in the trace) the results are placeholders of the best-known type.
    pub(crate) fn bind(prim: Prim, params: Params, inputs: &[&Tensor]) -> Vec<Tensor> {
        Tensor::bind_typed(prim, params, inputs, None)
    }

    /// Like [`Tensor::bind`], giving the result type for primitives whose printed parameters
    /// leave it implied (JAX's `broadcast_in_dim` prints no `shape`).
    pub(crate) fn bind_typed(
        prim: Prim,
        params: Params,
        inputs: &[&Tensor],
        out: Option<ShapedArray>,
    ) -> Vec<Tensor> {
        Tensor::check_captured(prim.name(), inputs);
        let lifted = lift_to_common_vma(prim, inputs);
        let inputs: Vec<&Tensor> = lifted.iter().collect();
        let inputs = inputs.as_slice();
        // An operation without operands (a host callback taking nothing) joins the innermost
        // trace.
        let builder = match inputs.first() {
            Some(t) => t.builder.clone(),
            None => failure::innermost_or_failed(prim.name()),
        };
        let in_avals: Vec<ShapedArray> = inputs.iter().map(|t| t.aval.clone()).collect();
        let mut b = builder.borrow_mut();
        let result = if b.error.is_some() {
            Err(())
        } else {
            match prim.abstract_eval(&params, &in_avals, out.as_ref().map(std::slice::from_ref)) {
                Ok(avals) => Ok(avals),
                Err(e) => {
                    b.error = Some(e);
                    Err(())
                }
            }
        };
        let avals = result.unwrap_or_else(|()| failed_results(prim, &params, &in_avals, out));
        let outputs: Vec<_> = avals.iter().map(|a| b.jaxpr.new_var(a.clone())).collect();
        if b.error.is_none() {
            let eqn = Eqn {
                prim,
                params,
                inputs: inputs.iter().map(|t| t.atom.clone()).collect(),
                outputs: outputs.clone(),
            };
            b.jaxpr.eqns.push(eqn);
        }
        drop(b);
        outputs
            .into_iter()
            .zip(avals)
            .map(|(v, aval)| Tensor {
                builder: builder.clone(),
                atom: Atom::Var(v),
                aval,
            })
            .collect()
    }

    /// Records a primitive without operands (e.g. `iota`) in `like`'s trace.
    pub(crate) fn bind_nullary(prim: Prim, params: Params, like: &Tensor) -> Tensor {
        Tensor::check_captured(prim.name(), &[like]);
        let builder = like.builder.clone();
        let mut b = builder.borrow_mut();
        let aval = match prim.abstract_eval(&params, &[], None) {
            Ok(mut avals) if b.error.is_none() => avals.remove(0),
            Ok(_) => like.aval.clone(),
            Err(e) => {
                b.error.get_or_insert(e);
                like.aval.clone()
            }
        };
        let var = b.jaxpr.new_var(aval.clone());
        if b.error.is_none() {
            b.jaxpr.eqns.push(Eqn {
                prim,
                params,
                inputs: Vec::new(),
                outputs: vec![var],
            });
        }
        drop(b);
        Tensor {
            builder,
            atom: Atom::Var(var),
            aval,
        }
    }

    /// Like [`Tensor::bind`] for a single result.
    pub(crate) fn bind1(prim: Prim, params: Params, inputs: &[&Tensor]) -> Tensor {
        Tensor::bind(prim, params, inputs).remove(0)
    }

    /// Records an error of operation `op` (the trace returns the first one).
    pub(crate) fn fail(&self, op: &str, message: String) -> Tensor {
        let mut b = self.builder.borrow_mut();
        if b.error.is_none() {
            b.error = Some(IrError::Type {
                prim: op.to_owned(),
                message,
            });
        }
        self.clone()
    }

    /// Whether two tensors belong to the same trace.
    pub(crate) fn same_trace(&self, other: &Tensor) -> bool {
        Rc::ptr_eq(&self.builder, &other.builder)
    }
}

/// Inside `shard_map`, operands of a local primitive must vary over the same manual axes: as
/// JAX does, a variable that varies over fewer axes than its partners is cast with `pvary` (or,
/// when it is reduced over exactly those axes, with `reduced_vary_cast_p`)
/// (whose transpose, `psum`, is what makes gradients of invariant values correct). Literals stay
/// as they are: they carry no cotangent.
fn lift_to_common_vma(prim: Prim, inputs: &[&Tensor]) -> Vec<Tensor> {
    let plain = || inputs.iter().map(|t| (*t).clone()).collect();
    if inputs.len() < 2 || prim.is_collective() || prim == Prim::ShardMap {
        return plain();
    }
    let all: std::collections::BTreeSet<String> = inputs
        .iter()
        .flat_map(|t| t.aval.vma.iter().cloned())
        .collect();
    if inputs.iter().all(|t| t.aval.vma == all) {
        return plain();
    }
    inputs
        .iter()
        .map(|t| {
            let missing: Vec<String> = all.difference(&t.aval.vma).cloned().collect();
            if missing.is_empty() || matches!(t.atom, Atom::Lit(_)) {
                (*t).clone()
            } else if t.aval.reduced().iter().eq(missing.iter()) {
                // A value reduced over exactly the missing axes is cast with
                // `reduced_vary_cast_p` (JAX's `auto_insert_reshard`), whose transpose leaves
                // the sum to the `preduced` that made it reduced.
                t.reduced_vary_cast(&missing)
            } else {
                t.pvary(&missing)
            }
        })
        .collect()
}

/// Records equation `eqn` of `jaxpr` again on traced `operands` (in `anchor`'s trace when it
/// has none), with its own parameters and result types: how passes and program splitters copy
/// equations into a new trace.
pub fn replay(eqn: &Eqn, jaxpr: &Jaxpr, operands: &[Tensor], anchor: &Tensor) -> Vec<Tensor> {
    if operands.is_empty() {
        return vec![Tensor::bind_nullary(eqn.prim, eqn.params.clone(), anchor)];
    }
    let refs: Vec<&Tensor> = operands.iter().collect();
    let out = eqn.outputs.first().map(|&v| jaxpr.aval(v).clone());
    Tensor::bind_typed(eqn.prim, eqn.params.clone(), &refs, out)
}

/// Replays `eqn` of `jaxpr` with operands read from `env` (literals in `anchor`'s trace) and
/// binds its results in `env`.
pub fn replay_into(
    env: &mut std::collections::HashMap<crate::jaxpr::Var, Tensor>,
    jaxpr: &Jaxpr,
    eqn: &Eqn,
    anchor: &Tensor,
) {
    let operands: Vec<Tensor> = eqn
        .inputs
        .iter()
        .map(|a| replay_atom(env, anchor, a))
        .collect();
    let outs = replay(eqn, jaxpr, &operands, anchor);
    env.extend(eqn.outputs.iter().copied().zip(outs));
}

/// The value of `atom` of a program being replayed: its tensor in `env`, or its literal in
/// `anchor`'s trace.
pub fn replay_atom(
    env: &std::collections::HashMap<crate::jaxpr::Var, Tensor>,
    anchor: &Tensor,
    atom: &Atom,
) -> Tensor {
    match atom {
        Atom::Var(v) => env
            .get(v)
            .cloned()
            .unwrap_or_else(|| anchor.fail("replay", format!("variable {} has no value", v.0))),
        Atom::Lit(l) => anchor.literal_exact(l),
    }
}

/// Traces `f` on arguments of types `in_avals` into a closed jaxpr.
pub fn trace(
    in_avals: &[ShapedArray],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Result<ClosedJaxpr> {
    trace_counted(in_avals, f).0
}

/// Like [`trace`], also giving the types of the values `f` returned, known even when tracing
/// failed: a caller stands in for the results of a failed nested trace with that many
/// placeholders.
pub(crate) fn trace_counted(
    in_avals: &[ShapedArray],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> (Result<ClosedJaxpr>, Vec<ShapedArray>) {
    let builder = Rc::new(RefCell::new(Builder::default()));
    let args: Vec<Tensor> = in_avals
        .iter()
        .map(|aval| {
            let var = builder.borrow_mut().jaxpr.new_var(aval.clone());
            builder.borrow_mut().jaxpr.invars.push(var);
            Tensor {
                builder: builder.clone(),
                atom: Atom::Var(var),
                aval: aval.clone(),
            }
        })
        .collect();
    let outputs = {
        let _active = failure::Active::enter(&builder);
        f(&args)
    };
    drop(args);
    let out_avals: Vec<ShapedArray> = outputs.iter().map(|t| t.aval.clone()).collect();
    (close(&builder, &outputs), out_avals)
}

/// The traced program with `outputs` as its results, or the trace's first error.
fn close(builder: &Rc<RefCell<Builder>>, outputs: &[Tensor]) -> Result<ClosedJaxpr> {
    if let Some(foreign) = outputs.iter().find(|t| !Rc::ptr_eq(&t.builder, builder)) {
        return Err(IrError::Type {
            prim: "trace".into(),
            message: format!(
                "an output of type {} comes from another trace (a Tensor captured from an outer \
                 trace, returned by the inner function); pass it as an argument instead",
                foreign.aval
            ),
        });
    }
    let mut b = builder.borrow_mut();
    if let Some(error) = b.error.take() {
        return Err(error);
    }
    b.jaxpr.outvars = outputs.iter().map(|t| t.atom.clone()).collect();
    let jaxpr = std::mem::take(&mut b.jaxpr);
    let closed = ClosedJaxpr::new(jaxpr);
    crate::verify(&closed)?;
    Ok(closed)
}

/// The result types a failed operation stands in for: those of its nested program when it has
/// one (`jit`, `checkpoint`, `treduce`, `shard_map`), else the given or first operand's type.
fn failed_results(
    prim: Prim,
    params: &Params,
    in_avals: &[ShapedArray],
    out: Option<ShapedArray>,
) -> Vec<ShapedArray> {
    // A host callback declares its results.
    if let Some(p) = prim
        .callback_op()
        .and_then(|op| crate::prim::CallbackParams::read(prim, op, params).ok())
    {
        return p.result_avals;
    }
    match (params.get("jaxpr"), out) {
        (Some(ParamValue::Jaxpr(j)), _) => j.jaxpr.out_avals(),
        (None | Some(_), Some(out)) => vec![out],
        (None | Some(_), None) => in_avals.first().cloned().into_iter().collect(),
    }
}

/// Traces `f` on the types of `args` and records `prim` on `args`, its parameters made from the
/// traced program by `params`; a failure inside `f` is reported as `what`'s.
fn bind_traced(
    prim: Prim,
    what: &str,
    args: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
    params: impl FnOnce(ClosedJaxpr) -> Params,
) -> Vec<Tensor> {
    let Some(first) = args.first() else {
        return Vec::new();
    };
    let avals: Vec<ShapedArray> = args.iter().map(|t| t.aval.clone()).collect();
    match trace_counted(&avals, f) {
        (Ok(inner), _) => Tensor::bind(prim, params(inner), args),
        (Err(e), outs) => first.fail_with(prim.name(), format!("in {what}: {e}"), &outs),
    }
}

/// Calls `f` as a nested function named `name` (a `jit` equation holding its own jaxpr), so the
/// program keeps the call structure.
pub fn jit(name: &str, args: &[&Tensor], f: impl FnOnce(&[Tensor]) -> Vec<Tensor>) -> Vec<Tensor> {
    bind_traced(
        Prim::Jit,
        &format!("nested function `{name}`"),
        args,
        f,
        |inner| {
            Params::new()
                .with("name", ParamValue::Name(name.to_owned()))
                .with("jaxpr", ParamValue::Jaxpr(Box::new(inner)))
        },
    )
}

/// Calls `f` as a `checkpoint` region (JAX's `jax.checkpoint`/`remat`): the values it computes
/// are not kept for the backward pass; differentiation recomputes them from its operands.
pub fn checkpoint(args: &[&Tensor], f: impl FnOnce(&[Tensor]) -> Vec<Tensor>) -> Vec<Tensor> {
    checkpoint_region(args, "None", f)
}

/// Calls `f` as a `checkpoint` region under the remat policy `policy`: differentiation keeps
/// the values the policy saves and recomputes the others from the region's operands, behind an
/// `optimization_barrier` (JAX's `jax.checkpoint(f, policy=...)`). [`checkpoint`] is
/// `nothing_saveable`.
pub fn checkpoint_with(
    args: &[&Tensor],
    policy: crate::remat_policy::RematPolicy,
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    checkpoint_region(args, policy.name(), f)
}

/// A `checkpoint` equation of `f` on `args` whose `policy` parameter is `policy`.
fn checkpoint_region(
    args: &[&Tensor],
    policy: &str,
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    bind_traced(
        Prim::Checkpoint,
        "the checkpointed function",
        args,
        f,
        |inner| {
            Params::new()
                .with("jaxpr", ParamValue::Jaxpr(Box::new(inner)))
                .with("prevent_cse", ParamValue::Bool(true))
                .with("differentiated", ParamValue::Bool(false))
                .with("policy", ParamValue::Name(policy.into()))
        },
    )
}

/// `optimization_barrier` of `args`: the same values, which the compiler computes together and
/// does not merge with computations on the operands themselves.
pub fn optimization_barrier(args: &[&Tensor]) -> Vec<Tensor> {
    if args.is_empty() {
        return Vec::new();
    }
    Tensor::bind(Prim::OptimizationBarrier, Params::new(), args)
}

/// Calls a closed program on traced operands as a nested `jit` equation. With no operands there
/// is no trace to record in: a program of no arguments must be inlined by its caller, and is
/// returned as no results.
pub fn call_closed(program: &ClosedJaxpr, args: &[&Tensor]) -> Vec<Tensor> {
    if args.is_empty() {
        return Vec::new();
    }
    let params = Params::new()
        .with("name", ParamValue::Name("call".into()))
        .with("jaxpr", ParamValue::Jaxpr(Box::new(program.clone())));
    Tensor::bind(Prim::Jit, params, args)
}
