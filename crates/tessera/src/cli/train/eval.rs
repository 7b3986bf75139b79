//! The eval loss, computed where the model lives: a forward-only pipeline over the training
//! step's groups, on the parameters the last step left there.
//!
//! The eval program is `(params..., tokens, targets) -> mean loss`, the held-out batches
//! stacked as micro-batches along a leading axis and looped over by a `treduce` whose body is
//! the staged loss itself (no `value_and_grad_call`). `mpmd_jit` runs such a body forward only
//! (`tessera_mpmd::driver::PipelineOptions::forward_only`): the training schedule's placement,
//! each group running its stages' forwards on the parameters it already holds, with the
//! parameters' specs of the training layout and the same processes (one rank per group under
//! MPI). Nothing is donated: the parameters go on to the next step.
//!
//! Unless `--no-reference`, each eval loss is checked against the same loss on one device (the
//! unstaged loss on the parameters copied to the host; under MPI gathered on rank 0 first).

use anyhow::{Context, bail};
use tessera::jit::{from_host, to_host};
use tessera_ir::trace::{Tensor, call_closed, trace, treduce};
use tessera_ir::{Array, ClosedJaxpr, DType};
use tessera_mpmd::mpi_job::MpiJob;
use tessera_mpmd::{MpmdJit, MpmdJitOptions, MpmdMesh, StepArg, StepResult};
use tessera_pjrt::{Client, HostArray, LoadedExecutable};

use super::model::Model;
use super::step;

/// The largest relative difference of an eval loss from its one-device value that passes, for
/// a float32 model (a lower-precision one gets the reference's tolerance).
pub const TOLERANCE: f64 = 1e-5;

/// A compiled eval: the forward-only pipeline, the held-out data, and the one-device check.
pub struct Eval {
    jit: MpmdJit,
    /// The stacked eval tokens and targets.
    data: Vec<HostArray>,
    /// The one-device eval loss, compiled on rank 0 when the reference is on.
    check: Option<LoadedExecutable>,
    /// Whether every rank joins the check (gathering the parameters on rank 0).
    checked: bool,
    tolerance: f64,
    n_params: usize,
}

/// What [`Eval::new`] needs of the run.
pub struct EvalSetup<'a> {
    pub client: &'a Client,
    pub mesh: &'a MpmdMesh,
    pub model: &'a Model,
    pub schedule: &'a str,
    /// The training step's options: its in_specs (parameters first, data last), processes and
    /// fusion are the eval's.
    pub training: &'a MpmdJitOptions,
    /// Whether to check each eval loss against one device.
    pub check: bool,
    pub root: bool,
    /// The dtype the model computes in (a lower precision gets the reference's tolerance).
    pub compute: DType,
}

impl Eval {
    /// Compiles the eval of `setup.model`, or `None` when the model has no held-out data (the
    /// MLP).
    pub fn new(setup: &EvalSetup<'_>) -> anyhow::Result<Option<Eval>> {
        let model = setup.model;
        let batches = model.eval_batches()?;
        if batches.is_empty() {
            return Ok(None);
        }
        let (tokens, targets): (Vec<Array>, Vec<Array>) = batches.into_iter().unzip();
        let data = [tokens, targets]
            .iter()
            .map(|parts| {
                let first = parts.first().context("no eval batches")?;
                Ok(Array::stack_rows(first.dtype(), first.dims(), parts)?)
            })
            .collect::<anyhow::Result<Vec<Array>>>()?;
        let program = eval_program(model, setup.schedule, &data)?;
        let n_params = model.n_params();
        let specs = &setup.training.in_specs;
        // The training step's specs: its parameters', then its data's (after the optimizer state
        // and the learning rate).
        let in_specs = match specs.is_empty() {
            true => Vec::new(),
            false => {
                let data_specs = specs.len().saturating_sub(data.len());
                specs[..n_params]
                    .iter()
                    .chain(&specs[data_specs..])
                    .cloned()
                    .collect()
            }
        };
        let options = MpmdJitOptions {
            processes: setup.training.processes.clone(),
            in_specs,
            fusion: setup.training.fusion,
            timeout: setup.training.timeout,
            ..MpmdJitOptions::default()
        };
        let jit = tessera_mpmd::mpmd_jit_with(setup.client, setup.mesh, &program, &options)
            .context("compiling the eval loss's forward-only pipeline")?;
        let check = match (setup.check && setup.root, &model.eval_loss) {
            (true, Some(loss)) => Some(tessera::jit::compile(setup.client, loss, 0)?),
            _ => None,
        };
        Ok(Some(Eval {
            jit,
            data: data.iter().map(to_host).collect::<Result<_, _>>()?,
            check,
            checked: setup.check && model.eval_loss.is_some(),
            tolerance: match setup.compute {
                DType::BF16 | DType::F16 => super::reference::tolerance(setup.compute),
                _ => TOLERANCE,
            },
            n_params,
        }))
    }

