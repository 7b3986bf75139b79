//! The calibration's rules: the shapes it times, the leaders' turns and medians, the fresh
//! timings and the machine's level.

use super::*;

#[test]
fn the_leaders_rank_by_the_median_of_their_timings() {
    // Layouts 4, 2, 7 lead (7 untimed is skipped, 9 is the third timed one); 4 was timed
    // luckily once and measures slower twice more.
    let mut timings = BTreeMap::from([
        (4, vec![10.0]),
        (2, vec![11.0]),
        (9, vec![12.0]),
        (5, vec![20.0]),
    ]);
    let again = BTreeMap::from([(4, [13.0, 14.0]), (2, [11.5, 10.5]), (9, [12.0, 12.5])]);
    let mut calls = Vec::new();
    let mut time = |i: usize, timing: usize| {
        calls.push((i, timing));
        Ok(again[&i][timing - 1])
    };
    assert!(settle_leaders(&[4, 2, 7, 9, 5], &mut timings, &mut time).unwrap());
    // Settled leaders are not timed again.
    assert!(!settle_leaders(&[4, 2, 7, 9, 5], &mut timings, &mut time).unwrap());
    // Taking turns: each leader once, then each again; the fourth timed layout untouched.
    assert_eq!(calls, [(4, 1), (2, 1), (9, 1), (4, 2), (2, 2), (9, 2)]);
    assert_eq!(
        medians(&timings),
        BTreeMap::from([(4, 13.0), (2, 11.0), (9, 12.0), (5, 20.0)])
    );
}

#[test]
fn a_single_timed_layout_is_not_timed_again() {
    let mut timings = BTreeMap::from([(0, vec![10.0])]);
    let settled = settle_leaders(&[0, 1, 2], &mut timings, |_, _| bail!("timed again"));
    assert!(!settled.unwrap());
    assert_eq!(timings[&0], [10.0]);
}

/// A candidate of `groups` groups of one device predicted at `ms` milliseconds and
/// calibrated by `factor`.
fn candidate(groups: u32, ms: f64, factor: Option<f64>) -> Candidate {
    Candidate {
        stages: groups,
        stage_layers: vec![1; groups as usize],
        groups,
        data: 1,
        devices: groups,
        microbatches: 2,
        rows_per_device: 1,
        schedule: "1f1b".to_string(),
        step_seconds: ms / 1000.0,
        simulated_seconds: ms / 1000.0,
        bubble: 0.0,
        peak_bytes: 0,
        peak_bytes_per_group: vec![0; groups as usize],
        tokens_per_second: 1000.0 / ms,
        same_prediction: Vec::new(),
        measured_stages: false,
        remat: None,
        fsdp_gather: None,
        calibration: factor,
        timed_step_ms: None,
    }
}

#[test]
fn the_leaders_are_predicted_by_fresh_timings_and_the_rest_by_the_level() {
    // Settled: 4 (10.0 ms), 2 (11.0), 9 (12.0) lead; 7 is untimed, 5 timed but not a leader.
    let timings = BTreeMap::from([
        (4, vec![10.0, 9.0, 10.5]),
        (2, vec![11.0, 11.5, 10.5]),
        (9, vec![12.0, 12.5, 11.0]),
        (5, vec![20.0]),
    ]);
    let again = BTreeMap::from([(4, [11.0, 12.0]), (2, [10.5, 11.5]), (9, [12.0, 13.2])]);
    let mut calls = Vec::new();
    let order = [4, 2, 7, 9, 5];
    let fresh = retime_leaders(&order, &timings, |i: usize, timing: usize| {
        calls.push((i, timing));
        Ok(again[&i][timing - TIMINGS])
    })
    .unwrap();
    // Taking turns, numbered after the settled timings; the fourth timed layout untouched.
    assert_eq!(calls, [(4, 3), (2, 3), (9, 3), (4, 4), (2, 4), (9, 4)]);
    assert_eq!(fresh, BTreeMap::from([(4, 11.5), (2, 11.0), (9, 12.6)]));
    // Fresh over settled: 1.15, 1.0, 1.05; the median is 9's.
    let level = machine_level(&medians(&timings), &fresh).unwrap();
    assert!((level - 1.05).abs() < 1e-12, "{level}");
    // Predictions 8, 10, 11, 12, 15 ms; the timed ones calibrated to their settled steps,
    // 7 by its shape's factor 1.1 (so at 12.1 ms, after 9 as the timings ranked them).
    let current = vec![
        (4, candidate(1, 10.0, Some(1.25))),
        (2, candidate(2, 11.0, Some(1.1))),
        (9, candidate(3, 12.0, Some(1.0))),
        (7, candidate(2, 12.1, Some(1.1))),
        (5, candidate(4, 20.0, Some(4.0 / 3.0))),
    ];
    let out = with_fresh_steps(current, &fresh, Some(level));
    let ms: Vec<f64> = out.iter().map(|c| c.step_seconds * 1000.0).collect();
    let expected = [11.5, 11.0, 12.6, 12.1 * 1.05, 20.0 * 1.05];
    for (got, want) in ms.iter().zip(expected) {
        assert!((got - want).abs() < 1e-9, "{ms:?} against {expected:?}");
    }
    // The order is the settled one: 2 is faster than 4 afresh and stays second.
    assert_eq!(
        out.iter().map(|c| c.groups).collect::<Vec<_>>(),
        [1, 2, 3, 2, 4]
    );
    // A leader's factor is its fresh step over the time model's prediction (8 ms for 4).
    assert!((out[0].calibration.unwrap() - 11.5 / 8.0).abs() < 1e-12);
    assert_eq!(out[0].timed_step_ms, Some(11.5));
    assert!((out[3].calibration.unwrap() - 1.1 * 1.05).abs() < 1e-12);
    assert_eq!(out[3].timed_step_ms, None);
    // Tokens per second follow the step.
    assert!((out[4].tokens_per_second - 1000.0 / 21.0).abs() < 1e-9);
}

