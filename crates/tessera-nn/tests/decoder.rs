//! Both decoders trace into verified loss programs whose loss at initialisation is near
//! `ln(vocab)`, whose gradients are finite and non-zero for every parameter, and whose stage
//! markers sit where the plan says.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::{Array, DType, Prim, value_and_grad, verify};
use tessera_nn::{DecoderConfig, StagePlan, StagePlanError, Tree};

const ROWS: i64 = 2;

fn tiny(kind: &str) -> DecoderConfig {
    match kind {
        "gpt2" => DecoderConfig::gpt2(16, 4, 8, 2, 4),
        _ => DecoderConfig::llama(16, 4, 8, 2, 4),
    }
}

fn tokens(c: &DecoderConfig, offset: i64) -> Array {
    let n = ROWS * c.seq_len;
    let values = (0..n)
        .map(|i| ((i * 5 + offset) % c.vocab) as f64)
        .collect();
    Array::new(DType::I32, &[ROWS, c.seq_len], values).unwrap()
}

fn inputs(c: &DecoderConfig, params: &Tree<Array>) -> Vec<Array> {
    let mut args = vec![tokens(c, 0)];
    args.extend(params.flatten());
    args.push(tokens(c, 1));
    args
}

#[test]
fn losses_start_near_uniform_and_gradients_reach_every_parameter() {
    for kind in ["gpt2", "llama"] {
        let c = tiny(kind);
        let program = c.loss(ROWS, &StagePlan::single()).unwrap();
        verify(&program).unwrap();
        let params = c.init(0).unwrap();
        assert_eq!(params.len(), c.spec().len());
        let args = inputs(&c, &params);
        let loss = eval_closed(&program, &args).unwrap()[0].to_vec()[0];
        let uniform = (c.vocab as f64).ln();
        assert!(
            (loss - uniform).abs() < 0.2,
            "{kind}: loss {loss}, ln(vocab) {uniform}"
        );

        let argnums: Vec<usize> = (1..=params.len()).collect();
        let grads_program = value_and_grad(&program, &argnums).unwrap();
        let outs = eval_closed(&grads_program, &args).unwrap();
        assert!((outs[0].to_vec()[0] - loss).abs() < 1e-6);
        for (path, g) in c.spec().paths().iter().zip(&outs[1..]) {
            let values = g.to_vec();
            assert!(values.iter().all(|v| v.is_finite()), "{kind} {path}");
            assert!(
                values.iter().any(|v| *v != 0.0),
                "{kind} {path}: zero gradient"
            );
        }
    }
}

#[test]
fn parameter_trees_name_the_layers_and_count_the_parameters() {
    let gpt = tiny("gpt2");
    let llama = tiny("llama");
    let paths = gpt.spec().paths();
    assert_eq!(paths[..2], ["embed.tokens.table", "embed.positions"]);
    assert!(paths.contains(&"blocks.3.attn.qkv.b".to_owned()));
    assert!(paths.contains(&"blocks.0.mlp.fc.w".to_owned()));
    let paths = llama.spec().paths();
    assert!(paths.contains(&"blocks.2.mlp.gate.w".to_owned()));
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("positions") || p.ends_with(".b"))
    );
    // GPT-2: per block 2 norms (2d each), qkv (3d^2 + 3d), out (d^2 + d), mlp (8d^2 + 5d).
    let (v, d, t, l) = (16, 8, 4, 4);
    let block = 4 * d + 3 * d * d + 3 * d + d * d + d + 8 * d * d + 5 * d;
    assert_eq!(gpt.param_count(), v * d + t * d + l * block + 2 * d + d * v);
    // The tree round-trips through its flat argument list.
    let params = llama.init(3).unwrap();
    let back = params.unflatten(params.flatten()).unwrap();
    assert_eq!(back.paths(), params.paths());
    for (a, b) in back.leaves().iter().zip(params.leaves()) {
        assert_eq!(a.to_vec(), b.to_vec());
    }
}

#[test]
fn stage_plans_place_one_marker_per_boundary() {
    let c = tiny("llama");
    for (plan, markers) in [
        (StagePlan::even(2, 4).unwrap(), vec![1]),
        (StagePlan::even(4, 4).unwrap(), vec![1, 2, 3]),
        // Three stages of four layers: 2 + 1 + 1, never fewer stages than asked.
        (StagePlan::even(3, 4).unwrap(), vec![1, 2]),
        (StagePlan::at_layers(&[1, 3]), vec![1, 2]),
        (StagePlan::from_counts(&[1, 2, 1], 4).unwrap(), vec![1, 2]),
        // The embedding alone on the first stage, the head and loss alone on the last.
        (StagePlan::from_counts(&[0, 4], 4).unwrap(), vec![1]),
        (StagePlan::from_counts(&[4, 0], 4).unwrap(), vec![1]),
        (
            StagePlan::from_counts(&[0, 2, 2, 0], 4).unwrap(),
            vec![1, 2, 3],
        ),
    ] {
        let program = c.loss(ROWS, &plan).unwrap();
        let stages: Vec<i64> = program
            .jaxpr
            .eqns
            .iter()
            .filter(|e| e.prim == Prim::PipelineEnterStage)
            .map(|e| e.params.int("pipeline_enter_stage", "stage").unwrap())
            .collect();
        assert_eq!(stages, markers, "{plan:?}");
    }
}

