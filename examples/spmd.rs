//! SPMD from Rust, as docs/spmd.md describes it: the sharding algebra, a data-parallel `jit`
//! training step, `shard_map` with collectives, and `pmap` on chosen devices, all on the 8
//! devices of the PJRT CPU plugin, each checked against the reference interpreter.
//!
//! `cargo run -p tessera-examples --example spmd` (it also runs as a test).

use anyhow::{Context, ensure};
use tessera::ir::autodiff::value_and_grad;
use tessera::ir::interp::eval_closed;
use tessera::ir::trace::{Tensor, call_closed, pmap, shard_map, trace};
use tessera::ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera::jit::{Jit, from_host, run_spmd};
use tessera::pjrt::{Array as DeviceArray, Client};
use tessera::pmap::PmapRun;
use tessera::sharding::{Mesh, NamedSharding, PartitionSpec};

fn main() -> anyhow::Result<()> {
    let client = Client::cpu(8).context("the PJRT CPU plugin (run `cargo xtask setup`)")?;
    sharding_algebra()?;
    data_parallel_step(&client)?;
    collectives(&client)?;
    pmap_on_devices(&client)?;
    println!("spmd: every check passed");
    Ok(())
}

/// Values `sin(0.37 i + seed)` of a given shape.
fn values(dtype: DType, shape: &[i64], seed: f64) -> anyhow::Result<Array> {
    let n: i64 = shape.iter().product();
    let data = (0..n).map(|i| (i as f64 * 0.37 + seed).sin()).collect();
    Ok(Array::new(dtype, shape, data)?)
}

/// The largest difference between two arrays of one shape, relative to their magnitude.
fn difference(a: &Array, b: &Array) -> anyhow::Result<f64> {
    ensure!(
        a.shape() == b.shape(),
        "{:?} against {:?}",
        a.shape(),
        b.shape()
    );
    Ok(a.to_vec()
        .iter()
        .zip(b.to_vec())
        .map(|(p, q)| (p - q).abs() / (1.0 + q.abs()))
        .fold(0.0, f64::max))
}

/// A mesh, a spec and what they mean for an array: XLA's sharding text and each device's block.
fn sharding_algebra() -> anyhow::Result<()> {
    let mesh = Mesh::auto(&[("data", 4), ("model", 2)])?;
    let sharding = NamedSharding::new(&mesh, PartitionSpec::parse("P('data', 'model')")?)?;
    let hlo = sharding.to_hlo_sharding(2)?;
    println!("P('data', 'model') on data=4 × model=2 is {hlo}");
    ensure!(hlo.to_string() == "{devices=[4,2]<=[8]}", "{hlo}");
    ensure!(sharding.shard_shape(&[16, 6])? == vec![4, 3]);
    // Device 3 is data index 1, model index 1: rows 4..8, columns 3..6.
    let blocks = sharding.devices_indices_map(&[16, 6])?;
    let (_, block) = blocks
        .iter()
        .find(|(device, _)| *device == 3)
        .context("device 3 holds no block")?;
    println!("device 3 holds rows and columns {block:?}");
    ensure!(*block == vec![(4, 8), (3, 6)], "{block:?}");
    // A spec naming an axis the mesh lacks is an error that says so.
    let wrong = NamedSharding::new(&mesh, PartitionSpec::parse("P('batch')")?);
    ensure!(wrong.is_err(), "an unknown axis was accepted");
    Ok(())
}

const FEATURES: i64 = 16;
const BATCH: i64 = 64;

/// `mean((x @ w + b - y)^2)`: arguments `w`, `b`, `x`, `y`.
fn loss(a: &[Tensor]) -> Vec<Tensor> {
    let error = &(&a[2].matmul(&a[0]) + &a[1]) - &a[3];
    vec![(&error * &error).mean(&[0, 1])]
}

