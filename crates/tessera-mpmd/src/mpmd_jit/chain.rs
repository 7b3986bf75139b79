//! Steps of several sequential top-level `treduce` loops (issue 32; JAXPP's `treduce` may appear
//! more than once in a step): a training loop then a forward-only eval loop on the updated
//! parameters, two accumulation loops over two data sources whose gradients the update sums, a
//! forward-only loop before the training loop.
//!
//! The step is cut at its loops into segments, each a step of one loop compiled as
//! [`MpmdJit`] is (its own pipeline under the loop's schedule on the same mesh, or one program
//! on one group): segment `k` is loop `k` and the code after it up to the next loop (the first
//! also holds the code before its loop), so the code between two loops runs as the update of
//! the first, on the groups holding the values it reads. A segment takes the step arguments and
//! the values of earlier segments it reads, in that order, and returns the step results it
//! computes, then the values later segments read; the values stay where their segment left them
//! (updated parameters on their groups), so the next loop's pipeline reads them there.
//!
//! Under several processes (MPI, one process per group) every process runs its groups' part of
//! each segment in the same order: each loop's pipeline run gets its own transport (numbered
//! alike in every process), host results are computed in every process, and a value left on a
//! group stays in that group's process, where the next segment's stages on that group read it.

use std::collections::{BTreeSet, HashMap};

use tessera_ir::{Atom, ClosedJaxpr, Jaxpr, ShapedArray, Var};
use tessera_pjrt::Client;
use tessera_sharding::PartitionSpec;

use super::{MpmdJit, MpmdJitOptions, MpmdStepRun, StepArg, StepPhases, StepResult, config};
use crate::driver::{CompiledPipeline, DriverError};
use crate::mesh::MpmdMesh;
use crate::runtime::{RunOptions, Timings};

/// Where a segment's argument, or a step result, comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Step argument `i`.
    Arg(usize),
    /// Result `index` of segment `segment`.
    Result { segment: usize, index: usize },
}

/// The segments after the first (which is the [`MpmdJit`] holding this) and their wiring.
pub(super) struct Chain {
    /// Segments `1..`.
    rest: Vec<MpmdJit>,
    /// For each segment (the first included), where each of its arguments comes from.
    wiring: Vec<Vec<Source>>,
    /// Where each step result comes from.
    outputs: Vec<Source>,
    /// The step's argument types.
    in_avals: Vec<ShapedArray>,
    /// The step arguments the segments donate.
    donated: Vec<usize>,
    /// The spec of each step argument and result inside its group (those of the segments).
    in_specs: Vec<PartitionSpec>,
    out_specs: Vec<PartitionSpec>,
}

/// Compiles a step whose top-level loops are the equations `loops` (two or more).
pub(super) fn compile(
    client: &Client,
    mesh: &MpmdMesh,
    step: &ClosedJaxpr,
    options: &MpmdJitOptions,
    loops: &[usize],
) -> Result<MpmdJit, DriverError> {
    let plan = plan(&step.jaxpr, loops);
    let specs = segment_specs(step, options, &plan, mesh)?;
    let mut donations =
        segment_donations(options, &plan.wiring, step.jaxpr.invars.len())?.into_iter();
    let mut segments = plan
        .programs
        .iter()
        .zip(specs)
        .enumerate()
        .map(|(segment, (jaxpr, (in_specs, out_specs)))| {
            let program = ClosedJaxpr {
                jaxpr: jaxpr.clone(),
                consts: step.consts.clone(),
            };
            let (donate_argnums, donate_where_possible) = donations.next().unwrap_or_default();
            let options = MpmdJitOptions {
                in_specs,
                out_specs,
                donate_argnums,
                donate_where_possible,
                ..options.clone()
            };
            let mut jit = MpmdJit::new(client, mesh, &program, &options)?;
            jit.set_replaced(&plan.replaced(segment, jaxpr.outvars.len()));
            Ok(jit)
        })
        .collect::<Result<Vec<_>, DriverError>>()?;
    let in_specs = (0..step.jaxpr.invars.len())
        .map(|i| {
            plan.wiring
                .iter()
                .zip(&segments)
                .find_map(|(wires, seg)| {
                    let j = wires.iter().position(|&w| w == Source::Arg(i))?;
                    seg.in_specs().get(j).cloned()
                })
                .unwrap_or_default()
        })
        .collect();
    let out_specs = plan
        .outputs
        .iter()
        .map(|&source| match source {
            Source::Result { segment, index } => segments[segment]
                .out_specs()
                .get(index)
                .cloned()
                .unwrap_or_default(),
            Source::Arg(_) => PartitionSpec::default(),
        })
        .collect();
    let mut donated: Vec<usize> = plan
        .wiring
        .iter()
        .zip(&segments)
        .flat_map(|(wires, seg)| {
            seg.donated().iter().filter_map(|&j| match wires.get(j) {
                Some(Source::Arg(i)) => Some(*i),
                _ => None,
            })
        })
        .collect();
    donated.sort_unstable();
    let mut first = segments.remove(0);
    first.chain = Some(Box::new(Chain {
        rest: segments,
        wiring: plan.wiring,
        outputs: plan.outputs,
        in_avals: step.jaxpr.in_avals(),
        donated,
        in_specs,
        out_specs,
    }));
    Ok(first)
}

