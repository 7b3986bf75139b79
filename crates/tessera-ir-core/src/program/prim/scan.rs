//! `scan` (JAX's `lax.scan`): a loop of `length` steps over a body `jaxpr` taking `(consts...,
//! carry..., x_slices...)` to `(carry..., y_slices...)`. Operands are the `num_consts`
//! constants, the `num_carry` initial carries and the `xs`, each with a leading dimension of
//! `length` sliced one step at a time (from the end when `reverse`); results are the final
//! carries and the `ys` stacked along a new leading dimension (at the step's index, so a reverse
//! scan's `ys[i]` is still step `i`'s). `unroll`, `linear` and `_split_transpose` are kept as
//! printed and do not change the meaning.

use crate::array::Array;
use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::program::jaxpr::ClosedJaxpr;
use crate::program::params::{ParamValue, Params};

const NAME: &str = "scan";

/// The typed view of a `scan` equation's parameters.
#[derive(Debug, Clone)]
pub struct ScanParams<'a> {
    /// The body: `(consts..., carry..., x_slices...) -> (carry..., y_slices...)`.
    pub body: &'a ClosedJaxpr,
    /// The number of steps.
    pub length: i64,
    /// Whether the steps run from the last index to the first.
    pub reverse: bool,
    /// How many leading operands are constants.
    pub num_consts: usize,
    /// How many operands after the constants are carries.
    pub num_carry: usize,
}

impl<'a> ScanParams<'a> {
    /// Reads the parameters of a `scan` equation.
    pub fn read(params: &'a Params) -> Result<Self> {
        let count = |name: &str| -> Result<usize> {
            usize::try_from(params.int(NAME, name)?)
                .map_err(|_| type_error(NAME, format!("`{name}` must not be negative")))
        };
        let length = params.int(NAME, "length")?;
        if length < 0 {
            return Err(type_error(NAME, "`length` must not be negative"));
        }
        Ok(ScanParams {
            body: params.jaxpr(NAME, "jaxpr")?,
            length,
            reverse: params.bool_or(NAME, "reverse", false)?,
            num_consts: count("num_consts")?,
            num_carry: count("num_carry")?,
        })
    }

    /// The step index of iteration `i`.
    pub fn index(&self, i: i64) -> i64 {
        if self.reverse { self.length - 1 - i } else { i }
    }
}

/// The parameters of a `scan` as JAX prints them.
pub fn scan_params(
    body: ClosedJaxpr,
    length: i64,
    reverse: bool,
    num_consts: usize,
    num_carry: usize,
) -> Params {
    Params::new()
        .with("jaxpr", ParamValue::Jaxpr(Box::new(body)))
        .with("length", ParamValue::Int(length))
        .with("num_carry", ParamValue::Int(num_carry as i64))
        .with("num_consts", ParamValue::Int(num_consts as i64))
        .with("reverse", ParamValue::Bool(reverse))
        .with("unroll", ParamValue::Int(1))
}

/// The type of one slice of a stacked operand.
pub fn unstacked(aval: &ShapedArray) -> ShapedArray {
    let mut a = aval.clone();
    if !a.shape.is_empty() {
        a.shape.remove(0);
    }
    a
}

/// The type of `length` stacked values of type `aval`.
pub fn stacked(aval: &ShapedArray, length: i64) -> ShapedArray {
    let mut a = aval.clone();
    a.shape.insert(0, length);
    a
}

fn shown(avals: &[ShapedArray]) -> String {
    avals
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn abstract_eval(params: &Params, inputs: &[ShapedArray]) -> Result<Vec<ShapedArray>> {
    let p = ScanParams::read(params)?;
    let fixed = p.num_consts + p.num_carry;
    if inputs.len() < fixed {
        return Err(type_error(
            NAME,
            format!(
                "{} operands, fewer than num_consts + num_carry = {fixed}",
                inputs.len()
            ),
        ));
    }
    if let Some(x) = inputs[fixed..]
        .iter()
        .find(|x| x.shape.first() != Some(&p.length))
    {
        return Err(type_error(
            NAME,
            format!(
                "every scanned operand needs a leading dimension of length {}, got {x}",
                p.length
            ),
        ));
    }
    let mut want: Vec<ShapedArray> = inputs[..fixed].to_vec();
    want.extend(inputs[fixed..].iter().map(unstacked));
    let got = p.body.jaxpr.in_avals();
    if got.len() != want.len() || got.iter().zip(&want).any(|(g, w)| !g.same_type(w)) {
        return Err(type_error(
            NAME,
            format!(
                "the body takes ({}) but the operands give ({})",
                shown(&got),
                shown(&want)
            ),
        ));
    }
    let outs = p.body.jaxpr.out_avals();
    let carry_in = &inputs[p.num_consts..fixed];
    if outs.len() < p.num_carry
        || outs[..p.num_carry]
            .iter()
            .zip(carry_in)
            .any(|(o, c)| !o.same_type(c))
    {
        return Err(type_error(
            NAME,
            format!(
                "the body returns ({}) but its first {} results must be the carries ({})",
                shown(&outs),
                p.num_carry,
                shown(carry_in)
            ),
        ));
    }
    let mut results = outs[..p.num_carry].to_vec();
    results.extend(outs[p.num_carry..].iter().map(|y| stacked(y, p.length)));
    Ok(results)
}

/// Each per-step result of a scan stacked along a new leading axis (`ys[result][step]`, a
/// result of zero steps as zeros of its type `avals[result]`).
pub fn stack_ys<'a>(
    ys: Vec<Vec<Option<Array>>>,
    avals: &'a [ShapedArray],
) -> impl Iterator<Item = Result<Array>> + 'a {
    ys.into_iter().zip(avals).map(|(parts, aval)| {
        let parts: Vec<Array> = parts.into_iter().flatten().collect();
        if parts.is_empty() {
            return Ok(Array::zeros(aval));
        }
        Array::stack_rows(aval.dtype, &aval.shape[1..], &parts)
    })
}
