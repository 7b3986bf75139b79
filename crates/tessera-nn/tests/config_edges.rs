//! Hostile decoder sizes: constructors, counts and validation never panic (debug builds check
//! arithmetic overflow), and validation refuses what cannot be built with an error that names
//! the size to change.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use proptest::prelude::*;
use tessera_nn::{DecoderConfig, Init, MAX_LAYERS, Rng};

fn both(layers: usize, d: i64, heads: i64, seq: i64) -> [DecoderConfig; 2] {
    [
        DecoderConfig::gpt2(256, layers, d, heads, seq),
        DecoderConfig::llama(256, layers, d, heads, seq),
    ]
}

#[test]
fn the_counted_parameters_are_the_leaves_of_the_spec() {
    for c in both(3, 16, 2, 8)
        .into_iter()
        .chain(both(1, 8, 4, 1).map(DecoderConfig::tied))
    {
        let leaves: i64 = c
            .spec()
            .leaves()
            .iter()
            .map(|p| p.shape.iter().product::<i64>())
            .sum();
        assert_eq!(c.param_count(), leaves, "{c:?}");
    }
}

#[test]
fn huge_sizes_are_refused_not_overflowed() {
    for c in both(2, i64::MAX, 1, 8)
        .into_iter()
        .chain(both(2, 1 << 40, 1, 8))
        .chain(both(usize::MAX, 16, 2, 8))
        .chain(both(MAX_LAYERS + 1, 16, 2, 8))
        .chain(both(2, 16, 2, i64::MAX))
        .chain(both(2, 16, 2, 1 << 32))
    {
        let err = c.validate().expect_err("refused").to_string();
        assert!(
            err.contains("64 bits") || err.contains("fewer layers"),
            "{c:?}: {err}"
        );
        let _ = c.param_count();
        let _ = c.train_flops_per_token();
    }
    // The largest accepted depth still validates.
    for c in both(MAX_LAYERS, 8, 2, 4) {
        c.validate().unwrap();
    }
}

