//! Partial sums computed where they start: results a program returns unreduced over some mesh
//! axes (Shardy's `unreduced={...}`: each device holds a partial sum, and the value is their
//! sum) are only right if every device's value really is its part. XLA reads an unreduced
//! layout as a promise: a value it holds whole on every device and is told is unreduced is not
//! masked, so summing the parts counts it once per device; and it does not carry an unreduced
//! layout backwards from a result to the contraction that could leave its sum partial. This pass
//! builds each such result's partial value itself, beside the whole one:
//!
//! - a contraction (`dot_general`, `reduce_sum`) is computed again with one of its contracted
//!   dimensions split over the unreduced axes (the first whose size they divide: the batch
//!   dimension of a gradient's contraction), so that each device sums its own slice, and its
//!   result is constrained unreduced;
//! - a linear operation (`add`, `sub`, `neg`, `copy`, `convert_element_type`, `transpose`,
//!   `broadcast_in_dim`, `mul` or `div` by a value that is not itself partial) of partial values
//!   is computed again on them;
//! - anything else (a value that cannot be split: a non-linear operation, an argument) is laid
//!   out whole on every device and divided by the number of devices the axes span (each holds
//!   the same share; exact for a power of two). XLA reads a value held whole and constrained
//!   unreduced as every device's partial sum, but one split over the axes as zero outside each
//!   device's slice, hence the layout first.
//!
//! Every other reader keeps the whole value, so the program means what it did; the partial path
//! only adds equations, which XLA's dead-code and common-subexpression passes fold with the
//! originals where they coincide. Dimensions split over other axes (tensor parallelism) follow
//! the result's spec backwards through transposes and broadcasts.

use std::collections::HashMap;

use tessera_sharding::{AbstractMesh, DimSpec, PartitionSpec};

use super::Rebuild;
use crate::aval::ShapedArray;
use crate::program::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal, Var};
use crate::program::prim::linalg::dot_dims;
use crate::program::prim::{ConstraintParams, Prim, ReductionParams, ScatterParams};

/// How the partial value of one variable is made (see the module docs).
#[derive(Debug, Clone)]
enum Rule {
    /// An argument already laid out unreduced: itself.
    Given,
    /// The whole value divided by the number of devices.
    Scale,
    /// The same linear operation of the partial values of operands `walked` (the other
    /// operands whole).
    Linear { walked: Vec<usize> },
    /// The contraction again, its operands split over the axes at these dimensions (one per
    /// operand; `None`: left as it is), and operands `walked` partial (a scatter's operand).
    Split {
        dims: Vec<Option<usize>>,
        walked: Vec<usize>,
    },
}

/// `program` with results `outputs` (index and unreduced spec over `mesh`) computed as partial
/// sums; arguments `inputs` (index and spec) are already laid out unreduced. Results whose spec
/// holds no unreduced axis are left alone. See the module docs.
pub fn keep_partial_sums(
    program: &ClosedJaxpr,
    mesh: &AbstractMesh,
    outputs: &[(usize, PartitionSpec)],
    inputs: &[(usize, PartitionSpec)],
) -> ClosedJaxpr {
    let jaxpr = &program.jaxpr;
    let outputs: Vec<&(usize, PartitionSpec)> = outputs
        .iter()
        .filter(|(_, spec)| !spec.unreduced().is_empty())
        .collect();
    if outputs.is_empty() {
        return program.clone();
    }
    let given: Vec<Var> = inputs
        .iter()
        .filter(|(_, spec)| !spec.unreduced().is_empty())
        .filter_map(|(i, _)| jaxpr.invars.get(*i).copied())
        .collect();
    let rules = rules(jaxpr, mesh, &outputs, &given);
    let mut build = Build {
        rb: Rebuild::new(jaxpr),
        partial: HashMap::new(),
        mesh,
    };
    for &v in &jaxpr.invars {
        if let Some((rule, spec)) = rules.get(&v) {
            build.make_partial(v, rule, spec, None);
        }
    }
    for eqn in &jaxpr.eqns {
        build.rb.copy(eqn);
        for v in &eqn.outputs {
            if let Some((rule, spec)) = rules.get(v) {
                build.make_partial(*v, rule, spec, Some(eqn));
            }
        }
    }
    let mut results: Vec<Atom> = jaxpr.outvars.iter().map(|a| build.rb.atom(a)).collect();
    for (i, spec) in outputs.iter().map(|(i, s)| (*i, s)) {
        let partial = match jaxpr.outvars.get(i) {
            Some(Atom::Var(v)) => build.partial.get(v).cloned(),
            Some(Atom::Lit(lit)) => Some(Atom::Lit(Literal::new(
                lit.to_f64() / devices(mesh, spec) as f64,
                lit.aval.clone(),
            ))),
            None => None,
        };
        if let Some(p) = partial {
            results[i] = p;
        }
    }
    let mut new = build.rb.new;
    new.outvars = results;
    ClosedJaxpr {
        jaxpr: new,
        consts: program.consts.clone(),
    }
}

