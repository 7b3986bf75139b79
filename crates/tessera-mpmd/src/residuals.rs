//! What a stage's forward task saves for its backward task, under its [`RematPolicy`].
//!
//! The stage's value-and-VJP program (its results and the cotangents of its arguments, from the
//! arguments and the results' cotangents; the forward replay of the VJP shared with the results
//! by common-subexpression elimination) is cut by dependence on the cotangents: the equations
//! that do not read one form the forward task's program (the stage's results and the
//! *residuals*, the values the other part reads), the others the backward's. A policy keeps some
//! residuals and has the backward recompute the rest from the stage's inputs and the kept ones
//! ([`crate::remat::recompute_program`]); `nothing_saveable` keeps none and recomputes the whole
//! forward, its host callbacks left out (they ran in the forward task).
//!
//! A residual that is a parameter is never saved: the backward reads the parameter itself.

use std::collections::{HashMap, HashSet};

use tessera_ir::autodiff::{defining_equations, vjp};
use tessera_ir::jaxpr::{Atom, Eqn, Jaxpr, Var};
use tessera_ir::passes::{eliminate_common_subexpressions, eliminate_dead_code, inline_calls};
use tessera_ir::trace::{Tensor, call_closed, trace};
use tessera_ir::{ClosedJaxpr, IrError, ShapedArray};

use crate::remat::RematPolicy;

/// A residual the forward task returns: one of the stage program's arguments, or a value its
/// forward computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Argument `i` of the stage program (an imported value or data, never a parameter).
    Arg(usize),
    /// A value of the forward program, by its result index there.
    Computed(usize),
}

/// How the backward gets residual `j` of the cut.
#[derive(Debug, Clone, Copy)]
enum Get {
    /// Stage program argument `i`, a parameter.
    Param(usize),
    /// The forward task's residual `k`.
    Saved(usize),
    /// Result `k` of the recompute program.
    Recomputed(usize),
}

/// The stage's programs cut at its residuals.
#[derive(Debug, Clone)]
struct Cut {
    /// Arguments of the stage program to `(results..., residuals...)`.
    forward: ClosedJaxpr,
    /// `(residuals..., cotangents...)` to one cotangent per stage program argument.
    backward: ClosedJaxpr,
    /// Per residual of the cut, how the backward gets it.
    gets: Vec<Get>,
    /// `(arguments..., kept computed residuals...)` to the recomputed ones, if any.
    recompute: Option<ClosedJaxpr>,
    /// The forward results the recompute program reads after the arguments, as indices into
    /// [`Residuals::sources`].
    recompute_reads: Vec<usize>,
}

/// A stage's residuals: what its forward task returns for its backward, and how the backward
/// computes the stage arguments' cotangents from them.
#[derive(Debug, Clone)]
pub struct Residuals {
    /// The policy that applies (`nothing_saveable` where the cut failed).
    pub policy: RematPolicy,
    /// Why the cut failed, if it did (the stage then recomputes its forward).
    pub fallback: Option<String>,
    sources: Vec<Source>,
    avals: Vec<ShapedArray>,
    cut: Option<Cut>,
    /// The recomputing backward (`nothing_saveable`): `(arguments..., cotangents...)` to one
    /// cotangent per argument.
    recomputing: ClosedJaxpr,
}

impl Residuals {
    /// The residuals of `program` under `policy`; `params` are its parameter arguments, `inputs`
    /// its other arguments (imported values, then data) in the contract's order.
    pub fn new(
        program: &ClosedJaxpr,
        policy: RematPolicy,
        params: &[usize],
        inputs: &[usize],
    ) -> Result<Self, IrError> {
        let recomputing = crate::effects::drop_recomputed_effects(&vjp(program)?);
        let avals = program.jaxpr.in_avals();
        let mut out = Residuals {
            policy: RematPolicy::NothingSaveable,
            fallback: None,
            sources: inputs.iter().map(|&i| Source::Arg(i)).collect(),
            avals: inputs.iter().map(|&i| avals[i].clone()).collect(),
            cut: None,
            recomputing,
        };
        if policy == RematPolicy::NothingSaveable {
            return Ok(out);
        }
        match out.cut(program, policy, params, inputs) {
            Ok(()) => out.policy = policy,
            Err(e) => {
                out.sources = inputs.iter().map(|&i| Source::Arg(i)).collect();
                out.avals = inputs.iter().map(|&i| avals[i].clone()).collect();
                out.fallback = Some(e.to_string());
            }
        }
        Ok(out)
    }