/// One SGD step `(w, b, x, y) -> (w', b', loss)`, traced from `loss` and its gradient.
fn sgd_step() -> anyhow::Result<ClosedJaxpr> {
    let avals = [
        ShapedArray::new(DType::F32, &[FEATURES, 1]),
        ShapedArray::new(DType::F32, &[1]),
        ShapedArray::new(DType::F32, &[BATCH, FEATURES]),
        ShapedArray::new(DType::F32, &[BATCH, 1]),
    ];
    let grads = value_and_grad(&trace(&avals, loss)?, &[0, 1])?;
    Ok(trace(&avals, |a| {
        let refs: Vec<&Tensor> = a.iter().collect();
        let out = call_closed(&grads, &refs);
        vec![
            &a[0] - &(&out[1] * 0.1),
            &a[1] - &(&out[2] * 0.1),
            out[0].clone(),
        ]
    })?)
}

/// The step under `jit` with the batch split over 8 devices and the parameters replicated: XLA
/// partitions it and sums the gradients across devices, as `jax.jit` with NamedShardings does.
fn data_parallel_step(client: &Client) -> anyhow::Result<()> {
    let mesh = Mesh::auto(&[("data", 8)])?;
    let replicated = NamedSharding::new(&mesh, PartitionSpec::replicated())?;
    let batch = NamedSharding::new(&mesh, PartitionSpec::parse("P('data', None)")?)?;
    let ins = vec![replicated.clone(), replicated.clone(), batch.clone(), batch];
    let outs = vec![replicated; 3];
    let program = sgd_step()?;
    let compiled = Jit::new(program.clone(), ins.clone(), outs)?
        .lower()?
        .compile(client)?;
    let mut w = values(DType::F32, &[FEATURES, 1], 0.0)?;
    let mut b = values(DType::F32, &[1], 1.0)?;
    let x = values(DType::F32, &[BATCH, FEATURES], 2.0)?;
    let y = values(DType::F32, &[BATCH, 1], 3.0)?;
    let put = |a: &Array, s: &NamedSharding| DeviceArray::device_put(client, a, s);
    let (x_dev, y_dev) = (put(&x, &ins[2])?, put(&y, &ins[3])?);
    let (mut w_dev, mut b_dev) = (put(&w, &ins[0])?, put(&b, &ins[1])?);
    let mut losses = Vec::new();
    for _ in 0..20 {
        let out = compiled.call(&[&w_dev, &b_dev, &x_dev, &y_dev])?;
        let mut out = out.into_iter();
        let (Some(w_next), Some(b_next), Some(loss)) = (out.next(), out.next(), out.next()) else {
            anyhow::bail!("the step returned fewer than 3 results");
        };
        losses.push(from_host(&loss.to_host()?, DType::F32)?.to_vec()[0]);
        (w_dev, b_dev) = (w_next, b_next);
        // The same step on the host interpreter, from the same parameters.
        let want = eval_closed(&program, &[w.clone(), b.clone(), x.clone(), y.clone()])?;
        (w, b) = (want[0].clone(), want[1].clone());
        let got_w = from_host(&w_dev.to_host()?, DType::F32)?;
        ensure!(
            difference(&got_w, &w)? < 1e-5,
            "the devices' weights left the interpreter's"
        );
        ensure!((losses[losses.len() - 1] - want[2].to_vec()[0]).abs() < 1e-5);
    }
    println!(
        "data-parallel SGD on 8 devices: loss {:.4} -> {:.4}",
        losses[0],
        losses[losses.len() - 1]
    );
    ensure!(
        losses[losses.len() - 1] < 0.5 * losses[0],
        "the loss did not fall: {losses:?}"
    );
    Ok(())
}