/// The number of devices the unreduced axes of `spec` span.
fn devices(mesh: &AbstractMesh, spec: &PartitionSpec) -> i64 {
    spec.unreduced()
        .iter()
        .filter_map(|a| mesh.axis_size(a))
        .product()
}

/// The rule and spec of every variable whose partial value a result needs.
fn rules(
    jaxpr: &Jaxpr,
    mesh: &AbstractMesh,
    outputs: &[&(usize, PartitionSpec)],
    given: &[Var],
) -> HashMap<Var, (Rule, PartitionSpec)> {
    let producer: HashMap<Var, &Eqn> = jaxpr
        .eqns
        .iter()
        .flat_map(|e| e.outputs.iter().map(move |&v| (v, e)))
        .collect();
    let mut rules: HashMap<Var, (Rule, PartitionSpec)> = HashMap::new();
    let mut stack: Vec<(Var, PartitionSpec)> = outputs
        .iter()
        .filter_map(|(i, spec)| match jaxpr.outvars.get(*i) {
            Some(Atom::Var(v)) => Some((*v, spec.clone())),
            _ => None,
        })
        .collect();
    while let Some((v, spec)) = stack.pop() {
        if rules.contains_key(&v) {
            continue;
        }
        let rule = match producer.get(&v) {
            _ if given.contains(&v) => Rule::Given,
            None => Rule::Scale,
            Some(eqn) => {
                let (rule, operands) = rule_of(jaxpr, mesh, eqn, &spec, &producer);
                stack.extend(operands);
                rule
            }
        };
        rules.insert(v, (rule, spec));
    }
    rules
}

