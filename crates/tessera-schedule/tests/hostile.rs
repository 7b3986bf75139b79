//! Hostile input to the schedule crate: garbage plans (tasks of stages and micro-batches that do
//! not exist, actor lists that do not match the placement, counts at `u32::MAX`) and planner
//! search spaces at the integer limits. Validation refuses what is wrong and nothing panics
//! (debug builds check arithmetic overflow) or loops for long.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use proptest::prelude::*;
use tessera_schedule::memory::{StageBytes, peak_inflight, predict_peak_bytes};
use tessera_schedule::plan::{Part, Profile};
use tessera_schedule::search::{RowCosts, Space, search, shapes};
use tessera_schedule::{
    Action, Costs, Placement, Plan, Task, render, simulate, transfers, validate,
};

fn task() -> impl Strategy<Value = Task> {
    let id = prop_oneof![0u32..4, Just(u32::MAX)];
    (0u8..4, id.clone(), id).prop_map(|(kind, stage, mb)| match kind {
        0 => Task::fwd(stage, mb),
        1 => Task::bwd(stage, mb),
        2 => Task::bwd_i(stage, mb),
        _ => Task::bwd_w(stage, mb),
    })
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        task().prop_map(Action::from),
        (task(), task()).prop_map(|(a, b)| Action::fuse(a, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any plan: validation answers; an accepted one simulates, renders and predicts memory.
    #[test]
    fn garbage_plans_are_refused_or_simulated_without_a_panic(
        stages in 0u32..4,
        microbatches in prop_oneof![0u32..4, Just(u32::MAX)],
        actors in prop::collection::vec(prop::collection::vec(action(), 0..6), 0..5),
        num_stages in prop_oneof![0u32..5, Just(u32::MAX)],
    ) {
        let plan = Plan {
            name: "garbage".into(),
            num_stages,
            num_microbatches: microbatches,
            actors,
            placement: Placement::plain(stages),
        };
        let costs = Costs::uniform(stages, 1.0, 2.0, 1.0);
        let simulated = simulate(&plan, &costs);
        let _ = transfers(&plan);
        if validate(&plan).is_ok() {
            let sim = simulated.unwrap();
            let _ = render::ascii(&plan, &sim);
            let _ = render::svg(&plan, &costs, &sim);
            let _ = render::json(&plan, &costs, &sim);
            let _ = peak_inflight(&plan);
            let huge = StageBytes {
                activation: u64::MAX,
                weight_residual: u64::MAX,
                backward: u64::MAX,
                accumulators: u64::MAX,
            };
            let _ = predict_peak_bytes(&plan, &[u64::MAX; 4], &[huge; 4]);
        }
    }
}

fn costs(rows: u32, data: u32) -> Option<RowCosts> {
    let part = Part {
        forward: 1e-3 * f64::from(rows),
        backward: 2e-3 * f64::from(rows),
        activation_bytes: 100 * u64::from(rows),
        parameter_bytes: 1000,
    };
    let _ = data;
    Some(RowCosts::uniform_bytes(
        rows,
        Profile {
            embedding: part,
            layers: vec![part; 2],
            head: part,
        },
    ))
}

#[test]
fn search_spaces_at_the_integer_limits_answer_at_once() {
    let base = Space {
        devices: 2,
        batch: 4,
        layers: 2,
        ..Space::default()
    };
    for space in [
        Space {
            max_stages_per_group: u32::MAX,
            ..base.clone()
        },
        Space {
            microbatches: vec![u32::MAX, 2],
            ..base.clone()
        },
        Space {
            batch: u32::MAX,
            microbatches: vec![u32::MAX],
            ..base.clone()
        },
        Space {
            devices: u32::MAX,
            batch: u32::MAX,
            microbatches: vec![1],
            ..base.clone()
        },
    ] {
        let found = shapes(&space);
        assert!(found.iter().all(|s| s.stages <= 4), "{found:?}");
    }
    // The first space still ranks: stages stop at the layers plus the two ends.
    let ranked = search(
        &costs,
        &Space {
            max_stages_per_group: u32::MAX,
            ..base
        },
    )
    .unwrap();
    assert!(ranked.iter().all(|c| c.stages <= 4));
}

#[test]
fn memory_predictions_of_huge_bytes_do_not_overflow() {
    use tessera_schedule::{Registry, ScheduleParams};
    let params = ScheduleParams {
        stages: 4,
        mpmd_dim: 2,
    };
    let plan = Registry::with_builtins()
        .create("interleaved-1f1b", params)
        .and_then(|s| s.plan(8))
        .unwrap();
    let huge = StageBytes {
        activation: u64::MAX / 2,
        weight_residual: u64::MAX,
        backward: u64::MAX,
        accumulators: u64::MAX,
    };
    let peaks = predict_peak_bytes(&plan, &[u64::MAX; 2], &[huge; 4]);
    assert_eq!(peaks.len(), 2);
    let costs = Costs::uniform(4, 1e308, 1e308, 0.0);
    let sim = simulate(&plan, &costs).unwrap();
    let _ = render::ascii(&plan, &sim);
    let _ = render::svg(&plan, &costs, &sim);
    let _ = render::json(&plan, &costs, &sim);
}

#[test]
fn memory_predictions_skip_stages_an_unvalidated_plan_does_not_have() {
    let plan = Plan {
        name: "garbage".into(),
        num_stages: 1,
        num_microbatches: 1,
        actors: vec![vec![Task::fwd(7, 0).into(), Task::bwd(u32::MAX, 0).into()]],
        placement: Placement::plain(1),
    };
    assert!(validate(&plan).is_err());
    assert_eq!(peak_inflight(&plan), vec![0]);
    assert_eq!(
        predict_peak_bytes(&plan, &[5], &[StageBytes::default()]),
        vec![5]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every built-in with any small or zero sizes: creation and planning answer, and an
    /// accepted plan validates.
    #[test]
    fn builtins_answer_for_zero_and_odd_sizes(
        name in prop::sample::select(tessera_schedule::Registry::with_builtins().names()),
        stages in 0u32..7,
        mpmd_dim in 0u32..7,
        microbatches in 0u32..9,
    ) {
        use tessera_schedule::{Registry, ScheduleParams};
        let params = ScheduleParams { stages, mpmd_dim };
        if let Ok(plan) = Registry::with_builtins()
            .create(&name, params)
            .and_then(|s| s.plan(microbatches))
        {
            prop_assert!(validate(&plan).is_ok(), "{name} {params:?} m={microbatches}");
        }
    }
}

#[test]
fn tiny_costs_label_the_time_axis_with_numbers() {
    use tessera_schedule::{Registry, ScheduleParams};
    let plan = Registry::with_builtins()
        .create(
            "1f1b",
            ScheduleParams {
                stages: 2,
                mpmd_dim: 2,
            },
        )
        .and_then(|s| s.plan(4))
        .unwrap();
    for costs in [
        Costs::uniform(2, 1e-320, 1e-320, 0.0),
        Costs::uniform(2, 1.0001, 2.0002, 0.0),
    ] {
        let sim = simulate(&plan, &costs).unwrap();
        let text = render::ascii(&plan, &sim);
        let axis = text.lines().next().unwrap();
        // No label ends in a bare decimal point (`0.` for 1e-320 before).
        assert!(
            axis.split_whitespace().all(|label| !label.ends_with('.')),
            "{axis}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The boundary search with any stage count, odd times, huge bytes and memory limits
    /// answers without a panic, and a split it returns covers every layer.
    #[test]
    fn partition_answers_for_hostile_profiles(
        layers in 0usize..6,
        stages in prop_oneof![0usize..9, Just(usize::MAX)],
        seconds in prop_oneof![Just(f64::NAN), Just(-1.0), 0.0f64..2.0, Just(1e308)],
        bytes in prop_oneof![0u64..100, Just(u64::MAX)],
        limit in prop_oneof![Just(None), (0u64..1000).prop_map(Some), Just(Some(u64::MAX))],
        copies in prop_oneof![0u64..4, Just(u64::MAX)],
        in_flight in prop::collection::vec(prop_oneof![0u32..4, Just(u32::MAX)], 0..4),
        empty_ends in any::<bool>(),
    ) {
        use tessera_schedule::plan::{MemoryLimit, PartitionOptions, partition};
        let part = Part {
            forward: seconds,
            backward: 1.0,
            activation_bytes: bytes,
            parameter_bytes: bytes,
        };
        let profile = Profile { embedding: part, layers: vec![part; layers], head: part };
        let options = PartitionOptions {
            empty_ends,
            memory: limit.map(|bytes| MemoryLimit {
                bytes,
                parameter_copies: copies,
                in_flight: in_flight.clone(),
            }),
        };
        if let Ok(split) = partition(&profile, stages, &options) {
            prop_assert_eq!(split.counts.iter().sum::<usize>(), layers);
            prop_assert_eq!(split.counts.len(), stages);
        }
    }
}

#[test]
fn placement_tables_with_huge_actor_ids_are_refused() {
    use tessera_schedule::ScheduleError;
    for table in [vec![u32::MAX], vec![0, u32::MAX], vec![1, 2]] {
        assert!(
            matches!(
                Placement::from_table(table.clone()),
                Err(ScheduleError::ActorWithoutStage { .. })
            ),
            "{table:?}"
        );
    }
    assert!(Placement::from_table(Vec::new()).is_err());
    assert_eq!(
        Placement::from_table(vec![1, 0, 1]).unwrap().num_actors(),
        2
    );
    assert!(Placement::round_robin(4, 0).is_err());
    assert!(Placement::v_shape(0, 0).is_err());
    assert!(Placement::v_shape(u32::MAX, 2).is_err());
}

#[test]
fn schedules_of_absurd_sizes_are_refused_before_they_are_built() {
    use tessera_schedule::{MAX_STAGES, Registry, ScheduleParams};
    let registry = Registry::with_builtins();
    for name in registry.names() {
        for (stages, mpmd_dim) in [(u32::MAX, u32::MAX), (1 << 31, 2), (2, u32::MAX)] {
            let err = registry
                .create(&name, ScheduleParams { stages, mpmd_dim })
                .err()
                .unwrap_or_else(|| panic!("{name} accepted {stages} stages on {mpmd_dim}"));
            assert!(
                err.to_string().contains(&MAX_STAGES.to_string()),
                "{name}: {err}"
            );
        }
        // u32::MAX micro-batches are refused, not allocated.
        let schedule = registry.create(
            &name,
            ScheduleParams {
                stages: 4,
                mpmd_dim: 2,
            },
        );
        if let Ok(schedule) = schedule {
            let err = schedule.plan(u32::MAX).expect_err(&name).to_string();
            assert!(err.contains("micro-batches"), "{name}: {err}");
        }
    }
}
