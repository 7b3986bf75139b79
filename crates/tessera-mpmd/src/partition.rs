//! From a traced loss with `pipeline_enter_stage` markers to the stage programs of the pipeline
//! contract ([`crate::pipeline`]): `Fwd`, `Bwd`, and the split `BwdI`/`BwdW` of every stage.
//!
//! The loss takes parameters and per-microbatch data and returns one scalar. It is split with
//! `tessera_ir::passes::split_stages`; stage `s` must read only its own parameters, its data and
//! one activation from stage `s - 1`, and pass one activation to stage `s + 1` (the last stage
//! returns the loss). Backward programs recompute their stage's forward from the saved inputs
//! (rematerialisation: the residuals are the stage's activation and data), then apply `vjp`.
//! The split backward is one backward pass cut in two by its results (`split_outputs`): `BwdI`
//! computes the input cotangent and hands on the values the weight gradients still need, and
//! `BwdW` finishes the weight gradients from those alone, recomputing nothing.

use tessera_ir::autodiff::vjp;
use tessera_ir::passes::{
    StageInput, eliminate_dead_code, inline_calls, split_outputs, split_stages,
};
use tessera_ir::trace::{Tensor, call_closed, trace};
use tessera_ir::{ClosedJaxpr, IrError, ShapedArray};

use crate::pipeline::{Key, StageShape};

/// One stage's programs, each following the contract's argument and result order.
#[derive(Debug, Clone)]
pub struct StagePrograms {
    /// `params, x (s > 0), data -> x_next | loss, residuals`.
    pub fwd: ClosedJaxpr,
    /// `params, residuals, ct (s < last), acc -> ct_in (s > 0), acc'`.
    pub bwd: ClosedJaxpr,
    /// `params, residuals, ct (s < last) -> ct_in (s > 0), wres`.
    pub bwd_i: ClosedJaxpr,
    /// `wres, acc -> acc'`.
    pub bwd_w: ClosedJaxpr,
    /// The loss arguments that are this stage's parameters, in contract order.
    pub param_args: Vec<usize>,
    /// The loss arguments that are this stage's data, in contract order.
    pub data_args: Vec<usize>,
    /// The contract's sizes.
    pub shape: StageShape,
}

/// Errors of partitioning.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    /// An IR error (tracing, splitting, differentiation).
    #[error(transparent)]
    Ir(#[from] IrError),
    /// The stages do not form a chain the contract can express.
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
    let flat = inline_calls(loss);
    let split = split_stages(&flat)?;
    let count = split.stages.len();
    if !matches!(split.results.first(), Some(StageInput::Stage { stage, .. }) if *stage + 1 == count)
        || split.results.len() != 1
    {
        return Err(PartitionError::Shape {
            stage: count.saturating_sub(1),
            message: "the loss must be the program's only result, computed in the last stage"
                .into(),
        });
    }
    (0..count)
        .map(|s| stage_programs(&split, s, params))
        .collect()
}

