//! The optimizers' traced updates against the same arithmetic written out by hand in f64, for
//! two steps; clipping by global norm against its definition.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::trace::trace;
use tessera_ir::{Array, DType, ShapedArray};
use tessera_nn::Tree;
use tessera_nn::optim::{AdamW, Optimizer, Sgd, clip_by_global_norm};

fn params() -> Tree<Array> {
    Tree::node([
        (
            "w",
            Tree::Leaf(Array::new(DType::F32, &[3], vec![0.5, -1.0, 2.0]).unwrap()),
        ),
        (
            "b",
            Tree::Leaf(Array::new(DType::F32, &[], vec![0.25]).unwrap()),
        ),
    ])
}

fn grads(step: usize) -> Vec<Vec<f64>> {
    match step {
        0 => vec![vec![0.1, -0.2, 0.3], vec![1.0]],
        _ => vec![vec![-0.4, 0.05, 0.6], vec![-0.5]],
    }
}

/// One traced step `(lr, params, grads, state) -> (params, state)`, run by the interpreter.
fn run_step(
    opt: &dyn Optimizer,
    lr: f64,
    params: &Tree<Array>,
    grads: &[Vec<f64>],
    state: &Tree<Array>,
) -> (Tree<Array>, Tree<Array>) {
    let p_avals = params.map(&mut |_, a| a.aval());
    let s_avals = opt.state_avals(&p_avals);
    let mut avals = vec![ShapedArray::new(DType::F32, &[])];
    avals.extend(p_avals.flatten());
    avals.extend(p_avals.flatten());
    avals.extend(s_avals.flatten());
    let (np, ns) = (p_avals.len(), s_avals.len());
    let program = trace(&avals, |a| {
        let p = p_avals.unflatten(a[1..1 + np].to_vec()).unwrap();
        let g = p_avals.unflatten(a[1 + np..1 + 2 * np].to_vec()).unwrap();
        let s = s_avals.unflatten(a[1 + 2 * np..].to_vec()).unwrap();
        let (p, s) = opt.update(&a[0], &p, &g, &s).unwrap();
        let mut out = p.flatten();
        out.extend(s.flatten());
        out
    })
    .unwrap();
    let mut args = vec![Array::scalar(DType::F32, lr)];
    args.extend(params.flatten());
    for (g, a) in grads.iter().zip(params.leaves()) {
        args.push(Array::new(DType::F32, &a.shape(), g.clone()).unwrap());
    }
    args.extend(state.flatten());
    let outs = eval_closed(&program, &args).unwrap();
    assert_eq!(outs.len(), np + ns);
    (
        p_avals.unflatten(outs[..np].to_vec()).unwrap(),
        s_avals.unflatten(outs[np..].to_vec()).unwrap(),
    )
}

fn close(actual: &[f64], expected: &[f64]) {
    for (a, e) in actual.iter().zip(expected) {
        assert!(
            (a - e).abs() <= 1e-6 * (1.0 + e.abs()),
            "{actual:?} vs {expected:?}"
        );
    }
    assert_eq!(actual.len(), expected.len());
}

#[test]
fn adamw_matches_a_hand_computation_for_two_steps() {
    let opt = AdamW {
        b1: 0.9,
        b2: 0.99,
        eps: 1e-8,
        weight_decay: 0.01,
    };
    let lr = 0.1;
    let mut p = params();
    let mut state = opt.init_state(&p).unwrap();
    // By hand, in f64: the same recurrences, leaf by leaf.
    let mut hp: Vec<Vec<f64>> = p.leaves().iter().map(|a| a.to_vec()).collect();
    let mut mu: Vec<Vec<f64>> = hp.iter().map(|v| vec![0.0; v.len()]).collect();
    let mut nu = mu.clone();
    for step in 0..2 {
        let g = grads(step);
        (p, state) = run_step(&opt, lr, &p, &g, &state);
        let t = (step + 1) as i32;
        for leaf in 0..hp.len() {
            for i in 0..hp[leaf].len() {
                let gi = g[leaf][i];
                mu[leaf][i] = 0.9 * mu[leaf][i] + 0.1 * gi;
                nu[leaf][i] = 0.99 * nu[leaf][i] + 0.01 * gi * gi;
                let m_hat = mu[leaf][i] / (1.0 - 0.9f64.powi(t));
                let v_hat = nu[leaf][i] / (1.0 - 0.99f64.powi(t));
                let update = m_hat / (v_hat.sqrt() + 1e-8) + 0.01 * hp[leaf][i];
                hp[leaf][i] -= lr * update;
            }
        }
        for (leaf, a) in p.leaves().iter().enumerate() {
            close(&a.to_vec(), &hp[leaf]);
        }
        close(&state.leaf("count").unwrap().to_vec(), &[f64::from(t)]);
        close(&state.leaf("mu.w").unwrap().to_vec(), &mu[0]);
        close(&state.leaf("nu.b").unwrap().to_vec(), &nu[1]);
    }
}

