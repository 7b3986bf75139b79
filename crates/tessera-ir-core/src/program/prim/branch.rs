//! `cond` (JAX's `lax.cond` and `lax.switch`) and `while` (JAX's `lax.while_loop`).
//!
//! - `cond[branches=(...)] index operands...`: runs branch `index` (an integer scalar) on the
//!   operands; every branch takes the operands' types and all return the same types. An index
//!   out of range runs the last branch, as `stablehlo.case` does (`switch` clamps it first, as
//!   JAX's does).
//! - `while[body_jaxpr body_nconsts cond_jaxpr cond_nconsts] cond_consts... body_consts...
//!   carry...`: while `cond_jaxpr(cond_consts, carry)` (a `bool[]`) holds, `carry =
//!   body_jaxpr(body_consts, carry)`.

use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::program::jaxpr::ClosedJaxpr;
use crate::program::params::{ParamValue, Params};

fn shown(avals: &[ShapedArray]) -> String {
    avals
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn same(a: &[ShapedArray], b: &[ShapedArray]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_type(y))
}

/// The branches of a `cond`.
pub fn cond_branches(params: &Params) -> Result<Vec<&ClosedJaxpr>> {
    let bad = || IrError::Param {
        prim: "cond".into(),
        param: "branches".into(),
        expected: "a tuple of jaxprs".into(),
    };
    let items = params
        .get("branches")
        .and_then(ParamValue::as_seq)
        .ok_or_else(bad)?;
    let branches = items
        .iter()
        .map(|v| {
            if let ParamValue::Jaxpr(j) = v {
                Ok(&**j)
            } else {
                Err(bad())
            }
        })
        .collect::<Result<Vec<_>>>()?;
    if branches.is_empty() {
        return Err(type_error("cond", "needs at least one branch"));
    }
    Ok(branches)
}

/// The parameters of a `cond` as JAX prints them.
pub fn cond_params(branches: Vec<ClosedJaxpr>) -> Params {
    let items = branches
        .into_iter()
        .map(|b| ParamValue::Jaxpr(Box::new(b)))
        .collect();
    Params::new().with("branches", ParamValue::Tuple(items))
}

/// The branch a `cond` runs for `index` among `n`.
pub fn branch_index(index: f64, n: usize) -> usize {
    if index >= 0.0 && index < n as f64 {
        index as usize
    } else {
        n - 1
    }
}

pub(super) fn cond_abstract_eval(
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let branches = cond_branches(params)?;
    let Some((index, operands)) = inputs.split_first() else {
        return Err(type_error("cond", "needs an index operand"));
    };
    if index.rank() != 0 || !(index.dtype.is_int() || index.dtype == DType::Bool) {
        return Err(type_error(
            "cond",
            format!("the index must be an integer scalar, got {index}"),
        ));
    }
    let outs = branches[0].jaxpr.out_avals();
    for (k, b) in branches.iter().enumerate() {
        let ins = b.jaxpr.in_avals();
        if !same(&ins, operands) {
            return Err(type_error(
                "cond",
                format!(
                    "branch {k} takes ({}) but the operands are ({})",
                    shown(&ins),
                    shown(operands)
                ),
            ));
        }
        let got = b.jaxpr.out_avals();
        if !same(&got, &outs) {
            return Err(type_error(
                "cond",
                format!(
                    "branch {k} returns ({}) but branch 0 returns ({})",
                    shown(&got),
                    shown(&outs)
                ),
            ));
        }
    }
    Ok(outs)
}

/// The typed view of a `while` equation's parameters.
#[derive(Debug, Clone)]
pub struct WhileParams<'a> {
    /// `(cond_consts..., carry...) -> bool[]`.
    pub cond: &'a ClosedJaxpr,
    /// How many leading operands are the condition's constants.
    pub cond_nconsts: usize,
    /// `(body_consts..., carry...) -> carry...`.
    pub body: &'a ClosedJaxpr,
    /// How many operands after the condition's constants are the body's constants.
    pub body_nconsts: usize,
}

impl<'a> WhileParams<'a> {
    /// Reads the parameters of a `while` equation.
    pub fn read(params: &'a Params) -> Result<Self> {
        let count = |name: &str| -> Result<usize> {
            usize::try_from(params.int("while", name)?)
                .map_err(|_| type_error("while", format!("`{name}` must not be negative")))
        };
        Ok(WhileParams {
            cond: params.jaxpr("while", "cond_jaxpr")?,
            cond_nconsts: count("cond_nconsts")?,
            body: params.jaxpr("while", "body_jaxpr")?,
            body_nconsts: count("body_nconsts")?,
        })
    }

    /// The number of leading operands that are constants.
    pub fn num_consts(&self) -> usize {
        self.cond_nconsts + self.body_nconsts
    }
}

/// The parameters of a `while` as JAX prints them.
pub fn while_params(
    body: ClosedJaxpr,
    body_nconsts: usize,
    cond: ClosedJaxpr,
    cond_nconsts: usize,
) -> Params {
    Params::new()
        .with("body_jaxpr", ParamValue::Jaxpr(Box::new(body)))
        .with("body_nconsts", ParamValue::Int(body_nconsts as i64))
        .with("cond_jaxpr", ParamValue::Jaxpr(Box::new(cond)))
        .with("cond_nconsts", ParamValue::Int(cond_nconsts as i64))
}

pub(super) fn while_abstract_eval(
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let p = WhileParams::read(params)?;
    let nc = p.num_consts();
    if inputs.len() < nc {
        return Err(type_error(
            "while",
            format!("{} operands, fewer than its {nc} constants", inputs.len()),
        ));
    }
    let (cond_consts, rest) = inputs.split_at(p.cond_nconsts);
    let (body_consts, carry) = rest.split_at(p.body_nconsts);
    let cond_in: Vec<ShapedArray> = cond_consts.iter().chain(carry).cloned().collect();
    let body_in: Vec<ShapedArray> = body_consts.iter().chain(carry).cloned().collect();
    let check = |what: &str, j: &ClosedJaxpr, ins: &[ShapedArray], outs: &[ShapedArray]| {
        let (gi, go) = (j.jaxpr.in_avals(), j.jaxpr.out_avals());
        if same(&gi, ins) && same(&go, outs) {
            Ok(())
        } else {
            Err(type_error(
                "while",
                format!(
                    "{what} is ({}) -> ({}) but must be ({}) -> ({})",
                    shown(&gi),
                    shown(&go),
                    shown(ins),
                    shown(outs)
                ),
            ))
        }
    };
    check(
        "the condition",
        p.cond,
        &cond_in,
        &[ShapedArray::scalar(DType::Bool)],
    )?;
    check("the body", p.body, &body_in, carry)?;
    Ok(carry.to_vec())
}