#[test]
fn an_initializer_of_an_overflowing_shape_is_an_error() {
    let err = Init::Zeros
        .array(&[i64::MAX, 4], &mut Rng::new(0))
        .expect_err("refused")
        .to_string();
    assert!(err.contains("smaller sizes"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any sizes: validation answers, and an accepted decoder counts its parameters exactly.
    #[test]
    fn validation_answers_for_any_sizes(
        vocab in prop_oneof![Just(i64::MIN), -2i64..300, Just(i64::MAX)],
        layers in prop_oneof![0usize..6, Just(usize::MAX)],
        d in prop_oneof![Just(i64::MIN), -2i64..40, Just(i64::MAX / 3), Just(i64::MAX)],
        heads in prop_oneof![-2i64..6, Just(i64::MAX)],
        seq in prop_oneof![-2i64..10, Just(i64::MAX)],
        gpt in any::<bool>(),
        tied in any::<bool>(),
    ) {
        let make = if gpt { DecoderConfig::gpt2 } else { DecoderConfig::llama };
        let mut c = make(vocab, layers, d, heads, seq);
        if tied {
            c = c.tied();
        }
        let _ = c.train_flops_per_token();
        if c.validate().is_ok() {
            let leaves: i64 = c
                .spec()
                .leaves()
                .iter()
                .map(|p| p.shape.iter().product::<i64>())
                .sum();
            prop_assert_eq!(c.param_count(), leaves);
        }
    }
}

#[test]
fn stage_counts_near_usize_max_are_a_wrong_sum_answered_at_once() {
    use tessera_nn::{StagePlan, StagePlanError};
    for (counts, layers) in [
        (vec![usize::MAX, 3], 2),
        (vec![usize::MAX, usize::MAX, 1], 4),
        (vec![0, 0], 1 << 60),
        (vec![usize::MAX], usize::MAX - 1),
    ] {
        match StagePlan::from_counts(&counts, layers) {
            Err(StagePlanError::Sum { suggestion, .. }) => {
                let sum: u128 = suggestion.iter().map(|&c| c as u128).sum();
                assert_eq!(sum, layers as u128, "{counts:?} → {suggestion:?}");
            }
            other => panic!("{counts:?}: {other:?}"),
        }
    }
}

/// The suggestion of a wrong sum, one layer at a time as the messages describe it: added to
/// the smallest stage or taken from the largest, the later stage on ties.
fn one_at_a_time(counts: &[usize], layers: usize) -> Vec<usize> {
    let mut out = counts.to_vec();
    let mut sum: usize = out.iter().sum();
    while sum != layers {
        let adding = sum < layers;
        let i = (0..out.len())
            .rev()
            .reduce(|best, i| match adding {
                true if out[i] < out[best] => i,
                false if out[i] > out[best] => i,
                _ => best,
            })
            .unwrap();
        if adding {
            out[i] += 1;
            sum += 1;
        } else {
            out[i] -= 1;
            sum -= 1;
        }
    }
    out
}

proptest! {
    #[test]
    fn suggestions_move_one_layer_at_a_time(
        counts in prop::collection::vec(0usize..12, 1..6),
        layers in 0usize..40,
    ) {
        use tessera_nn::{StagePlan, StagePlanError};
        if let Err(StagePlanError::Sum { suggestion, .. }) = StagePlan::from_counts(&counts, layers) {
            prop_assert_eq!(suggestion, one_at_a_time(&counts, layers));
        }
    }
}

proptest! {
    /// Any schedule: `at` answers at any step, and a validated one is finite and non-negative.
    #[test]
    fn learning_rate_schedules_answer_at_every_step(
        init in prop_oneof![Just(f64::NAN), Just(-1.0), 0.0f64..1.0, Just(f64::INFINITY)],
        peak in prop_oneof![Just(f64::NAN), 0.0f64..1.0, Just(1e308)],
        end in prop_oneof![Just(-0.5), 0.0f64..1.0],
        warmup in prop_oneof![Just(0u64), 1u64..10, Just(u64::MAX)],
        decay_steps in prop_oneof![Just(0u64), 1u64..20, Just(u64::MAX)],
        step in prop_oneof![0u64..30, Just(u64::MAX)],
    ) {
        use tessera_nn::lr::LrSchedule;
        let schedule = LrSchedule::WarmupCosine { init, peak, warmup, decay_steps, end };
        let rate = schedule.at(step);
        if schedule.validate().is_ok() {
            prop_assert!(rate.is_finite() && rate >= 0.0, "{schedule:?} at {step}: {rate}");
        }
        let _ = LrSchedule::Constant(init).at(step);
    }
}

#[test]
fn parallel_axes_of_zero_or_negative_size_are_refused_or_replicate() {
    use tessera_nn::ParallelAxes;
    let c = DecoderConfig::llama(256, 2, 16, 2, 8);
    for size in [0, -1, i64::MIN, 3, i64::MAX] {
        assert!(
            c.param_specs(&ParallelAxes::tensor("model", size)).is_err(),
            "{size}"
        );
        let _ = c.param_specs(&ParallelAxes::replicated().with_fsdp("data", size));
    }
    let bad = DecoderConfig::llama(256, 2, 16, 0, 8);
    let _ = bad.param_specs(&ParallelAxes::tensor("model", 2));
}

#[test]
fn a_warm_up_to_a_huge_peak_does_not_overflow_to_infinity() {
    use tessera_nn::lr::LrSchedule;
    let schedule = LrSchedule::WarmupCosine {
        init: 0.0,
        peak: 1e308,
        warmup: 9,
        decay_steps: u64::MAX,
        end: 0.0,
    };
    schedule.validate().unwrap();
    let rate = schedule.at(2);
    assert!(rate.is_finite() && rate > 0.0, "{rate}");
}
