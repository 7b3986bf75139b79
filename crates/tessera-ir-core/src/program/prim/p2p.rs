//! Point-to-point sends and receives: JAX's `lax.psend(x, axis_name, perm)` and
//! `lax.precv(token, out_shape, axis_name, perm)`, the halves of a `ppermute` (XLA's `Send` and
//! `Recv`). `psend` takes the value to send and returns an abstract token (`Tok`, JAX's
//! `abstract_token`); `precv` takes that token and returns the value received, of type
//! `out_shape`. Both carry `axis_name` and `perm`, `(source, target)` pairs of indices along
//! the axes (a source or target at most once, every index below the group size), as
//! `ppermute`'s.
//!
//! Typing follows JAX: `psend`'s result is `Tok`; `precv`'s is `out_shape` as written (JAX
//! builds it from the shape and dtype alone, so it varies over no axis). The axes must be bound
//! by an enclosing `shard_map` (or `pmap`), and `perm` must fit the group size (JAX checks the
//! latter when lowering; Tessera in the shape rule).
//!
//! Pairing ([`token_misuse`], run by the verifier): a token is made by a `psend` and received by
//! exactly one `precv` of the same jaxpr, with the same `axis_name` and `perm`, whose
//! `out_shape` has the sent value's shape and dtype; a token may not be used otherwise (taken by
//! another primitive, returned, passed in as a parameter), and every `psend` is received. JAX
//! also accepts a token from `lax.create_token()` (no send: the receive's ordering only), which
//! Tessera has no primitive for. With the pairing fixed, a `psend`/`precv` pair means what a
//! `ppermute` of the sent value means, and the interpreter evaluates it so: the SPMD
//! interpreter holds each device's token as the value that device sends (`psend` is the identity
//! on values), and `precv` gives each target its source's value and every other device zeros
//! (`collective::permute`, the pairs the lowering sends).
//!
//! JAX defines no JVP, transpose or batching rule of its own for them (it reuses `ppermute`'s
//! batcher, which binds a `ppermute` in their place); Tessera refuses to differentiate them (a
//! typed error naming the primitive) and batches them over other axes than their own.
//! Lowering (in `tessera-stablehlo`) emits `stablehlo.send`/`stablehlo.recv` as JAX's GPU
//! lowering does; XLA's CPU plugin cannot compile them.

use tessera_sharding::{AbstractMesh, groups};

use super::{CollectiveKind, CollectiveParams, Prim};
use crate::array::Array;
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::program::jaxpr::{Atom, Jaxpr};
use crate::program::params::{ParamValue, Params};

/// `precv`'s `out_shape`: `ShapedArray(float32[4,2])` as JAX prints it (or the type alone,
/// `float32[4,2]` / `f32[4,2]`), with `weak_type=True` where written.
pub(super) fn out_shape(prim: Prim, params: &Params) -> Result<ShapedArray> {
    let bad = |why: String| IrError::Param {
        prim: prim.name().into(),
        param: "out_shape".into(),
        expected: why,
    };
    let value = params
        .get("out_shape")
        .ok_or_else(|| bad("a type, `ShapedArray(float32[4])` (JAX prints it)".into()))?;
    let (text, weak) = if let ParamValue::Record(name, fields) = value
        && name == "ShapedArray"
    {
        let text = fields.iter().find_map(|(k, v)| {
            if let ("", ParamValue::Name(t)) = (k.as_str(), v) {
                Some(t.clone())
            } else {
                None
            }
        });
        let weak = fields
            .iter()
            .any(|(k, v)| k == "weak_type" && *v == ParamValue::Bool(true));
        (text, weak)
    } else if let ParamValue::Name(t) = value {
        (Some(t.clone()), false)
    } else {
        (None, false)
    };
    let parsed = text.as_deref().and_then(parse_type);
    let Some(mut aval) = parsed else {
        return Err(bad(format!(
            "a type such as `ShapedArray(float32[4])`, got {value}"
        )));
    };
    if aval.dtype.is_token() {
        return Err(bad(
            "an array type (precv receives an array, not a token)".into()
        ));
    }
    aval.weak_type = weak;
    Ok(aval)
}

