//! From a traced loss with `pipeline_enter_stage` markers to the stage programs of the pipeline
//! contract ([`crate::pipeline`]): `Fwd`, `Bwd`, and the split `BwdI`/`BwdW` of every stage.
//!
//! The loss takes parameters and per-microbatch data and returns one scalar, then any auxiliary
//! results (per-micro-batch metrics, not differentiated), which the last stage returns. It is split with
//! `tessera_ir::passes::split_stages`; stage `s` reads its own parameters, its data and any values
//! of earlier stages (a residual may skip stages, several values may cross one boundary), and
//! exports the values later stages read (the last stage returns the loss). The
//! [`StageGraph`] checks that values flow forward and names each export's consumers.
//! A stage's forward task returns the residuals its backward reads, as its [`RematPolicy`]
//! chooses ([`crate::residuals`]): by default every value the backward needs, so the backward
//! computes no forward value again; under `nothing_saveable` only the stage's imported values and
//! data, from which the backward recomputes its forward. Backward programs take one cotangent
//! per export and consumer and sum them. The split backward is one backward pass cut in two by
//! its results (`split_outputs`): `BwdI` computes the imported values' cotangents and hands on
//! the values the weight gradients still need, and `BwdW` finishes the weight gradients from
//! those alone, recomputing nothing.

use tessera_ir::passes::{
    StageInput, eliminate_dead_code, inline_calls, split_outputs, split_stages,
};
use tessera_ir::trace::{Tensor, call_closed, trace};
use tessera_ir::{ClosedJaxpr, IrError, ShapedArray};

use crate::pipeline::{ActRef, Key, PartSignature, StageShape};
use crate::remat::{Remat, RematPolicy};
use crate::residuals::Residuals;
use crate::stage_graph::{StageGraph, StageGraphError};

/// One stage's programs, each following the contract's argument and result order.
#[derive(Debug, Clone)]
pub struct StagePrograms {
    /// `params, x (s > 0), data -> x_next | loss, residuals`.
    pub fwd: ClosedJaxpr,
    /// `params, x (s > 0), data -> x_next | loss`: `fwd` without residuals, for a forward-only
    /// pipeline (no backward reads them).
    pub fwd_only: ClosedJaxpr,
    /// `params, residuals, ct (s < last), acc -> ct_in (s > 0), acc'`.
    pub bwd: ClosedJaxpr,
    /// `params, residuals, ct (s < last) -> ct_in (s > 0), wres`.
    pub bwd_i: ClosedJaxpr,
    /// `wres, acc -> acc'`.
    pub bwd_w: ClosedJaxpr,
    /// `params, residuals, ct (s < last) -> ct_in (s > 0), grads`: `bwd` without accumulators,
    /// for the stage's first backward of a step, whose gradients start the accumulators.
    pub bwd_first: ClosedJaxpr,
    /// `wres -> grads`: `bwd_w` without accumulators, for the stage's first weight gradient.
    pub bwd_w_first: ClosedJaxpr,
    /// The loss arguments that are this stage's parameters, in contract order.
    pub param_args: Vec<usize>,
    /// The loss arguments that are this stage's data, in contract order.
    pub data_args: Vec<usize>,
    /// The contract's sizes.
    pub shape: StageShape,
    /// The remat policy the stage's residuals follow (`nothing_saveable` where the asked one
    /// could not apply: see `remat_fallback`).
    pub remat: RematPolicy,
    /// Why the asked policy could not apply, if it could not.
    pub remat_fallback: Option<String>,
    /// The residuals (by index) that read no per-micro-batch value, only parameters and
    /// constants (a rotary table): laid out whole, not split like the batch.
    pub batch_free_residuals: Vec<usize>,
}

/// Errors of partitioning.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    /// An IR error (tracing, splitting, differentiation).
    #[error(transparent)]
    Ir(#[from] IrError),
    /// The values between the stages do not flow forward.
    #[error(transparent)]
    Graph(#[from] StageGraphError),
    /// A stage marker sits inside a nested program.
    #[error(
        "equation {index} (`{prim}`) holds a stage marker in its body; stage markers must be at \
         the top level of the loss, outside `cond`, `scan` and `while`"
    )]
    NestedMarker {
        /// The equation's index in the (inlined) loss.
        index: usize,
        /// Its primitive.
        prim: &'static str,
    },
    /// The stages do not form a pipeline the contract can express.
    #[error("stage {stage}: {message}")]
    Shape {
        /// The stage.
        stage: usize,
        /// What is wrong.
        message: String,
    },
}

