//! A pipelined step with sharded stages: `cargo run -p tessera-examples --example
//! sharded_pipeline` (and `cargo test -p tessera-examples --example sharded_pipeline`, which
//! `cargo xtask test` runs).
//!
//! A GPT of the model library is split into 2 pipeline stages on the mesh `stage=2, data=2,
//! model=2` of 8 CPU devices: the MPMD axis `stage` makes 2 groups of 4 devices; inside each
//! group the stage runs SPMD, its layers split Megatron style over `model` and every parameter
//! also over `data` (FSDP), its micro-batches' rows over `data`. The layouts are plain
//! `PartitionSpec`s: the library gives the parameters' (`DecoderConfig::param_specs`) and the
//! optimizer state's (`Optimizer::state_specs`), and `mpmd_jit` takes one per step argument
//! (`MpmdJitOptions::in_specs`). The example checks each step's loss against the same sharded
//! step under `jit` on one group-shaped mesh, and that each device holds a quarter of a
//! weight.

use tessera::ir::trace::{Tensor, trace, treduce, value_and_grad_call};
use tessera::ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera::jit::Jit;
use tessera::mpmd::{MpmdJitOptions, MpmdMesh, StepArg, StepResult, mpmd_jit_with};
use tessera::nn::data::{ByteCorpus, Split};
use tessera::nn::optim::{AdamW, Optimizer};
use tessera::nn::{DecoderConfig, ParallelAxes, StagePlan};
use tessera::pjrt::{Array as DeviceArray, Client};
use tessera::sharding::{Mesh, NamedSharding, PartitionSpec};

const MICRO_BATCHES: i64 = 4;
const ROWS: i64 = 2;
const STEPS: u64 = 6;
const LR: f64 = 3e-3;

/// `(params..., state..., lr, tokens [M, rows, T], targets [M, rows, T]) -> (params'...,
/// state'..., mean loss)`: a `treduce` over the micro-batches of `value_and_grad_call(loss)`,
/// then AdamW on the mean gradients.
fn training_step(config: &DecoderConfig, opt: &AdamW) -> anyhow::Result<ClosedJaxpr> {
    let loss = config.loss(ROWS, &StagePlan::even(2, config.layers)?)?;
    let params = config.avals();
    let state = opt.state_avals(&params);
    let (n, m) = (params.len(), state.len());
    let batch = ShapedArray::new(DType::I32, &[MICRO_BATCHES, ROWS, config.seq_len]);
    let mut avals = params.flatten();
    avals.extend(state.flatten());
    avals.extend([ShapedArray::new(DType::F32, &[]), batch.clone(), batch]);
    let argnums: Vec<usize> = (1..=n).collect();
    let mut failure = None;
    let step = trace(&avals, |a| {
        let weights: Vec<&Tensor> = a[..n].iter().collect();
        let data = [&a[n + m + 1], &a[n + m + 2]];
        let outs = treduce(&weights, &data, 0, "1f1b", &[], |w, mb| {
            let mut args = vec![&mb[0]];
            args.extend(w.iter());
            args.push(&mb[1]);
            value_and_grad_call(&loss, &argnums, &args)
        });
        let update = || -> tessera::nn::Result<Vec<Tensor>> {
            let grads: Vec<Tensor> = outs[1..=n]
                .iter()
                .map(|g| g / MICRO_BATCHES as f64)
                .collect();
            let (new, state) = opt.update(
                &a[n + m],
                &params.unflatten(a[..n].to_vec())?,
                &params.unflatten(grads)?,
                &state.unflatten(a[n..n + m].to_vec())?,
            )?;
            let mut results = new.flatten();
            results.extend(state.flatten());
            results.push(outs[0].mean(&[0]));
            Ok(results)
        };
        update().unwrap_or_else(|e| {
            failure = Some(e);
            vec![outs[0].clone()]
        })
    });
    match failure {
        Some(e) => Err(e.into()),
        None => Ok(step?),
    }
}

/// The micro-batches of step `step`, stacked: tokens and targets `[M, rows, T]`.
fn batches(corpus: &ByteCorpus, step: u64, seq: i64) -> anyhow::Result<[Array; 2]> {
    let (mut tokens, mut targets) = (Vec::new(), Vec::new());
    for mb in 0..MICRO_BATCHES as u64 {
        let position = (step * MICRO_BATCHES as u64 + mb) * ROWS as u64;
        let (x, y) = corpus.batch(Split::Train, position, ROWS as usize)?;
        tokens.extend(x.to_vec());
        targets.extend(y.to_vec());
    }
    let shape = [MICRO_BATCHES, ROWS, seq];
    Ok([
        Array::new(DType::I32, &shape, tokens)?,
        Array::new(DType::I32, &shape, targets)?,
    ])
}