/// `float32[4,2]` (or `f32[4,2]`, or `float32[]`).
fn parse_type(text: &str) -> Option<ShapedArray> {
    let (dtype, rest) = text.split_once('[')?;
    let dims = rest.strip_suffix(']')?;
    let shape = if dims.trim().is_empty() {
        Vec::new()
    } else {
        dims.split(',')
            .map(|d| d.trim().parse::<i64>().ok().filter(|&d| d >= 0))
            .collect::<Option<Vec<_>>>()?
    };
    Some(ShapedArray::new(DType::parse(dtype)?, &shape))
}

/// The `out_shape` parameter of a `precv` receiving values of type `aval`, as JAX prints it.
pub fn out_shape_param(aval: &ShapedArray) -> ParamValue {
    let dims: Vec<String> = aval.shape.iter().map(ToString::to_string).collect();
    let mut fields = vec![(
        String::new(),
        ParamValue::Name(format!("{}[{}]", aval.dtype.numpy_name(), dims.join(","))),
    )];
    if aval.weak_type {
        fields.push(("weak_type".into(), ParamValue::Bool(true)));
    }
    ParamValue::Record("ShapedArray".into(), fields)
}

/// The result type of a `psend` (a token) or a `precv` (its `out_shape`) on `x`, whose groups
/// have `n` devices.
pub(super) fn out_type(
    prim: Prim,
    p: &CollectiveParams,
    x: &ShapedArray,
    n: i64,
) -> Result<Vec<ShapedArray>> {
    let (perm, out) = match &p.kind {
        CollectiveKind::Psend { perm } => {
            if x.dtype.is_token() {
                return Err(type_error(
                    prim.name(),
                    "sends an array, not a token; pass it the value to send",
                ));
            }
            (perm, ShapedArray::token())
        }
        CollectiveKind::Precv { perm, out_shape } => {
            if !x.dtype.is_token() {
                return Err(type_error(
                    prim.name(),
                    format!("takes the token of a psend (type Tok), got {x}"),
                ));
            }
            (perm, out_shape.clone())
        }
        other => {
            return Err(type_error(
                prim.name(),
                format!("is not a send or a receive ({other:?})"),
            ));
        }
    };
    groups::check_permutation(perm, n).map_err(|e| type_error(prim.name(), e.to_string()))?;
    Ok(vec![out])
}

/// Evaluates a `psend` or `precv` on every position of `mesh`: a `psend` leaves each position
/// the value it sends (its token), a `precv` gives each target the value its source sent
/// (converted to `out_shape`'s dtype) and the other positions zeros.
pub(super) fn simulate(
    prim: Prim,
    p: &CollectiveParams,
    mesh: &AbstractMesh,
    xs: &[&Array],
    out: &ShapedArray,
) -> Result<Vec<Array>> {
    match &p.kind {
        CollectiveKind::Psend { .. } => Ok(xs.iter().map(|&x| x.clone()).collect()),
        CollectiveKind::Precv { perm, .. } => {
            if let Some(x) = xs.iter().find(|x| x.dims() != out.shape.as_slice()) {
                return Err(IrError::Eval(format!(
                    "precv receives {out}, but the matching psend sent a value of shape {:?}; \
                     give precv the sent value's shape as out_shape",
                    x.dims()
                )));
            }
            super::collective::permute(prim, mesh, &p.axes, perm, xs, out)
        }
        other => Err(IrError::Eval(format!(
            "{} is not a send or a receive ({other:?})",
            prim.name()
        ))),
    }
}