/// How `eqn`'s result (laid out by `spec`) is made partial, and the operands whose partial
/// values that needs, with their specs.
fn rule_of(
    jaxpr: &Jaxpr,
    mesh: &AbstractMesh,
    eqn: &Eqn,
    spec: &PartitionSpec,
    producer: &HashMap<Var, &Eqn>,
) -> (Rule, Vec<(Var, PartitionSpec)>) {
    let scale = (Rule::Scale, Vec::new());
    if eqn.outputs.len() != 1 || spec.len() > jaxpr.aval(eqn.outputs[0]).rank() {
        return scale;
    }
    let shape = &jaxpr.aval(eqn.outputs[0]).shape;
    let var = |i: usize| match eqn.inputs.get(i) {
        Some(Atom::Var(v)) => Some(*v),
        _ => None,
    };
    let linear = |walked: Vec<(usize, PartitionSpec)>| -> (Rule, Vec<(Var, PartitionSpec)>) {
        let operands = walked
            .iter()
            .filter_map(|(i, s)| Some((var(*i)?, s.clone())));
        let operands: Vec<_> = operands.collect();
        match operands.len() == walked.len() {
            true => (
                Rule::Linear {
                    walked: walked.iter().map(|(i, _)| *i).collect(),
                },
                operands,
            ),
            false => (Rule::Scale, Vec::new()),
        }
    };
    let same_shape = |i: usize| var(i).is_some_and(|v| &jaxpr.aval(v).shape == shape);
    let summed = |i: usize| var(i).is_some_and(|v| reaches_contraction(v, producer, 8));
    match eqn.prim {
        Prim::Add | Prim::AddAny | Prim::Sub if (0..eqn.inputs.len()).all(same_shape) => {
            linear((0..eqn.inputs.len()).map(|i| (i, spec.clone())).collect())
        }
        Prim::Neg | Prim::Copy | Prim::ConvertElementType if same_shape(0) => {
            linear(vec![(0, spec.clone())])
        }
        Prim::Mul if eqn.inputs.len() == 2 => match (summed(0), summed(1)) {
            (true, false) if same_shape(0) => linear(vec![(0, spec.clone())]),
            (false, true) if same_shape(1) => linear(vec![(1, spec.clone())]),
            _ => scale,
        },
        Prim::Div if summed(0) && same_shape(0) => linear(vec![(0, spec.clone())]),
        Prim::Transpose => match transposed(eqn, spec) {
            Some(s) => linear(vec![(0, s)]),
            None => scale,
        },
        Prim::BroadcastInDim => match broadcast_source(jaxpr, eqn, spec) {
            Some(s) => linear(vec![(0, s)]),
            None => scale,
        },
        Prim::DotGeneral | Prim::ReduceSum => match split_dims(jaxpr, eqn, devices(mesh, spec)) {
            Some(dims) => (
                Rule::Split {
                    dims,
                    walked: Vec::new(),
                },
                Vec::new(),
            ),
            // A sum over dimensions of size one only drops them. (A larger sum none of whose
            // dimensions splits is linear too, but XLA sums a partial operand over all devices
            // first, so it is not walked.)
            None if eqn.prim == Prim::ReduceSum => match reduced_source(jaxpr, eqn, spec) {
                Some(s) => linear(vec![(0, s)]),
                None => scale,
            },
            None => scale,
        },
        // A scatter-add of split updates into a partial operand.
        Prim::ScatterAdd => match (scatter_split(jaxpr, eqn, devices(mesh, spec)), var(0)) {
            (Some(dims), Some(operand)) if same_shape(0) => (
                Rule::Split {
                    dims,
                    walked: vec![0],
                },
                vec![(operand, spec.clone())],
            ),
            _ => scale,
        },
        // Rearranging a value whose dimensions nothing splits: the operand unsplit too.
        Prim::Reshape | Prim::Squeeze | Prim::ExpandDims | Prim::Slice
            if spec.used_axes().next().is_none() =>
        {
            linear(vec![(0, unsplit(jaxpr, eqn, spec))])
        }
        Prim::Pad if spec.used_axes().next().is_none() && is_zero(eqn.inputs.get(1)) => {
            linear(vec![(0, unsplit(jaxpr, eqn, spec))])
        }
        _ => scale,
    }
}

/// For a contraction, the dimension of each operand to split over the unreduced axes
/// (`devices` ways): the first contracted dimension whose size they divide.
fn split_dims(jaxpr: &Jaxpr, eqn: &Eqn, devices: i64) -> Option<Vec<Option<usize>>> {
    let shape = |i: usize| match eqn.inputs.get(i)? {
        Atom::Var(v) => Some(jaxpr.aval(*v).shape.clone()),
        Atom::Lit(_) => None,
    };
    let divides =
        |shape: &[i64], d: usize| shape.get(d).is_some_and(|&n| n > 0 && n % devices == 0);
    match eqn.prim {
        Prim::DotGeneral => {
            let dims = dot_dims(&eqn.params).ok()?;
            let (lhs, rhs) = (shape(0)?, shape(1)?);
            let pairs = dims.lhs_contract.iter().zip(&dims.rhs_contract);
            let (&l, &r) = pairs
                .into_iter()
                .find(|&(&l, &r)| divides(&lhs, l) && divides(&rhs, r))?;
            Some(vec![Some(l), Some(r)])
        }
        Prim::ReduceSum => {
            let operand = shape(0)?;
            let ReductionParams::Axes(axes) =
                ReductionParams::read(eqn.prim, &eqn.params, operand.len()).ok()?
            else {
                return None;
            };
            let d = axes.into_iter().find(|&d| divides(&operand, d))?;
            Some(vec![Some(d)])
        }
        _ => None,
    }
}

