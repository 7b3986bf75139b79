//! Every shared schedule's action lists equal JAXPP's, for 1 to 8 stages and 1 to 16
//! microbatches: `data/jaxpp_orders.json` holds what JAXPP's own `tasks()` returns (written by
//! `data/gen_jaxpp_orders.py`; format in `data/README.md`). Where JAXPP refuses the parameters,
//! Tessera refuses too, except for the documented extensions in [`extension`], whose plans must
//! validate.

use serde::Deserialize;
use tessera_schedule::{Action, Registry, ScheduleParams, Task, validate};

/// One row of the data file.
#[derive(Deserialize)]
struct Case {
    schedule: String,
    stages: u32,
    mpmd_dim: u32,
    microbatches: u32,
    /// Each actor's actions as JAXPP writes them (absent when JAXPP refused).
    actors: Option<Vec<Vec<String>>>,
    /// JAXPP's exception, `Type: message`, when it refused the parameters.
    refused: Option<String>,
}

impl Case {
    fn context(&self) -> String {
        format!(
            "{} stages={} mpmd_dim={} microbatches={}",
            self.schedule, self.stages, self.mpmd_dim, self.microbatches
        )
    }
}

fn cases() -> Vec<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jaxpp_orders.json");
    let text = std::fs::read_to_string(path).expect("the data file is committed");
    serde_json::from_str(&text).expect("the data file parses")
}

/// `F0:3` for a task, as the data file writes it.
fn task_text(task: &Task) -> String {
    format!("{}{}:{}", task.kind.letter(), task.stage, task.mb)
}

/// A single task as its text, a fused action as `(F3:0+B3:0)`.
fn action_text(action: &Action) -> String {
    match action {
        Action::Single(task) => task_text(task),
        Action::Fused(tasks) => {
            let parts: Vec<String> = tasks.iter().map(task_text).collect();
            format!("({})", parts.join("+"))
        }
    }
}

/// Parameters JAXPP refuses and Tessera accepts on purpose: the interleaved family's microbatch
/// counts that do not split into equal rounds (Tessera balances the rounds), and ZeroBubble on
/// one stage (JAXPP's generator fails there with an `UnboundLocalError`, not a refusal).
fn extension(case: &Case, why: &str) -> bool {
    let interleaved =
        case.schedule.starts_with("interleaved-1f1b") || case.schedule.starts_with("kimi-k2");
    (interleaved && why.contains("n_microbatches must be divisible by mpmd_dim"))
        || (case.schedule == "zero-bubble"
            && case.stages == 1
            && why.starts_with("UnboundLocalError"))
}

/// Compares one case; `Err` says how Tessera differs from JAXPP.
fn compare(registry: &Registry, case: &Case) -> Result<(), String> {
    let params = ScheduleParams {
        stages: case.stages,
        mpmd_dim: case.mpmd_dim,
    };
    let plan = registry
        .create(&case.schedule, params)
        .and_then(|s| s.plan(case.microbatches));
    match (&case.actors, &case.refused, plan) {
        (Some(want), _, Ok(plan)) => {
            let got: Vec<Vec<String>> = plan
                .actors
                .iter()
                .map(|list| list.iter().map(action_text).collect())
                .collect();
            if &got == want {
                return Ok(());
            }
            let actor = (0..want.len().max(got.len()))
                .find(|&a| want.get(a) != got.get(a))
                .unwrap_or(0);
            Err(format!(
                "actor {actor} differs\n  jaxpp:   {:?}\n  tessera: {:?}",
                want.get(actor),
                got.get(actor)
            ))
        }
        (Some(_), _, Err(e)) => Err(format!("JAXPP accepts, Tessera refuses: {e}")),
        (None, Some(_), Err(_)) => Ok(()),
        (None, Some(why), Ok(plan)) if extension(case, why) => {
            validate(&plan).map_err(|e| format!("accepted beyond JAXPP ({why}), but invalid: {e}"))
        }
        (None, Some(why), Ok(_)) => Err(format!("JAXPP refuses ({why}), Tessera accepts")),
        (None, None, _) => Err("the data file's case has neither actors nor refused".into()),
    }
}

#[test]
fn every_shared_schedule_matches_jaxpp() {
    let registry = Registry::with_builtins();
    let cases = cases();
    let mut by_schedule = std::collections::BTreeMap::<&str, usize>::new();
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let e = compare(&registry, case).err()?;
            *by_schedule.entry(case.schedule.as_str()).or_default() += 1;
            Some(format!("{}: {e}", case.context()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from JAXPP ({by_schedule:?}); the first of each:\n{}",
        failures.len(),
        cases.len(),
        by_schedule
            .keys()
            .filter_map(|name| failures.iter().find(|f| f.starts_with(&format!("{name} "))))
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_data_covers_every_shared_schedule_and_size() {
    let cases = cases();
    for name in [
        "gpipe",
        "1f1b",
        "eager-1f1b",
        "zero-bubble",
        "interleaved-1f1b",
        "interleaved-1f1b-fused",
        "kimi-k2",
        "kimi-k2-fused",
        "dualpipev",
    ] {
        for stages in 1..=8 {
            for m in 1..=16 {
                let accepted = cases
                    .iter()
                    .any(|c| c.schedule == name && c.stages == stages && c.microbatches == m);
                assert!(accepted, "no case for {name} stages={stages} m={m}");
            }
        }
        let compared = cases
            .iter()
            .filter(|c| c.schedule == name && c.actors.is_some())
            .count();
        assert!(
            compared >= 16,
            "{name}: only {compared} cases JAXPP accepts"
        );
    }
}
