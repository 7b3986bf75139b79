//! Splitting a program at its `pipeline_enter_stage` markers into one program per stage (JAXPP's
//! stage partitioning). An equation belongs to the highest stage among its operands (a marker
//! sets its result's stage); an equation that reads only arguments and literals (e.g. a
//! transposed weight, or the first layer before any marker) belongs to the lowest stage that
//! consumes it, counting a marker into stage k as a consumer in stage k - 1, so parameters are
//! used where they live. A host callback with side effects whose results nothing reads (a
//! `debug_callback`, an `io_callback` logging a value) belongs to the highest stage of the
//! values it reads, or, reading only arguments, to the stage of the code around it; it never
//! pulls the values it reads into another stage. Each stage program takes the original arguments it uses and the earlier stages'
//! values it reads, and returns what later stages or the program's results need.

use std::collections::HashMap;

use crate::error::{IrError, Result};
use crate::program::jaxpr::{Atom, ClosedJaxpr, Jaxpr, Var};
use crate::program::prim::Prim;

/// Where a stage program's argument comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageInput {
    /// Argument `k` of the original program.
    Arg(usize),
    /// Result `index` of stage `stage`'s program.
    Stage {
        /// The producing stage.
        stage: usize,
        /// The position among its results.
        index: usize,
    },
}

/// One stage's program and how its arguments are fed.
#[derive(Debug, Clone)]
pub struct StageProgram {
    /// The program (verified).
    pub program: ClosedJaxpr,
    /// For each argument of `program`, where it comes from.
    pub inputs: Vec<StageInput>,
}

/// The stages, and where each result of the original program is found.
#[derive(Debug, Clone)]
pub struct StageSplit {
    /// Stage programs in stage order.
    pub stages: Vec<StageProgram>,
    /// For each original result: the stage and result index holding it, or the original
    /// argument it passes through.
    pub results: Vec<StageInput>,
}

/// Splits `program` at its stage markers. Programs with constants or literal results are refused.
pub fn split_stages(program: &ClosedJaxpr) -> Result<StageSplit> {
    let jaxpr = &program.jaxpr;
    if !program.consts.is_empty() || jaxpr.outvars.iter().any(|a| matches!(a, Atom::Lit(_))) {
        return Err(IrError::Type {
            prim: "split_stages".into(),
            message: "needs a program without constants or literal results".into(),
        });
    }
    let stage_of_eqn = assign_stages(jaxpr)?;
    let count = stage_of_eqn.iter().copied().max().map_or(1, |m| m + 1);
    let mut producer: HashMap<Var, usize> = HashMap::new();
    for (i, eqn) in jaxpr.eqns.iter().enumerate() {
        for &v in &eqn.outputs {
            producer.insert(v, stage_of_eqn[i]);
        }
    }
    let arg_index: HashMap<Var, usize> = jaxpr
        .invars
        .iter()
        .enumerate()
        .map(|(k, &v)| (v, k))
        .collect();
    // Which vars each stage needs from outside, and which it must export.
    let mut exports: Vec<Vec<Var>> = vec![Vec::new(); count];
    let export = |v: Var, exports: &mut Vec<Vec<Var>>| {
        if let Some(&s) = producer.get(&v)
            && !exports[s].contains(&v)
        {
            exports[s].push(v);
        }
    };
    for (i, eqn) in jaxpr.eqns.iter().enumerate() {
        for a in &eqn.inputs {
            if let Atom::Var(v) = a
                && producer.get(v).is_some_and(|&p| p != stage_of_eqn[i])
            {
                export(*v, &mut exports);
            }
        }
    }
    for a in &jaxpr.outvars {
        if let Atom::Var(v) = a {
            export(*v, &mut exports);
        }
    }
    let mut stages = Vec::with_capacity(count);
    for s in 0..count {
        stages.push(build_stage(
            jaxpr,
            s,
            &stage_of_eqn,
            &producer,
            &arg_index,
            &exports,
        )?);
    }
    let results = jaxpr
        .outvars
        .iter()
        .map(|a| match a {
            Atom::Var(v) => match producer.get(v) {
                Some(&s) => StageInput::Stage {
                    stage: s,
                    index: exports[s].iter().position(|x| x == v).unwrap_or(0),
                },
                None => StageInput::Arg(arg_index.get(v).copied().unwrap_or(0)),
            },
            Atom::Lit(_) => StageInput::Arg(0),
        })
        .collect();
    Ok(StageSplit { stages, results })
}

