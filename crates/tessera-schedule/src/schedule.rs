//! The [`Schedule`] trait users implement, the [`Plan`] it produces, and a [`Registry`] of
//! schedules by name.
//!
//! A schedule is a recipe; a plan is its data for a given microbatch count: the placement and
//! each actor's ordered list of [`Action`]s. Validation, simulation, rendering and the MPMD
//! runtime all take the plan, so they never special-case a schedule.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::builtins;
use crate::error::ScheduleError;
use crate::placement::Placement;
use crate::task::Action;

/// The most stages (and MPMD groups) [`Registry::create`] accepts: a plan's placement and
/// lists grow with the stage count, so a count near `u32::MAX` would exhaust memory.
pub const MAX_STAGES: u32 = 1 << 16;

/// The most stage-micro-batch pairs [`Schedule::plan`] builds (each becomes two or three tasks).
pub const MAX_PIPELINE_CELLS: u64 = 1 << 22;

/// A pipeline schedule: a placement of stages on actors and, for a microbatch count, each
/// actor's ordered list of actions.
pub trait Schedule {
    /// A short name, e.g. `1f1b`.
    fn name(&self) -> String;

    /// Where each stage runs. Its stage count is the schedule's.
    fn placement(&self) -> Placement;

    /// Each actor's actions, in the order the actor runs them, for `microbatches` microbatches.
    /// Errors say which microbatch counts the schedule accepts.
    fn actions(&self, microbatches: u32) -> Result<Vec<Vec<Action>>, ScheduleError>;

    /// The plan for `microbatches` microbatches (placement plus actions). Not validated: call
    /// [`crate::validate()`] on it.
    fn plan(&self, microbatches: u32) -> Result<Plan, ScheduleError> {
        if microbatches == 0 {
            return Err(ScheduleError::TooFewMicrobatches {
                schedule: self.name(),
                needed: 1,
                got: 0,
                why: "a pipeline needs work".into(),
            });
        }
        let placement = self.placement();
        let cells = u64::from(placement.num_stages()) * u64::from(microbatches);
        if cells > MAX_PIPELINE_CELLS {
            return Err(ScheduleError::Invalid {
                schedule: self.name(),
                reason: format!(
                    "{} stages × {microbatches} micro-batches = {cells} is more than the \
                     {MAX_PIPELINE_CELLS} stage-micro-batch pairs a plan may hold; use fewer \
                     micro-batches",
                    placement.num_stages()
                ),
            });
        }
        Ok(Plan {
            name: self.name(),
            num_stages: placement.num_stages(),
            num_microbatches: microbatches,
            actors: self.actions(microbatches)?,
            placement,
        })
    }
}

/// A schedule as plain data: what each actor runs, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The schedule's name.
    pub name: String,
    /// The number of stages.
    pub num_stages: u32,
    /// The number of microbatches.
    pub num_microbatches: u32,
    /// Where each stage runs.
    pub placement: Placement,
    /// Each actor's actions, in execution order; `actors[a]` is actor `a`'s list.
    pub actors: Vec<Vec<Action>>,
}

impl Plan {
    /// The number of actors (MPMD groups).
    pub fn num_actors(&self) -> u32 {
        self.placement.num_actors()
    }
}

/// The parameters a registry constructor gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleParams {
    /// The number of stages.
    pub stages: u32,
    /// The number of actors (MPMD groups).
    pub mpmd_dim: u32,
}

/// Makes a schedule from parameters.
pub type Constructor =
    Box<dyn Fn(ScheduleParams) -> Result<Box<dyn Schedule>, ScheduleError> + Send + Sync>;

struct Entry {
    about: String,
    make: Constructor,
}

/// Schedules by name: the built-ins, plus any a user registers.
pub struct Registry {
    entries: BTreeMap<String, Entry>,
}

impl Registry {
    /// An empty registry.
    pub fn empty() -> Registry {
        Registry {
            entries: BTreeMap::new(),
        }
    }

    /// The built-in schedules under their command-line names.
    pub fn with_builtins() -> Registry {
        let mut registry = Registry::empty();
        builtins::register_all(&mut registry);
        registry
    }

    /// Registers (or replaces) `name`, with a one-line description.
    pub fn register(
        &mut self,
        name: &str,
        about: &str,
        make: impl Fn(ScheduleParams) -> Result<Box<dyn Schedule>, ScheduleError>
        + Send
        + Sync
        + 'static,
    ) {
        self.entries.insert(
            name.to_owned(),
            Entry {
                about: about.to_owned(),
                make: Box::new(make),
            },
        );
    }

    /// Makes the schedule registered as `name`.
    pub fn create(
        &self,
        name: &str,
        params: ScheduleParams,
    ) -> Result<Box<dyn Schedule>, ScheduleError> {
        match self.entries.get(name) {
            Some(entry) => {
                for (what, count) in [("stages", params.stages), ("mpmd_dim", params.mpmd_dim)] {
                    if count > MAX_STAGES {
                        return Err(ScheduleError::Invalid {
                            schedule: name.to_owned(),
                            reason: format!(
                                "{what} {count} is more than the {MAX_STAGES} a schedule may \
                                 have (a plan holds every stage's work); use fewer"
                            ),
                        });
                    }
                }
                (entry.make)(params)
            }
            None => Err(ScheduleError::UnknownSchedule {
                name: name.to_owned(),
                known: self.names().join(", "),
            }),
        }
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    /// `(name, description)` pairs, sorted by name.
    pub fn describe(&self) -> Vec<(String, String)> {
        self.entries
            .iter()
            .map(|(name, e)| (name.clone(), e.about.clone()))
            .collect()
    }
}

impl Default for Registry {
    fn default() -> Registry {
        Registry::with_builtins()
    }
}