    /// The mean eval loss of the parameters in `outputs` (a training step's results, parameters
    /// first, on their groups), on every rank; checked against one device when set up so
    /// (every rank of a job calls this together). `like` gives the parameters' types.
    pub fn loss(
        &self,
        client: &Client,
        model: &Model,
        outputs: &[StepResult],
        like: &[Array],
        job: Option<&MpiJob>,
    ) -> anyhow::Result<EvalLoss> {
        let args: Vec<StepArg> = outputs
            .iter()
            .take(self.n_params)
            .cloned()
            .map(StepResult::into_arg)
            .chain(self.data.iter().cloned().map(StepArg::Host))
            .collect();
        let run = self.jit.call_mpmd(&args)?;
        let loss = run
            .outputs
            .first()
            .context("the eval returned nothing")?
            .to_host()?;
        let loss = from_host(&loss, DType::F32)?.to_vec()[0];
        if !self.checked {
            return Ok(EvalLoss {
                loss,
                one_device: None,
            });
        }
        let params = &outputs[..self.n_params.min(outputs.len())];
        let like = &like[..self.n_params.min(like.len())];
        let on_host = match job {
            None => Some(super::carried_on_host(params, like)?),
            Some(job) => crate::cli::mpi::gather_carried(job, params, like)?,
        };
        let (Some(exe), Some(params)) = (&self.check, on_host) else {
            return Ok(EvalLoss {
                loss,
                one_device: None,
            });
        };
        let one_device = one_device_loss(client, exe, model, &params)?;
        let difference = super::reference::relative_difference(loss, one_device);
        if difference > self.tolerance {
            bail!(
                "the pipelined eval loss {loss} differs from the same loss on one device \
                 ({one_device}) by {difference:.2e} relative, above {:.0e}",
                self.tolerance
            );
        }
        Ok(EvalLoss {
            loss,
            one_device: Some(one_device),
        })
    }
}

/// One eval's result.
pub struct EvalLoss {
    /// The pipelined eval loss.
    pub loss: f64,
    /// The same loss on one device, where checked (rank 0).
    pub one_device: Option<f64>,
}

/// `(params..., tokens, targets) -> mean loss`: a forward-only `treduce` over the stacked eval
/// batches of the staged loss, under the training schedule's name (its placement).
fn eval_program(model: &Model, schedule: &str, data: &[Array]) -> anyhow::Result<ClosedJaxpr> {
    let data_args = super::step::data_args(model);
    if data_args.len() != data.len() {
        bail!(
            "the loss takes {} data arguments, the eval has {}",
            data_args.len(),
            data.len()
        );
    }
    let n_params = model.params.len();
    let mut avals = model.param_avals.flatten();
    avals.extend(data.iter().map(Array::aval));
    let program = trace(&avals, |a| {
        let (weights, rest) = a.split_at(n_params);
        let weight_refs: Vec<&Tensor> = weights.iter().collect();
        let xs: Vec<&Tensor> = rest.iter().collect();
        let outs = treduce(&weight_refs, &xs, 0, schedule, &[], |w, mb| {
            let args = super::step::loss_args(model, &data_args, w, mb);
            call_closed(&model.loss, &args)
        });
        vec![outs[0].mean(&[0])]
    })?;
    Ok(program)
}

/// The mean loss of `params` on the held-out batches, on device 0, batch by batch.
fn one_device_loss(
    client: &Client,
    exe: &LoadedExecutable,
    model: &Model,
    params: &[Array],
) -> anyhow::Result<f64> {
    let batches = model.eval_batches()?;
    let mut total = 0.0;
    for (tokens, targets) in &batches {
        let args: Vec<_> = std::iter::once(tokens)
            .chain(params)
            .chain(std::iter::once(targets))
            .map(to_host)
            .collect::<Result<_, _>>()?;
        let out = step::run_on_one_device(client, exe, &args, &[DType::F32])?;
        total += out
            .first()
            .context("the eval loss returned nothing")?
            .to_vec()[0];
    }
    Ok(total / batches.len().max(1) as f64)
}
