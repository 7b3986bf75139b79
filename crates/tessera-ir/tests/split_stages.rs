//! Stage partitioning: a 4-stage MLP marked with `pipeline_enter_stage` splits into verified
//! per-stage programs whose chained evaluation equals the original program; every weight is read
//! only by its stage; a host callback nothing reads stays in the stage of its operands; a marker
//! that goes backwards is refused.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::interp::eval_closed;
use tessera_ir::passes::{StageInput, split_stages};
use tessera_ir::trace::trace;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};

fn f32(s: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, s)
}

/// `x, w0..w3, y -> mean((tanh(...tanh(x @ w0)...) @ w3.T.T - y)^2)`, one stage per layer.
fn marked_mlp() -> ClosedJaxpr {
    let avals = [
        f32(&[4, 8]),
        f32(&[8, 8]),
        f32(&[8, 8]),
        f32(&[8, 8]),
        f32(&[8, 8]),
        f32(&[4, 8]),
    ];
    trace(&avals, |a| {
        let mut h = a[0].clone();
        for s in 0..4 {
            if s > 0 {
                h = h.enter_stage(s as i64);
            }
            // A weight-only computation (transpose twice) that must stay with its stage.
            let w = a[1 + s].transpose(&[1, 0]).transpose(&[1, 0]);
            h = h.matmul(&w).tanh();
        }
        vec![(&h - &a[5]).integer_pow(2).mean(&[0, 1]), h]
    })
    .unwrap()
}

fn inputs() -> Vec<Array> {
    [
        vec![4, 8],
        vec![8, 8],
        vec![8, 8],
        vec![8, 8],
        vec![8, 8],
        vec![4, 8],
    ]
    .iter()
    .enumerate()
    .map(|(k, s)| {
        let n: i64 = s.iter().product();
        Array::new(
            DType::F32,
            s,
            (0..n)
                .map(|i| ((i as f64 + 0.5) * (k as f64 + 1.3)).sin() * 0.6)
                .collect(),
        )
        .unwrap()
    })
    .collect()
}

#[test]
fn stages_chain_back_to_the_original_program() {
    let program = marked_mlp();
    let split = split_stages(&program).unwrap();
    assert_eq!(split.stages.len(), 4);
    let args = inputs();
    let mut produced: Vec<Vec<Array>> = Vec::new();
    for (s, stage) in split.stages.iter().enumerate() {
        tessera_ir::verify(&stage.program).unwrap();
        let feed: Vec<Array> = stage
            .inputs
            .iter()
            .map(|src| match *src {
                StageInput::Arg(k) => args[k].clone(),
                StageInput::Stage { stage, index } => {
                    assert!(stage < s, "stage {s} reads from a later stage");
                    produced[stage][index].clone()
                }
            })
            .collect();
        produced.push(eval_closed(&stage.program, &feed).unwrap());
        let weights: Vec<usize> = stage
            .inputs
            .iter()
            .filter_map(|src| match src {
                StageInput::Arg(k) if (1..=4).contains(k) => Some(*k),
                _ => None,
            })
            .collect();
        assert_eq!(weights, [s + 1], "stage {s} reads exactly its own weight");
    }
    let expected = eval_closed(&program, &args).unwrap();
    for (result, want) in split.results.iter().zip(&expected) {
        let got = match *result {
            StageInput::Stage { stage, index } => &produced[stage][index],
            StageInput::Arg(k) => &args[k],
        };
        assert_eq!(got, want);
    }
    assert!(
        matches!(split.results[0], StageInput::Stage { stage: 3, .. }),
        "the loss is computed in the last stage"
    );
}

#[test]
fn a_marker_that_goes_back_a_stage_is_refused() {
    let program = trace(&[f32(&[2])], |a| {
        vec![a[0].enter_stage(2).tanh().enter_stage(1)]
    })
    .unwrap();
    let err = split_stages(&program).unwrap_err();
    assert!(
        err.to_string().contains("stages must not go backwards"),
        "{err}"
    );
}

/// The stages holding a `debug_callback`, and the stages reading argument `arg`.
fn callback_stages(program: &ClosedJaxpr, arg: usize) -> (Vec<usize>, Vec<usize>) {
    let split = split_stages(program).unwrap();
    let holding = (0..split.stages.len())
        .filter(|&s| {
            let eqns = &split.stages[s].program.jaxpr.eqns;
            eqns.iter()
                .any(|e| e.prim == tessera_ir::Prim::DebugCallback)
        })
        .collect();
    let reading = (0..split.stages.len())
        .filter(|&s| split.stages[s].inputs.contains(&StageInput::Arg(arg)))
        .collect();
    (holding, reading)
}

#[test]
fn a_callback_nothing_reads_runs_in_the_stage_of_its_operands() {
    use tessera_ir::trace::debug_callback;
    // Stage 0's activation and stage 0's weight logged before the marker: both callbacks stay
    // in stage 0, and the weight is read by stage 0 alone.
    let avals = [f32(&[4, 8]), f32(&[8, 8]), f32(&[8, 8])];
    let program = trace(&avals, |a| {
        let h = a[0].matmul(&a[1]).tanh();
        debug_callback(|_| {}, &[&h]);
        debug_callback(|_| {}, &[&a[1]]);
        let h = h.enter_stage(1);
        vec![h.matmul(&a[2]).sum(&[0, 1])]
    })
    .unwrap();
    assert_eq!(callback_stages(&program, 1), (vec![0], vec![0]));
    // Logged after the marker, stage 0's weight alone: the callback runs in stage 1, the code
    // around it, which then reads the weight too.
    let program = trace(&avals, |a| {
        let h = a[0].matmul(&a[1]).tanh().enter_stage(1);
        debug_callback(|_| {}, &[&a[2]]);
        vec![h.matmul(&a[2]).sum(&[0, 1])]
    })
    .unwrap();
    assert_eq!(callback_stages(&program, 2), (vec![1], vec![1]));
}
