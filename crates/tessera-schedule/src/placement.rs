//! Stage → actor placement: which MPMD group runs each stage.
//!
//! Three shapes cover the built-in schedules: [`Placement::plain`] (stage `s` on actor `s`),
//! [`Placement::round_robin`] (stage `s` on actor `s mod D`, the interleaved schedules) and
//! [`Placement::v_shape`] (stages go down the actors and come back up, DualPipeV). Users can
//! give any table with [`Placement::from_table`].

use serde::{Deserialize, Serialize};

use crate::error::ScheduleError;
use crate::task::{ActorId, StageId};

/// Which actor runs each stage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    num_actors: u32,
    actor_of_stage: Vec<ActorId>,
}

impl Placement {
    /// One stage per actor: stage `s` runs on actor `s`.
    pub fn plain(stages: u32) -> Placement {
        Placement {
            num_actors: stages,
            actor_of_stage: (0..stages).collect(),
        }
    }

    /// Stage `s` runs on actor `s mod actors`; `stages` must be a multiple of `actors`.
    pub fn round_robin(stages: u32, actors: u32) -> Result<Placement, ScheduleError> {
        check_multiple(stages, actors)?;
        Ok(Placement {
            num_actors: actors,
            actor_of_stage: (0..stages).map(|s| s % actors).collect(),
        })
    }

    /// V shape: the stages go down actors `0..D`, then back up `D-1..0`, then down again…
    /// (DualPipeV uses two legs: stage `s` and stage `2D-1-s` share actor `s`).
    pub fn v_shape(stages: u32, actors: u32) -> Result<Placement, ScheduleError> {
        check_multiple(stages, actors)?;
        let actor = |s: u32| {
            let (leg, r) = (s / actors, s % actors);
            if leg % 2 == 0 { r } else { actors - 1 - r }
        };
        Ok(Placement {
            num_actors: actors,
            actor_of_stage: (0..stages).map(actor).collect(),
        })
    }

    /// Any table: `actor_of_stage[s]` runs stage `s`. Every actor below the largest one used
    /// must run at least one stage.
    pub fn from_table(actor_of_stage: Vec<ActorId>) -> Result<Placement, ScheduleError> {
        let Some(&largest) = actor_of_stage.iter().max() else {
            return Err(ScheduleError::NoStages {
                schedule: "placement".into(),
            });
        };
        // The scan stops at the first idle actor, so an id near `u32::MAX` costs no more than
        // the table's length (and `largest + 1` cannot overflow once every id below it is used).
        if let Some(idle) = (0..=largest).find(|a| !actor_of_stage.contains(a)) {
            return Err(ScheduleError::ActorWithoutStage { actor: idle });
        }
        let num_actors = largest.saturating_add(1);
        Ok(Placement {
            num_actors,
            actor_of_stage,
        })
    }

    /// The number of actors (MPMD groups).
    pub fn num_actors(&self) -> u32 {
        self.num_actors
    }

    /// The number of stages.
    pub fn num_stages(&self) -> u32 {
        self.actor_of_stage.len() as u32
    }

    /// The actor that runs `stage`, or `None` if there is no such stage.
    pub fn actor(&self, stage: StageId) -> Option<ActorId> {
        self.actor_of_stage.get(stage as usize).copied()
    }

    /// The stages `actor` runs, in increasing order.
    pub fn stages_of(&self, actor: ActorId) -> Vec<StageId> {
        (0..self.num_stages())
            .filter(|&s| self.actor_of_stage[s as usize] == actor)
            .collect()
    }

    /// The most stages any actor runs (`v` in the interleaved schedules).
    pub fn max_stages_per_actor(&self) -> u32 {
        (0..self.num_actors)
            .map(|a| self.stages_of(a).len() as u32)
            .max()
            .unwrap_or(0)
    }
}

fn check_multiple(stages: u32, actors: u32) -> Result<(), ScheduleError> {
    if stages == 0 {
        return Err(ScheduleError::NoStages {
            schedule: "placement".into(),
        });
    }
    if actors == 0 || !stages.is_multiple_of(actors) {
        return Err(ScheduleError::StagesNotMultiple {
            stages,
            mpmd_dim: actors,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(Placement::plain(3).actor_of_stage, vec![0, 1, 2]);
        let rr = Placement::round_robin(6, 3).expect("6 is a multiple of 3");
        assert_eq!(rr.actor_of_stage, vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(rr.stages_of(1), vec![1, 4]);
        let v = Placement::v_shape(8, 4).expect("8 is a multiple of 4");
        assert_eq!(v.actor_of_stage, vec![0, 1, 2, 3, 3, 2, 1, 0]);
        assert_eq!(v.max_stages_per_actor(), 2);
    }

    #[test]
    fn errors() {
        assert!(matches!(
            Placement::round_robin(6, 4),
            Err(ScheduleError::StagesNotMultiple {
                stages: 6,
                mpmd_dim: 4
            })
        ));
        assert!(matches!(
            Placement::from_table(vec![0, 2]),
            Err(ScheduleError::ActorWithoutStage { actor: 1 })
        ));
    }
}