/// Partitions `loss` (arguments `params` are parameters, the rest per-microbatch data).
pub fn partition(
    loss: &ClosedJaxpr,
    params: &[usize],
) -> Result<Vec<StagePrograms>, PartitionError> {
    partition_with(loss, params, &[], &Remat::default())
}

/// How many stages [`partition`] would cut `loss` into, without building their programs (a
/// stage's programs need its value-and-VJP program cut at its residuals: work to do once).
pub fn stage_count(loss: &ClosedJaxpr) -> Result<usize, PartitionError> {
    let flat = inline_calls(loss);
    refuse_nested_markers(&flat.jaxpr)?;
    Ok(split_stages(&flat)?.stages.len())
}

/// [`partition`], the gradients of the parameters `maxed` (loss arguments among `params`)
/// combined over the micro-batches by their elementwise maximum instead of their sum (a
/// `treduce` gradient result combined by `Max`): the backward's accumulating programs take
/// `max(acc, g)` for them (the first backward of a step starts the accumulator with its `g`
/// either way). Each stage's residuals follow its policy in `remat`.
pub fn partition_with(
    loss: &ClosedJaxpr,
    params: &[usize],
    maxed: &[usize],
    remat: &Remat,
) -> Result<Vec<StagePrograms>, PartitionError> {
    let flat = inline_calls(loss);
    refuse_nested_markers(&flat.jaxpr)?;
    let mut split = split_stages(&flat)?;
    let count = split.stages.len();
    if !matches!(split.results.first(), Some(StageInput::Stage { stage, .. }) if *stage + 1 == count)
    {
        return Err(PartitionError::Shape {
            stage: count.saturating_sub(1),
            message: "the loss (the program's first result) must be computed in the last stage"
                .into(),
        });
    }
    results_from_last_stage(&mut split, &flat.jaxpr.in_avals());
    let reads: Vec<Vec<ActRef>> = split
        .stages
        .iter()
        .map(|stage| {
            stage
                .inputs
                .iter()
                .filter_map(|input| match *input {
                    StageInput::Stage { stage, index } => Some(ActRef {
                        stage: stage as u32,
                        k: index,
                    }),
                    StageInput::Arg(_) => None,
                })
                .collect()
        })
        .collect();
    let exports: Vec<usize> = (0..count)
        .map(|s| match s + 1 == count {
            true => 0,
            false => split.stages[s].program.jaxpr.outvars.len(),
        })
        .collect();
    let graph = StageGraph::new(&reads, &exports)?;
    (0..count)
        .map(|s| {
            let consumers = graph.consumers(s as u32);
            if let Some(k) = consumers.iter().position(Vec::is_empty) {
                return Err(PartitionError::Shape {
                    stage: s,
                    message: format!(
                        "its value {k} is a result of the program, but only the loss (in the \
                         last stage) may be one"
                    ),
                });
            }
            let policy = remat.of_stage(s as u32);
            stage_programs(&split, s, (params, maxed), &reads[s], consumers, policy)
        })
        .collect()
}

/// Makes the last stage's program return the program's results in order: the loss, then the
/// auxiliary results (metrics). A result computed in an earlier stage, or an argument, is read by
/// the last stage and passed through, so every result of a micro-batch ends on one group.
fn results_from_last_stage(split: &mut tessera_ir::passes::StageSplit, arg_avals: &[ShapedArray]) {
    let last = split.stages.len() - 1;
    let aval_of = |source: StageInput| match source {
        StageInput::Arg(k) => arg_avals[k].clone(),
        StageInput::Stage { stage, index } => {
            split.stages[stage].program.jaxpr.out_avals()[index].clone()
        }
    };
    let sources: Vec<(StageInput, ShapedArray)> =
        split.results.iter().map(|&r| (r, aval_of(r))).collect();
    let stage = &mut split.stages[last];
    let produced = stage.program.jaxpr.outvars.clone();
    let mut outvars = Vec::with_capacity(sources.len());
    for (source, aval) in sources {
        let atom = match source {
            StageInput::Stage { stage: s, index } if s == last => produced[index].clone(),
            _ => {
                let jaxpr = &mut stage.program.jaxpr;
                let var = match stage.inputs.iter().position(|&i| i == source) {
                    Some(p) => jaxpr.invars[p],
                    None => {
                        let v = jaxpr.new_var(aval);
                        jaxpr.invars.push(v);
                        stage.inputs.push(source);
                        v
                    }
                };
                tessera_ir::Atom::Var(var)
            }
        };
        outvars.push(atom);
    }
    stage.program.jaxpr.outvars = outvars;
    split.results = (0..split.results.len())
        .map(|index| StageInput::Stage { stage: last, index })
        .collect();
}