/// The spec of operand 0 of `eqn` of another shape, no dimension split.
fn unsplit(jaxpr: &Jaxpr, eqn: &Eqn, spec: &PartitionSpec) -> PartitionSpec {
    let rank = eqn.inputs.first().map_or(0, |a| jaxpr.atom_aval(a).rank());
    with_dims(spec, vec![DimSpec::Replicated; rank])
}

/// Whether `atom` is the literal zero.
fn is_zero(atom: Option<&Atom>) -> bool {
    matches!(atom, Some(Atom::Lit(l)) if l.to_f64() == 0.0)
}

/// The operand spec of a sum over dimensions of size one (`None` for another sum): the
/// result's dimensions where they stay, the summed ones unsplit.
fn reduced_source(jaxpr: &Jaxpr, eqn: &Eqn, spec: &PartitionSpec) -> Option<PartitionSpec> {
    let rank = jaxpr.atom_aval(eqn.inputs.first()?).rank();
    let ReductionParams::Axes(axes) = ReductionParams::read(eqn.prim, &eqn.params, rank).ok()?
    else {
        return None;
    };
    let operand = &jaxpr.atom_aval(eqn.inputs.first()?).shape;
    if axes.iter().any(|&d| operand.get(d) != Some(&1)) {
        return None;
    }
    let mut kept = spec.dims().iter().cloned();
    let dims = (0..rank)
        .map(|d| match axes.contains(&d) {
            true => DimSpec::Replicated,
            false => kept.next().unwrap_or(DimSpec::Replicated),
        })
        .collect();
    Some(with_dims(spec, dims))
}

/// For a `scatter-add(operand, indices, updates)` without batching dimensions, the dimension of
/// the indices and of the updates to split (`devices` ways): the first scattered dimension of
/// the updates whose size they divide, and the dimension of the indices it pairs with.
fn scatter_split(jaxpr: &Jaxpr, eqn: &Eqn, devices: i64) -> Option<Vec<Option<usize>>> {
    let params = ScatterParams::read(&eqn.params).ok()?;
    if !params.dims.operand_batching_dims.is_empty() {
        return None;
    }
    let shape = |i: usize| Some(jaxpr.atom_aval(eqn.inputs.get(i)?).shape.clone());
    let (indices, updates) = (shape(1)?, shape(2)?);
    let window: Vec<usize> = params
        .dims
        .update_window_dims
        .iter()
        .filter_map(|&d| usize::try_from(d).ok())
        .collect();
    let scattered = (0..updates.len()).filter(|d| !window.contains(d));
    let index_dims = 0..indices.len().saturating_sub(1);
    let (i, u) = index_dims
        .zip(scattered)
        .find(|&(i, u)| updates[u] > 0 && updates[u] % devices == 0 && indices[i] == updates[u])?;
    Some(vec![None, Some(i), Some(u)])
}

/// Whether a result of `prim` carries a partial sum through (a linear operation) or starts
/// one (a contraction).
fn carries_sums(prim: Prim) -> bool {
    matches!(
        prim,
        Prim::DotGeneral
            | Prim::ReduceSum
            | Prim::Add
            | Prim::AddAny
            | Prim::Sub
            | Prim::Neg
            | Prim::Copy
            | Prim::ConvertElementType
            | Prim::Transpose
            | Prim::Mul
            | Prim::Div
            | Prim::BroadcastInDim
            | Prim::Reshape
            | Prim::Squeeze
            | Prim::ExpandDims
            | Prim::Slice
            | Prim::Pad
    )
}