fn stage_programs(
    split: &tessera_ir::passes::StageSplit,
    s: usize,
    params: &[usize],
) -> Result<StagePrograms, PartitionError> {
    let stage = &split.stages[s];
    let last = s + 1 == split.stages.len();
    let bad = |message: String| PartitionError::Shape { stage: s, message };
    // Positions of the stage program's arguments by role.
    let (mut p_pos, mut d_pos, mut act_pos) = (Vec::new(), Vec::new(), None);
    let (mut param_args, mut data_args) = (Vec::new(), Vec::new());
    for (i, src) in stage.inputs.iter().enumerate() {
        match *src {
            StageInput::Arg(k) if params.contains(&k) => {
                p_pos.push(i);
                param_args.push(k);
            }
            StageInput::Arg(k) => {
                d_pos.push(i);
                data_args.push(k);
            }
            StageInput::Stage { stage: from, .. } if from + 1 == s && act_pos.is_none() => {
                act_pos = Some(i)
            }
            StageInput::Stage { stage: from, .. } => {
                return Err(bad(format!(
                    "reads a second value, or one from stage {from}; only one activation from the previous stage is supported"
                )));
            }
        }
    }
    if (s > 0) != act_pos.is_some() || stage.program.jaxpr.outvars.len() != 1 {
        return Err(bad("must take one activation from the previous stage (none for stage 0) and produce one value".into()));
    }
    let program = &stage.program;
    let avals = program.jaxpr.in_avals();
    let order: Vec<usize> = p_pos
        .iter()
        .copied()
        .chain(act_pos)
        .chain(d_pos.iter().copied())
        .collect();
    let contract_avals: Vec<ShapedArray> = order.iter().map(|&i| avals[i].clone()).collect();
    let out_aval = program.jaxpr.out_avals()[0].clone();
    let (np, nr) = (p_pos.len(), order.len() - p_pos.len());
    // Arguments of the stage program, from contract-ordered tensors.
    let reorder = |contract: &[Tensor]| -> Vec<Tensor> {
        let mut args = vec![contract[0].clone(); order.len()];
        for (c, &i) in order.iter().enumerate() {
            args[i] = contract[c].clone();
        }
        args
    };
    let grads = vjp(program)?;
    let fwd = trace(&contract_avals, |a| {
        let refs: Vec<Tensor> = reorder(a);
        let out = call_closed(program, &refs.iter().collect::<Vec<_>>());
        std::iter::once(out[0].clone())
            .chain(a[np..].iter().cloned())
            .collect()
    })?;
    // The stage's gradients (per program argument) from contract-ordered inputs and a cotangent.
    let stage_grads = |a: &[Tensor], ct: Tensor| -> Vec<Tensor> {
        let mut operands = reorder(a);
        operands.push(ct);
        call_closed(&grads, &operands.iter().collect::<Vec<_>>())
    };
    let seed = |a: &[Tensor]| {
        if last {
            a[0].literal_one(out_aval.dtype)
        } else {
            a[np + nr].clone()
        }
    };
    let ct_in = |g: &[Tensor]| act_pos.map(|i| g[i].clone());
    let mut bwd_avals = contract_avals.clone();
    if !last {
        bwd_avals.push(out_aval.clone());
    }
    let acc_avals: Vec<ShapedArray> = p_pos.iter().map(|&i| avals[i].clone()).collect();
    let mut full_avals = bwd_avals.clone();
    full_avals.extend(acc_avals.iter().cloned());
    let n_ct = usize::from(!last);
    let bwd = trace(&full_avals, |a| {
        let g = stage_grads(&a[..np + nr], seed(a));
        let accs = p_pos
            .iter()
            .enumerate()
            .map(|(k, &i)| &a[np + nr + n_ct + k] + &g[i]);
        ct_in(&g).into_iter().chain(accs).collect()
    })?;
    // The backward pass split by its results: BwdI computes the input cotangent and hands on
    // what the weight gradients still need; BwdW finishes them from that alone.
    let whole = trace(&bwd_avals, |a| {
        let g = stage_grads(&a[..np + nr], seed(a));
        ct_in(&g)
            .into_iter()
            .chain(p_pos.iter().map(|&i| g[i].clone()))
            .collect()
    })?;
    let first: Vec<usize> = if act_pos.is_some() {
        vec![0]
    } else {
        Vec::new()
    };
    let split = split_outputs(&whole, &first)?;
    let bwd_i = split.first;
    let mut w_avals = split.second.jaxpr.in_avals();
    w_avals.extend(acc_avals.iter().cloned());
    let handed = split.handed_on;
    let weight_grads = split.second;
    let bwd_w = trace(&w_avals, |a| {
        let refs: Vec<&Tensor> = a[..handed].iter().collect();
        let g = call_closed(&weight_grads, &refs);
        g.iter().zip(&a[handed..]).map(|(g, acc)| acc + g).collect()
    })?;
    let clean = |p: ClosedJaxpr| eliminate_dead_code(&inline_calls(&p));
    let shape = StageShape {
        params: np,
        data: d_pos.len(),
        residuals: nr,
        weight_residuals: handed,
    };
    Ok(StagePrograms {
        fwd: clean(fwd),
        bwd: clean(bwd),
        bwd_i: clean(bwd_i),
        bwd_w: clean(bwd_w),
        param_args,
        data_args,
        shape,
    })
}

impl StagePrograms {
    /// The program of one kind of task.
    pub fn program(&self, kind: tessera_schedule::TaskKind) -> &ClosedJaxpr {
        match kind {
            tessera_schedule::TaskKind::Fwd => &self.fwd,
            tessera_schedule::TaskKind::Bwd => &self.bwd,
            tessera_schedule::TaskKind::BwdI => &self.bwd_i,
            tessera_schedule::TaskKind::BwdW => &self.bwd_w,
        }
    }
}

/// The type of a pipeline value, read off the stage programs.
pub fn key_aval(stages: &[StagePrograms], key: Key) -> Option<ShapedArray> {
    let fwd_in = |s: u32| stages.get(s as usize).map(|p| p.fwd.jaxpr.in_avals());
    let fwd_out = |s: u32| stages.get(s as usize).map(|p| p.fwd.jaxpr.out_avals());
    match key {
        Key::Param { stage, k } | Key::Acc { stage, k, .. } => fwd_in(stage)?.get(k).cloned(),
        Key::Data { stage, k, .. } => {
            let p = stages.get(stage as usize)?;
            fwd_in(stage)?
                .get(p.shape.params + usize::from(stage > 0) + k)
                .cloned()
        }
        Key::Act { stage, .. } | Key::Cot { stage, .. } => {
            fwd_out(stage.checked_sub(1)?)?.first().cloned()
        }
        Key::Loss { .. } => fwd_out(stages.len().checked_sub(1)? as u32)?
            .first()
            .cloned(),
        Key::Resid { stage, k, .. } => fwd_out(stage)?.get(1 + k).cloned(),
        Key::WResid { stage, k, .. } => {
            let p = stages.get(stage as usize)?;
            p.bwd_i
                .jaxpr
                .out_avals()
                .get(usize::from(stage > 0) + k)
                .cloned()
        }
    }
}