/// Each segment's `donate_argnums` and `donate_where_possible`: a step argument is donated by
/// the last segment reading it (the earlier ones read it before its buffer is reused).
#[allow(clippy::type_complexity)]
fn segment_donations(
    options: &MpmdJitOptions,
    wiring: &[Vec<Source>],
    num_args: usize,
) -> Result<Vec<(Vec<usize>, Vec<usize>)>, DriverError> {
    let mut out: Vec<(Vec<usize>, Vec<usize>)> = vec![Default::default(); wiring.len()];
    let last_reader = |i: usize| {
        wiring.iter().enumerate().rev().find_map(|(s, wires)| {
            let j = wires.iter().position(|&w| w == Source::Arg(i))?;
            Some((s, j))
        })
    };
    for &i in &options.donate_argnums {
        if i >= num_args {
            return Err(config(format!(
                "donate_argnums names argument {i}, but the step takes {num_args}"
            )));
        }
        let (s, j) = last_reader(i).ok_or_else(|| {
            config(format!(
                "donate_argnums names step argument {i}, which the step never reads; donate only arguments the update replaces"
            ))
        })?;
        out[s].0.push(j);
    }
    for &i in &options.donate_where_possible {
        if let Some((s, j)) = last_reader(i) {
            out[s].1.push(j);
        }
    }
    Ok(out)
}

/// Each segment's `in_specs` and `out_specs` from the step's: a step argument keeps its spec in
/// every segment reading it; a step result takes its spec (by default its argument's, when it
/// replaces it); a value passed between segments, its producer's spec, given explicitly on both
/// sides (replicated unless it is a step result with a spec).
#[allow(clippy::type_complexity)]
fn segment_specs(
    step: &ClosedJaxpr,
    options: &MpmdJitOptions,
    plan: &Plan,
    mesh: &MpmdMesh,
) -> Result<Vec<(Vec<Option<PartitionSpec>>, Vec<Option<PartitionSpec>>)>, DriverError> {
    let (in_avals, out_avals) = (step.jaxpr.in_avals(), step.jaxpr.out_avals());
    for (given, n) in [
        (options.in_specs.len(), in_avals.len()),
        (options.out_specs.len(), out_avals.len()),
    ] {
        if given > n {
            return Err(crate::SpecError::Count { given, args: n }.into());
        }
    }
    // Checked here, naming the step's argument or result rather than a segment's.
    let checks = [
        ("step argument", &options.in_specs, &in_avals),
        ("step result", &options.out_specs, &out_avals),
    ];
    for (what, specs, avals) in checks {
        for (i, (spec, aval)) in specs.iter().zip(avals).enumerate() {
            if let Some(spec) = spec {
                let what = format!("{what} {i} ({aval})");
                let group = mesh.lowering_mesh();
                crate::specs::check_spec(&what, &aval.shape, spec, group, mesh.mpmd_axis())?;
            }
        }
    }
    let arg_spec = |i: usize| options.in_specs.get(i).cloned().flatten();
    // The spec of each result of each segment.
    let mut outs: Vec<Vec<Option<PartitionSpec>>> = plan
        .programs
        .iter()
        .map(|p| vec![Some(PartitionSpec::replicated()); p.outvars.len()])
        .collect();
    for (k, source) in plan.outputs.iter().enumerate() {
        if let Source::Result { segment, index } = *source {
            let spec = match options.out_specs.get(k).cloned().flatten() {
                Some(spec) => Some(spec),
                None if in_avals.get(k) == out_avals.get(k) => arg_spec(k),
                None => None,
            };
            outs[segment][index] = Some(spec.unwrap_or_else(PartitionSpec::replicated));
        }
    }
    let ins = plan.wiring.iter().map(|wires| {
        wires
            .iter()
            .map(|&w| match w {
                Source::Arg(i) => arg_spec(i),
                Source::Result { segment, index } => outs[segment][index].clone(),
            })
            .collect()
    });
    Ok(ins.collect::<Vec<_>>().into_iter().zip(outs).collect())
}

