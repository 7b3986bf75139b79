//! The training step as one traced program, and running it unpipelined for reference.
//!
//! The step is `(params..., optimizer state..., lr, data...) -> (params'..., state'..., mean
//! loss)`, each data argument holding every micro-batch along a leading axis. The micro-batch
//! loop is a `treduce` of `value_and_grad_call(loss)` under the schedule; the optimizer's update
//! (`tessera_nn::optim`) of the mean gradients follows it. `mpmd_jit` pipelines it; the
//! reference is the same program unpipelined (its `treduce` a while loop) on one device.

use std::collections::HashMap;

use anyhow::Context;
use tessera::jit::{from_host, to_host};
use tessera_ir::trace::{Tensor, trace, treduce, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_nn::Tree;
use tessera_nn::optim::{Optimizer, clip_by_global_norm};
use tessera_pjrt::{Client, HostArray};

use super::model::Model;

/// The step program and the optimizer state it carries.
pub struct TrainingStep {
    /// The program.
    pub program: ClosedJaxpr,
    /// The optimizer state's names and types.
    pub state_avals: Tree<ShapedArray>,
    /// The optimizer state before the first step.
    pub init_state: Vec<Array>,
}

/// The loss's data argument positions (those that are not parameters), in order.
pub(super) fn data_args(model: &Model) -> Vec<usize> {
    let n_args = model.loss.jaxpr.invars.len();
    (0..n_args).filter(|k| !model.params.contains(k)).collect()
}

/// The loss's arguments in its order, from the weights `w` (one per parameter argument) and a
/// micro-batch's data `mb` (one per data argument, `data_args`' order).
pub(super) fn loss_args<'t>(
    model: &Model,
    data_args: &[usize],
    w: &'t [Tensor],
    mb: &'t [Tensor],
) -> Vec<&'t Tensor> {
    (0..model.loss.jaxpr.invars.len())
        .map(|k| match model.params.iter().position(|&p| p == k) {
            Some(i) => &w[i],
            None => &mb[data_args.iter().position(|&d| d == k).unwrap_or(0)],
        })
        .collect()
}

/// Each data argument of the micro-batches stacked along a new leading axis.
pub fn stack(model: &Model, batches: &[HashMap<usize, Array>]) -> anyhow::Result<Vec<Array>> {
    data_args(model)
        .iter()
        .map(|k| {
            let parts: Vec<Array> = batches
                .iter()
                .map(|b| {
                    b.get(k)
                        .cloned()
                        .context("a micro-batch lacks a data argument")
                })
                .collect::<anyhow::Result<_>>()?;
            let first = parts.first().context("a step has no micro-batches")?;
            // Byte for byte, so integer tokens stay exact whatever their width.
            Ok(Array::stack_rows(first.dtype(), first.dims(), &parts)?)
        })
        .collect()
}