/// The stage of every equation.
fn assign_stages(jaxpr: &Jaxpr) -> Result<Vec<usize>> {
    let mut var_stage: HashMap<Var, usize> = HashMap::new();
    let mut stage: Vec<Option<usize>> = Vec::with_capacity(jaxpr.eqns.len());
    for eqn in &jaxpr.eqns {
        let from_inputs = eqn.inputs.iter().filter_map(|a| match a {
            Atom::Var(v) => var_stage.get(v).copied(),
            Atom::Lit(_) => None,
        });
        let s = if eqn.prim == Prim::PipelineEnterStage {
            let marked = eqn.params.int("pipeline_enter_stage", "stage")?;
            let marked = usize::try_from(marked).map_err(|_| IrError::Type {
                prim: "pipeline_enter_stage".into(),
                message: format!("stage {marked} is negative"),
            })?;
            if let Some(earlier) = from_inputs.max().filter(|&e| e > marked) {
                return Err(IrError::Type {
                    prim: "pipeline_enter_stage".into(),
                    message: format!(
                        "enters stage {marked} with a value computed in stage {earlier}; stages must not go backwards"
                    ),
                });
            }
            Some(marked)
        } else {
            from_inputs.max()
        };
        if let Some(s) = s {
            for &v in &eqn.outputs {
                var_stage.insert(v, s);
            }
        }
        stage.push(s);
    }
    // Argument-only computations go to their lowest consumer's stage (or the last stage).
    let last = stage.iter().flatten().copied().max().unwrap_or(0);
    let sinks = effect_sinks(jaxpr);
    // The stage of the code around equation i: the highest stage staged before it.
    let mut around = Vec::with_capacity(stage.len());
    let mut highest = 0;
    for s in &stage {
        around.push(highest);
        highest = highest.max(s.unwrap_or(0));
    }
    let mut resolved = vec![0usize; stage.len()];
    for i in (0..jaxpr.eqns.len()).rev() {
        resolved[i] = match stage[i] {
            Some(s) => s,
            // A host callback nothing reads runs where the code around it runs (placed below).
            None if sinks[i] => around[i],
            None => {
                let outs = &jaxpr.eqns[i].outputs;
                let consumers: Vec<(usize, &crate::program::jaxpr::Eqn)> = jaxpr
                    .eqns
                    .iter()
                    .enumerate()
                    .skip(i + 1)
                    .filter(|(_, e)| {
                        e.inputs
                            .iter()
                            .any(|a| matches!(a, Atom::Var(v) if outs.contains(v)))
                    })
                    .collect();
                // A value entering stage k through a marker is produced in stage k - 1.
                let lowest = consumers
                    .iter()
                    .filter(|(j, _)| !sinks[*j])
                    .map(|(j, e)| {
                        if e.prim == Prim::PipelineEnterStage {
                            resolved[*j].saturating_sub(1)
                        } else {
                            resolved[*j]
                        }
                    })
                    .min();
                match (lowest, consumers.is_empty()) {
                    (Some(s), _) => s,
                    (None, true) => last,
                    // Read by host callbacks alone: computed where the code around it runs.
                    (None, false) => around[i],
                }
            }
        };
    }
    // A host callback nothing reads runs in the stage of the values it reads (the highest), so
    // a callback logging a stage's activation runs in that stage's forward, once per
    // micro-batch; one reading only arguments runs in the stage of the code around it.
    let mut var_resolved: HashMap<Var, usize> = HashMap::new();
    for (i, eqn) in jaxpr.eqns.iter().enumerate() {
        if sinks[i] && stage[i].is_none() {
            resolved[i] = eqn
                .inputs
                .iter()
                .filter_map(|a| match a {
                    Atom::Var(v) => var_resolved.get(v).copied(),
                    Atom::Lit(_) => None,
                })
                .max()
                .unwrap_or(around[i]);
        }
        for &v in &eqn.outputs {
            var_resolved.insert(v, resolved[i]);
        }
    }
    Ok(resolved)
}