    /// The types of the forward task's residual results.
    pub fn avals(&self) -> &[ShapedArray] {
        &self.avals
    }

    /// The stage's results and its residuals, from the stage program's arguments.
    pub fn forward(&self, program: &ClosedJaxpr, args: &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>) {
        let refs: Vec<&Tensor> = args.iter().collect();
        let Some(cut) = &self.cut else {
            let results = call_closed(program, &refs);
            let saved = self.sources.iter().map(|s| source_value(s, args, &[]));
            return (results, saved.collect());
        };
        let all = call_closed(&cut.forward, &refs);
        let n = program.jaxpr.outvars.len();
        let saved = self.sources.iter().map(|s| source_value(s, args, &all));
        (all[..n].to_vec(), saved.collect())
    }

    /// The cotangent of every stage program argument: `param(i)` gives parameter argument `i`,
    /// `saved` are the forward task's residuals, `cts` the results' cotangents.
    pub fn backward(
        &self,
        param: impl Fn(usize) -> Tensor,
        n_args: usize,
        saved: &[Tensor],
        cts: Vec<Tensor>,
    ) -> Vec<Tensor> {
        // The stage program's arguments: parameters, and the residuals that are arguments.
        let args = || -> Vec<Tensor> {
            let mut by_arg: HashMap<usize, Tensor> = HashMap::new();
            for (s, t) in self.sources.iter().zip(saved) {
                if let Source::Arg(i) = s {
                    by_arg.insert(*i, t.clone());
                }
            }
            (0..n_args)
                .map(|i| by_arg.remove(&i).unwrap_or_else(|| param(i)))
                .collect()
        };
        let Some(cut) = &self.cut else {
            let mut operands = args();
            operands.extend(cts);
            return call_closed(&self.recomputing, &operands.iter().collect::<Vec<_>>());
        };
        let recomputed = match &cut.recompute {
            Some(r) => {
                let mut operands = args();
                operands.extend(cut.recompute_reads.iter().map(|&k| saved[k].clone()));
                call_closed(r, &operands.iter().collect::<Vec<_>>())
            }
            None => Vec::new(),
        };
        let mut operands: Vec<Tensor> = cut
            .gets
            .iter()
            .map(|g| match *g {
                Get::Param(i) => param(i),
                Get::Saved(k) => saved[k].clone(),
                Get::Recomputed(k) => recomputed[k].clone(),
            })
            .collect();
        operands.extend(cts);
        call_closed(&cut.backward, &operands.iter().collect::<Vec<_>>())
    }