/// Whether `v` is made by a contraction through at most `depth` linear operations.
fn reaches_contraction(v: Var, producer: &HashMap<Var, &Eqn>, depth: usize) -> bool {
    let Some(eqn) = producer.get(&v) else {
        return false;
    };
    match eqn.prim {
        Prim::DotGeneral | Prim::ReduceSum => true,
        prim if carries_sums(prim) && depth > 0 => eqn.inputs.iter().any(|a| match a {
            Atom::Var(w) => reaches_contraction(*w, producer, depth - 1),
            Atom::Lit(_) => false,
        }),
        _ => false,
    }
}

/// A transpose's operand spec: the result's dimensions split as before the permutation.
fn transposed(eqn: &Eqn, spec: &PartitionSpec) -> Option<PartitionSpec> {
    let perm = eqn.params.ints("transpose", "permutation").ok()?;
    let mut dims = vec![DimSpec::Replicated; perm.len()];
    for (out_dim, &in_dim) in perm.iter().enumerate() {
        let d = spec.dims().get(out_dim).cloned();
        *dims.get_mut(usize::try_from(in_dim).ok()?)? = d.unwrap_or(DimSpec::Replicated);
    }
    Some(with_dims(spec, dims))
}

/// A broadcast's operand spec: each dimension split as the result dimension it becomes
/// (unsplit where the broadcast grows it).
fn broadcast_source(jaxpr: &Jaxpr, eqn: &Eqn, spec: &PartitionSpec) -> Option<PartitionSpec> {
    let Some(Atom::Var(operand)) = eqn.inputs.first() else {
        return None;
    };
    let map = eqn
        .params
        .opt_ints("broadcast_in_dim", "broadcast_dimensions")
        .ok()?
        .unwrap_or_default();
    let in_shape = &jaxpr.aval(*operand).shape;
    let out_shape = &jaxpr.aval(eqn.outputs[0]).shape;
    if map.len() != in_shape.len() {
        return None;
    }
    let mut dims = Vec::with_capacity(in_shape.len());
    for (i, &to) in map.iter().enumerate() {
        let to = usize::try_from(to).ok()?;
        let split = spec.dims().get(to).cloned().unwrap_or(DimSpec::Replicated);
        let kept = in_shape.get(i) == out_shape.get(to);
        dims.push(if kept { split } else { DimSpec::Replicated });
    }
    Some(with_dims(spec, dims))
}

fn with_dims(spec: &PartitionSpec, dims: Vec<DimSpec>) -> PartitionSpec {
    PartitionSpec::new(dims).with_unreduced(spec.unreduced())
}

/// The program being rebuilt, with the partial value made so far of each variable.
struct Build<'a> {
    rb: Rebuild<'a>,
    partial: HashMap<Var, Atom>,
    mesh: &'a AbstractMesh,
}

