//! A schedule written outside the crate goes through the same API as the built-ins: registry,
//! validation, simulation, transfers and all three renderings.

use expect_test::expect;
use tessera_schedule::{
    Action, Costs, Placement, Registry, Schedule, ScheduleError, ScheduleParams, Task,
    ValidationError, render, simulate, transfers, validate,
};

/// GPipe that drains in reverse (last microbatch first), so the last stage's final forward and
/// first backward are adjacent and run fused.
struct ReverseDrain {
    stages: u32,
}

impl Schedule for ReverseDrain {
    fn name(&self) -> String {
        "reverse-drain".into()
    }

    fn placement(&self) -> Placement {
        Placement::plain(self.stages)
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        let last = self.stages - 1;
        Ok((0..self.stages)
            .map(|s| {
                let mut list: Vec<Action> = (0..m).map(|mb| Task::fwd(s, mb).into()).collect();
                if s == last {
                    list.pop();
                    list.push(Action::fuse(Task::fwd(s, m - 1), Task::bwd(s, m - 1)));
                    list.extend((0..m - 1).rev().map(|mb| Action::from(Task::bwd(s, mb))));
                } else {
                    list.extend((0..m).rev().map(|mb| Action::from(Task::bwd(s, mb))));
                }
                list
            })
            .collect())
    }
}

/// A broken schedule: every actor runs its backwards before its forwards.
struct BackwardsFirst;

impl Schedule for BackwardsFirst {
    fn name(&self) -> String {
        "backwards-first".into()
    }

    fn placement(&self) -> Placement {
        Placement::plain(2)
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        Ok((0..2)
            .map(|s| {
                (0..m)
                    .map(|mb| Task::bwd(s, mb))
                    .chain((0..m).map(|mb| Task::fwd(s, mb)))
                    .map(Action::from)
                    .collect()
            })
            .collect())
    }
}

fn registry() -> Registry {
    let mut registry = Registry::with_builtins();
    registry.register(
        "reverse-drain",
        "GPipe draining last microbatch first",
        |p: ScheduleParams| {
            if p.mpmd_dim != p.stages {
                return Err(ScheduleError::Invalid {
                    schedule: "reverse-drain".into(),
                    reason: "one stage per actor".into(),
                });
            }
            Ok(Box::new(ReverseDrain { stages: p.stages }) as Box<dyn Schedule>)
        },
    );
    registry
}

#[test]
fn custom_schedule_validates_simulates_and_renders() {
    let registry = registry();
    assert!(registry.names().contains(&"reverse-drain".to_owned()));
    let schedule = registry
        .create(
            "reverse-drain",
            ScheduleParams {
                stages: 3,
                mpmd_dim: 3,
            },
        )
        .expect("registered");
    let plan = schedule.plan(3).expect("any microbatch count");
    assert_eq!(validate(&plan), Ok(()));
    let costs = Costs::uniform(3, 1.0, 2.0, 0.0);
    let sim = simulate(&plan, &costs).expect("valid");
    // Fill-drain: the same makespan as GPipe, (m+p-1)(F+B).
    assert_eq!(sim.makespan, 5.0 * 3.0);
    expect![[r#"
        time    0              5              10             15
        actor 0 F0 F1 F2 ..................B2    B1    B0
        actor 1 ...F0 F1 F2 .........B2    B1    B0    ......
        actor 2 ......F0 F1 F2+B2    B1    B0    ............
    "#]]
    .assert_eq(&render::ascii(&plan, &sim));
    let svg = render::svg(&plan, &costs, &sim);
    assert!(svg.starts_with("<svg") && svg.contains("fused action") && svg.contains("actor 2"));
    let json: serde_json::Value =
        serde_json::from_str(&render::json(&plan, &costs, &sim)).expect("JSON");
    assert_eq!(json["schedule"], "reverse-drain");
    assert_eq!(json["makespan"], 15.0);
    assert_eq!(json["peak_activations"], serde_json::json!([3, 3, 3]));
    assert_eq!(json["actors"][2][2]["fused"][1]["kind"], "bwd");
    // Two hops per microbatch: an activation down and a gradient up, per stage boundary.
    let sent = transfers(&plan).expect("valid");
    assert_eq!(sent.len(), 2 * 2 * 3);
}

#[test]
fn custom_registry_constructor_errors() {
    let err = registry()
        .create(
            "reverse-drain",
            ScheduleParams {
                stages: 4,
                mpmd_dim: 2,
            },
        )
        .err()
        .expect("rejected");
    assert_eq!(err.to_string(), "reverse-drain: one stage per actor");
}

#[test]
fn broken_custom_schedule_is_reported() {
    let plan = BackwardsFirst.plan(2).expect("built");
    let Err(ValidationError::Deadlock { blocked }) = validate(&plan) else {
        panic!("expected a deadlock")
    };
    assert_eq!(blocked.len(), 2);
    assert!(simulate(&plan, &Costs::uniform(2, 1.0, 1.0, 0.0)).is_err());
}

#[test]
fn plans_round_trip_through_json() {
    let plan = registry()
        .create(
            "dualpipev",
            ScheduleParams {
                stages: 4,
                mpmd_dim: 2,
            },
        )
        .and_then(|s| s.plan(4))
        .expect("accepted");
    let text = serde_json::to_string(&plan).expect("serialise");
    let back: tessera_schedule::Plan = serde_json::from_str(&text).expect("deserialise");
    assert_eq!(back, plan);
}

#[test]
fn transfers_name_the_actions_that_send_and_receive() {
    let plan = registry()
        .create(
            "1f1b-fuse-last",
            ScheduleParams {
                stages: 2,
                mpmd_dim: 2,
            },
        )
        .and_then(|s| s.plan(1))
        .expect("accepted");
    // Actor 0: [Fwd(0,0), Bwd(0,0)]; actor 1: [Fused[Fwd(1,0) + Bwd(1,0)]].
    let sent = transfers(&plan).expect("valid");
    let summary: Vec<String> = sent
        .iter()
        .map(|t| {
            format!(
                "{:?} {}#{} -> {}#{}",
                t.payload, t.from, t.sent_after, t.to, t.received_before
            )
        })
        .collect();
    assert_eq!(summary, ["Gradient 1#0 -> 0#1", "Activation 0#0 -> 1#0"]);
}
