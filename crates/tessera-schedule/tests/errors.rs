//! The typed errors and their messages: bad parameters, invalid plans, bad costs.
//! Update with `UPDATE_EXPECT=1 cargo test -p tessera-schedule --test errors`.

use expect_test::{Expect, expect};
use tessera_schedule::{
    Action, Costs, Placement, Plan, Registry, ScheduleError, ScheduleParams, Task, ValidationError,
    simulate, validate,
};

fn check(error: impl std::fmt::Display, expect: Expect) {
    expect.assert_eq(&error.to_string());
}

fn params_error(name: &str, stages: u32, mpmd_dim: u32, m: u32) -> ScheduleError {
    match Registry::with_builtins()
        .create(name, ScheduleParams { stages, mpmd_dim })
        .and_then(|s| s.plan(m))
    {
        Ok(_) => panic!("{name} S={stages} D={mpmd_dim} M={m} should be rejected"),
        Err(e) => e,
    }
}

#[test]
fn parameter_errors() {
    check(
        params_error("interleaved-1f1b", 6, 4, 8),
        expect![
            "6 stages are not a multiple of the MPMD size 4: pick a stage count that is a multiple of the MPMD size (e.g. 8)"
        ],
    );
    check(
        params_error("dualpipev", 6, 2, 8),
        expect![
            "dualpipev: needs exactly 2 stages per actor, i.e. stages = 2 × mpmd_dim (got 6 stages for mpmd_dim 2; use --stages 4 or --mpmd-dim 3)"
        ],
    );
    check(
        params_error("dualpipev", 8, 4, 7),
        expect![
            "dualpipev: needs at least 8 microbatches (at least the number of stages, 2 × mpmd_dim), got 7"
        ],
    );
    check(
        params_error("zero-bubble", 4, 4, 3),
        expect![
            "zero-bubble: needs at least 4 microbatches (one per stage, to fill the warm-up), got 3"
        ],
    );
    check(
        params_error("1f1b", 4, 2, 8),
        expect![
            "1f1b: runs one stage per actor, so the MPMD size must equal the stage count 4 (got 2); use an interleaved schedule for several stages per actor"
        ],
    );
    check(
        params_error("gpipe", 0, 0, 8),
        expect!["gpipe: needs at least 1 stage (got 0)"],
    );
    check(
        params_error("gpipe", 2, 2, 0),
        expect!["gpipe: needs at least 1 microbatches (a pipeline needs work), got 0"],
    );
    check(
        params_error("pipedream", 2, 2, 2),
        expect![[
            r#"unknown schedule "pipedream"; known schedules: 1f1b, 1f1b-fuse-last, dualpipev, dualpipev-deepseek, eager-1f1b, eager-1f1b-fuse-last, gpipe, interleaved-1f1b, interleaved-1f1b-fused, interleaved-gpipe, kimi-k2, kimi-k2-fused, zero-bubble, zero-bubble-fuse-ends"#
        ]],
    );
}

/// A two-stage plan on two actors from explicit lists.
fn plan(actors: Vec<Vec<Action>>, m: u32) -> Plan {
    Plan {
        name: "test".into(),
        num_stages: 2,
        num_microbatches: m,
        placement: Placement::plain(2),
        actors,
    }
}

fn invalid(actors: Vec<Vec<Action>>) -> ValidationError {
    validate(&plan(actors, 1)).expect_err("invalid plan")
}

#[test]
fn validation_errors() {
    let (f0, f1, b0, b1) = (
        Task::fwd(0, 0),
        Task::fwd(1, 0),
        Task::bwd(0, 0),
        Task::bwd(1, 0),
    );
    let good = vec![vec![f0.into(), b0.into()], vec![f1.into(), b1.into()]];
    assert_eq!(validate(&plan(good, 1)), Ok(()));
    check(
        invalid(vec![
            vec![f0.into(), b0.into()],
            vec![f1.into(), b1.into(), f1.into()],
        ]),
        expect![
            "Fwd(1, 0) at actor 1 action #2 repeats work already done by Fwd(1, 0) at actor 1 action #0; every task must appear exactly once"
        ],
    );
    check(
        invalid(vec![
            vec![f0.into(), b0.into()],
            vec![f1.into(), Task::bwd_i(1, 0).into()],
        ]),
        expect![
            "the weight gradient of stage 1 on microbatch 0 is never run; add Bwd(1, 0) or BwdW(1, 0)"
        ],
    );
    check(
        invalid(vec![vec![f0.into(), b0.into(), f1.into()], vec![b1.into()]]),
        expect![
            "actor 0 action #2: Fwd(1, 0) is on actor 0 but the placement puts stage 1 on actor 1"
        ],
    );
    check(
        invalid(vec![vec![b0.into(), f0.into()], vec![f1.into(), b1.into()]]),
        expect![[r#"
            deadlock: running each actor's list in order, these actions wait forever:
              actor 0 action #0: Bwd(0, 0) waits for Fwd(0, 0) at actor 0 action #1
              actor 1 action #0: Fwd(1, 0) waits for Fwd(0, 0) at actor 0 action #1"#]],
    );
    check(
        invalid(vec![
            vec![f0.into(), b0.into()],
            vec![Action::Fused(vec![b1, f1])],
        ]),
        expect![
            "actor 1 action #0: in Fused[Bwd(1, 0) + Fwd(1, 0)], Bwd(1, 0) needs Fwd(1, 0), which comes later in the same fused action; reorder the fused tasks"
        ],
    );
    check(
        invalid(vec![
            vec![f0.into(), b0.into()],
            vec![f1.into(), Task::bwd(1, 3).into()],
        ]),
        expect!["actor 1 action #1: Bwd(1, 3) is out of range (2 stages, 1 microbatches)"],
    );
    check(
        invalid(vec![vec![f0.into(), b0.into()]]),
        expect![
            "the plan has 1 task lists but its placement has 2 actors; give one list per actor"
        ],
    );
}

#[test]
fn cost_errors() {
    let plan = Registry::with_builtins()
        .create(
            "zero-bubble",
            ScheduleParams {
                stages: 2,
                mpmd_dim: 2,
            },
        )
        .and_then(|s| s.plan(2))
        .expect("accepted");
    let err = |costs: Costs| simulate(&plan, &costs).expect_err("bad costs");
    check(
        err(Costs::uniform(2, 1.0, 1.0, 2.0)),
        expect![
            "costs: W = 2 exceeds B = 1 for stage 0; W is the weight-gradient part of B, so W ≤ B"
        ],
    );
    check(
        err(Costs::uniform(3, 1.0, 2.0, 1.0)),
        expect!["costs: F has 3 entries but the schedule has 2 stages; give one per stage"],
    );
    check(
        err(Costs::uniform(2, -1.0, 2.0, 1.0)),
        expect!["costs: F = -1 for stage 0; costs must be finite and ≥ 0"],
    );
    check(
        err(Costs::uniform(2, 1.0, 2.0, 1.0).with_latency(f64::NAN)),
        expect!["costs: transfer latency NaN must be finite and ≥ 0"],
    );
    check(
        Costs::parse("1,x", 2).expect_err("not numbers"),
        expect![[r#"costs: "1,x" is not F,B,W (three numbers, e.g. 1,2,1) or F,B (W = 0)"#]],
    );
    assert_eq!(
        Costs::parse("1, 2,0.5", 2),
        Ok(Costs::uniform(2, 1.0, 2.0, 0.5))
    );
}
