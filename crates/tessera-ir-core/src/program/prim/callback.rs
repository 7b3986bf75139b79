//! Host callbacks: `pure_callback`, `io_callback` and `debug_callback` (JAX's
//! `jax.pure_callback`, `jax.experimental.io_callback`, `jax.debug.callback`), with every rule
//! of theirs in this file: the typed parameters, the shape rule (the declared result types), the
//! interpreter (call the closure of the registry, [`crate::callback`], and check what it
//! returns), the effects (what dead-code elimination keeps), and the refusals of
//! differentiation. Batching is in `callback_vmap.rs`; the lowering (a typed-FFI
//! `stablehlo.custom_call`) is `tessera-stablehlo`'s `lower/callback.rs`.
//!
//! Parameters are printed as JAX prints them (`pure_callback[callback=<...> result_avals=(...)
//! sharding=None vmap_method=sequential]`), the callable named `<tessera host callback N>`
//! after its registry id. Only traced programs hold callbacks: the parser refuses them, since
//! text cannot carry a closure.

use crate::array::Array;
use crate::aval::ShapedArray;
use crate::callback::{CallbackId, lookup};
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::program::params::{ParamValue, Params};

use super::Prim;

/// Which host callback primitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackOp {
    /// `pure_callback`: no side effects; removed when its results are unused.
    Pure,
    /// `io_callback`: effectful, `ordered` or not; always run.
    Io,
    /// `debug_callback`: effectful, no results; always run.
    Debug,
}

/// How `vmap` batches a `pure_callback` (JAX's `vmap_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmapMethod {
    /// Call the callback once per batch element (a host loop).
    Sequential,
    /// Call it once with the batch dimension in front of the batched operands, unbatched
    /// operands given a leading dimension of size 1.
    ExpandDims,
    /// Like `ExpandDims`, every operand broadcast to the batch size.
    BroadcastAll,
}

impl VmapMethod {
    /// JAX's spelling.
    pub fn name(self) -> &'static str {
        match self {
            VmapMethod::Sequential => "sequential",
            VmapMethod::ExpandDims => "expand_dims",
            VmapMethod::BroadcastAll => "broadcast_all",
        }
    }

    /// Reads JAX's spelling (`None` for anything else).
    pub fn parse(text: &str) -> Option<VmapMethod> {
        [
            VmapMethod::Sequential,
            VmapMethod::ExpandDims,
            VmapMethod::BroadcastAll,
        ]
        .into_iter()
        .find(|m| m.name() == text)
    }
}

/// The parameters of a callback equation, read once.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackParams {
    /// The closure's id in the registry.
    pub id: CallbackId,
    /// The declared result types (none for `debug_callback`).
    pub result_avals: Vec<ShapedArray>,
    /// `pure_callback`'s `vmap_method` (`None`: `vmap` refuses it, as JAX does).
    pub vmap_method: Option<VmapMethod>,
    /// `io_callback`'s `ordered`.
    pub ordered: bool,
}

/// How a callback's callable is printed.
pub fn callback_name(id: CallbackId) -> String {
    format!("<tessera host callback {}>", id.0)
}

fn parse_id(text: &str) -> Option<CallbackId> {
    let n = text
        .strip_prefix("<tessera host callback ")?
        .strip_suffix('>')?;
    n.parse().ok().map(CallbackId)
}

/// `ShapedArray(float32[4,3])`, as JAX prints a result type.
fn aval_text(a: &ShapedArray) -> String {
    let dims: Vec<String> = a.shape.iter().map(ToString::to_string).collect();
    format!("ShapedArray({}[{}])", a.dtype.numpy_name(), dims.join(","))
}

fn parse_aval(text: &str) -> Option<ShapedArray> {
    let inner = text.strip_prefix("ShapedArray(")?.strip_suffix(')')?;
    let (dtype, rest) = inner.split_once('[')?;
    let dims = rest.strip_suffix(']')?;
    let shape = if dims.trim().is_empty() {
        Vec::new()
    } else {
        dims.split(',')
            .map(|d| d.trim().parse::<i64>().ok())
            .collect::<Option<Vec<_>>>()?
    };
    Some(ShapedArray::new(DType::parse(dtype)?, &shape))
}

