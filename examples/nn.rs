//! A model from the library, trained: `cargo run -p tessera-examples --example nn` (and `cargo
//! test -p tessera-examples --example nn`, which `cargo xtask test` runs).
//!
//! A Llama-style byte-level decoder (`tessera::nn::DecoderConfig::llama`) is traced into its loss
//! program; the training step differentiates it and applies AdamW, with the learning rate of a
//! warm-up + cosine schedule passed in each step. The step is compiled once with `jit` on one
//! PJRT CPU device and run on windows of `examples/data/corpus.txt` (`tessera::nn::data`, with a
//! held-out tail for an eval loss); parameters and optimizer state stay on the device between
//! steps. Parameters are a tree (`embed.tokens.table`, `blocks.0.attn.qkv.w`, ...) flattened to
//! the step's argument list and back. Halfway it saves a checkpoint (`tessera::nn::checkpoint`);
//! a second run resumes from it and gives the same losses, bit for bit. The loss curve is drawn
//! to `target/nn-loss.svg`.

use tessera::ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera::jit::Jit;
use tessera::nn::checkpoint::{self, Manifest};
use tessera::nn::data::{ByteCorpus, Split};
use tessera::nn::lr::LrSchedule;
use tessera::nn::optim::{AdamW, Optimizer};
use tessera::nn::{DecoderConfig, NnError, StagePlan, Tree, trace_trees, value_and_grad_tree};
use tessera::pjrt::{Array as DeviceArray, Client};
use tessera::sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec};

const ROWS: i64 = 8;
const STEPS: u64 = 30;
const SEED: u64 = 0;

/// `(lr, tokens, params, state, targets) -> (loss, params, state)`, trees in and out; as a
/// program, each tree is its leaves in order.
fn training_step(config: &DecoderConfig, opt: &AdamW) -> anyhow::Result<ClosedJaxpr> {
    let loss = config.loss(ROWS, &StagePlan::single())?;
    let params = config.avals();
    let tokens = Tree::Leaf(ShapedArray::new(DType::I32, &[ROWS, config.seq_len]));
    let lr = Tree::Leaf(ShapedArray::new(DType::F32, &[]));
    let state = opt.state_avals(&params);
    let inputs = [lr, tokens.clone(), params, state, tokens];
    let (step, _outputs) = trace_trees(&inputs, |trees| {
        let [lr, tokens, params, state, targets] = trees else {
            return Err(NnError::Structure(
                "expected the step's five input trees".into(),
            ));
        };
        let (loss, grads) = value_and_grad_tree(&loss, &[tokens, params, targets], 1)?;
        let (params, state) = opt.update(lr.leaf("")?, params, &grads, state)?;
        Ok(vec![Tree::Leaf(loss), params, state])
    })?;
    Ok(step)
}

/// The model, optimizer and learning rates of the run.
fn setup() -> (DecoderConfig, AdamW, LrSchedule) {
    let schedule = LrSchedule::WarmupCosine {
        init: 0.0,
        peak: 3e-3,
        warmup: 5,
        decay_steps: STEPS,
        end: 3e-4,
    };
    (
        DecoderConfig::llama(256, 2, 32, 4, 16),
        AdamW::default(),
        schedule,
    )
}

/// Where a run starts: fresh, or from a checkpoint folder.
enum Start<'a> {
    Fresh,
    From(&'a std::path::Path),
}