/// Traces the training step of `model` under `schedule` with `opt`, the mean gradients clipped
/// to the global norm `clip` if given; `data` fixes the data arguments' types (one step's
/// stacked micro-batches).
pub fn training_step(
    model: &Model,
    schedule: &str,
    opt: &dyn Optimizer,
    clip: Option<f64>,
    data: &[Array],
) -> anyhow::Result<TrainingStep> {
    let data_args = data_args(model);
    let mbs = data.first().map_or(1, |d| d.shape()[0]);
    let param_avals = &model.param_avals;
    let state_avals = opt.state_avals(param_avals);
    // The optimizer's state starts from the parameters' shapes (zeros, a count); an imported
    // model has no values here yet, so zeros of its parameters' types stand in.
    let params = match model.init.is_empty() {
        false => param_avals.unflatten(model.init.clone())?,
        true => param_avals.try_map(&mut |_, a| {
            let n: i64 = a.shape.iter().product();
            Array::new(a.dtype, &a.shape, vec![0.0; n as usize])
        })?,
    };
    let init_state = opt.init_state(&params)?.flatten();
    let mut avals = param_avals.flatten();
    avals.extend(state_avals.flatten());
    avals.push(ShapedArray::new(DType::F32, &[]));
    avals.extend(data.iter().map(Array::aval));
    let (n_params, n_state) = (model.params.len(), state_avals.len());
    let mut failure = None;
    let step = trace(&avals, |a| {
        let (weights, rest) = a.split_at(n_params);
        let (state, rest) = rest.split_at(n_state);
        let weight_refs: Vec<&Tensor> = weights.iter().collect();
        let xs: Vec<&Tensor> = rest[1..].iter().collect();
        let outs = treduce(&weight_refs, &xs, 0, schedule, &[], |w, mb| {
            let args = loss_args(model, &data_args, w, mb);
            value_and_grad_call(&model.loss, &model.params, &args)
        });
        // The mean of the micro-batches' gradients, then the optimizer's update.
        let update = || -> tessera_nn::Result<Vec<Tensor>> {
            let grads: Vec<Tensor> = outs[1..=n_params].iter().map(|g| g / mbs as f64).collect();
            let grads = param_avals.unflatten(grads)?;
            let grads = match clip {
                Some(max_norm) => clip_by_global_norm(&grads, max_norm),
                None => grads,
            };
            let (params, state) = opt.update(
                &rest[0],
                &param_avals.unflatten(weights.to_vec())?,
                &grads,
                &state_avals.unflatten(state.to_vec())?,
            )?;
            let mut results = params.flatten();
            results.extend(state.flatten());
            results.push(outs[0].mean(&[0]));
            Ok(results)
        };
        update().unwrap_or_else(|err| {
            failure = Some(err);
            vec![outs[0].clone()]
        })
    });
    if let Some(err) = failure {
        return Err(err.into());
    }
    Ok(TrainingStep {
        program: step?,
        state_avals,
        init_state,
    })
}

/// The step's arguments as host arrays: the carried values, the learning rate, the data.
pub fn step_args(carried: &[Array], lr: f64, data: &[Array]) -> anyhow::Result<Vec<HostArray>> {
    let lr = Array::scalar(DType::F32, lr);
    carried
        .iter()
        .chain(std::iter::once(&lr))
        .chain(data)
        .map(|a| Ok(to_host(a)?))
        .collect()
}

/// The arguments of step `step_index` after the carried ones (the learning rate, then the
/// micro-batches), each placed where the step takes it (`MpmdJit::place_ahead`: on the device
/// for a step run as one program), `first` being the position of the first of them. Called on
/// another thread for the next step while the current one runs.
pub fn batch_args(
    model: &Model,
    schedule: &tessera_nn::lr::LrSchedule,
    jit: &tessera_mpmd::MpmdJit,
    step_index: u64,
    first: usize,
) -> anyhow::Result<Vec<tessera_mpmd::StepArg>> {
    let data = stack(model, &model.batches(step_index)?)?;
    step_args(&[], schedule.at(step_index), &data)?
        .into_iter()
        .enumerate()
        .map(|(i, host)| Ok(jit.place_ahead(first + i, host)?))
        .collect()
}

/// Runs a compiled program on device 0 of `client` and returns its outputs.
pub fn run_on_one_device(
    client: &Client,
    exe: &tessera_pjrt::LoadedExecutable,
    args: &[HostArray],
    dtypes: &[DType],
) -> anyhow::Result<Vec<Array>> {
    let buffers = args
        .iter()
        .map(|a| Ok(tessera_pjrt::Buffer::from_host_to(client, a, 0)?))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let outs = exe.execute(&[buffers.iter().collect()])?;
    let first = outs.first().context("the program returned nothing")?;
    first
        .iter()
        .zip(dtypes)
        .map(|(b, &dtype)| Ok(from_host(&b.to_host()?, dtype)?))
        .collect()
}

/// One unpipelined step: the carried values after it, and its mean loss.
pub fn reference_step(
    client: &Client,
    exe: &tessera_pjrt::LoadedExecutable,
    step: &ClosedJaxpr,
    args: &[HostArray],
) -> anyhow::Result<(f64, Vec<Array>)> {
    let dtypes: Vec<DType> = step.jaxpr.out_avals().iter().map(|a| a.dtype).collect();
    let mut outs = run_on_one_device(client, exe, args, &dtypes)?;
    let loss = outs.pop().context("the step returned nothing")?;
    Ok((loss.to_vec()[0], outs))
}