impl CallbackParams {
    /// The parameters of `op` as JAX prints them.
    pub fn to_params(&self, op: CallbackOp) -> Params {
        let avals = ParamValue::Tuple(
            self.result_avals
                .iter()
                .map(|a| ParamValue::Name(aval_text(a)))
                .collect(),
        );
        let callable = ParamValue::Name(callback_name(self.id));
        let none = || ParamValue::Name("None".into());
        match op {
            CallbackOp::Pure => Params::new()
                .with("callback", callable)
                .with("result_avals", avals)
                .with("sharding", none())
                .with(
                    "vmap_method",
                    self.vmap_method
                        .map_or_else(none, |m| ParamValue::Name(m.name().into())),
                ),
            CallbackOp::Io => Params::new()
                .with("callback", callable)
                .with("ordered", ParamValue::Bool(self.ordered))
                .with("result_avals", avals)
                .with("sharding", none()),
            CallbackOp::Debug => Params::new()
                .with("callback", callable)
                .with("effect", ParamValue::Name("Debug".into()))
                .with("partitioned", ParamValue::Bool(false)),
        }
    }

    /// Reads the parameters of `prim` (one of the callbacks); every field is required.
    pub fn read(prim: Prim, op: CallbackOp, params: &Params) -> Result<CallbackParams> {
        let name = prim.name();
        let bad = |param: &str, expected: &str| IrError::Param {
            prim: name.to_owned(),
            param: param.to_owned(),
            expected: expected.to_owned(),
        };
        let name_of = |v: &ParamValue| {
            if let ParamValue::Name(n) = v {
                Some(n.clone())
            } else {
                None
            }
        };
        let id = params
            .get("callback")
            .and_then(name_of)
            .and_then(|n| parse_id(&n))
            .ok_or_else(|| {
                bad(
                    "callback",
                    "a registered host callback `<tessera host callback N>`",
                )
            })?;
        let result_avals = match op {
            CallbackOp::Debug => Vec::new(),
            CallbackOp::Pure | CallbackOp::Io => params
                .get("result_avals")
                .and_then(ParamValue::as_seq)
                .and_then(|items| {
                    items
                        .iter()
                        .map(|v| name_of(v).and_then(|t| parse_aval(&t)))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| bad("result_avals", "a tuple of `ShapedArray(dtype[dims])`"))?,
        };
        let vmap_method = match op {
            CallbackOp::Pure => {
                let expected = "sequential, expand_dims, broadcast_all or None";
                let text = params
                    .get("vmap_method")
                    .and_then(name_of)
                    .ok_or_else(|| bad("vmap_method", expected))?;
                if text == "None" {
                    None
                } else {
                    Some(VmapMethod::parse(&text).ok_or_else(|| bad("vmap_method", expected))?)
                }
            }
            CallbackOp::Io | CallbackOp::Debug => None,
        };
        let ordered = match op {
            CallbackOp::Io => params.bool(name, "ordered")?,
            CallbackOp::Pure | CallbackOp::Debug => false,
        };
        Ok(CallbackParams {
            id: CallbackId(id.0),
            result_avals,
            vmap_method,
            ordered,
        })
    }
}

/// Whether `prim` has a side effect: `io_callback` and `debug_callback` do (dead-code
/// elimination keeps them, the lowering marks them `has_side_effect`); `pure_callback` and every
/// other primitive do not.
pub fn is_effectful(prim: Prim) -> bool {
    matches!(prim, Prim::IoCallback | Prim::DebugCallback)
}

/// Whether `prim` is an `io_callback` with `ordered=True`.
pub fn is_ordered(prim: Prim, params: &Params) -> bool {
    prim == Prim::IoCallback && matches!(params.get("ordered"), Some(ParamValue::Bool(true)))
}

/// The shape rule: the declared result types (checked: no key or token results).
pub(super) fn abstract_eval(
    prim: Prim,
    op: CallbackOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let p = CallbackParams::read(prim, op, params)?;
    if let Some(a) = p
        .result_avals
        .iter()
        .chain(inputs)
        .find(|a| a.dtype.is_key() || a.dtype.is_token())
    {
        return Err(crate::error::type_error(
            prim.name(),
            format!(
                "host callbacks take and return plain arrays, not {}; unwrap keys with \
                 random_unwrap first",
                a.dtype.numpy_name()
            ),
        ));
    }
    Ok(p.result_avals)
}

/// Calls the callback `id` on `inputs` and checks that it returns one array of each type of
/// `expected` (what the interpreter and the PJRT host callback handler both do). A missing
/// callback, an error of the callback, a panic inside it and a result of the wrong count, shape
/// or dtype are each an [`IrError::Callback`] naming what was wrong.
pub fn call_host_callback(
    prim: &str,
    id: CallbackId,
    inputs: &[Array],
    expected: &[ShapedArray],
) -> Result<Vec<Array>> {
    let err = |message: String| IrError::Callback {
        prim: prim.to_owned(),
        message,
    };
    let f = lookup(id).ok_or_else(|| {
        err(format!(
            "no host callback is registered under id {} (ids are valid only in the process \
             that traced the program)",
            id.0
        ))
    })?;
    let outs = crate::panics::catch_unwind(|| f(inputs))
        .map_err(|_| err("the callback panicked".into()))?
        .map_err(|m| err(format!("the callback failed: {m}")))?;
    if outs.len() != expected.len() {
        return Err(err(format!(
            "the callback returned {} arrays but {} were declared in result_avals",
            outs.len(),
            expected.len()
        )));
    }
    for (k, (got, want)) in outs.iter().zip(expected).enumerate() {
        if got.dtype() != want.dtype || got.dims() != want.shape.as_slice() {
            return Err(err(format!(
                "result {k} is {}{:?} but result_avals declares {}{:?}; return arrays of the \
                 declared shapes and dtypes",
                got.dtype().numpy_name(),
                got.dims(),
                want.dtype.numpy_name(),
                want.shape
            )));
        }
    }
    Ok(outs)
}

/// The message of a refused derivative of `prim` (JAX refuses them too: "Pure callbacks do
/// not support JVP", "IO callbacks do not support JVP"). `debug_callback` is never refused: it
/// returns nothing and runs on the primals.
pub fn differentiation_refusal(prim: Prim) -> String {
    let kind = if prim == Prim::IoCallback {
        "IO"
    } else {
        "Pure"
    };
    format!(
        "{} is not differentiable: {kind} callbacks do not support JVP (as in JAX); wrap the \
         call in custom_jvp/custom_vjp with a derivative rule, or stop_gradient its operands",
        prim.name()
    )
}

/// Whether `jaxpr` (or a jaxpr nested in it) holds an effectful equation.
pub fn jaxpr_has_effects(jaxpr: &crate::program::jaxpr::Jaxpr) -> bool {
    jaxpr.eqns.iter().any(|e| {
        is_effectful(e.prim)
            || e.params
                .jaxprs()
                .iter()
                .any(|j| jaxpr_has_effects(&j.jaxpr))
    })
}

/// Whether `jaxpr` (or a jaxpr nested in it) holds a host callback of any kind.
pub fn jaxpr_has_callbacks(jaxpr: &crate::program::jaxpr::Jaxpr) -> bool {
    jaxpr.eqns.iter().any(|e| {
        e.prim.callback_op().is_some()
            || e.params
                .jaxprs()
                .iter()
                .any(|j| jaxpr_has_callbacks(&j.jaxpr))
    })
}

/// Whether `jaxpr` (or a jaxpr nested in it) holds an ordered `io_callback`: such a program
/// runs on one device only (JAX: "Ordered effects are not supported for more than 1 device").
pub fn jaxpr_has_ordered_effects(jaxpr: &crate::program::jaxpr::Jaxpr) -> bool {
    jaxpr.eqns.iter().any(|e| {
        is_ordered(e.prim, &e.params)
            || e.params
                .jaxprs()
                .iter()
                .any(|j| jaxpr_has_ordered_effects(&j.jaxpr))
    })
}