/// The first misuse of a token in `jaxpr` (not its nested jaxprs): the index of the offending
/// equation (the number of equations for the jaxpr's results) and what is wrong. See the
/// module documentation for the rules.
pub fn token_misuse(jaxpr: &Jaxpr) -> Option<(usize, String)> {
    let is_token = |atom: &Atom| match atom {
        Atom::Var(v) => jaxpr.aval(*v).dtype.is_token().then_some(v.index()),
        Atom::Lit(..) => None,
    };
    if jaxpr
        .invars
        .iter()
        .chain(&jaxpr.constvars)
        .any(|v| jaxpr.aval(*v).dtype.is_token())
    {
        return Some((
            0,
            "a jaxpr's parameter cannot be a token (Tok): tokens are made by a psend and \
             received by a precv inside the same jaxpr"
                .into(),
        ));
    }
    // For each token: the psend equation that made it, and whether a precv received it.
    let mut sent: Vec<Option<(usize, bool)>> = vec![None; jaxpr.vars.len()];
    for (i, eqn) in jaxpr.eqns.iter().enumerate() {
        for k in eqn.inputs.iter().filter_map(is_token) {
            if eqn.prim != Prim::Precv {
                return Some((
                    i,
                    format!(
                        "equation {i}: {} takes a token; only a precv may take a psend's token",
                        eqn.prim.name()
                    ),
                ));
            }
            let Some(Some((j, received))) = sent.get_mut(k) else {
                return Some((
                    i,
                    format!(
                        "equation {i}: precv takes a token no psend of this jaxpr made; pass it \
                         the result of the matching psend"
                    ),
                ));
            };
            if std::mem::replace(received, true) {
                return Some((
                    i,
                    format!(
                        "equation {i}: the token of the psend at equation {j} was already \
                         received by an earlier precv; each send is received once"
                    ),
                ));
            }
            if let Some(why) = mismatch(jaxpr, *j, i) {
                return Some((i, format!("equation {i}: {why}")));
            }
        }
        if eqn.prim == Prim::Psend {
            for v in &eqn.outputs {
                if let Some(slot) = sent.get_mut(v.index()) {
                    *slot = Some((i, false));
                }
            }
        }
    }
    if jaxpr.outvars.iter().any(|a| is_token(a).is_some()) {
        return Some((
            jaxpr.eqns.len(),
            "the jaxpr returns a token; receive it with a precv and return the received value"
                .into(),
        ));
    }
    sent.iter().flatten().find(|(_, received)| !received).map(|&(j, _)| {
        (
            j,
            format!(
                "equation {j}: the psend's token is never received; pass it to a precv with the \
                 same axis_name and perm (with the tracing API, `precv(token, ...)`), or remove \
                 the psend"
            ),
        )
    })
}

/// Why the `precv` at equation `recv` does not receive what the `psend` at `send` sends, if it
/// does not: other axes or pairs, or an `out_shape` that is not the sent value's type.
fn mismatch(jaxpr: &Jaxpr, send: usize, recv: usize) -> Option<String> {
    let (s, r) = (jaxpr.eqns.get(send)?, jaxpr.eqns.get(recv)?);
    let sent = match s.inputs.first()? {
        Atom::Var(v) => jaxpr.aval(*v).clone(),
        Atom::Lit(l) => l.aval.clone(),
    };
    // Malformed parameters are the shape rule's to report.
    let ps = CollectiveParams::read(Prim::Psend, &s.params, sent.rank()).ok()?;
    let pr = CollectiveParams::read(Prim::Precv, &r.params, 0).ok()?;
    let (
        CollectiveKind::Psend { perm: sp },
        CollectiveKind::Precv {
            perm: rp,
            out_shape,
        },
    ) = (&ps.kind, &pr.kind)
    else {
        return None;
    };
    if ps.axes != pr.axes || sp != rp {
        return Some(format!(
            "precv (axis_name {:?}, perm {rp:?}) receives from a psend with axis_name {:?} and \
             perm {sp:?}; a send and its receive name the same axes and pairs",
            pr.axes, ps.axes
        ));
    }
    if !out_shape.same_type(&sent) {
        return Some(format!(
            "precv's out_shape is {out_shape}, but its psend sends {sent}; give out_shape the \
             sent value's shape and dtype"
        ));
    }
    None
}