fn main() -> anyhow::Result<()> {
    let (config, opt) = (DecoderConfig::gpt2(256, 2, 32, 4, 16), AdamW::default());
    let step = training_step(&config, &opt)?;
    // Where everything lives: the parameters and optimizer state as the library shards them,
    // the learning rate replicated, the micro-batches' rows split over `data`.
    let axes = ParallelAxes::tensor("model", 2).with_fsdp("data", 2);
    let param_specs = config.param_specs(&axes)?;
    let state_specs = opt.state_specs(&config.avals(), &param_specs)?;
    let rows = PartitionSpec::parse("P(None, 'data')")?;
    let mut in_specs: Vec<Option<PartitionSpec>> =
        param_specs.flatten().into_iter().map(Some).collect();
    in_specs.extend(state_specs.flatten().into_iter().map(Some));
    in_specs.extend([None, Some(rows.clone()), Some(rows)]);
    let n_carried = config.avals().len() + opt.state_avals(&config.avals()).len();

    let client = Client::cpu(8)?;
    let mesh = Mesh::auto(&[("stage", 2), ("data", 2), ("model", 2)])?;
    let mesh = MpmdMesh::new(mesh, "stage")?;
    // The update writes each parameter into its old buffers (the step count, read by every
    // group, is not donated).
    let options = MpmdJitOptions {
        in_specs,
        donate_argnums: (0..config.avals().len()).collect(),
        ..MpmdJitOptions::default()
    };
    let pipelined = mpmd_jit_with(&client, &mesh, &step, &options)?;
    // The reference: the same step and shardings under `jit` on one group's 4 devices.
    let group = mesh.lowering_mesh();
    let named = |specs: &[PartitionSpec]| -> anyhow::Result<Vec<NamedSharding>> {
        Ok(specs
            .iter()
            .map(|s| NamedSharding::new(group, s.clone()))
            .collect::<Result<_, _>>()?)
    };
    let (ins, outs) = (named(pipelined.in_specs())?, named(pipelined.out_specs())?);
    let reference = Jit::new(step.clone(), ins.clone(), outs)?
        .lower()?
        .compile(&client)?;

    let corpus_path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/data/corpus.txt"));
    let corpus = ByteCorpus::from_file(corpus_path, config.seq_len as usize, 0.1)?;
    let params = config.init(0)?;
    let mut carried: Vec<Array> = params.flatten();
    carried.extend(opt.init_state(&params)?.flatten());
    let mut weights: Vec<StepArg> = carried
        .iter()
        .map(|a| Ok(StepArg::Host(a.clone())))
        .collect::<anyhow::Result<_>>()?;
    let mut on_group: Vec<DeviceArray> = carried
        .iter()
        .zip(&ins)
        .map(|(a, s)| Ok(DeviceArray::device_put(&client, a, s)?))
        .collect::<anyhow::Result<_>>()?;
    let paths = config.avals().paths();
    let qkv = paths
        .iter()
        .position(|p| p == "blocks.0.attn.qkv.w")
        .ok_or_else(|| anyhow::anyhow!("no blocks.0.attn.qkv.w"))?;
    let mut losses = Vec::new();
    for i in 0..STEPS {
        let mut data = vec![Array::scalar(DType::F32, LR)];
        data.extend(batches(&corpus, i, config.seq_len)?);
        let mut args: Vec<StepArg> = std::mem::take(&mut weights);
        args.extend(data.iter().cloned().map(StepArg::Host));
        let mut results = pipelined.call_mpmd_donated(&mut args)?.outputs;
        let loss = results.pop().ok_or_else(|| anyhow::anyhow!("no loss"))?;
        let loss = loss.to_host()?.to_vec()[0];
        // The same step unpipelined.
        let puts = data
            .iter()
            .zip(&ins[n_carried..])
            .map(|(h, s)| Ok(DeviceArray::device_put(&client, h, s)?))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let refs: Vec<&DeviceArray> = on_group.iter().chain(&puts).collect();
        let mut next = reference.call(&refs)?;
        let want = next.pop().ok_or_else(|| anyhow::anyhow!("no loss"))?;
        let want = want.to_host()?.to_vec()[0];
        on_group = next;
        println!("step {}  loss {loss:.6}  (unpipelined {want:.6})", i + 1);
        anyhow::ensure!(
            (loss - want).abs() <= 1e-4 * want.abs(),
            "step {}: the pipelined loss {loss} differs from the unpipelined {want}",
            i + 1
        );
        losses.push(loss);
        check_quartered(&results[qkv])?;
        weights = results.into_iter().map(StepResult::into_arg).collect();
    }
    anyhow::ensure!(
        losses[losses.len() - 1] < losses[0],
        "the loss does not fall: {losses:?}"
    );
    Ok(())
}

/// The first block's `qkv` weight, `[32, 96]`, lies on its group as `P('data', 'model')`: each
/// of the 4 devices holds a `[16, 48]` quarter.
fn check_quartered(result: &StepResult) -> anyhow::Result<()> {
    let StepResult::Mpmd(array) = result else {
        anyhow::bail!("the weight came back to the host")
    };
    for group in array.to_mpmd_local_arrays()?.values() {
        for shard in group.addressable_shards()? {
            let dims: Vec<i64> = shard.block.iter().map(|(a, b)| b - a).collect();
            anyhow::ensure!(dims == [16, 48], "a shard of {dims:?}, not a quarter");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sharded_pipeline_trains_like_the_unpipelined_sharded_step() -> anyhow::Result<()> {
        super::main()
    }
}