#[test]
fn without_two_leaders_nothing_is_timed_afresh() {
    let timings = BTreeMap::from([(0, vec![10.0, 10.0, 10.0])]);
    let fresh = retime_leaders(&[0, 1], &timings, |_, _| bail!("timed again")).unwrap();
    assert!(fresh.is_empty());
    assert_eq!(machine_level(&medians(&timings), &fresh), None);
    let current = vec![
        (0, candidate(1, 10.0, Some(1.0))),
        (1, candidate(2, 9.0, None)),
    ];
    let out = with_fresh_steps(current.clone(), &fresh, None);
    let unchanged: Vec<Candidate> = current.into_iter().map(|(_, c)| c).collect();
    assert_eq!(out, unchanged);
}
/// A shape predicted within the margin of the first is timed though none of its layouts is
/// among the `--calibrate` fastest; one beyond it, or already calibrated, is not; nothing
/// is timed with `--calibrate 0`.
#[test]
fn shapes_near_the_first_are_calibrated_too() {
    let current = vec![
        (0, candidate(6, 100.0, None)),
        (1, candidate(6, 101.0, None)),
        (2, candidate(6, 102.0, None)),
        (3, candidate(1, 125.0, None)),
        (4, candidate(3, 128.0, None)),
        (5, candidate(2, 140.0, None)),
    ];
    assert_eq!(
        shapes_to_time(&current, 2, &BTreeSet::new()),
        [(6, 1), (1, 1), (3, 1)]
    );
    let calibrated = BTreeSet::from([(6, 1), (3, 1)]);
    assert_eq!(shapes_to_time(&current, 2, &calibrated), [(1, 1)]);
    // Past the margin, a shape among the `--calibrate` fastest is still timed.
    assert_eq!(shapes_to_time(&current, 6, &calibrated), [(1, 1), (2, 1)]);
    assert!(shapes_to_time(&current, 0, &BTreeSet::new()).is_empty());
}

/// The untimed layouts predicted within the near-tie margin of the first are timed, fastest
/// first and no more than there is room for; timed ones and those past the margin are not;
/// nothing is timed with `--calibrate 0`.
#[test]
fn near_ties_of_the_first_are_timed_too() {
    let current = vec![
        (4, candidate(1, 100.0, Some(1.0))),
        (0, candidate(1, 105.0, Some(1.0))),
        (7, candidate(1, 110.0, Some(1.0))),
        (2, candidate(2, 114.0, Some(1.0))),
        (9, candidate(1, 116.0, Some(1.0))),
        (3, candidate(1, 130.0, Some(1.0))),
    ];
    let timings = BTreeMap::from([(4, vec![100.0]), (0, vec![105.0])]);
    assert_eq!(near_ties_to_time(&current, 7, &timings, 8), [7, 2]);
    assert_eq!(near_ties_to_time(&current, 7, &timings, 1), [7]);
    assert!(near_ties_to_time(&current, 7, &timings, 0).is_empty());
    assert!(near_ties_to_time(&current, 0, &timings, 8).is_empty());
}
