//! Forward-only plans: every built-in schedule's placement with forwards only validates as a
//! forward-only plan, for any micro-batch count, and not as a training plan.

use tessera_schedule::{
    ForwardOnly, Registry, Schedule, ScheduleParams, TaskKind, ValidationError, validate,
    validate_forward_only,
};

#[test]
fn every_builtin_placement_runs_forward_only() {
    let registry = Registry::with_builtins();
    for name in registry.names() {
        for (stages, mpmd_dim) in [(4, 4), (4, 2), (8, 4), (2, 1)] {
            let params = ScheduleParams { stages, mpmd_dim };
            let Ok(schedule) = registry.create(&name, params) else {
                continue;
            };
            let forward = ForwardOnly::new(schedule.as_ref());
            for mbs in [1, 3, 4, 7] {
                let plan = forward.plan(mbs).unwrap();
                validate_forward_only(&plan)
                    .unwrap_or_else(|e| panic!("{name} {stages}/{mpmd_dim} {mbs}: {e}"));
                let tasks: Vec<_> = plan.actors.iter().flatten().collect();
                assert_eq!(tasks.len(), (stages * mbs) as usize);
                assert!(
                    tasks
                        .iter()
                        .all(|a| a.tasks().iter().all(|t| t.kind == TaskKind::Fwd))
                );
                assert_eq!(plan.placement, schedule.placement());
                // A training plan needs its backwards.
                assert!(matches!(
                    validate(&plan),
                    Err(ValidationError::Missing { .. })
                ));
            }
        }
    }
}

#[test]
fn a_backward_is_refused_in_a_forward_only_plan() {
    let schedule = Registry::with_builtins()
        .create(
            "1f1b",
            ScheduleParams {
                stages: 2,
                mpmd_dim: 2,
            },
        )
        .unwrap();
    let plan = schedule.plan(2).unwrap();
    let err = validate_forward_only(&plan).unwrap_err();
    assert!(
        matches!(err, ValidationError::BackwardInForwardOnly { .. }),
        "{err}"
    );
}