/// Refuses a stage marker inside a nested program (a `cond` branch, a `scan` or `while` body):
/// stages split the top-level program only. The error names the equation holding it.
fn refuse_nested_markers(jaxpr: &tessera_ir::Jaxpr) -> Result<(), PartitionError> {
    fn holds_marker(params: &tessera_ir::Params) -> bool {
        params.jaxprs().iter().any(|j| {
            j.jaxpr
                .eqns
                .iter()
                .any(|e| e.prim == tessera_ir::Prim::PipelineEnterStage || holds_marker(&e.params))
        })
    }
    for (i, eqn) in jaxpr.eqns.iter().enumerate() {
        if holds_marker(&eqn.params) {
            return Err(PartitionError::NestedMarker {
                index: i,
                prim: eqn.prim.name(),
            });
        }
    }
    Ok(())
}

/// Where a stage program's arguments go in the contract: parameters, imported values, data.
struct Roles {
    params: Vec<usize>,
    acts: Vec<usize>,
    data: Vec<usize>,
    param_args: Vec<usize>,
    data_args: Vec<usize>,
}

fn roles(inputs: &[StageInput], params: &[usize]) -> Roles {
    let mut r = Roles {
        params: Vec::new(),
        acts: Vec::new(),
        data: Vec::new(),
        param_args: Vec::new(),
        data_args: Vec::new(),
    };
    for (i, src) in inputs.iter().enumerate() {
        match *src {
            StageInput::Arg(k) if params.contains(&k) => {
                r.params.push(i);
                r.param_args.push(k);
            }
            StageInput::Arg(k) => {
                r.data.push(i);
                r.data_args.push(k);
            }
            StageInput::Stage { .. } => r.acts.push(i),
        }
    }
    r
}

