//! How a trace fails without panicking in user code: the first error is kept by the trace and
//! returned by [`super::trace`], and every operation still returns as many results as it would
//! have (placeholders of the expected types, recorded nowhere), so code after a failed `jit`,
//! `treduce` or transform can index its results.
//!
//! It also catches captured tensors: the traces being recorded on this thread form a stack
//! (innermost last), and an operation whose operands come from different traces, or from a
//! trace other than the innermost one (a closure traced by `jit`, `checkpoint`, `treduce` or a
//! transform that uses a `Tensor` of the outer trace it captured), fails the innermost trace
//! with an error saying so.

use std::cell::RefCell;
use std::rc::Rc;

use super::{Builder, Tensor};
use crate::aval::ShapedArray;
use crate::error::IrError;
use crate::jaxpr::Atom;

thread_local! {
    /// The traces being recorded on this thread, innermost last.
    static ACTIVE: RefCell<Vec<Rc<RefCell<Builder>>>> = const { RefCell::new(Vec::new()) };
}

/// Marks a trace as the innermost one while it lives.
pub(super) struct Active;

impl Active {
    pub(super) fn enter(builder: &Rc<RefCell<Builder>>) -> Active {
        ACTIVE.with(|a| a.borrow_mut().push(builder.clone()));
        Active
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.with(|a| {
            a.borrow_mut().pop();
        });
    }
}

/// The innermost trace being recorded, if any.
fn innermost() -> Option<Rc<RefCell<Builder>>> {
    ACTIVE.with(|a| a.borrow().last().cloned())
}

/// The innermost trace, for an operation `op` without operands; outside any trace, a new trace
/// that has failed (its tensors are placeholders; using them in a real trace fails it too).
pub(super) fn innermost_or_failed(op: &str) -> Rc<RefCell<Builder>> {
    innermost().unwrap_or_else(|| {
        let builder = Builder {
            error: Some(IrError::Type {
                prim: op.to_owned(),
                message: "called with no operands outside any trace; call it inside the \
                          function given to trace (or jit, vmap, ...)"
                    .to_owned(),
            }),
            ..Builder::default()
        };
        Rc::new(RefCell::new(builder))
    })
}

/// Records `error` as the trace's error unless it already has one.
pub(super) fn record(builder: &Rc<RefCell<Builder>>, error: &IrError) {
    let mut b = builder.borrow_mut();
    if b.error.is_none() {
        b.error = Some(error.clone());
    }
}

/// The error of an operation `op` on `inputs` that mixes traces or reaches past the innermost
/// one, if it does.
pub(super) fn captured_operand(op: &str, inputs: &[&Tensor]) -> Option<IrError> {
    let first = inputs.first()?;
    let advice = "a function traced inside another (by jit, checkpoint, treduce, shard_map or a \
                  transform) used a Tensor of the outer trace that it captured; pass that Tensor \
                  to the inner function as an argument instead";
    let message = if inputs.iter().any(|t| !t.same_trace(first)) {
        format!("its operands come from different traces: {advice}")
    } else {
        match innermost() {
            Some(inner) if !Rc::ptr_eq(&inner, &first.builder) => {
                format!("it was applied to a Tensor of an outer trace: {advice}")
            }
            _ => return None,
        }
    };
    Some(IrError::Type {
        prim: op.to_owned(),
        message,
    })
}

/// Fails the innermost trace and `like`'s with `error`.
pub(super) fn fail_everywhere(like: &Tensor, error: &IrError) {
    if let Some(inner) = innermost() {
        record(&inner, error);
    }
    record(&like.builder, error);
}

impl Tensor {
    /// Fails the traces involved when `inputs` of `op` come from another trace (see
    /// [`captured_operand`]); returns whether they did.
    pub(crate) fn check_captured(op: &str, inputs: &[&Tensor]) -> bool {
        match (captured_operand(op, inputs), inputs.first()) {
            (Some(error), Some(first)) => {
                fail_everywhere(first, &error);
                true
            }
            _ => false,
        }
    }

    /// Records an error of operation `op` (the trace returns the first one) and returns one
    /// placeholder per expected result type, so callers can index the results they expect.
    pub(crate) fn fail_with(
        &self,
        op: &str,
        message: String,
        avals: &[ShapedArray],
    ) -> Vec<Tensor> {
        record(
            &self.builder,
            &IrError::Type {
                prim: op.to_owned(),
                message,
            },
        );
        self.placeholders(avals)
    }

    /// Fresh values of types `avals` in this tensor's trace, defined by no equation (only
    /// returned once the trace has failed, so they never reach a program).
    pub(super) fn placeholders(&self, avals: &[ShapedArray]) -> Vec<Tensor> {
        let mut b = self.builder.borrow_mut();
        avals
            .iter()
            .map(|aval| Tensor {
                builder: self.builder.clone(),
                atom: Atom::Var(b.jaxpr.new_var(aval.clone())),
                aval: aval.clone(),
            })
            .collect()
    }
}

/// Records an error of `op` in the innermost trace and returns placeholders of types `avals`
/// there (an operation with no operand to name its trace); nothing outside any trace.
pub(crate) fn fail_innermost(op: &str, message: String, avals: &[ShapedArray]) -> Vec<Tensor> {
    let Some(inner) = innermost() else {
        return Vec::new();
    };
    let error = IrError::Type {
        prim: op.to_owned(),
        message,
    };
    record(&inner, &error);
    let mut b = inner.borrow_mut();
    avals
        .iter()
        .map(|aval| Tensor {
            builder: inner.clone(),
            atom: Atom::Var(b.jaxpr.new_var(aval.clone())),
            aval: aval.clone(),
        })
        .collect()
}
