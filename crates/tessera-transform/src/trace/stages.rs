//! Pipeline stage boundaries in a traced loss, written three ways that record the same thing:
//!
//! - [`Tensor::enter_stage`] (JAXPP's `pipeline_enter_stage`): the value enters stage `k`,
//!   numbered by the caller;
//! - [`mark_stage_end`] / [`Tensor::mark_stage_end`] (JAXPP's `mark_stage_end`): the current
//!   stage ends here and the marked values are the ones crossing into the next stage;
//! - [`pipeline_yield`] (JAXPP's `pipeline_yield`, the boundary `mpmd_jit_by_yield` splits on):
//!   the same boundary under its other name.
//!
//! All three bind the one `pipeline_enter_stage` primitive, so partitioning, autodiff, the
//! interpreter and lowering treat them alike. Each trace counts its stages: it starts in stage
//! 0, an `enter_stage(k)` moves it to `k` if `k` is later, and each `mark_stage_end` call moves
//! it one stage on, giving every value it marks the new stage's number.

use crate::params::{ParamValue, Params};
use crate::prim::Prim;

use super::Tensor;

impl Tensor {
    /// Marks the start of pipeline stage `stage` (JAXPP's `pipeline_enter_stage`).
    pub fn enter_stage(&self, stage: i64) -> Tensor {
        {
            let mut b = self.builder.borrow_mut();
            b.stage = b.stage.max(stage);
        }
        Tensor::bind1(
            Prim::PipelineEnterStage,
            Params::new().with("stage", ParamValue::Int(stage)),
            &[self],
        )
    }

    /// Ends the current stage with this one value crossing into the next (JAXPP's
    /// `mark_stage_end` on one array). Each call is a boundary of its own: for several values
    /// crossing the same boundary use the free [`mark_stage_end`].
    pub fn mark_stage_end(&self) -> Tensor {
        mark_stage_end(std::slice::from_ref(self)).remove(0)
    }
}

/// Ends the trace's current stage: `values` are what the next stage reads of the stages so far,
/// returned as that stage's inputs (JAXPP's `mark_stage_end`). An empty slice marks nothing and
/// leaves the stage as it is. Values of another trace fail the trace as any operation does.
pub fn mark_stage_end(values: &[Tensor]) -> Vec<Tensor> {
    let Some(first) = values.first() else {
        return Vec::new();
    };
    let next = first.builder.borrow().stage + 1;
    values.iter().map(|v| v.enter_stage(next)).collect()
}

/// JAXPP's `pipeline_yield`: the stage boundary of a program compiled by `mpmd_jit_by_yield`,
/// recorded exactly as [`mark_stage_end`] records it.
pub fn pipeline_yield(values: &[Tensor]) -> Vec<Tensor> {
    mark_stage_end(values)
}
