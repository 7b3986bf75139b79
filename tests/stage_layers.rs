//! `tessera train --stage-layers`: uneven stage boundaries, including a first stage holding the
//! embedding alone and a last stage holding the final norm, the head and the loss alone, train
//! the GPT preset pipelined over 4 groups equal to the unpipelined run on every step, and
//! `--json` records the boundaries; counts that do not split the layers are refused before any
//! device work, naming the smallest fix.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_tests::{summary_numbers, tessera_train, train_summary};

fn gpt(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "--model",
        "gpt",
        "--stages",
        "4",
        "--microbatches",
        "4",
        "--batch",
        "8",
        "--steps",
        "3",
        "--eval-every",
        "0",
        "--json",
    ];
    args.extend(extra);
    train_summary(&tessera_train(&args), &format!("{args:?}"))
}

#[test]
fn uneven_stages_train_like_the_unpipelined_run() {
    let runs: [(&[&str], [u64; 4]); 4] = [
        (
            &["--layers", "9", "--stage-layers", "3,3,2,1"],
            [3, 3, 2, 1],
        ),
        // The head and the loss alone on the last stage.
        (&["--stage-layers", "2,1,1,0"], [2, 1, 1, 0]),
        // The embedding alone on the first stage, both ends alone under zero-bubble.
        (&["--stage-layers", "0,2,1,1"], [0, 2, 1, 1]),
        (
            &["--stage-layers", "0,2,2,0", "--schedule", "zero-bubble"],
            [0, 2, 2, 0],
        ),
    ];
    for (extra, counts) in runs {
        let s = gpt(extra);
        let recorded: Vec<u64> = s["stage_layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(recorded, counts, "{extra:?}");
        let (losses, reference) = (
            summary_numbers(&s, "losses"),
            summary_numbers(&s, "reference_losses"),
        );
        assert_eq!(losses.len(), 3, "{extra:?}");
        assert_eq!(reference.len(), 3, "{extra:?}");
        for (a, b) in losses.iter().zip(&reference) {
            assert!((a - b).abs() <= 1e-4 * b.abs(), "{extra:?}: {a} vs {b}");
        }
        assert!(
            s["max_relative_difference"].as_f64().unwrap() <= 1e-4,
            "{extra:?}"
        );
        assert_eq!(s["order_matches_schedule"], true, "{extra:?}");
    }
    // Without --stage-layers stage s begins at layer ceil(s × layers / stages).
    let s = gpt(&["--layers", "6"]);
    assert_eq!(s["stage_layers"], serde_json::json!([2, 1, 2, 1]));
}

#[test]
fn stage_layers_that_do_not_split_the_layers_are_refused_with_the_fix() {
    let dir = std::env::temp_dir().join(format!("tessera-stage-layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gpt.toml");
    std::fs::write(
        &config,
        "model = \"gpt2\"\nlayers = 4\nstage_layers = [2, 2, 1, 1]\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (
            &[
                "--model",
                "gpt",
                "--layers",
                "9",
                "--stage-layers",
                "3,3,2,0",
            ],
            "--stage-layers 3,3,2,0 sums to 8 layers but the model has 9: add 1 to a stage, e.g. \
             3,3,2,1",
        ),
        (
            &["--model", "gpt", "--stage-layers", "3,3,2,1"],
            "--stage-layers 3,3,2,1 sums to 9 layers but the model has 4: take 5 from the \
             stages, e.g. 1,1,1,1",
        ),
        (
            &["--model", "gpt", "--stage-layers", "2,2"],
            "--stage-layers 2,2 names 2 stages but --stages is 4: pass --stages 2 with it, or \
             give 4 counts, e.g. 1,1,1,1",
        ),
        (
            &["--model", "gpt", "--stage-layers", "2,0,1,1"],
            "stage 1 of 2,0,1,1 has no layers: only the first stage (the embedding alone) or the \
             last (the head and the loss alone) may be empty; move a layer into it, e.g. 1,1,1,1",
        ),
        (
            &["--model", "mlp", "--stage-layers", "1,1,1,1"],
            "the mlp model has one layer per stage",
        ),
        (
            &["--config", config],
            "gpt.toml: stage_layers 2,2,1,1 sums to 6 layers but the model has 4: take 2 from \
             the stages, e.g. 1,1,1,1",
        ),
        // The flag wins over the file.
        (
            &["--config", config, "--stage-layers", "1,1,1,2"],
            "--stage-layers 1,1,1,2 sums to 5 layers but the model has 4",
        ),
    ];
    for (args, message) in cases {
        let out = tessera_train(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        // Refused before any device work: no step ran.
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("step "),
            "{args:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