/// Trains until step `STEPS`, saving a checkpoint after step `save_at` into `dir`; returns the
/// `(step, loss)` of every step it ran and the eval losses.
#[allow(clippy::type_complexity)]
fn train(
    start: Start<'_>,
    dir: &std::path::Path,
    save_at: u64,
) -> anyhow::Result<(Vec<(u64, f64)>, Vec<(u64, f64)>)> {
    let (config, opt, schedule) = setup();
    let corpus_path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/data/corpus.txt"));
    let corpus = ByteCorpus::from_file(corpus_path, config.seq_len as usize, 0.1)?;
    let step = training_step(&config, &opt)?;
    let eval = config.loss(ROWS, &StagePlan::single())?;

    let client = Client::cpu(1)?;
    let mesh = Mesh::new(AbstractMesh::auto(&[("x", 1)])?, vec![0])?;
    let one = NamedSharding::new(&mesh, PartitionSpec::replicated())?;
    let compile = |program: ClosedJaxpr| -> anyhow::Result<_> {
        let (ins, outs) = (program.jaxpr.invars.len(), program.jaxpr.out_avals().len());
        Ok(
            Jit::new(program, vec![one.clone(); ins], vec![one.clone(); outs])?
                .lower()?
                .compile(&client)?,
        )
    };
    let (compiled, eval) = (compile(step)?, compile(eval)?);
    let put = |a: &Array| -> anyhow::Result<DeviceArray> {
        Ok(DeviceArray::device_put(&client, a, &one)?)
    };
    let get = |a: &DeviceArray| -> anyhow::Result<Array> { Ok(a.to_host()?) };

    let (params, state, first) = match start {
        Start::Fresh => {
            let params = config.init(SEED)?;
            let state = opt.init_state(&params)?;
            (params, state, 0)
        }
        Start::From(folder) => {
            let saved =
                checkpoint::load(folder, &config.avals(), &opt.state_avals(&config.avals()))?;
            println!(
                "resuming from {} (step {})",
                folder.display(),
                saved.manifest.step
            );
            (saved.params, saved.opt_state, saved.manifest.step)
        }
    };
    let mut weights: Vec<DeviceArray> = params
        .flatten()
        .iter()
        .map(put)
        .collect::<anyhow::Result<_>>()?;
    let mut state: Vec<DeviceArray> = state
        .flatten()
        .iter()
        .map(put)
        .collect::<anyhow::Result<_>>()?;
    let (mut losses, mut evals) = (Vec::new(), Vec::new());
    for i in first..STEPS {
        let (tokens, targets) = corpus.batch(Split::Train, i * ROWS as u64, ROWS as usize)?;
        let lr = put(&Array::scalar(DType::F32, schedule.at(i)))?;
        let (tokens, targets) = (put(&tokens)?, put(&targets)?);
        let mut args = vec![&lr, &tokens];
        args.extend(weights.iter());
        args.extend(state.iter());
        args.push(&targets);
        let mut out = compiled.call(&args)?;
        let loss = get(&out[0])?.to_vec()[0];
        state = out.split_off(1 + weights.len());
        weights = out.split_off(1);
        losses.push((i, loss));
        if i % 10 == 9 {
            let (tokens, targets) = corpus.batch(Split::Eval, 0, ROWS as usize)?;
            let (tokens, targets) = (put(&tokens)?, put(&targets)?);
            let mut args = vec![&tokens];
            args.extend(weights.iter());
            args.push(&targets);
            let eval_loss = get(&eval.call(&args)?[0])?.to_vec()[0];
            evals.push((i, eval_loss));
            println!(
                "step {i:>3}  lr {:.2e}  loss {loss:.4}  eval {eval_loss:.4}",
                schedule.at(i)
            );
        }
        if i + 1 == save_at {
            let to_tree =
                |arrays: &[DeviceArray], like: &Tree<ShapedArray>| -> anyhow::Result<Tree<Array>> {
                    Ok(like.unflatten(arrays.iter().map(get).collect::<anyhow::Result<_>>()?)?)
                };
            let manifest = Manifest {
                step: i + 1,
                seed: SEED,
                data_position: (i + 1) * ROWS as u64,
                model: format!("{config:?}"),
                history: Default::default(),
            };
            let params = to_tree(&weights, &config.avals())?;
            let opt_state = to_tree(&state, &opt.state_avals(&config.avals()))?;
            let folder = checkpoint::save(dir, &manifest, &params, &opt_state)?;
            println!("saved {}", folder.display());
        }
    }
    Ok((losses, evals))
}

fn main() -> anyhow::Result<()> {
    let (config, ..) = setup();
    println!(
        "Llama-style decoder: {} parameters in {} tensors, e.g. {}",
        config.param_count(),
        config.spec().len(),
        config.spec().paths()[1]
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = root.parent().unwrap_or(root).join("target");
    let dir = target.join("nn-checkpoints");
    let (losses, evals) = train(Start::Fresh, &dir, STEPS / 2)?;
    let folder = checkpoint::latest(&dir)?.ok_or_else(|| anyhow::anyhow!("no checkpoint"))?;
    let (resumed, _) = train(Start::From(&folder), &dir, 0)?;
    let same = resumed[..] == losses[losses.len() - resumed.len()..];
    println!("resumed losses equal the uninterrupted run's, bit for bit: {same}");
    let svg = target.join("nn-loss.svg");
    tessera::plot::loss_curve_svg(&svg, "Llama-style decoder on corpus.txt", &losses, &evals)?;
    println!("loss curve: {}", svg.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loss starts near ln(256) and falls; a run resumed from the checkpoint written halfway
    /// gives the uninterrupted run's losses for the remaining steps, bit for bit.
    #[test]
    fn the_llama_learns_the_corpus_and_resumes_exactly() {
        let dir = std::env::temp_dir().join(format!("tessera-nn-example-{}", std::process::id()));
        let (losses, _) = train(Start::Fresh, &dir, STEPS / 2).unwrap();
        let (first, last) = (losses[0].1, losses.last().unwrap().1);
        assert!((first - 256f64.ln()).abs() < 0.3, "first loss {first}");
        assert!(last < first - 1.0, "losses {losses:?}");
        let folder = checkpoint::latest(&dir).unwrap().unwrap();
        let (resumed, _) = train(Start::From(&folder), &dir, 0).unwrap();
        assert_eq!(resumed.len() as u64, STEPS / 2);
        assert_eq!(resumed[..], losses[(STEPS / 2) as usize..]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
