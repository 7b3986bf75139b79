//! `checkpoint` regions under remat policies (`checkpoint_with`), differentiated and compiled as
//! one program (as a step run as one program is): every policy's gradients equal the plain
//! program's on the device, and after inlining and common-subexpression elimination the
//! program recomputes exactly what the policy does not save: `nothing_saveable` each block's
//! product and `tanh` again, `dots_saveable` only the `tanh` (from the saved product),
//! `everything_saveable` nothing. Without the `optimization_barrier` (`prevent_cse` off) the
//! recomputation merges with the forward. (XLA's CPU pipeline itself merges the recomputation
//! back, as it does for JAX's `jax.checkpoint` there: its memory analysis gives every policy
//! the same temporary bytes. The barrier is for compilers that honour it, as XLA's GPU one.)

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::Jit;
use tessera_ir::autodiff::{RematPolicy, value_and_grad};
use tessera_ir::params::ParamValue;
use tessera_ir::passes::{eliminate_common_subexpressions, eliminate_dead_code, inline_all};
use tessera_ir::prim::Prim;
use tessera_ir::trace::{Tensor, checkpoint_with, trace};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

const ROWS: i64 = 1024;
const WIDTH: i64 = 64;
const BLOCKS: usize = 6;

/// One block: `x + tanh(x @ w1) @ w2`.
fn block(a: &[Tensor]) -> Vec<Tensor> {
    let hidden = a[0].matmul(&a[1]).tanh();
    vec![&a[0] + &hidden.matmul(&a[2])]
}

/// The loss of `BLOCKS` blocks over `x`, each block in a `checkpoint` region under `policy`
/// (none: plain), as `value_and_grad` in the weights.
fn step(policy: Option<RematPolicy>, prevent_cse: bool) -> ClosedJaxpr {
    let f32 = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let mut avals = vec![f32(&[ROWS, WIDTH])];
    avals.extend((0..2 * BLOCKS).map(|_| f32(&[WIDTH, WIDTH])));
    let mut loss = trace(&avals, |a| {
        let mut h = a[0].clone();
        for b in 0..BLOCKS {
            let (w1, w2) = (&a[1 + 2 * b], &a[2 + 2 * b]);
            h = match policy {
                Some(p) => checkpoint_with(&[&h, w1, w2], p, block).remove(0),
                None => block(&[h.clone(), w1.clone(), w2.clone()]).remove(0),
            };
        }
        vec![(&h * &h).sum(&[0, 1])]
    })
    .unwrap();
    for eqn in &mut loss.jaxpr.eqns {
        if eqn.prim == Prim::Checkpoint {
            eqn.params = eqn
                .params
                .clone()
                .with("prevent_cse", ParamValue::Bool(prevent_cse));
        }
    }
    let weights: Vec<usize> = (1..=2 * BLOCKS).collect();
    value_and_grad(&loss, &weights).unwrap()
}

fn inputs() -> Vec<Array> {
    let array = |dims: &[i64], seed: f64, scale: f64| {
        let n: i64 = dims.iter().product();
        let values = (0..n).map(|i| (i as f64 * 0.37 + seed).sin() * scale);
        Array::new(DType::F32, dims, values.collect()).unwrap()
    };
    let mut out = vec![array(&[ROWS, WIDTH], 0.1, 1.0)];
    out.extend((0..2 * BLOCKS).map(|k| array(&[WIDTH, WIDTH], k as f64, 0.05)));
    out
}

/// The program's results on `inputs()`, compiled for one device.
fn run(client: &Client, program: ClosedJaxpr) -> Vec<Vec<f64>> {
    let mesh = Mesh::auto(&[("x", 1)]).unwrap();
    let whole = NamedSharding::new(&mesh, PartitionSpec::replicated()).unwrap();
    let (n_in, n_out) = (program.jaxpr.invars.len(), program.jaxpr.outvars.len());
    let jit = Jit::new(
        program,
        vec![whole.clone(); n_in],
        vec![whole.clone(); n_out],
    )
    .unwrap();
    let compiled = jit.lower().unwrap().compile(client).unwrap();
    let args: Vec<DeviceArray> = inputs()
        .iter()
        .map(|a| DeviceArray::device_put(client, a, &whole).unwrap())
        .collect();
    let refs: Vec<&DeviceArray> = args.iter().collect();
    let out = compiled.call(&refs).unwrap();
    out.iter().map(|a| a.to_host().unwrap().to_vec()).collect()
}

/// How many `dot_general` and `tanh` equations the program computes once flattened and with
/// common subexpressions merged.
fn work(program: &ClosedJaxpr) -> (usize, usize) {
    let flat = eliminate_dead_code(&eliminate_common_subexpressions(&inline_all(program)));
    let count = |prim: Prim| flat.jaxpr.eqns.iter().filter(|e| e.prim == prim).count();
    (count(Prim::DotGeneral), count(Prim::Tanh))
}

#[test]
fn every_policy_keeps_the_gradients() {
    let client = Client::cpu(1).unwrap();
    let want = run(&client, step(None, true));
    for policy in RematPolicy::ALL {
        let got = run(&client, step(Some(policy), true));
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            for (a, b) in g.iter().zip(w) {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                    "{policy}: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn each_policy_recomputes_what_it_does_not_save() {
    let blocks = BLOCKS;
    let (dots, tanhs) = work(&step(None, true));
    // Forward: two products a block; backward: one for each weight's gradient and one for each
    // block input's, but `x`'s (not asked).
    assert_eq!((dots, tanhs), (6 * blocks - 1, blocks));
    let under = |p: RematPolicy| work(&step(Some(p), true));
    assert_eq!(under(RematPolicy::EverythingSaveable), (dots, tanhs));
    assert_eq!(under(RematPolicy::DotsSaveable), (dots, 2 * tanhs));
    assert_eq!(
        under(RematPolicy::NothingSaveable),
        (dots + blocks, 2 * tanhs)
    );
    // `tanh(x @ w1)`'s product has no batch dimension: saved as `dots_saveable` saves it.
    assert_eq!(
        under(RematPolicy::DotsWithNoBatchDimsSaveable),
        (dots, 2 * tanhs)
    );
    // Without the barrier the recomputation is the forward's own computation again, and merges.
    assert_eq!(
        work(&step(Some(RematPolicy::NothingSaveable), false)),
        (dots, tanhs)
    );
}
