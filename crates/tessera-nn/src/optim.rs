//! Optimizers as traced updates, so the update compiles with the step (and, under `mpmd_jit`,
//! runs where the parameters live): SGD with momentum and AdamW, with their state as parameter
//! trees; and gradient clipping by global norm.
//!
//! An update takes the learning rate as a traced scalar (see [`crate::lr`]), the parameters, their
//! gradients and the state, all as trees of the parameters' structure, and returns the new
//! parameters and the new state.

use std::collections::HashMap;

use tessera_ir::trace::Tensor;
use tessera_ir::{Array, DType, ShapedArray};
use tessera_sharding::PartitionSpec;

use crate::error::Result;
use crate::tree::Tree;

/// An optimizer: its state and its traced update.
pub trait Optimizer {
    /// The initial state for `params`.
    fn init_state(&self, params: &Tree<Array>) -> Result<Tree<Array>>;

    /// The types of the state for parameters of types `params`.
    fn state_avals(&self, params: &Tree<ShapedArray>) -> Tree<ShapedArray>;

    /// The new parameters and state after one step with learning rate `lr`.
    fn update(
        &self,
        lr: &Tensor,
        params: &Tree<Tensor>,
        grads: &Tree<Tensor>,
        state: &Tree<Tensor>,
    ) -> Result<(Tree<Tensor>, Tree<Tensor>)>;

    /// The layout of the state for parameters of types `params` laid out by `specs` (e.g.
    /// [`crate::DecoderConfig::param_specs`]): a state leaf that mirrors a parameter (its path
    /// ends with the parameter's path and it has its type, as AdamW's `mu.<path>`) takes the
    /// parameter's spec, so the update runs where the shards are; the rest (a step count) is
    /// replicated.
    fn state_specs(
        &self,
        params: &Tree<ShapedArray>,
        specs: &Tree<PartitionSpec>,
    ) -> Result<Tree<PartitionSpec>> {
        params.check_same_structure(specs)?;
        let by_path: HashMap<String, (&ShapedArray, &PartitionSpec)> = params
            .paths()
            .into_iter()
            .zip(params.leaves().into_iter().zip(specs.leaves()))
            .collect();
        Ok(self.state_avals(params).map(&mut |path, aval| {
            // The longest suffix of the path, after a dot, naming a parameter of this type.
            let mut rest = path;
            loop {
                match (by_path.get(rest), rest.split_once('.')) {
                    (Some((a, spec)), _) if *a == aval => return (*spec).clone(),
                    (_, Some((_, tail))) => rest = tail,
                    (_, None) => return PartitionSpec::replicated(),
                }
            }
        }))
    }
}

/// Zeros shaped like each leaf.
fn zeros_like(params: &Tree<Array>) -> Result<Tree<Array>> {
    params.try_map(&mut |_, a| Ok(Array::zeros(&a.aval())))
}

/// Applies `f` leaf by leaf to trees of one structure, returning one tree per output.
fn zip_map<const N: usize>(
    trees: &[&Tree<Tensor>],
    f: impl Fn(&[&Tensor]) -> [Tensor; N],
) -> Result<[Tree<Tensor>; N]> {
    let first = trees[0];
    for tree in &trees[1..] {
        first.check_same_structure(tree)?;
    }
    let leaves: Vec<Vec<&Tensor>> = trees.iter().map(|t| t.leaves()).collect();
    let mut outputs: [Vec<Tensor>; N] = std::array::from_fn(|_| Vec::new());
    for i in 0..first.len() {
        let args: Vec<&Tensor> = leaves.iter().map(|l| l[i]).collect();
        for (out, value) in outputs.iter_mut().zip(f(&args)) {
            out.push(value);
        }
    }
    let mut trees_out = Vec::with_capacity(N);
    for out in outputs {
        trees_out.push(first.unflatten(out)?);
    }
    trees_out
        .try_into()
        .map_err(|_| crate::NnError::Structure("internal: wrong number of outputs".into()))
}

/// Stochastic gradient descent, with momentum when `momentum > 0` (optax's `sgd`:
/// `v = momentum v + g`, `p = p - lr v`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sgd {
    /// The momentum coefficient (0: plain SGD, no state).
    pub momentum: f64,
}

impl Optimizer for Sgd {
    fn init_state(&self, params: &Tree<Array>) -> Result<Tree<Array>> {
        if self.momentum == 0.0 {
            return Ok(Tree::Node(Vec::new()));
        }
        Ok(Tree::node([("velocity", zeros_like(params)?)]))
    }