fn markers_and_positions(program: &tessera_ir::ClosedJaxpr) -> Vec<(usize, i64)> {
    program
        .jaxpr
        .eqns
        .iter()
        .enumerate()
        .filter(|(_, e)| e.prim == Prim::PipelineEnterStage)
        .map(|(i, e)| (i, e.params.int("pipeline_enter_stage", "stage").unwrap()))
        .collect()
}

/// Layer counts per stage become boundaries and back; the first and last stage may hold no
/// layers (their markers sit right after the embedding and right before the final norm), and
/// the staged loss equals the unstaged one.
#[test]
fn stage_plans_from_layer_counts() {
    assert_eq!(
        StagePlan::from_counts(&[3, 3, 2, 1], 9).unwrap(),
        StagePlan::at_layers(&[3, 6, 8])
    );
    assert_eq!(
        StagePlan::from_counts(&[4, 4, 0], 8).unwrap(),
        StagePlan::at_layers(&[4, 8])
    );
    assert_eq!(
        StagePlan::from_counts(&[0, 4, 4], 8).unwrap(),
        StagePlan::at_layers(&[0, 4])
    );
    assert_eq!(
        StagePlan::from_counts(&[5], 5).unwrap(),
        StagePlan::single()
    );
    // Every split of up to 5 layers over up to 4 stages round-trips through its counts.
    for layers in 1..=5usize {
        for stages in 1..=4usize {
            let mut counts = vec![0; stages];
            loop {
                if counts.iter().sum::<usize>() == layers {
                    let middle_empty = (1..stages.saturating_sub(1)).any(|s| counts[s] == 0);
                    match StagePlan::from_counts(&counts, layers) {
                        Ok(plan) => {
                            assert!(!middle_empty, "{counts:?}");
                            assert_eq!(plan.stages(), stages);
                            assert_eq!(plan.counts(layers), counts);
                        }
                        Err(err) => assert!(middle_empty, "{counts:?}: {err}"),
                    }
                }
                // The next counts vector, each entry in 0..=layers.
                let Some(i) = counts.iter().position(|&c| c < layers) else {
                    break;
                };
                counts[i] += 1;
                counts[..i].fill(0);
            }
        }
    }
    for kind in ["gpt2", "llama"] {
        let c = tiny(kind);
        let params = c.init(0).unwrap();
        let args = inputs(&c, &params);
        let single = c.loss(ROWS, &StagePlan::single()).unwrap();
        let expected = eval_closed(&single, &args).unwrap()[0].to_vec()[0];
        for counts in [[0, 2, 2], [2, 2, 0], [1, 3, 0]] {
            let program = c
                .loss(ROWS, &StagePlan::from_counts(&counts, 4).unwrap())
                .unwrap();
            verify(&program).unwrap();
            let loss = eval_closed(&program, &args).unwrap()[0].to_vec()[0];
            assert!((loss - expected).abs() < 1e-6, "{kind} {counts:?}");
            assert_eq!(
                markers_and_positions(&program).len(),
                2,
                "{kind} {counts:?}"
            );
        }
        // Where the markers sit, in equations: `layer` apart per layer of a stage, so an empty
        // first stage ends right after the embedding and an empty last one begins right before
        // the final norm.
        let at = |counts: &[usize]| {
            let program = c
                .loss(ROWS, &StagePlan::from_counts(counts, 4).unwrap())
                .unwrap();
            let markers = markers_and_positions(&program);
            let last = program.jaxpr.eqns.len() - markers[markers.len() - 1].0;
            (markers[0].0, last)
        };
        let layer = at(&[2, 1, 1]).0 - at(&[1, 2, 1]).0;
        assert!(layer > 10, "{kind}: a block is {layer} equations");
        assert_eq!(at(&[1, 2, 1]).0 - at(&[0, 2, 2]).0, layer, "{kind}");
        assert_eq!(at(&[2, 1, 1]).1 - at(&[2, 2, 0]).1, layer, "{kind}");
    }
}

