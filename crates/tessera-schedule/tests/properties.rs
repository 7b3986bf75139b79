//! Invariants of every built-in schedule, for all the parameters it accepts up to 16 stages and
//! 64 microbatches: the plan validates, and its simulation adds up.

use proptest::prelude::*;
use tessera_schedule::{Costs, Registry, ScheduleParams, simulate, transfers, validate};

/// Every divisor of `stages`, as candidate MPMD sizes.
fn divisors(stages: u32) -> Vec<u32> {
    (1..=stages).filter(|d| stages.is_multiple_of(*d)).collect()
}

/// Builds, validates and simulates `name`; `Ok(false)` when the parameters are rejected.
fn check(name: &str, stages: u32, mpmd_dim: u32, m: u32) -> Result<bool, TestCaseError> {
    let registry = Registry::with_builtins();
    let Ok(schedule) = registry.create(name, ScheduleParams { stages, mpmd_dim }) else {
        return Ok(false);
    };
    let Ok(plan) = schedule.plan(m) else {
        return Ok(false);
    };
    let context = format!("{name} S={stages} D={mpmd_dim} M={m}");
    if let Err(e) = validate(&plan) {
        return Err(TestCaseError::fail(format!("{context}: {e}")));
    }
    let costs = Costs::uniform(stages, 1.0, 2.0, 0.5).with_latency(0.25);
    let sim =
        simulate(&plan, &costs).map_err(|e| TestCaseError::fail(format!("{context}: {e}")))?;
    let work = f64::from(m) * f64::from(stages) * 3.0;
    let busy: f64 = sim.busy.iter().sum();
    prop_assert!(
        (busy - work).abs() < 1e-6,
        "{context}: busy {busy} != work {work}"
    );
    let max_busy = sim.busy.iter().copied().fold(0.0, f64::max);
    prop_assert!(sim.makespan + 1e-9 >= max_busy, "{context}");
    prop_assert!(sim.peak_activations.iter().all(|&p| p >= 1), "{context}");
    let cross = transfers(&plan).map_err(|e| TestCaseError::fail(format!("{context}: {e}")))?;
    prop_assert!(cross.iter().all(|t| t.from != t.to), "{context}");
    Ok(true)
}

const NAMES: [&str; 14] = [
    "gpipe",
    "interleaved-gpipe",
    "1f1b",
    "1f1b-fuse-last",
    "eager-1f1b",
    "eager-1f1b-fuse-last",
    "interleaved-1f1b",
    "interleaved-1f1b-fused",
    "kimi-k2",
    "kimi-k2-fused",
    "zero-bubble",
    "zero-bubble-fuse-ends",
    "dualpipev",
    "dualpipev-deepseek",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_accepted_builtin_validates(name in 0..NAMES.len(), stages in 1u32..=16, pick in 0usize..16, m in 1u32..=64) {
        let ds = divisors(stages);
        let mpmd_dim = ds[pick % ds.len()];
        check(NAMES[name], stages, mpmd_dim, m)?;
        check(NAMES[name], stages, stages, m)?;
    }
}

/// The parameter grid JAXPP's own tests use, which must all be accepted and valid.
#[test]
fn jaxpp_test_parameters_are_accepted() {
    let cases = [
        ("1f1b", 1, 1, 4),
        ("1f1b", 2, 2, 4),
        ("eager-1f1b", 3, 3, 5),
        ("interleaved-1f1b", 1, 1, 1),
        ("interleaved-1f1b", 8, 4, 1),
        ("interleaved-1f1b", 4, 2, 12),
        ("interleaved-1f1b-fused", 8, 4, 8),
        ("zero-bubble", 4, 4, 4),
        ("zero-bubble", 4, 4, 8),
        ("dualpipev", 6, 3, 6),
        ("dualpipev", 6, 3, 10),
    ];
    for (name, stages, mpmd_dim, m) in cases {
        let accepted = check(name, stages, mpmd_dim, m).map_err(|e| e.to_string());
        assert_eq!(accepted, Ok(true), "{name} S={stages} D={mpmd_dim} M={m}");
    }
}

/// An exhaustive sweep of the small cases, so a failure names its parameters directly. Every
/// schedule must accept some of them (a schedule refusing everything would check nothing),
/// and the plain one-stage-per-group pipeline of 4 stages and 8 micro-batches where it takes
/// one stage per group.
#[test]
fn small_cases_exhaustively() {
    for name in NAMES {
        let mut accepted = 0;
        for stages in 1..=6 {
            for mpmd_dim in divisors(stages) {
                for m in 1..=12 {
                    accepted += u32::from(check(name, stages, mpmd_dim, m).expect("valid"));
                }
            }
        }
        assert!(accepted > 0, "{name} accepts none of the small cases");
        let one_per_group = !name.starts_with("interleaved") && !name.starts_with("dualpipev");
        if one_per_group {
            assert_eq!(
                check(name, 4, 4, 8).map_err(|e| e.to_string()),
                Ok(true),
                "{name} refuses 4 stages on 4 groups with 8 micro-batches"
            );
        }
    }
}