fn stage_programs(
    split: &tessera_ir::passes::StageSplit,
    s: usize,
    (params, maxed): (&[usize], &[usize]),
    reads: &[ActRef],
    consumers: Vec<Vec<u32>>,
    policy: RematPolicy,
) -> Result<StagePrograms, PartitionError> {
    let stage = &split.stages[s];
    let last = s + 1 == split.stages.len();
    let program = &stage.program;
    let r = roles(&stage.inputs, params);
    let avals = program.jaxpr.in_avals();
    let order: Vec<usize> = r
        .params
        .iter()
        .chain(&r.acts)
        .chain(&r.data)
        .copied()
        .collect();
    let contract_avals: Vec<ShapedArray> = order.iter().map(|&i| avals[i].clone()).collect();
    let out_avals = program.jaxpr.out_avals();
    let np = r.params.len();
    // Arguments of the stage program, from contract-ordered tensors.
    let reorder = |contract: &[Tensor]| -> Vec<Tensor> {
        let mut args = vec![contract[0].clone(); order.len()];
        for (c, &i) in order.iter().enumerate() {
            args[i] = contract[c].clone();
        }
        args
    };
    // The forward task runs the stage's callbacks and returns the residuals; a backward that
    // recomputes runs none of them.
    let inputs: Vec<usize> = r.acts.iter().chain(&r.data).copied().collect();
    let res = Residuals::new(program, policy, &r.params, &inputs)?;
    let nr = res.avals().len();
    let fwd = trace(&contract_avals, |a| {
        let (out, saved) = res.forward(program, &reorder(a));
        out.into_iter().chain(saved).collect()
    })?;
    let fwd_only = trace(&contract_avals, |a| {
        let refs: Vec<Tensor> = reorder(a);
        call_closed(program, &refs.iter().collect::<Vec<_>>())
    })?;
    // One cotangent per export and consumer; the last stage seeds its loss with 1 and its
    // auxiliary results (not differentiated) with 0.
    let ct_avals: Vec<ShapedArray> = consumers
        .iter()
        .zip(&out_avals)
        .flat_map(|(users, aval)| std::iter::repeat_n(aval.clone(), users.len()))
        .collect();
    let n_ct = ct_avals.len();
    let seeds = |a: &[Tensor], cts: &[Tensor]| -> Vec<Tensor> {
        if last {
            let zero = |aval: &ShapedArray| {
                let z = a[0].literal_zero(aval.dtype);
                match aval.rank() {
                    0 => z,
                    _ => z.broadcast_in_dim(&aval.shape, &[]),
                }
            };
            let one = a[0].literal_one(out_avals[0].dtype);
            return std::iter::once(one)
                .chain(out_avals[1..].iter().map(zero))
                .collect();
        }
        let mut next = 0;
        consumers
            .iter()
            .map(|users| {
                let parts = &cts[next..next + users.len()];
                next += users.len();
                parts[1..].iter().fold(parts[0].clone(), |sum, p| &sum + p)
            })
            .collect()
    };
    // The stage's gradients (per program argument) from the parameters, the residuals and the
    // cotangents, in the contract's order.
    let n_args = avals.len();
    let stage_grads = |a: &[Tensor]| -> Vec<Tensor> {
        // Only parameters are asked for (the residuals hold every other argument it reads).
        let param = |i: usize| match r.params.iter().position(|&p| p == i) {
            Some(k) => a[k].clone(),
            None => a[0].clone(),
        };
        let cts = seeds(a, &a[np + nr..np + nr + n_ct]);
        res.backward(param, n_args, &a[np..np + nr], cts)
    };
    let ct_out = |g: &[Tensor]| r.acts.iter().map(|&i| g[i].clone()).collect::<Vec<_>>();
    let mut bwd_avals: Vec<ShapedArray> = contract_avals[..np].to_vec();
    bwd_avals.extend(res.avals().iter().cloned());
    bwd_avals.extend(ct_avals);
    let acc_avals: Vec<ShapedArray> = r.params.iter().map(|&i| avals[i].clone()).collect();
    // Each parameter's accumulator takes the next micro-batch's gradient by its combination.
    let combine = |k: usize, acc: &Tensor, g: &Tensor| match maxed.contains(&r.param_args[k]) {
        true => acc.maximum(g),
        false => acc + g,
    };
    let mut full_avals = bwd_avals.clone();
    full_avals.extend(acc_avals.iter().cloned());
    let bwd = trace(&full_avals, |a| {
        let g = stage_grads(a);
        let accs = r
            .params
            .iter()
            .enumerate()
            .map(|(k, &i)| combine(k, &a[np + nr + n_ct + k], &g[i]));
        ct_out(&g).into_iter().chain(accs).collect()
    })?;
    // The backward pass split by its results: BwdI computes the imported values' cotangents and
    // hands on what the weight gradients still need; BwdW finishes them from that alone.
    let whole = trace(&bwd_avals, |a| {
        let g = stage_grads(a);
        ct_out(&g)
            .into_iter()
            .chain(r.params.iter().map(|&i| g[i].clone()))
            .collect()
    })?;
    let first: Vec<usize> = (0..r.acts.len()).collect();
    let split = split_outputs(&whole, &first)?;
    let bwd_i = split.first;
    // The first backward of a step returns its gradients as they are: they become the
    // accumulators, so none is made or uploaded (0 + g is g).
    let bwd_first = whole;
    let mut w_avals = split.second.jaxpr.in_avals();
    w_avals.extend(acc_avals.iter().cloned());
    let handed = split.handed_on;
    let weight_grads = split.second;
    let bwd_w_first = weight_grads.clone();
    let bwd_w = trace(&w_avals, |a| {
        let refs: Vec<&Tensor> = a[..handed].iter().collect();
        let g = call_closed(&weight_grads, &refs);
        g.iter()
            .zip(&a[handed..])
            .enumerate()
            .map(|(k, (g, acc))| combine(k, acc, g))
            .collect()
    })?;
    let clean = |p: ClosedJaxpr| eliminate_dead_code(&inline_calls(&p));
    let shape = StageShape {
        params: np,
        data: r.data.len(),
        residuals: nr,
        weight_residuals: handed,
        inputs: reads.to_vec(),
        consumers,
        aux: if last { out_avals.len() - 1 } else { 0 },
    };
    let fwd = clean(fwd);
    let batch_free_residuals = batch_free_results(&fwd, np, nr);
    Ok(StagePrograms {
        batch_free_residuals,
        fwd,
        fwd_only: clean(fwd_only),
        bwd: clean(bwd),
        bwd_i: clean(bwd_i),
        bwd_w: clean(bwd_w),
        bwd_first: clean(bwd_first),
        bwd_w_first: clean(bwd_w_first),
        param_args: r.param_args,
        data_args: r.data_args,
        shape,
        remat: res.policy,
        remat_fallback: res.fallback.clone(),
    })
}