/// `shard_map` over a `data=2 × model=4` mesh: a matmul split over its contracted dimension
/// (each device multiplies its blocks, `psum` over `model` adds them), an `all_gather` and a
/// ring shift with `ppermute`, each against the same computation on whole arrays.
fn collectives(client: &Client) -> anyhow::Result<()> {
    let mesh = Mesh::auto(&[("data", 2), ("model", 4)])?;
    let spec = |s: &str| PartitionSpec::parse(s);
    let avals = [
        ShapedArray::new(DType::F32, &[4, 8]),
        ShapedArray::new(DType::F32, &[8, 3]),
    ];
    let (by_both, by_model_rows) = (spec("P('data', 'model')")?, spec("P('model', None)")?);
    let by_data = spec("P('data', None)")?;
    let sharded = trace(&avals, |a| {
        shard_map(
            mesh.abstract_mesh(),
            &[by_both.clone(), by_model_rows.clone()],
            &[by_data.clone(), by_both.clone(), by_both.clone()],
            &[&a[0], &a[1]],
            |blocks| {
                let x = &blocks[0]; // [2, 2]: this device's rows and columns of x
                let product = x.matmul(&blocks[1]).psum(&["model"]);
                let gathered = x.all_gather("model", 1, true); // [2, 8]: its whole rows
                let shifted = x.ppermute("model", &[(0, 1), (1, 2), (2, 3), (3, 0)]);
                vec![product, gathered, shifted]
            },
        )
    })?;
    let whole = trace(&avals, |a| vec![a[0].matmul(&a[1])])?;
    let inputs = [
        values(DType::F32, &[4, 8], 0.5)?,
        values(DType::F32, &[8, 3], 1.5)?,
    ];
    let on_devices = run_spmd(client, &sharded, &inputs)?;
    let on_host = eval_closed(&sharded, &inputs)?;
    let reference = eval_closed(&whole, &inputs)?;
    ensure!(
        difference(&on_devices[0], &reference[0])? < 1e-5,
        "psum matmul"
    );
    // Every device along `model` gathered the same whole rows: 4 copies side by side.
    let (x, gathered) = (inputs[0].to_vec(), on_devices[1].to_vec());
    ensure!(
        on_devices[1].shape() == [4, 32],
        "{:?}",
        on_devices[1].shape()
    );
    for row in 0..4 {
        for col in 0..32 {
            ensure!(
                gathered[row * 32 + col] == x[row * 8 + col % 8],
                "all_gather at ({row}, {col})"
            );
        }
    }
    // The ring shift moves each column block one device along `model`.
    let shifted = on_devices[2].to_vec();
    for row in 0..4 {
        for col in 0..8 {
            let from = (col + 6) % 8; // block k receives block k - 1 (2 columns a block)
            ensure!(
                shifted[row * 8 + col] == x[row * 8 + from],
                "ppermute at ({row}, {col})"
            );
        }
    }
    for (d, h) in on_devices.iter().zip(&on_host) {
        ensure!(difference(d, h)? < 1e-5, "PJRT and the interpreter differ");
    }
    println!("shard_map on data=2 × model=4: psum, all_gather and ppermute match");
    Ok(())
}

/// `pmap` over devices 4 to 7: each device normalizes its row by the sum over all rows.
fn pmap_on_devices(client: &Client) -> anyhow::Result<()> {
    let aval = ShapedArray::new(DType::F32, &[4, 5]);
    let program = trace(&[aval], |a| {
        pmap("i", &[&a[0]], |rows| {
            let total = rows[0].psum(&["i"]);
            vec![&rows[0] / &total]
        })
    })?;
    let run = PmapRun::new(client, &program, Some(&[4, 5, 6, 7]), &[])?;
    let input = Array::new(
        DType::F32,
        &[4, 5],
        (0..20).map(|i| 1.0 + f64::from(i)).collect(),
    )?;
    let got = run.run(std::slice::from_ref(&input))?;
    let want = eval_closed(&program, &[input])?;
    ensure!(
        difference(&got[0], &want[0])? < 1e-6,
        "pmap against the interpreter"
    );
    // Each column of the result sums to one.
    let out = got[0].to_vec();
    for col in 0..5 {
        let sum: f64 = (0..4).map(|row| out[row * 5 + col]).sum();
        ensure!((sum - 1.0).abs() < 1e-5, "column {col} sums to {sum}");
    }
    println!(
        "pmap on devices {:?}: each column sums to one",
        run.devices()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_spmd_snippet_of_the_docs_runs_and_matches_the_interpreter() -> anyhow::Result<()> {
        super::main()
    }
}
