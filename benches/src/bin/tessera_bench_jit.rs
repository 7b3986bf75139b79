//! Tessera's half of `cargo xtask bench --compare-jax`: the same 3-layer MLP training step as
//! `benches/jax/bench_jax.py` (256 -> 512 -> 512 -> 10, batch 256, float32, softmax
//! cross-entropy, SGD), data parallel on 8 CPU devices (batch on `data`, parameters replicated).
//! The loss picks the label's log-probability with a one-hot product, as JAX's script does, and
//! both start from the same parameters and batch (the same formulas), so their first losses
//! (`first_losses`) must agree. Prints one JSON object with medians.
//!
//! `--losses` instead trains the 120 steps and prints every step's loss (`{"losses": [...]}`);
//! `--losses --nudge` does the same with every weight of the first layer first moved by one unit
//! in the last place (up at even indices, down at odd ones); `--lr X` sets the learning rate.
//! docs/profiling.md uses them to show how plugins' rounding differences grow during training.

use std::time::Instant;

use anyhow::Context;
use tessera::ir::autodiff::value_and_grad;
use tessera::ir::trace::{Tensor, call_closed, trace};
use tessera::ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera::jit::{Jit, to_host};
use tessera::pjrt::{Array as DeviceArray, Client, CompileOptions, HostArray};
use tessera::sharding::{Mesh, NamedSharding, PartitionSpec};

// The allocator the `tessera` program runs with (`tessera::alloc`): XLA's temporaries keep their
// pages from step to step instead of being faulted in again.
tessera::use_jemalloc!();

const DIMS: [i64; 4] = [256, 512, 512, 10];
const BATCH: i64 = 256;
const LEARNING_RATE: f64 = 0.1;

fn param_avals() -> Vec<ShapedArray> {
    DIMS.windows(2)
        .flat_map(|d| {
            [
                ShapedArray::new(DType::F32, &[d[0], d[1]]),
                ShapedArray::new(DType::F32, &[d[1]]),
            ]
        })
        .collect()
}

fn loss(args: &[Tensor]) -> Vec<Tensor> {
    let (params, x, y) = (&args[..6], &args[6], &args[7]);
    let mut h = x.clone();
    for layer in 0..3 {
        h = h.matmul(&params[2 * layer]) + &params[2 * layer + 1];
        if layer < 2 {
            h = h.relu();
        }
    }
    let picked = (h.log_softmax(1) * y.one_hot(DIMS[3], DType::F32)).sum(&[1]);
    vec![-picked.mean(&[0])]
}

/// Traces the training step: `(params..., x, y) -> (new params..., loss)`.
fn step_program(lr: f64) -> anyhow::Result<ClosedJaxpr> {
    let mut avals = param_avals();
    avals.push(ShapedArray::new(DType::F32, &[BATCH, DIMS[0]]));
    avals.push(ShapedArray::new(DType::I32, &[BATCH]));
    let loss_program = trace(&avals, loss)?;
    let grads = value_and_grad(&loss_program, &[0, 1, 2, 3, 4, 5])?;
    Ok(trace(&avals, |args| {
        let refs: Vec<&Tensor> = args.iter().collect();
        let out = call_closed(&grads, &refs);
        let mut results: Vec<Tensor> = (0..6).map(|k| &args[k] - &(&out[1 + k] * lr)).collect();
        results.push(out[0].clone());
        results
    })?)
}

fn median(mut samples: Vec<f64>) -> serde_json::Value {
    samples.sort_by(f64::total_cmp);
    let m = samples[samples.len() / 2];
    serde_json::json!({ "median_s": m, "samples": samples })
}

fn timed<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let start = Instant::now();
    let out = f();
    (start.elapsed().as_secs_f64(), out)
}

/// `w` with every non-zero element moved to the neighbouring float32, away from zero at even
/// indices and towards it at odd ones.
fn nudged(
    client: &Client,
    w: &DeviceArray,
    sharding: &NamedSharding,
) -> anyhow::Result<DeviceArray> {
    let host = w.to_host()?;
    let values: Vec<f32> = host
        .to_typed::<f32>()
        .context("float32 weights")?
        .iter()
        .enumerate()
        .map(|(i, v)| match (i % 2, v.to_bits()) {
            (_, 0) => *v,
            (0, bits) => f32::from_bits(bits + 1),
            (_, bits) => f32::from_bits(bits - 1),
        })
        .collect();
    let dims: Vec<i64> = host.dims().to_vec();
    Ok(DeviceArray::device_put(
        client,
        &HostArray::from_slice(&dims, &values)?,
        sharding,
    )?)
}