/// The segments' programs and wiring.
struct Plan {
    programs: Vec<Jaxpr>,
    wiring: Vec<Vec<Source>>,
    outputs: Vec<Source>,
}

impl Plan {
    /// For each of segment `segment`'s `n` results, the segment argument it replaces: step result
    /// `k` replaces step argument `k` (as a step of one loop's result `k` does), at its position
    /// among the segment's arguments; a value passed to later segments replaces none.
    fn replaced(&self, segment: usize, n: usize) -> Vec<Option<usize>> {
        let mut out = vec![None; n];
        for (k, source) in self.outputs.iter().enumerate() {
            if let Source::Result { segment: s, index } = *source
                && s == segment
                && let Some(slot) = out.get_mut(index)
            {
                *slot = self.wiring[segment]
                    .iter()
                    .position(|&w| w == Source::Arg(k));
            }
        }
        out
    }
}

/// The variables an equation range reads.
fn reads(eqns: &[tessera_ir::Eqn]) -> impl Iterator<Item = Var> + '_ {
    eqns.iter().flat_map(|e| {
        e.inputs.iter().filter_map(|a| match a {
            Atom::Var(v) => Some(*v),
            Atom::Lit(_) => None,
        })
    })
}

/// Cuts `jaxpr` at its loops `loops`: segment `k` runs equations `[loops[k], loops[k + 1])`
/// (the first from 0, the last to the end); the last also returns the step results no segment
/// computes (step arguments and literals returned as they are).
fn plan(jaxpr: &Jaxpr, loops: &[usize]) -> Plan {
    let n = loops.len();
    let starts: Vec<usize> = std::iter::once(0)
        .chain(loops[1..].iter().copied())
        .collect();
    let ends: Vec<usize> = loops[1..]
        .iter()
        .copied()
        .chain(std::iter::once(jaxpr.eqns.len()))
        .collect();
    // The segment defining each equation's results.
    let mut defined: HashMap<Var, usize> = HashMap::new();
    for s in 0..n {
        for eqn in &jaxpr.eqns[starts[s]..ends[s]] {
            defined.extend(eqn.outputs.iter().map(|&o| (o, s)));
        }
    }
    let outvar = |a: &Atom| match a {
        Atom::Var(v) => Some(*v),
        Atom::Lit(_) => None,
    };
    // Each step result's segment: where its variable is defined, else the last.
    let result_segment: Vec<usize> = jaxpr
        .outvars
        .iter()
        .map(|a| {
            outvar(a)
                .and_then(|v| defined.get(&v).copied())
                .unwrap_or(n - 1)
        })
        .collect();
    // What each segment reads from outside it (step arguments and earlier segments' values).
    let read: Vec<BTreeSet<Var>> = (0..n)
        .map(|s| {
            let mut set: BTreeSet<Var> = reads(&jaxpr.eqns[starts[s]..ends[s]]).collect();
            set.extend(
                jaxpr
                    .outvars
                    .iter()
                    .zip(&result_segment)
                    .filter(|(_, r)| **r == s)
                    .filter_map(|(a, _)| outvar(a)),
            );
            set.retain(|v| defined.get(v) != Some(&s) && !jaxpr.constvars.contains(v));
            set
        })
        .collect();
    let mut programs = Vec::new();
    let mut wiring = Vec::new();
    let mut outputs = vec![Source::Arg(0); jaxpr.outvars.len()];
    let mut results_of: Vec<Vec<Atom>> = Vec::new();
    for s in 0..n {
        // The step results it computes, then the values later segments read.
        let mut outs: Vec<Atom> = Vec::new();
        for (k, a) in jaxpr.outvars.iter().enumerate() {
            if result_segment[k] != s {
                continue;
            }
            let index = outs.iter().position(|o| o == a).unwrap_or(outs.len());
            if index == outs.len() {
                outs.push(a.clone());
            }
            outputs[k] = Source::Result { segment: s, index };
        }
        let later: BTreeSet<Var> = read[s + 1..]
            .iter()
            .flatten()
            .copied()
            .filter(|v| defined.get(v) == Some(&s))
            .collect();
        for v in later {
            if !outs.contains(&Atom::Var(v)) {
                outs.push(Atom::Var(v));
            }
        }
        // Its arguments: the step arguments it reads, in order, then earlier segments' values.
        let mut invars: Vec<Var> = Vec::new();
        let mut wires: Vec<Source> = Vec::new();
        for (i, v) in jaxpr.invars.iter().enumerate() {
            if read[s].contains(v) && !invars.contains(v) {
                invars.push(*v);
                wires.push(Source::Arg(i));
            }
        }
        for &v in &read[s] {
            if invars.contains(&v) {
                continue;
            }
            let Some(&segment) = defined.get(&v) else {
                continue;
            };
            let index = results_of[segment]
                .iter()
                .position(|a| *a == Atom::Var(v))
                .unwrap_or(0);
            invars.push(v);
            wires.push(Source::Result { segment, index });
        }
        programs.push(Jaxpr {
            vars: jaxpr.vars.clone(),
            constvars: jaxpr.constvars.clone(),
            invars,
            eqns: jaxpr.eqns[starts[s]..ends[s]].to_vec(),
            outvars: outs.clone(),
        });
        results_of.push(outs);
        wiring.push(wires);
    }
    Plan {
        programs,
        wiring,
        outputs,
    }
}