/// For each equation of `jaxpr`: whether it is a host callback with side effects (an
/// `io_callback` or `debug_callback`) whose results nothing reads.
fn effect_sinks(jaxpr: &Jaxpr) -> Vec<bool> {
    let read: std::collections::HashSet<Var> = jaxpr
        .eqns
        .iter()
        .flat_map(|e| e.inputs.iter())
        .chain(&jaxpr.outvars)
        .filter_map(|a| match a {
            Atom::Var(v) => Some(*v),
            Atom::Lit(_) => None,
        })
        .collect();
    jaxpr
        .eqns
        .iter()
        .map(|e| {
            crate::program::prim::is_effectful(e.prim)
                && e.outputs.iter().all(|v| !read.contains(v))
        })
        .collect()
}

fn build_stage(
    jaxpr: &Jaxpr,
    s: usize,
    stage_of_eqn: &[usize],
    producer: &HashMap<Var, usize>,
    arg_index: &HashMap<Var, usize>,
    exports: &[Vec<Var>],
) -> Result<StageProgram> {
    let mut out = Jaxpr::default();
    let mut map: HashMap<Var, Var> = HashMap::new();
    let mut inputs = Vec::new();
    let bind_input = |v: Var,
                      out: &mut Jaxpr,
                      map: &mut HashMap<Var, Var>,
                      inputs: &mut Vec<StageInput>|
     -> Result<Var> {
        if let Some(&nv) = map.get(&v) {
            return Ok(nv);
        }
        let source = match (producer.get(&v), arg_index.get(&v)) {
            (Some(&p), _) => StageInput::Stage {
                stage: p,
                index: exports[p]
                    .iter()
                    .position(|x| *x == v)
                    .ok_or_else(|| IrError::Verify {
                        message: "a value crossing stages was not exported".into(),
                        context: String::new(),
                    })?,
            },
            (None, Some(&k)) => StageInput::Arg(k),
            (None, None) => {
                return Err(IrError::Verify {
                    message: format!("variable {} is used but never defined", v.0),
                    context: String::new(),
                });
            }
        };
        let nv = out.new_var(jaxpr.aval(v).clone());
        out.invars.push(nv);
        map.insert(v, nv);
        inputs.push(source);
        Ok(nv)
    };
    for (_, eqn) in jaxpr
        .eqns
        .iter()
        .enumerate()
        .filter(|(i, _)| stage_of_eqn[*i] == s)
    {
        let mut args = Vec::with_capacity(eqn.inputs.len());
        for a in &eqn.inputs {
            args.push(match a {
                Atom::Var(v) => Atom::Var(bind_input(*v, &mut out, &mut map, &mut inputs)?),
                lit => lit.clone(),
            });
        }
        let outputs = eqn.outputs.iter().map(|&v| {
            let nv = out.new_var(jaxpr.aval(v).clone());
            map.insert(v, nv);
            nv
        });
        let outputs = outputs.collect();
        out.eqns.push(crate::program::jaxpr::Eqn {
            prim: eqn.prim,
            params: eqn.params.clone(),
            inputs: args,
            outputs,
        });
    }
    out.outvars = exports[s].iter().map(|v| Atom::Var(map[v])).collect();
    let program = ClosedJaxpr::new(out);
    crate::verify(&program)?;
    Ok(StageProgram { program, inputs })
}
