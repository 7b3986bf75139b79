//! A model from the library, trained: `cargo run -p tessera-examples --example nn` (and `cargo
//! test -p tessera-examples --example nn`, which `cargo xtask test` runs).
//!
//! A Llama-style byte-level decoder (`tessera::nn::DecoderConfig::llama`) is traced into its loss
//! program; the training step differentiates it and applies AdamW, with the learning rate of a
//! warm-up + cosine schedule passed in each step. The step is compiled once with `jit` on one
//! PJRT CPU device and run on windows of `examples/data/corpus.txt`; parameters and optimizer
//! state stay on the device between steps. Parameters are a tree (`embed.tokens.table`,
//! `blocks.0.attn.qkv.w`, ...) flattened to the step's argument list and back.

use tessera::ir::trace::{call_closed, trace};
use tessera::ir::{Array, ClosedJaxpr, DType, ShapedArray, value_and_grad};
use tessera::jit::{Jit, from_host, to_host};
use tessera::nn::lr::LrSchedule;
use tessera::nn::optim::{AdamW, Optimizer};
use tessera::nn::{DecoderConfig, StagePlan, Tree};
use tessera::pjrt::{Array as DeviceArray, Client};
use tessera::sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec};

const ROWS: i64 = 8;
const STEPS: u64 = 30;

/// `(lr, tokens, params..., state..., targets) -> (loss, params..., state...)`.
fn training_step(config: &DecoderConfig, opt: &AdamW) -> anyhow::Result<ClosedJaxpr> {
    let loss = config.loss(ROWS, &StagePlan::single())?;
    let params = config.avals();
    let state = opt.state_avals(&params);
    let (np, ns) = (params.len(), state.len());
    let grads = value_and_grad(&loss, &(1..=np).collect::<Vec<_>>())?;
    let tokens = ShapedArray::new(DType::I32, &[ROWS, config.seq_len]);
    let mut avals = vec![ShapedArray::new(DType::F32, &[]), tokens.clone()];
    avals.extend(params.flatten());
    avals.extend(state.flatten());
    avals.push(tokens);
    let mut failure = None;
    let step = trace(&avals, |a| {
        let (lr, tokens, targets) = (&a[0], &a[1], &a[2 + np + ns]);
        let mut loss_args = vec![tokens];
        loss_args.extend(&a[2..2 + np]);
        loss_args.push(targets);
        let out = call_closed(&grads, &loss_args);
        let update = || -> tessera::nn::Result<Vec<_>> {
            let p = params.unflatten(a[2..2 + np].to_vec())?;
            let s = state.unflatten(a[2 + np..2 + np + ns].to_vec())?;
            let g = params.unflatten(out[1..].to_vec())?;
            let (p, s) = opt.update(lr, &p, &g, &s)?;
            let mut results = vec![out[0].clone()];
            results.extend(p.flatten());
            results.extend(s.flatten());
            Ok(results)
        };
        update().unwrap_or_else(|err| {
            failure = Some(err);
            vec![out[0].clone()]
        })
    });
    match failure {
        Some(err) => Err(err.into()),
        None => Ok(step?),
    }
}

/// `ROWS` windows of `seq_len + 1` bytes of the corpus, starting at `offset`: tokens and the
/// next byte of each as the target.
fn batch(corpus: &[u8], seq: i64, offset: usize) -> anyhow::Result<(Array, Array)> {
    let window = seq as usize + 1;
    let stride = corpus.len().saturating_sub(window) / ROWS as usize;
    let (mut tokens, mut targets) = (Vec::new(), Vec::new());
    for row in 0..ROWS as usize {
        let start = (offset + row * stride) % (corpus.len() - window);
        let w = &corpus[start..start + window];
        tokens.extend(w[..window - 1].iter().map(|&b| f64::from(b)));
        targets.extend(w[1..].iter().map(|&b| f64::from(b)));
    }
    let shape = [ROWS, seq];
    Ok((
        Array::new(DType::I32, &shape, tokens)?,
        Array::new(DType::I32, &shape, targets)?,
    ))
}

/// Trains for `STEPS` steps and returns the losses.
fn train() -> anyhow::Result<Vec<f64>> {
    let config = DecoderConfig::llama(256, 2, 32, 4, 16);
    let opt = AdamW::default();
    let schedule = LrSchedule::WarmupCosine {
        init: 0.0,
        peak: 3e-3,
        warmup: 5,
        decay_steps: STEPS,
        end: 3e-4,
    };
    println!(
        "Llama-style decoder: {} parameters in {} tensors, e.g. {}",
        config.param_count(),
        config.spec().len(),
        config.spec().paths()[1]
    );
    let step = training_step(&config, &opt)?;

    let client = Client::cpu(1)?;
    let mesh = Mesh::new(AbstractMesh::auto(&[("x", 1)])?, vec![0])?;
    let one = NamedSharding::new(&mesh, PartitionSpec::replicated())?;
    let arity = step.jaxpr.invars.len();
    let results = step.jaxpr.out_avals().len();
    let compiled = Jit::new(step, vec![one.clone(); arity], vec![one.clone(); results])?
        .lower()?
        .compile(&client)?;
    let put = |a: &Array| -> anyhow::Result<DeviceArray> {
        Ok(DeviceArray::device_put(&client, &to_host(a)?, &one)?)
    };
    let params = config.init(0)?;
    let mut state: Vec<DeviceArray> = opt
        .init_state(&params)?
        .flatten()
        .iter()
        .map(put)
        .collect::<anyhow::Result<_>>()?;
    let mut weights: Vec<DeviceArray> = params
        .flatten()
        .iter()
        .map(put)
        .collect::<anyhow::Result<_>>()?;
    let corpus = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/data/corpus.txt"))?;
    let mut losses = Vec::new();
    for i in 0..STEPS {
        let (tokens, targets) = batch(&corpus, config.seq_len, i as usize * 97)?;
        let lr = put(&Array::scalar(DType::F32, schedule.at(i)))?;
        let (tokens, targets) = (put(&tokens)?, put(&targets)?);
        let mut args = vec![&lr, &tokens];
        args.extend(weights.iter());
        args.extend(state.iter());
        args.push(&targets);
        let mut out = compiled.call(&args)?;
        let loss = from_host(&out[0].to_host()?, DType::F32)?.to_vec()[0];
        state = out.split_off(1 + weights.len());
        weights = out.split_off(1);
        losses.push(loss);
        if i % 5 == 0 || i + 1 == STEPS {
            println!("step {i:>3}  lr {:.2e}  loss {loss:.4}", schedule.at(i));
        }
    }
    // Back to a named tree on the host, e.g. to save it.
    let host: Vec<Array> = weights
        .iter()
        .map(|w| Ok(from_host(&w.to_host()?, DType::F32)?))
        .collect::<anyhow::Result<_>>()?;
    let trained: Tree<Array> = config.spec().unflatten(host)?;
    println!("head weights: {:?}", trained.leaf("head.w")?.shape());
    Ok(losses)
}

fn main() -> anyhow::Result<()> {
    train().map(|_| ())
}

#[cfg(test)]
mod tests {
    /// The loss starts near ln(256) and falls by the end of the run.
    #[test]
    fn the_llama_learns_the_corpus() {
        let losses = super::train().unwrap();
        let (first, last) = (losses[0], *losses.last().unwrap());
        assert!((first - 256f64.ln()).abs() < 0.3, "first loss {first}");
        assert!(last < first - 1.0, "losses {losses:?}");
    }
}
