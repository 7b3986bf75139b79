//! The planner sections' rendering: verdicts, paces, drift against the plan and earlier runs.

use super::*;

#[test]
fn the_summary_checks_both_targets() {
    let run = serde_json::json!({"meta": {"commit": "abc"}, "data": {
        "preset": "gpt-held-out", "held_out": true, "plan_command": "tessera plan",
        "plan_seconds": 100.0, "layouts_considered": 40, "steps": 10, "rounds": 3,
        "load_average": [{"start": 1.0, "end": 2.0}], "within_15_percent": 5, "of": 7,
        "regret": 0.031,
        "candidates": [{"rank": 1, "groups": 2, "data": 3, "stages": 2,
            "stage_layers": [3, 3], "microbatches": 2, "schedule": "1f1b",
            "remat": "dots_saveable", "predicted_ms": 50.0, "measured_ms": 55.0, "rounds_ms": [55.0, 54.0, 56.0]}]}});
    let mut md = String::new();
    render_run(&mut md, &run).unwrap();
    assert!(md.contains("held out from the time model's tuning"), "{md}");
    assert!(
        md.contains("**5 of the first 7 within 15% of their prediction** (target 6 of 7: missed)"),
        "{md}"
    );
    assert!(md.contains("**regret 3.1%**"), "{md}");
    assert!(md.contains("at most 5%: met"), "{md}");
    assert!(!md.contains("fresh"), "{md}");
    assert!(
        md.contains(
            "| 1 | 2 × 3 | 2 (3,3) | 2 | 1f1b | dots_saveable | 50.0 | 55.0 (55.0, 54.0, 56.0) | 1.10× |"
        ),
        "{md}"
    );
}

/// Each round's pace and the plan's timings repeated right after it, from the run's steps.
#[test]
fn the_machine_s_drift_is_read_from_the_rounds() {
    let candidate = |rank: u64, rounds: [f64; 3], confirmed: Value, again: Value| {
        serde_json::json!({"rank": rank, "measured_ms": rounds[0], "rounds_ms": rounds,
            "confirmed_rounds_ms": confirmed, "timed_by_plan_ms": rounds[0] - 1.0,
            "after_plan_ms": again})
    };
    let candidates = [
        candidate(
            1,
            [10.0, 20.0, 10.0],
            serde_json::json!([15.0, 15.0]),
            Value::Null,
        ),
        candidate(
            2,
            [20.0, 40.0, 20.0],
            serde_json::json!([30.0, 40.0]),
            Value::Null,
        ),
        candidate(3, [5.0, 10.0, 5.0], Value::Null, serde_json::json!(6.0)),
    ];
    let mut md = String::new();
    render_drift(&mut md, &candidates, 3, None);
    assert!(
        md.contains("over the round's layouts): 1.00, 2.00, 1.00; confirming rounds 1.50, 2.00 ("),
        "{md}"
    );
    assert!(
        md.contains(
            "measured 1.50× (rank 3) its timings; against those steps the rounds ran at \
             0.83, 1.67, 0.83 (the median"
        ),
        "{md}"
    );
    // A run without confirming rounds or repeated timings says neither.
    let plain = [candidate(1, [10.0, 11.0, 12.0], Value::Null, Value::Null)];
    let mut md = String::new();
    render_drift(&mut md, &plain, 3, None);
    assert!(md.contains("layouts): 1.00, 1.10, 1.20."), "{md}");
    assert!(
        !md.contains("confirming") && !md.contains("right after"),
        "{md}"
    );
}

#[test]
fn an_earlier_run_keeps_its_verdicts_and_paces() {
    let run = serde_json::json!({"meta": {"commit": "abc", "machine": "M", "date": "D"},
        "data": {"within_15_percent": 1, "of": 7, "regret": 0.151, "regret_unconfirmed": 0.05,
        "rounds": 2, "candidates": [{"rank": 1, "measured_ms": 10.0, "rounds_ms": [10.0, 12.0],
        "confirmed_rounds_ms": [18.0], "timed_by_plan_ms": 10.0, "after_plan_ms": 11.0}]}});
    let mut md = String::new();
    render_earlier(&mut md, &[&run]);
    assert!(
        md.contains(
            "- commit abc, M, D: **1 of 7 within 15%** (missed), **regret 15.1%** (missed; \
             5.0% over the first rounds); each round's pace 1.00, 1.20, the confirming \
             rounds' 1.80; the plan's timings repeated at 1.10× (rank 1); the rounds \
             against those repeats 0.91, 1.09."
        ),
        "{md}"
    );
    let mut none = String::new();
    render_earlier(&mut none, &[]);
    assert!(none.is_empty());
}

