//! Renderings of a simulated plan: [`ascii`] (a text timeline), [`svg`] (a picture) and
//! [`json`] (a machine-readable report).

mod ascii;
mod json;
mod svg;

pub use ascii::{ascii, stats};
pub use json::{Report, json};
pub use svg::svg;

use crate::schedule::Plan;
use crate::task::{Action, Task};

/// Short label of a task: kind letter and microbatch (`F3`), plus the stage (`F3s5`) when
/// actors run several stages.
pub fn task_label(task: &Task, with_stage: bool) -> String {
    if with_stage {
        format!("{}{}s{}", task.kind.letter(), task.mb, task.stage)
    } else {
        format!("{}{}", task.kind.letter(), task.mb)
    }
}

/// Short label of an action: its tasks' labels joined by `+`.
pub fn action_label(action: &Action, with_stage: bool) -> String {
    let labels: Vec<String> = action
        .tasks()
        .iter()
        .map(|t| task_label(t, with_stage))
        .collect();
    labels.join("+")
}

/// Whether labels need the stage (some actor runs several stages).
fn needs_stage(plan: &Plan) -> bool {
    plan.placement.max_stages_per_actor() > 1
}