    /// Cuts the value-and-VJP program of `program` (see the module docs).
    fn cut(
        &mut self,
        program: &ClosedJaxpr,
        policy: RematPolicy,
        params: &[usize],
        inputs: &[usize],
    ) -> Result<(), IrError> {
        if !program.consts.is_empty() {
            return Err(IrError::Type {
                prim: "remat".into(),
                message: "a stage program with constants recomputes its forward".into(),
            });
        }
        let both = value_and_vjp(program, &self.recomputing)?;
        let n_args = program.jaxpr.invars.len();
        let n_out = program.jaxpr.outvars.len();
        let (mut forward, backward) = cut_by_dependence(&both, n_args, n_out)?;
        let fwd = forward.jaxpr.clone();
        // The residuals as the forward program names them (its results after the stage's).
        let residuals: Vec<Atom> = fwd.outvars[n_out..].to_vec();
        let arg_of: HashMap<Var, usize> = fwd
            .invars
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i))
            .collect();
        self.sources.clear();
        let defined = defining_equations(&fwd);
        let mut gets = Vec::new();
        let mut recomputed = Vec::new();
        for (j, atom) in residuals.iter().enumerate() {
            let arg = match atom {
                Atom::Var(v) => arg_of.get(v).copied(),
                Atom::Lit(_) => None,
            };
            let get = match (atom, arg) {
                (_, Some(i)) if params.contains(&i) => Get::Param(i),
                (_, Some(i)) => Get::Saved(self.source(Source::Arg(i))),
                (Atom::Var(v), None) if saveable(&fwd, &defined, policy, *v) => {
                    Get::Saved(self.source(Source::Computed(n_out + j)))
                }
                _ => {
                    recomputed.push(atom.clone());
                    Get::Recomputed(recomputed.len() - 1)
                }
            };
            gets.push(get);
        }
        let (recompute, recompute_reads) = if recomputed.is_empty() {
            (None, Vec::new())
        } else {
            // The values the policy keeps that recomputing reads (residuals or not: a kept
            // product under a recomputed `tanh`), returned by the forward too.
            let candidates: Vec<Var> = fwd
                .eqns
                .iter()
                .flat_map(|e| e.outputs.iter().copied())
                .filter(|&v| saveable(&fwd, &defined, policy, v))
                .collect();
            let kept = crate::remat::needed(&fwd, &candidates, &recomputed);
            let reads = kept
                .iter()
                .map(|&v| {
                    let at = forward
                        .jaxpr
                        .outvars
                        .iter()
                        .position(|a| *a == Atom::Var(v));
                    let k = at.unwrap_or_else(|| {
                        forward.jaxpr.outvars.push(Atom::Var(v));
                        forward.jaxpr.outvars.len() - 1
                    });
                    self.source(Source::Computed(k))
                })
                .collect();
            // Recomputing needs every input of the stage.
            for &i in inputs {
                self.source(Source::Arg(i));
            }
            let r =
                crate::remat::recompute_program(&ClosedJaxpr::new(fwd.clone()), &kept, &recomputed);
            (Some(crate::effects::drop_recomputed_effects(&r)), reads)
        };
        let out_avals = forward.jaxpr.out_avals();
        let in_avals = forward.jaxpr.in_avals();
        self.avals = self
            .sources
            .iter()
            .map(|s| match *s {
                Source::Arg(i) => in_avals[i].clone(),
                Source::Computed(k) => out_avals[k].clone(),
            })
            .collect();
        self.cut = Some(Cut {
            forward,
            backward,
            gets,
            recompute,
            recompute_reads,
        });
        Ok(())
    }

    /// The index of `source` among the forward task's residuals, added if new.
    fn source(&mut self, source: Source) -> usize {
        match self.sources.iter().position(|s| *s == source) {
            Some(k) => k,
            None => {
                self.sources.push(source);
                self.sources.len() - 1
            }
        }
    }
}

/// Whether the policy keeps computed value `v` of the forward program `fwd`. Booleans are
/// recomputed (comparisons are cheap, and pipeline values carry no booleans). Saving
/// everything, a value that arithmetic or a layout operation computes from other values is
/// recomputed too, from the values kept: the backward's fusions recompute it at almost no cost,
/// where saving it would make the forward write it out and the backward read it back (inside
/// one program XLA makes the same choice). Products, reductions and transcendental functions
/// are kept.
/// `defined`: each value of `fwd` an equation computes, with it ([`defining_equations`]).
fn saveable(fwd: &Jaxpr, defined: &HashMap<Var, &Eqn>, policy: RematPolicy, v: Var) -> bool {
    if fwd.aval(v).dtype == tessera_ir::DType::Bool {
        return false;
    }
    let eqn = defined.get(&v).copied();
    match policy {
        RematPolicy::EverythingSaveable => !eqn.is_some_and(computed_cheaply),
        _ => policy.saves_result_of(eqn),
    }
}

/// Whether `eqn` is an arithmetic (not transcendental) elementwise operation or a layout
/// operation.
fn computed_cheaply(eqn: &Eqn) -> bool {
    use tessera_ir::prim::Family;
    use tessera_ir::prim::{BinaryOp, ElementwiseOp, UnaryOp};
    match eqn.prim.family() {
        Family::Structural(_) => true,
        Family::Elementwise(ElementwiseOp::Unary(u)) => matches!(
            u,
            UnaryOp::Neg
                | UnaryOp::Abs
                | UnaryOp::Sign
                | UnaryOp::Floor
                | UnaryOp::Ceil
                | UnaryOp::Round
                | UnaryOp::Not
                | UnaryOp::IntegerPow
        ),
        Family::Elementwise(ElementwiseOp::Binary(b)) => !matches!(b, BinaryOp::Pow),
        Family::Elementwise(_) => true,
        _ => false,
    }
}