    fn state_avals(&self, params: &Tree<ShapedArray>) -> Tree<ShapedArray> {
        if self.momentum == 0.0 {
            return Tree::Node(Vec::new());
        }
        Tree::node([("velocity", params.clone())])
    }

    fn update(
        &self,
        lr: &Tensor,
        params: &Tree<Tensor>,
        grads: &Tree<Tensor>,
        state: &Tree<Tensor>,
    ) -> Result<(Tree<Tensor>, Tree<Tensor>)> {
        if self.momentum == 0.0 {
            let [new] = zip_map(&[params, grads], |a| [a[0] - &(a[1] * lr)])?;
            return Ok((new, Tree::Node(Vec::new())));
        }
        let velocity = state.get("velocity")?;
        let m = self.momentum;
        let [new, v] = zip_map(&[params, grads, velocity], |a| {
            let v = a[2] * m + a[1];
            [a[0] - &v * lr, v]
        })?;
        Ok((new, Tree::node([("velocity", v)])))
    }
}

/// AdamW (optax's `adamw`): Adam's bias-corrected moments plus decoupled weight decay,
/// `p = p - lr (m̂ / (sqrt(v̂) + eps) + weight_decay p)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamW {
    /// Decay of the first moment.
    pub b1: f64,
    /// Decay of the second moment.
    pub b2: f64,
    /// Added to the root of the second moment.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
}

impl Default for AdamW {
    /// optax's defaults: `b1 = 0.9`, `b2 = 0.999`, `eps = 1e-8`, `weight_decay = 1e-4`.
    fn default() -> Self {
        AdamW {
            b1: 0.9,
            b2: 0.999,
            eps: 1e-8,
            weight_decay: 1e-4,
        }
    }
}

impl Optimizer for AdamW {
    fn init_state(&self, params: &Tree<Array>) -> Result<Tree<Array>> {
        Ok(Tree::node([
            ("count", Tree::Leaf(Array::scalar(DType::F32, 0.0))),
            ("mu", zeros_like(params)?),
            ("nu", zeros_like(params)?),
        ]))
    }

    fn state_avals(&self, params: &Tree<ShapedArray>) -> Tree<ShapedArray> {
        Tree::node([
            ("count", Tree::Leaf(ShapedArray::new(DType::F32, &[]))),
            ("mu", params.clone()),
            ("nu", params.clone()),
        ])
    }

    fn update(
        &self,
        lr: &Tensor,
        params: &Tree<Tensor>,
        grads: &Tree<Tensor>,
        state: &Tree<Tensor>,
    ) -> Result<(Tree<Tensor>, Tree<Tensor>)> {
        let count = state.leaf("count")? + 1.0;
        // 1 - b^count, with the count traced: b^count = exp(count ln b).
        let correction = |b: f64| 1.0 - (&count * b.ln()).exp();
        let (c1, c2) = (correction(self.b1), correction(self.b2));
        let (b1, b2, eps, wd) = (self.b1, self.b2, self.eps, self.weight_decay);
        let [new, mu, nu] = zip_map(&[params, grads, state.get("mu")?, state.get("nu")?], |a| {
            let (p, g) = (a[0], a[1]);
            let mu = &(a[2] * b1) + &(g * (1.0 - b1));
            let nu = &(a[3] * b2) + &(g.integer_pow(2) * (1.0 - b2));
            let step = &(&mu / &c1) / &((&nu / &c2).sqrt() + eps);
            let update = &step + &(p * wd);
            [p - &(&update * lr), mu, nu]
        })?;
        let state = Tree::node([("count", Tree::Leaf(count)), ("mu", mu), ("nu", nu)]);
        Ok((new, state))
    }
}

/// The global L2 norm of all leaves: `sqrt(sum of squares)`.
pub fn global_norm(grads: &Tree<Tensor>) -> Option<Tensor> {
    let squares: Vec<Tensor> = grads
        .leaves()
        .iter()
        .map(|g| {
            let axes: Vec<i64> = (0..g.rank() as i64).collect();
            g.integer_pow(2).sum(&axes)
        })
        .collect();
    let total = squares.into_iter().reduce(|a, b| a + b)?;
    Some(total.sqrt())
}

/// The gradients scaled so that their global norm is at most `max_norm` (optax's
/// `clip_by_global_norm`: `g * max_norm / max(norm, max_norm)`).
pub fn clip_by_global_norm(grads: &Tree<Tensor>, max_norm: f64) -> Tree<Tensor> {
    let Some(norm) = global_norm(grads) else {
        return grads.clone();
    };
    let denominator = norm.maximum(&norm.full_like_scalar(max_norm));
    let scale = max_norm / &denominator;
    grads.map(&mut |_, g| g * &scale)
}
