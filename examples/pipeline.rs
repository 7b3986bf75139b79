//! Pipeline-parallel training in a few lines, JAXPP style: `cargo run -p tessera-examples
//! --example pipeline`. A two-layer model marks its stage boundary; the training step is one
//! traced program (a `treduce` over micro-batches of `value_and_grad_call`, then SGD);
//! `mpmd_jit` runs the loop pipelined under 1F1B over 2 MPMD groups of 4 CPU devices and the
//! update on the group holding each weight, which stays there between steps.

use tessera::ir::trace::{trace, treduce, value_and_grad_call};
use tessera::ir::{Array, DType, ShapedArray};
use tessera::mpmd::{MpmdMesh, StepArg, StepResult, mpmd_jit};
use tessera::pjrt::Client;
use tessera::sharding::Mesh;

const MICRO_BATCHES: i64 = 8;
const ROWS: i64 = 4;
const WIDTH: i64 = 16;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn values(shape: &[i64], seed: f64, scale: f64) -> anyhow::Result<Array> {
    let n: i64 = shape.iter().product();
    let data = (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.618 + seed).sin() * scale)
        .collect();
    Ok(Array::new(DType::F32, shape, data)?)
}

fn main() -> anyhow::Result<()> {
    // The loss of one micro-batch: x, w0, w1, y -> mean((tanh(tanh(x w0) w1) - y)^2), with the
    // second layer in stage 1.
    let loss = trace(
        &[
            f32(&[ROWS, WIDTH]),
            f32(&[WIDTH, WIDTH]),
            f32(&[WIDTH, WIDTH]),
            f32(&[ROWS, WIDTH]),
        ],
        |a| {
            let h = a[0].matmul(&a[1]).tanh().enter_stage(1);
            let out = h.matmul(&a[2]).tanh();
            vec![(&out - &a[3]).integer_pow(2).mean(&[0, 1])]
        },
    )?;
    // The step: (w0, w1, lr, xs, ys) -> (w0', w1', mean loss).
    let batch = f32(&[MICRO_BATCHES, ROWS, WIDTH]);
    let step = trace(
        &[
            f32(&[WIDTH, WIDTH]),
            f32(&[WIDTH, WIDTH]),
            f32(&[]),
            batch.clone(),
            batch,
        ],
        |a| {
            let outs = treduce(&[&a[0], &a[1]], &[&a[3], &a[4]], 0, "1f1b", &[], |w, mb| {
                value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
            });
            let scale = &a[2] / MICRO_BATCHES as f64;
            vec![
                &a[0] - &(&scale * &outs[1]),
                &a[1] - &(&scale * &outs[2]),
                outs[0].mean(&[0]),
            ]
        },
    )?;

    let client = Client::cpu(8)?;
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 2), ("data", 4)])?, "stage")?;
    let jit = mpmd_jit(&client, &mesh, &step)?;

    let host = |a: &Array| -> anyhow::Result<StepArg> { Ok(StepArg::Host(a.clone())) };
    let mut weights = vec![
        host(&values(&[WIDTH, WIDTH], 0.5, 0.5)?)?,
        host(&values(&[WIDTH, WIDTH], 1.5, 0.5)?)?,
    ];
    let data = [
        host(&Array::scalar(DType::F32, 0.5))?,
        host(&values(&[MICRO_BATCHES, ROWS, WIDTH], 3.0, 1.0)?)?,
        host(&values(&[MICRO_BATCHES, ROWS, WIDTH], 7.0, 0.8)?)?,
    ];
    for step in 1..=10 {
        let args: Vec<StepArg> = weights.iter().chain(&data).cloned().collect();
        let mut outputs = jit.call_mpmd(&args)?.outputs;
        let loss = outputs
            .pop()
            .ok_or_else(|| anyhow::anyhow!("the step returned nothing"))?;
        let loss = loss.to_host()?;
        println!("step {step:>2}  loss {:.6}", loss.to_vec()[0]);
        weights = outputs.into_iter().map(StepResult::into_arg).collect();
    }
    Ok(())
}