impl Build<'_> {
    /// Makes `v`'s partial value by `rule` (`eqn`: its producer, already copied).
    fn make_partial(&mut self, v: Var, rule: &Rule, spec: &PartitionSpec, eqn: Option<&Eqn>) {
        let whole = self.rb.atom(&Atom::Var(v));
        let aval = self.rb.old.aval(v).clone();
        let made = match (rule, eqn) {
            (Rule::Given, _) => Some(whole.clone()),
            (Rule::Linear { walked }, Some(eqn)) => {
                let inputs = eqn
                    .inputs
                    .iter()
                    .enumerate()
                    .map(|(i, a)| match (walked.contains(&i), a) {
                        (true, Atom::Var(w)) => self.partial.get(w).cloned(),
                        _ => Some(self.rb.atom(a)),
                    })
                    .collect::<Option<Vec<_>>>();
                inputs.map(|inputs| self.emit(eqn, inputs, &aval))
            }
            (Rule::Split { dims, walked }, Some(eqn)) => {
                let dims = dims.iter().chain(std::iter::repeat(&None));
                let inputs = eqn
                    .inputs
                    .iter()
                    .enumerate()
                    .zip(dims)
                    .map(|((i, a), d)| match (d, walked.contains(&i), a) {
                        (Some(d), _, _) => Some(self.split(self.rb.atom(a), *d, spec)),
                        (None, true, Atom::Var(w)) => self.partial.get(w).cloned(),
                        _ => Some(self.rb.atom(a)),
                    })
                    .collect::<Option<Vec<_>>>();
                inputs.map(|inputs| self.emit(eqn, inputs, &aval))
            }
            _ => None,
        };
        let made = match made {
            Some(m) => m,
            None => self.scaled(whole, &aval, spec),
        };
        let constrained = match rule {
            Rule::Given => made,
            _ => self.constrain(made, &aval, spec),
        };
        self.partial.insert(v, constrained);
    }

    /// A copy of `eqn` (one result of type `aval`) on `inputs`.
    fn emit(&mut self, eqn: &Eqn, inputs: Vec<Atom>, aval: &ShapedArray) -> Atom {
        let out = self.rb.new.new_var(aval.clone());
        self.rb.new.eqns.push(Eqn {
            prim: eqn.prim,
            params: eqn.params.clone(),
            inputs,
            outputs: vec![out],
        });
        Atom::Var(out)
    }

    /// `whole` divided by the number of devices the unreduced axes span, first laid out whole
    /// on each of them (XLA reads a value held whole as its own partial sum on every device, but
    /// a value split over the axes as zero outside each device's slice).
    fn scaled(&mut self, whole: Atom, aval: &ShapedArray, spec: &PartitionSpec) -> Atom {
        let kept = PartitionSpec::new(spec.dims().to_vec());
        let whole = self.constrain_to(whole, aval, self.mesh, kept);
        let n = devices(self.mesh, spec) as f64;
        let factor = Atom::Lit(Literal::new(1.0 / n, ShapedArray::scalar(aval.dtype)));
        let out = self.rb.new.new_var(aval.clone());
        self.rb.new.eqns.push(Eqn {
            prim: Prim::Mul,
            params: Default::default(),
            inputs: vec![whole, factor],
            outputs: vec![out],
        });
        Atom::Var(out)
    }

    /// `operand` with dimension `dim` split over the unreduced axes of `spec`, the other
    /// dimensions left to the partitioner.
    fn split(&mut self, operand: Atom, dim: usize, spec: &PartitionSpec) -> Atom {
        let Atom::Var(v) = operand else {
            return operand;
        };
        let aval = self.rb.new.aval(v).clone();
        let dims = (0..aval.rank())
            .map(|d| match d == dim {
                true => DimSpec::from_axes(spec.unreduced()),
                false => DimSpec::Unconstrained,
            })
            .collect();
        self.constrain_to(Atom::Var(v), &aval, self.mesh, PartitionSpec::new(dims))
    }

    /// `value` constrained to `spec` (unreduced axes typed Explicit, as JAX requires).
    fn constrain(&mut self, value: Atom, aval: &ShapedArray, spec: &PartitionSpec) -> Atom {
        let mesh = self.mesh.with_explicit(spec.unreduced());
        self.constrain_to(value, aval, &mesh, spec.clone())
    }

    fn constrain_to(
        &mut self,
        value: Atom,
        aval: &ShapedArray,
        mesh: &AbstractMesh,
        spec: PartitionSpec,
    ) -> Atom {
        let params = ConstraintParams::new(mesh, &spec);
        if params.check(aval).is_err() {
            return value;
        }
        let out = self.rb.new.new_var(aval.clone());
        self.rb.new.eqns.push(Eqn {
            prim: Prim::ShardingConstraint,
            params: params.to_params(),
            inputs: vec![value],
            outputs: vec![out],
        });
        Atom::Var(out)
    }
}