fn main() -> anyhow::Result<()> {
    let flags: Vec<String> = std::env::args().skip(1).collect();
    let losses_only = flags.iter().any(|f| f == "--losses");
    let nudge = flags.iter().any(|f| f == "--nudge");
    let lr = match flags.iter().position(|f| f == "--lr") {
        Some(i) => flags
            .get(i + 1)
            .and_then(|v| v.parse::<f64>().ok())
            .context("--lr takes a number")?,
        None => LEARNING_RATE,
    };
    let client = Client::cpu(8).context("the PJRT CPU plugin (run `cargo xtask setup`)")?;
    let mesh = Mesh::auto(&[("data", 8)])?;
    let sharding =
        |spec: &str| NamedSharding::new(&mesh, PartitionSpec::parse(spec).unwrap_or_default());
    let replicated = sharding("P()")?;
    let mut ins = vec![replicated.clone(); 6];
    ins.push(sharding("P('data', None)")?);
    ins.push(sharding("P('data')")?);
    let outs = vec![replicated.clone(); 7];

    let (mut trace_lower, mut compile) = (Vec::new(), Vec::new());
    let mut lowered = None;
    let rounds = if losses_only { 1 } else { 12 };
    for i in 0..rounds {
        let (dt, l) = timed(|| -> anyhow::Result<_> {
            Ok(Jit::new(step_program(lr)?, ins.clone(), outs.clone())?.lower()?)
        });
        let l = l?;
        // Uncached (`Client::compile`), with the options `Lowered::compile` gives XLA.
        let options = CompileOptions::spmd(&(0..8).collect::<Vec<_>>())
            .with_shardy(l.partitioner().is_shardy());
        let (dc, compiled) = timed(|| client.compile(l.as_text().as_bytes(), &options));
        compiled.context("compiling the step")?;
        if i >= 2 {
            trace_lower.push(dt);
            compile.push(dc);
        }
        lowered = Some(l);
    }
    let compiled = lowered.context("no lowering")?.compile(&client)?;

    let avals = param_avals();
    let mut params: Vec<DeviceArray> = avals
        .iter()
        .enumerate()
        .map(|(k, a)| {
            let n: i64 = a.shape.iter().product();
            let scale = if a.rank() == 2 {
                (2.0 / a.shape[0] as f64).sqrt()
            } else {
                0.0
            };
            let values = (0..n)
                .map(|i| ((i as f64 * 0.618 + k as f64).sin()) * scale)
                .collect();
            Ok(DeviceArray::device_put(
                &client,
                &to_host(&Array::new(DType::F32, &a.shape, values)?)?,
                &replicated,
            )?)
        })
        .collect::<anyhow::Result<_>>()?;
    let x = Array::new(
        DType::F32,
        &[BATCH, DIMS[0]],
        (0..BATCH * DIMS[0])
            .map(|i| (i as f64 * 0.37).sin())
            .collect(),
    )?;
    let y = Array::new(
        DType::I32,
        &[BATCH],
        (0..BATCH).map(|i| (i * 7 % DIMS[3]) as f64).collect(),
    )?;
    let x = DeviceArray::device_put(&client, &to_host(&x)?, &ins[6])?;
    let y = DeviceArray::device_put(&client, &to_host(&y)?, &ins[7])?;
    if nudge {
        params[0] = nudged(&client, &params[0], &replicated)?;
    }
    let mut step_samples = Vec::new();
    let mut losses = Vec::new();
    let mut last_loss = f64::NAN;
    for i in 0..120 {
        let (dt, out) = timed(|| -> anyhow::Result<Vec<DeviceArray>> {
            let mut args: Vec<&DeviceArray> = params.iter().collect();
            args.push(&x);
            args.push(&y);
            let out = compiled.call(&args)?;
            for a in &out {
                a.block_until_ready()?;
            }
            Ok(out)
        });
        let mut out = out?;
        let loss = out.pop().context("no loss")?;
        last_loss = f64::from(
            loss.to_host()?
                .to_typed::<f32>()
                .and_then(|v| v.first().copied())
                .unwrap_or(f32::NAN),
        );
        params = out;
        losses.push(last_loss);
        if i >= 20 {
            step_samples.push(dt);
        }
    }
    if losses_only {
        println!("{}", serde_json::json!({ "losses": losses }));
        return Ok(());
    }

    let tiny = trace(&[ShapedArray::new(DType::F32, &[4])], |a| vec![&a[0] + 1.0])?;
    let one = Mesh::new(tessera::sharding::AbstractMesh::auto(&[("x", 1)])?, vec![0])?;
    let single = NamedSharding::new(&one, PartitionSpec::replicated())?;
    let tiny = Jit::new(tiny, vec![single.clone()], vec![single.clone()])?
        .lower()?
        .compile(&client)?;
    let v = DeviceArray::device_put(&client, &HostArray::from_slice(&[4], &[0f32; 4])?, &single)?;
    let mut dispatch = Vec::new();
    for run in 0..17 {
        let (dt, r) = timed(|| -> anyhow::Result<()> {
            for _ in 0..200 {
                tiny.call(&[&v])?[0].block_until_ready()?;
            }
            Ok(())
        });
        r?;
        if run >= 2 {
            dispatch.push(dt / 200.0);
        }
    }
    let report = serde_json::json!({
        "devices": 8,
        "final_loss": last_loss,
        "first_losses": &losses[..3],
        "jit_step": median(step_samples),
        "trace_lower": median(trace_lower),
        "compile": median(compile),
        "dispatch": median(dispatch),
    });
    println!("{report}");
    Ok(())
}