#[test]
fn stage_layer_counts_that_do_not_split_the_layers_name_the_fix() {
    let err = StagePlan::from_counts(&[3, 3, 2], 9).unwrap_err();
    assert_eq!(
        err.to_string(),
        "3,3,2 sums to 8 layers but the model has 9: add 1 to a stage, e.g. 3,3,3"
    );
    let err = StagePlan::from_counts(&[3, 4, 2], 7).unwrap_err();
    assert_eq!(
        err.to_string(),
        "3,4,2 sums to 9 layers but the model has 7: take 2 from the stages, e.g. 3,2,2"
    );
    assert!(matches!(
        err,
        StagePlanError::Sum {
            sum: 9,
            layers: 7,
            ..
        }
    ));
    let err = StagePlan::from_counts(&[3, 0, 3, 2], 8).unwrap_err();
    assert_eq!(
        err,
        StagePlanError::EmptyMiddle {
            counts: vec![3, 0, 3, 2],
            stage: 1,
            suggestion: vec![3, 1, 2, 2],
        }
    );
    assert!(
        err.to_string().contains("stage 1 of 3,0,3,2 has no layers"),
        "{err}"
    );
    assert!(matches!(
        StagePlan::from_counts(&[], 4),
        Err(StagePlanError::NoStages { layers: 4 })
    ));
    // The suggestions are valid splits.
    for (counts, layers) in [
        (vec![1, 0, 1], 2),
        (vec![0, 0, 5], 5),
        (vec![2, 0, 0, 2], 4),
    ] {
        let Err(StagePlanError::EmptyMiddle { suggestion, .. }) =
            StagePlan::from_counts(&counts, layers)
        else {
            panic!("{counts:?} has an empty middle stage");
        };
        assert_eq!(suggestion.iter().sum::<usize>(), layers);
        assert!(suggestion[1] > 0, "{counts:?} -> {suggestion:?}");
    }
    // Boundaries past the last layer are refused by the loss.
    let err = tiny("gpt2")
        .loss(1, &StagePlan::at_layers(&[2, 5]))
        .unwrap_err();
    assert!(err.to_string().contains("in 0..=4"), "{err}");
}

#[test]
fn bad_configurations_say_what_to_fix() {
    let err = DecoderConfig::gpt2(16, 2, 10, 3, 4)
        .loss(1, &StagePlan::single())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("heads (3) must divide d_model (10)"),
        "{err}"
    );
    let err = DecoderConfig::llama(16, 2, 6, 2, 4).init(0).unwrap_err();
    assert!(err.to_string().contains("even head width"), "{err}");
    let err = tiny("gpt2")
        .loss(1, &StagePlan::at_layers(&[3, 2]))
        .unwrap_err();
    assert!(
        err.to_string().contains("increasing layer indices"),
        "{err}"
    );
    assert!(StagePlan::even(5, 4).is_err());
    assert_eq!(
        StagePlan::even(3, 4).unwrap(),
        StagePlan::at_layers(&[2, 3])
    );
}

/// Mixed precision: in bfloat16 every matmul computes in bfloat16 while the parameters, their
/// gradients and the loss stay float32, and the loss is the float32 one's within bfloat16's
/// rounding.
#[test]
fn bf16_compute_keeps_float32_parameters_gradients_and_loss() {
    for kind in ["gpt2", "llama"] {
        let f32_config = tiny(kind);
        let config = f32_config.with_compute_dtype(DType::BF16);
        let program = config.loss(ROWS, &StagePlan::even(2, 4).unwrap()).unwrap();
        verify(&program).unwrap();
        let dots: Vec<DType> = program
            .jaxpr
            .eqns
            .iter()
            .filter(|e| e.prim == Prim::DotGeneral)
            .map(|e| program.jaxpr.aval(e.outputs[0]).dtype)
            .collect();
        assert!(
            !dots.is_empty() && dots.iter().all(|d| *d == DType::BF16),
            "{kind}: {dots:?}"
        );
        let params = config.init(0).unwrap();
        let args = inputs(&config, &params);
        let argnums: Vec<usize> = (1..=params.len()).collect();
        let outs = eval_closed(&value_and_grad(&program, &argnums).unwrap(), &args).unwrap();
        assert_eq!(outs[0].dtype(), DType::F32, "{kind}: the loss");
        assert!(
            outs[1..].iter().all(|g| g.dtype() == DType::F32),
            "{kind}: a gradient"
        );
        let f32_program = f32_config.loss(ROWS, &StagePlan::single()).unwrap();
        let exact = eval_closed(&f32_program, &args).unwrap()[0].to_vec()[0];
        let mixed = outs[0].to_vec()[0];
        assert!(
            (mixed - exact).abs() <= 2e-2 * exact.abs(),
            "{kind}: {mixed} vs {exact}"
        );
        assert_ne!(
            mixed.to_bits(),
            exact.to_bits(),
            "{kind}: bf16 changed nothing"
        );
    }
    let bad = tiny("llama").with_compute_dtype(DType::I32).validate();
    assert!(bad.unwrap_err().to_string().contains("compute dtype"));
}

#[test]
fn maxtext_counts_causal_attention_at_half_and_gqa_counts_fewer_weights() {
    // 4 layers, 2 heads of width 4, 4 tokens: full attention is 12 × 4 × 8 × 4 FLOPs a token.
    let c = tiny("llama");
    let full_attention = 12.0 * 4.0 * 8.0 * 4.0;
    let weights = c.train_flops_per_token() - full_attention;
    assert_eq!(
        c.train_flops_per_token_maxtext(),
        weights + full_attention / 2.0
    );
    // One key/value head: k and v projections of 4 columns each instead of 8.
    let mut gqa = c;
    gqa.kv_heads = 1;
    let fewer = (c.param_count() - gqa.param_count()) as f64;
    assert_eq!(fewer, 4.0 * 8.0 * 8.0);
    assert_eq!(
        c.train_flops_per_token() - gqa.train_flops_per_token(),
        6.0 * fewer
    );
}
