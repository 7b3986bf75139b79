//! Where a run starts: step 0 with the seed's parameters or an imported model's, or the newest
//! checkpoint of `--resume` (each process reading only the values its groups use); the names of
//! the carried values (parameters, then optimizer state) and placeholders for those a process
//! does not read.

use anyhow::bail;
use tessera_ir::Array;
use tessera_nn::checkpoint::{History, Part};

use super::args::Args;
use super::model::Model;
use super::{checkpoints, hf_import, step};

/// Where a run starts: its step, carried values, history, seed and what reading an imported
/// model cost (see [`starting_point`]).
pub type Start = (
    u64,
    Vec<Array>,
    History,
    u64,
    Option<hf_import::ImportStats>,
);

/// Where a run starts: the number of steps already taken, the carried values (parameters,
/// then optimizer state), the history and the seed its parameters were made with (a resumed
/// run's is its checkpoint's, recorded again in the checkpoints it writes). From a checkpoint,
/// only the values `reads[i]` marks are read; the others (which this process never uses) are
/// placeholders of their type, NaN where they can be.
pub fn starting_point(
    args: &Args,
    model: &Model,
    training: &step::TrainingStep,
    description: &str,
    reads: &[bool],
    imported: Option<&hf_import::Imported>,
) -> anyhow::Result<Start> {
    let Some(dir) = &args.resume else {
        let (params, stats) = match imported {
            Some(imported) => {
                let (params, stats) =
                    hf_import::initial_params(imported, &model.param_avals, reads, placeholder)?;
                (params, Some(stats))
            }
            None => (model.init.clone(), None),
        };
        let carried = params
            .into_iter()
            .chain(training.init_state.iter().cloned());
        return Ok((0, carried.collect(), History::default(), args.seed, stats));
    };
    let names = carried_names(model, training);
    let wanted = |part: Part, path: &str| {
        names
            .iter()
            .zip(reads)
            .any(|((p, n), &read)| read && *p == part && n == path)
    };
    let checkpoint = checkpoints::resume(
        dir,
        description,
        &model.param_avals,
        &training.state_avals,
        &wanted,
    )?;
    let step = checkpoint.manifest.step;
    let seed = checkpoint.manifest.seed;
    if args.was_given("seed") && args.seed != seed {
        bail!(
            "--resume {}: the checkpoint's parameters were made with --seed {seed}, not {}; the \
             seed only makes the initial parameters, so drop --seed (or give {seed})",
            dir.display(),
            args.seed
        );
    }
    if step >= u64::from(args.steps) {
        bail!(
            "--resume {}: the newest checkpoint is after step {step}, and --steps {} counts all \
             steps of the run; pass --steps above {step} to train on",
            dir.display(),
            args.steps
        );
    }
    let avals = model.param_avals.flatten();
    let state_avals = training.state_avals.flatten();
    let loaded = checkpoint
        .params
        .flatten()
        .into_iter()
        .chain(checkpoint.opt_state.flatten());
    let carried = loaded
        .zip(avals.iter().chain(&state_avals))
        .map(|(a, aval)| a.map_or_else(|| placeholder(aval), Ok))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((step, carried, checkpoint.manifest.history, seed, None))
}

/// A value of `aval`'s type for a carried value this process does not read: NaN (or the
/// smallest integer), so that a use of it could not pass for a real value.
pub fn placeholder(aval: &tessera_ir::ShapedArray) -> anyhow::Result<Array> {
    let fill = match aval.dtype.is_float() {
        true => f64::NAN,
        false if aval.dtype.is_unsigned() => 0.0,
        false => f64::from(i32::MIN),
    };
    let n: i64 = aval.shape.iter().product();
    Ok(Array::new(aval.dtype, &aval.shape, vec![fill; n as usize])?)
}

/// The tree and path of each carried value: parameters, then optimizer state.
pub fn carried_names(model: &Model, training: &step::TrainingStep) -> Vec<(Part, String)> {
    let params = model
        .param_avals
        .paths()
        .into_iter()
        .map(|p| (Part::Params, p));
    let state = training.state_avals.paths().into_iter();
    params.chain(state.map(|p| (Part::Optimizer, p))).collect()
}