/// Among the last `residuals` results of `fwd` (whose first `params` arguments are the
/// parameters), the indices of those no other argument reaches.
fn batch_free_results(fwd: &ClosedJaxpr, params: usize, residuals: usize) -> Vec<usize> {
    use tessera_ir::jaxpr::{Atom, Var};
    let jaxpr = &fwd.jaxpr;
    let mut batched: std::collections::HashSet<Var> =
        jaxpr.invars.iter().skip(params).copied().collect();
    for eqn in &jaxpr.eqns {
        let reads = eqn
            .inputs
            .iter()
            .any(|a| matches!(a, Atom::Var(v) if batched.contains(v)));
        if reads {
            batched.extend(eqn.outputs.iter().copied());
        }
    }
    let first = jaxpr.outvars.len().saturating_sub(residuals);
    (0..residuals)
        .filter(|&k| match jaxpr.outvars.get(first + k) {
            Some(Atom::Var(v)) => !batched.contains(v),
            _ => true,
        })
        .collect()
}

impl StagePrograms {
    /// The program of one kind of task that accumulates (a `Bwd` or `BwdW` reading its
    /// accumulators); [`StagePrograms::part_program`] picks the one a planned task runs.
    pub fn program(&self, kind: tessera_schedule::TaskKind) -> &ClosedJaxpr {
        match kind {
            tessera_schedule::TaskKind::Fwd => &self.fwd,
            tessera_schedule::TaskKind::Bwd => &self.bwd,
            tessera_schedule::TaskKind::BwdI => &self.bwd_i,
            tessera_schedule::TaskKind::BwdW => &self.bwd_w,
        }
    }

    /// The program a planned task runs: its kind's, or, for the task that starts the stage's
    /// accumulators ([`PartSignature::starts_accumulators`]), `bwd_first` / `bwd_w_first`; for
    /// a forward that saves no residuals (a forward-only pipeline), `fwd_only`.
    pub fn part_program(&self, part: &PartSignature) -> &ClosedJaxpr {
        let saves = |k: &Key| matches!(k, Key::Resid { .. });
        if part.task.kind == tessera_schedule::TaskKind::Fwd
            && self.shape.residuals > 0
            && !part.outputs.iter().any(saves)
        {
            return &self.fwd_only;
        }
        match (part.task.kind, part.starts_accumulators()) {
            (tessera_schedule::TaskKind::Bwd, true) => &self.bwd_first,
            (tessera_schedule::TaskKind::BwdW, true) => &self.bwd_w_first,
            (kind, _) => self.program(kind),
        }
    }
}

/// The type of a pipeline value, read off the stage programs.
pub fn key_aval(stages: &[StagePrograms], key: Key) -> Option<ShapedArray> {
    let stage_of = |s: u32| stages.get(s as usize);
    let fwd_in = |s: u32| stage_of(s).map(|p| p.fwd.jaxpr.in_avals());
    let fwd_out = |s: u32| stage_of(s).map(|p| p.fwd.jaxpr.out_avals());
    // The forward's results before the residuals: its exports, or the loss and its metrics.
    let heads = |s: u32| {
        let p = stage_of(s)?;
        Some(match s as usize + 1 == stages.len() {
            true => 1 + p.shape.aux,
            false => p.shape.consumers.len(),
        })
    };
    match key {
        Key::Param { stage, k } | Key::Acc { stage, k, .. } => fwd_in(stage)?.get(k).cloned(),
        Key::Data { stage, k, .. } => {
            let p = stage_of(stage)?;
            fwd_in(stage)?
                .get(p.shape.params + p.shape.inputs.len() + k)
                .cloned()
        }
        Key::Act { stage, k, .. } | Key::Cot { stage, k, .. } => fwd_out(stage)?.get(k).cloned(),
        Key::Loss { .. } => fwd_out(stages.len().checked_sub(1)? as u32)?
            .first()
            .cloned(),
        Key::Aux { k, .. } => fwd_out(stages.len().checked_sub(1)? as u32)?
            .get(1 + k)
            .cloned(),
        Key::Resid { stage, k, .. } => fwd_out(stage)?.get(heads(stage)? + k).cloned(),
        Key::WResid { stage, k, .. } => {
            let p = stage_of(stage)?;
            p.bwd_i
                .jaxpr
                .out_avals()
                .get(p.shape.inputs.len() + k)
                .cloned()
        }
    }
}