impl Chain {
    /// The number of loops.
    pub(super) fn len(&self) -> usize {
        1 + self.rest.len()
    }

    /// The number of step arguments.
    pub(super) fn num_args(&self) -> usize {
        self.in_avals.len()
    }

    pub(super) fn donated(&self) -> &[usize] {
        &self.donated
    }

    pub(super) fn in_specs(&self) -> &[PartitionSpec] {
        &self.in_specs
    }

    pub(super) fn out_specs(&self) -> &[PartitionSpec] {
        &self.out_specs
    }

    /// The pipelines of the loops after the first.
    pub(super) fn pipelines(&self) -> impl Iterator<Item = &CompiledPipeline> {
        self.rest.iter().map(MpmdJit::pipeline)
    }

    pub(super) fn set_run_options(&mut self, options: RunOptions) {
        self.rest
            .iter_mut()
            .for_each(|s| s.set_run_options(options));
    }

    /// Runs the segments one after the other, `first` being the first.
    pub(super) fn run(
        &self,
        first: &MpmdJit,
        args: &[StepArg],
    ) -> Result<MpmdStepRun, DriverError> {
        super::check_args(args, &self.in_avals)?;
        let mut results: Vec<Vec<StepResult>> = Vec::new();
        let mut losses = Vec::new();
        let mut timings = Vec::new();
        let mut phases = StepPhases::default();
        for (s, wires) in self.wiring.iter().enumerate() {
            let seg_args = wires
                .iter()
                .map(|&w| match w {
                    Source::Arg(i) => Ok(args[i].clone()),
                    Source::Result { segment, index } => results
                        .get(segment)
                        .and_then(|r: &Vec<StepResult>| r.get(index))
                        .cloned()
                        .map(StepResult::into_arg)
                        .ok_or_else(|| config("a value between two loops of the step is missing")),
                })
                .collect::<Result<Vec<_>, DriverError>>()?;
            let run = match s {
                0 => first.run_loop(&seg_args)?,
                _ => self.rest[s - 1].run_loop(&seg_args)?,
            };
            losses.extend(run.losses);
            timings.push(run.timings);
            add_phases(&mut phases, &run.phases);
            results.push(run.outputs);
        }
        let outputs = self
            .outputs
            .iter()
            .map(|&source| match source {
                Source::Result { segment, index } => results
                    .get(segment)
                    .and_then(|r| r.get(index))
                    .cloned()
                    .ok_or_else(|| config("a result of the step was not computed")),
                Source::Arg(i) => Ok(match &args[i] {
                    StepArg::Host(h) => StepResult::Host(h.clone()),
                    StepArg::Mpmd(m) => StepResult::Mpmd(m.clone()),
                }),
            })
            .collect::<Result<_, _>>()?;
        Ok(MpmdStepRun {
            outputs,
            losses,
            timings: joined(timings),
            phases,
        })
    }
}

/// The loops' timings on one clock (the first loop's start), each loop's tasks after the
/// previous loop's; concatenated as they are where a loop's clock is unknown.
fn joined(parts: Vec<Timings>) -> Timings {
    if parts.iter().all(|t| t.epoch_unix_us > 0.0) {
        return Timings::merged(parts);
    }
    let mut all = Timings::default();
    for part in parts {
        all.tasks.extend(part.tasks);
        all.transfers.extend(part.transfers);
        all.values.extend(part.values);
        all.waits.extend(part.waits);
    }
    all
}

fn add_phases(all: &mut StepPhases, one: &StepPhases) {
    all.arguments_ms += one.arguments_ms;
    all.microbatches_ms += one.microbatches_ms;
    all.tasks_ms += one.tasks_ms;
    all.pipeline_rest_ms += one.pipeline_rest_ms;
    all.results_ms += one.results_ms;
    all.update_ms += one.update_ms;
    all.release_ms += one.release_ms;
}