/// A run with confirming rounds judges its regret on them and shows both.
#[test]
fn a_confirmed_regret_is_judged_and_the_first_rounds_one_shown() {
    let run = serde_json::json!({"meta": {"commit": "abc"}, "data": {
        "preset": "gpt", "held_out": false, "plan_command": "tessera plan",
        "plan_seconds": 100.0, "layouts_considered": 40, "steps": 10, "rounds": 3,
        "load_average": [{"start": 1.0, "end": 2.0}], "within_15_percent": 6, "of": 7,
        "within_15_percent_untimed": 4, "of_untimed": 5,
        "regret": 0.02, "regret_unconfirmed": 0.21, "confirmed": 4,
        "candidates": [{"rank": 1, "groups": 2, "data": 4, "stages": 2,
            "stage_layers": [2, 2], "microbatches": 1, "schedule": "1f1b",
            "predicted_ms": 30.0, "measured_ms": 33.0, "rounds_ms": [33.0, 32.0, 34.0],
            "confirmed_rounds_ms": [31.0, 30.5, 32.0], "timed_by_plan_ms": 30.0},
            {"rank": 40, "groups": 2, "data": 4, "stages": 2,
            "stage_layers": [2, 2], "microbatches": 2, "schedule": "gpipe",
            "predicted_ms": 40.0, "measured_ms": 41.0, "rounds_ms": [41.0, 41.0, 41.0]},
            {"rank": 41, "groups": 2, "data": 4, "stages": 2,
            "stage_layers": [2, 2], "microbatches": 4, "schedule": "gpipe",
            "predicted_ms": 45.0, "measured_ms": 44.0, "rounds_ms": [44.0, 44.0, 44.0],
            "confirmed_rounds_ms": [44.0, 44.0, 44.0]}]}});
    let mut md = String::new();
    render_run(&mut md, &run).unwrap();
    assert!(md.contains("**regret 2.0%**"), "{md}");
    assert!(
        md.contains("3 fresh rounds of the first choice and the 3 layouts"),
        "{md}"
    );
    assert!(md.contains("over the first rounds alone 21.0%"), "{md}");
    assert!(md.contains("at most 5%: met"), "{md}");
    assert!(
        md.contains("| 33.0 (33.0, 32.0, 34.0; again 31.0, 30.5, 32.0) |"),
        "{md}"
    );
    // Its calibration's share, the layout it timed marked; a layout neither among the
    // first 7 nor measured again is left to the run file.
    assert!(
        md.contains("timed 2 of those 7 itself") && md.contains("of the 5 it predicted"),
        "{md}"
    );
    assert!(md.contains("where it did), 4 within 15%"), "{md}");
    assert!(md.contains("| 1 † | 2 × 4 |"), "{md}");
    assert!(
        md.contains("| 41 | 2 × 4 |") && !md.contains("| 40 |"),
        "{md}"
    );
    assert!(md.contains("the other 1 layouts measured"), "{md}");
}

/// The host's probe, before and after the plan and at each round, where the run has it.
#[test]
fn the_host_s_probe_is_drawn_where_the_run_has_it() {
    let data = serde_json::json!({"probe_ms": {"before_plan": 160.4, "after_plan": 171.0},
        "load_average": [{"start": 1.0, "end": 1.0, "probe_ms": 162.0},
            {"start": 1.0, "end": 1.0, "probe_ms": 158.0},
            {"start": 1.0, "end": 1.0, "probe_ms": 165.0, "confirming": true}]});
    assert_eq!(
        probe_text(&data).as_deref(),
        Some(
            "160 ms before the plan, 171 ms after it, 162, 158 ms at the start of each round \
             and 165 ms at each confirming round's"
        )
    );
    let mut md = String::new();
    render_drift(&mut md, &[], 3, probe_text(&data));
    assert!(
        md.contains("(SHA-256 and a copy of 64 MiB, the median of 3) took 160 ms before the plan"),
        "{md}"
    );
    // Runs from before the probe draw none.
    let older = serde_json::json!({"load_average": [{"start": 1.0, "end": 1.0}]});
    assert_eq!(probe_text(&older), None);
}

/// The steady-host rule's waits, per round and in all, where the run has the rule.
#[test]
fn the_steady_host_rule_s_waits_are_drawn_where_the_run_has_it() {
    let gate = |waited: u64, waited_s: f64, outside: u64| {
        serde_json::json!({"trainings": 4, "waited": waited, "waited_s": waited_s,
            "outside": outside})
    };
    let data = serde_json::json!({"probe_ms": {"before_plan": 160.4, "after_plan": 171.0},
        "gate": {"within": 0.2, "wait_s": 60.0, "after_plan": gate(1, 2.0, 0)},
        "load_average": [{"start": 1.0, "end": 1.0, "gate": gate(2, 10.5, 1)},
            {"start": 1.0, "end": 1.0, "gate": gate(0, 0.2, 0)},
            {"start": 1.0, "end": 1.0, "confirming": true, "gate": gate(3, 70.0, 1)}]});
    let text = gate_text(&data).unwrap();
    assert!(text.contains("within 20% of the 171 ms after the plan"), "{text}");
    assert!(text.contains("per round: 2 of 4, 0 of 4 (confirming rounds: 3 of 4);"), "{text}");
    assert!(text.contains("83 s of waiting in all; 2 of the 16 trainings"), "{text}");
    // Runs from before the rule draw none.
    let older = serde_json::json!({"probe_ms": {"before_plan": 160.4, "after_plan": 171.0},
        "load_average": [{"start": 1.0, "end": 1.0, "probe_ms": 162.0}]});
    assert_eq!(gate_text(&older), None);
}