#[test]
fn sgd_with_momentum_matches_a_hand_computation() {
    let opt = Sgd { momentum: 0.9 };
    let mut p = params();
    let mut state = opt.init_state(&p).unwrap();
    let mut hp: Vec<Vec<f64>> = p.leaves().iter().map(|a| a.to_vec()).collect();
    let mut v: Vec<Vec<f64>> = hp.iter().map(|x| vec![0.0; x.len()]).collect();
    for step in 0..2 {
        let g = grads(step);
        (p, state) = run_step(&opt, 0.5, &p, &g, &state);
        for leaf in 0..hp.len() {
            for i in 0..hp[leaf].len() {
                v[leaf][i] = 0.9 * v[leaf][i] + g[leaf][i];
                hp[leaf][i] -= 0.5 * v[leaf][i];
            }
            close(&p.leaves()[leaf].to_vec(), &hp[leaf]);
        }
    }
    let plain = Sgd { momentum: 0.0 };
    assert!(plain.init_state(&p).unwrap().is_empty());
}

#[test]
fn clipping_scales_to_the_global_norm() {
    let avals = [
        ShapedArray::new(DType::F32, &[2]),
        ShapedArray::new(DType::F32, &[]),
    ];
    for (max_norm, expected_scale) in [(1.0, 1.0 / 13.0), (100.0, 1.0)] {
        let program = trace(&avals, |a| {
            let tree = Tree::node([
                ("a", Tree::Leaf(a[0].clone())),
                ("b", Tree::Leaf(a[1].clone())),
            ]);
            clip_by_global_norm(&tree, max_norm).flatten()
        })
        .unwrap();
        // norm of (3, 4, 12) = 13
        let args = [
            Array::new(DType::F32, &[2], vec![3.0, 4.0]).unwrap(),
            Array::scalar(DType::F32, 12.0),
        ];
        let outs = eval_closed(&program, &args).unwrap();
        close(
            &outs[0].to_vec(),
            &[3.0 * expected_scale, 4.0 * expected_scale],
        );
        close(&outs[1].to_vec(), &[12.0 * expected_scale]);
    }
}

#[test]
fn optimizer_state_takes_the_specs_of_the_parameters_it_mirrors() {
    use tessera_sharding::PartitionSpec;
    let avals = params().map(&mut |_, a| a.aval());
    let specs = Tree::node([
        ("w", Tree::Leaf(PartitionSpec::parse("P('model')").unwrap())),
        ("b", Tree::Leaf(PartitionSpec::replicated())),
    ]);
    let state = AdamW::default().state_specs(&avals, &specs).unwrap();
    let printed: Vec<(String, String)> = state
        .paths()
        .into_iter()
        .zip(state.leaves().iter().map(|s| s.to_string()))
        .collect();
    let spec = |path: &str| &printed.iter().find(|(p, _)| p == path).unwrap().1;
    assert_eq!(spec("count"), "P()");
    assert_eq!(spec("mu.w"), "P('model',)");
    assert_eq!(spec("nu.w"), "P('model',)");
    assert_eq!(spec("nu.b"), "P()");
    let sgd = Sgd { momentum: 0.9 }.state_specs(&avals, &specs).unwrap();
    assert_eq!(sgd.leaves()[0].to_string(), "P('model',)");
    // Specs of another structure are refused.
    let wrong = Tree::node([("w", Tree::Leaf(PartitionSpec::replicated()))]);
    assert!(AdamW::default().state_specs(&avals, &wrong).is_err());
}