fn source_value(source: &Source, args: &[Tensor], computed: &[Tensor]) -> Tensor {
    match *source {
        Source::Arg(i) => args[i].clone(),
        Source::Computed(k) => computed[k].clone(),
    }
}

/// `(args..., cts...) -> (results..., arg cotangents...)`, the forward replay of `grads` (the
/// VJP) shared with the results where the two compute the same.
fn value_and_vjp(program: &ClosedJaxpr, grads: &ClosedJaxpr) -> Result<ClosedJaxpr, IrError> {
    let mut avals = program.jaxpr.in_avals();
    let n = avals.len();
    avals.extend(program.jaxpr.out_avals());
    let both = trace(&avals, |a| {
        let x: Vec<&Tensor> = a[..n].iter().collect();
        let all: Vec<&Tensor> = a.iter().collect();
        let mut out = call_closed(program, &x);
        out.extend(call_closed(grads, &all));
        out
    })?;
    Ok(eliminate_dead_code(&eliminate_common_subexpressions(
        &inline_calls(&both),
    )))
}

/// `both` (`(args..., cts...) -> (results..., cotangents...)`) cut by dependence on the
/// cotangent arguments: the forward program (`args -> (results..., residuals...)`), the backward
/// program (`(residuals..., cts...) -> cotangents`), the residuals in first-use order.
fn cut_by_dependence(
    both: &ClosedJaxpr,
    n_args: usize,
    n_out: usize,
) -> Result<(ClosedJaxpr, ClosedJaxpr), IrError> {
    let jaxpr = &both.jaxpr;
    if !jaxpr.constvars.is_empty() {
        return Err(IrError::Type {
            prim: "remat".into(),
            message: "the value-and-VJP program holds constants".into(),
        });
    }
    let (args, cts) = jaxpr.invars.split_at(n_args);
    let (results, grads) = jaxpr.outvars.split_at(n_out);
    let mut unknown: HashSet<Var> = cts.iter().copied().collect();
    let reads = |unknown: &HashSet<Var>, a: &Atom| matches!(a, Atom::Var(v) if unknown.contains(v));
    let (mut known, mut rest) = (Vec::new(), Vec::new());
    for eqn in &jaxpr.eqns {
        if eqn.inputs.iter().any(|a| reads(&unknown, a)) {
            unknown.extend(eqn.outputs.iter().copied());
            rest.push(eqn.clone());
        } else {
            known.push(eqn.clone());
        }
    }
    if results.iter().any(|a| reads(&unknown, a)) {
        return Err(IrError::Type {
            prim: "remat".into(),
            message: "a stage result depends on a cotangent".into(),
        });
    }
    let mut seen = HashSet::new();
    let residuals: Vec<Var> = rest
        .iter()
        .flat_map(|e| e.inputs.iter())
        .chain(grads)
        .filter_map(|a| match a {
            Atom::Var(v) if !unknown.contains(v) && seen.insert(*v) => Some(*v),
            _ => None,
        })
        .collect();
    let forward = Jaxpr {
        vars: jaxpr.vars.clone(),
        constvars: Vec::new(),
        invars: args.to_vec(),
        eqns: known,
        outvars: results
            .iter()
            .cloned()
            .chain(residuals.iter().map(|&v| Atom::Var(v)))
            .collect(),
    };
    let backward = Jaxpr {
        vars: jaxpr.vars.clone(),
        constvars: Vec::new(),
        invars: residuals.iter().chain(cts).copied().collect(),
        eqns: rest,
        outvars: grads.to_vec(),
    };
    let forward = eliminate_dead_code(&ClosedJaxpr::new(forward));
    let backward = eliminate_dead_code(&ClosedJaxpr::new(backward));
    tessera_ir::verify(&forward)?;
    tessera_ir::verify(&backward)?;
    Ok((forward, backward))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_ir::prim::Prim;
    use tessera_ir::{DType, ShapedArray};

    /// `tanh(x @ w) @ v`, summed: a stage with two matrix products.
    fn stage() -> ClosedJaxpr {
        let f = |shape: &[i64]| ShapedArray::new(DType::F32, shape);
        trace(&[f(&[4, 6]), f(&[6, 6]), f(&[6, 6])], |a| {
            vec![a[0].matmul(&a[1]).tanh().matmul(&a[2]).sum(&[0, 1])]
        })
        .unwrap()
    }

    fn dots(program: &ClosedJaxpr) -> usize {
        let flat = inline_calls(program);
        flat.jaxpr
            .eqns
            .iter()
            .filter(|e| e.prim == Prim::DotGeneral)
            .count()
    }

    /// The backward of each policy, traced as partition.rs traces it.
    fn backward(policy: RematPolicy) -> (Residuals, ClosedJaxpr) {
        let program = stage();
        let res = Residuals::new(&program, policy, &[1, 2], &[0]).unwrap();
        let f = |shape: &[i64]| ShapedArray::new(DType::F32, shape);
        let mut avals = vec![f(&[6, 6]), f(&[6, 6])];
        avals.extend(res.avals().iter().cloned());
        avals.push(f(&[]));
        let nr = res.avals().len();
        let bwd = trace(&avals, |a| {
            let param = |i: usize| a[i - 1].clone();
            res.backward(param, 3, &a[2..2 + nr], vec![a[2 + nr].clone()])
        })
        .unwrap();
        (res, bwd)
    }

    /// Saving everything, the backward computes no forward product again (4 products: each
    /// matmul's two cotangents); recomputing, it computes the first forward product again (5:
    /// the second one's value is not read by any cotangent); saving the products' results, it
    /// recomputes only `tanh`.
    #[test]
    fn the_backward_recomputes_what_the_policy_does_not_save() {
        let (res, bwd) = backward(RematPolicy::EverythingSaveable);
        assert_eq!(res.policy, RematPolicy::EverythingSaveable);
        assert_eq!(dots(&bwd), 4, "{bwd:?}");
        let (res, bwd) = backward(RematPolicy::NothingSaveable);
        assert_eq!(res.avals().len(), 1, "only the input is kept");
        assert_eq!(dots(&bwd), 5, "{bwd:?}");
        let (_, bwd) = backward(RematPolicy::DotsSaveable);
        assert_eq!(dots(&bwd), 4, "{bwd:?}");
        let tanh = |p: &ClosedJaxpr| {
            inline_calls(p)
                .jaxpr
                .eqns
                .iter()
                .filter(|e| e.prim == Prim::Tanh)
                .count()
        };
        assert_eq!(tanh(&bwd), 1, "{bwd:?}");
    }

    /// Every policy's gradients are the recomputing backward's.
    #[test]
    fn every_policy_computes_the_same_gradients() {
        let args: Vec<tessera_ir::Array> = [[4i64, 6], [6, 6], [6, 6]]
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let n = (s[0] * s[1]) as usize;
                let v = (0..n).map(|i| ((i + 7 * k) as f64 * 0.37).sin()).collect();
                tessera_ir::Array::new(DType::F32, s, v).unwrap()
            })
            .collect();
        let program = stage();
        let grads = |policy: RematPolicy| {
            let res = Residuals::new(&program, policy, &[1, 2], &[0]).unwrap();
            let f = |shape: &[i64]| ShapedArray::new(DType::F32, shape);
            let whole = trace(&[f(&[4, 6]), f(&[6, 6]), f(&[6, 6]), f(&[])], |a| {
                let (_, saved) = res.forward(&program, &a[..3]);
                res.backward(|i| a[i].clone(), 3, &saved, vec![a[3].clone()])
            })
            .unwrap();
            let mut all = args.clone();
            all.push(tessera_ir::Array::new(DType::F32, &[], vec![1.0]).unwrap());
            tessera_ir::interp::eval_closed(&whole, &all).unwrap()
        };
        let want = grads(RematPolicy::NothingSaveable);
        for policy in RematPolicy::ALL {
            let got = grads(policy);
            for (g, w) in got.iter().zip(&want) {
                for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
                    assert!(
                        (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                        "{policy}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
