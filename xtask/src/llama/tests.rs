//! The Llama rows' command lines, medians, rendering and splicing.

use super::*;

#[test]
fn the_tessera_and_jax_command_lines_name_one_device_and_the_sizes() {
    let model = MODELS[1];
    let args = model.tessera_args(7).join(" ");
    assert!(args.starts_with("train --model llama --layers 4 --d-model 256 --heads 8"));
    for part in [
        "--seq-len 128 --batch 16",
        "--microbatches 1 --stages 1 --mpmd-dim 1 --devices 1",
        "--optimizer adamw --lr 0.001 --no-reference --eval-every 0 --json --steps 7",
    ] {
        assert!(args.contains(part), "{args}");
    }
    let jax = model.jax_args(7, Path::new("c.txt")).join(" ");
    assert_eq!(
        jax,
        "--layers 4 --d-model 256 --heads 8 --seq-len 128 --batch 16 --steps 7 --lr 0.001 \
         --data c.txt"
    );
    assert_eq!(model.tokens_per_step(), 2048.0);
}

#[test]
fn rounds_take_the_median_of_their_medians() {
    let r = Rounds {
        medians_s: vec![0.3, 0.1, 0.2],
    };
    assert_eq!(r.median_s(), 0.2);
    assert_eq!(r.range_s(), (0.1, 0.3));
    let even = Rounds {
        medians_s: vec![0.1, 0.3],
    };
    assert!((even.median_s() - 0.2).abs() < 1e-12);
}

pub(crate) fn fake_section() -> LlamaSection {
    let row = |model: LlamaModel, jax: f64, tessera: f64| LlamaRow {
        model,
        parameters: 25_728_000,
        jax: Rounds {
            medians_s: vec![jax, jax * 1.1, jax * 0.9],
        },
        tessera: Rounds {
            medians_s: vec![tessera; 3],
        },
        check: Check {
            tessera: [4.8625807, 4.0976877],
            jax: [4.8625807, 4.0976863],
        },
    };
    LlamaSection {
        machine: "Test CPU, 2 CPUs (nproc)".into(),
        date: "2026-11-26 10:00 UTC".into(),
        jax: "jax 0.10.1, jaxlib 0.10.1, optax.adamw (optax 0.2.8), cpu".into(),
        rows: vec![row(MODELS[0], 0.086, 0.125), row(MODELS[1], 0.5, 0.4)],
    }
}

#[test]
fn render_gives_tokens_per_second_and_the_ratio_against_the_target() {
    let mut md = String::new();
    render(&mut md, &fake_section());
    let line = |label: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {label} |")))
            .unwrap_or_default()
            .to_owned()
    };
    // 2 × 16 tokens in 86 ms and 125 ms: 372 and 256 tokens/s, 0.69×.
    assert_eq!(
        line(&MODELS[0].label()),
        "| Llama train step, 1 device: 2 layers, d_model 1024, 16 heads, seq_len 16, batch 2 \
         | 25,728,000 | 86.0 ms (77.4 ms–94.6 ms) | 372 | 125 ms (125 ms–125 ms) | 256 | \
         0.69× | ≥ 1.0× | missed (0.69× < 1.00×) |"
    );
    let second = line(&MODELS[1].label());
    assert!(
        second.contains(
            "| 4096 | 400 ms (400 ms–400 ms) | 5120 | 1.25× | ≥ 1.0× | met (1.25× ≥ 1.00×) |"
        ),
        "{second}"
    );
    assert!(md.contains("| 4.8625807 | 4.8625807 | 4.0976877 | 4.0976863 | 3.4e-7 | 1e-4 |"));
    assert!(md.contains("Test CPU, 2 CPUs (nproc), 2026-11-26 10:00 UTC; jax 0.10.1"));
    let mut empty = String::new();
    render(
        &mut empty,
        &LlamaSection {
            rows: Vec::new(),
            ..fake_section()
        },
    );
    assert!(empty.contains("| Llama train step, 1 device | — | not measured yet"));
}

#[test]
fn splice_replaces_the_section_or_inserts_it_before_the_next_one() {
    let stop = "<!-- kept -->";
    let before = "## Pipelined";
    let section = format!("{HEADING}\n\nnew rows\n");
    let without = format!("# B\n\ntable\n\n{before}\n\nold\n\n{stop}\nkept\n");
    let with = splice(&without, &section, before, stop);
    assert_eq!(
        with,
        format!("# B\n\ntable\n\n{HEADING}\n\nnew rows\n\n{before}\n\nold\n\n{stop}\nkept\n")
    );
    let newer = format!("{HEADING}\n\nnewer rows\n");
    assert_eq!(
        splice(&with, &newer, before, stop),
        with.replace("new rows", "newer rows")
    );
    let last = format!("# B\n\n{HEADING}\n\nold rows\n\n{stop}\nkept\n");
    assert_eq!(
        splice(&last, &newer, before, stop),
        format!("# B\n\n{HEADING}\n\nnewer rows\n\n{stop}\nkept\n")
    );
    assert_eq!(
        splice("# B\n", &newer, before, stop),
        format!("# B\n\n{HEADING}\n\nnewer rows\n\n")
    );
}
