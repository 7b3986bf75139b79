//! Tracing over parameter trees: [`trace_trees`] traces a function whose arguments and results are
//! trees (the program's argument list is their leaves, tree after tree), and
//! [`value_and_grad_tree`] differentiates a loss with respect to one tree argument inside a trace,
//! returning the gradients as a tree of the same structure.

use tessera_ir::trace::{Tensor, trace, value_and_grad_call};
use tessera_ir::{ClosedJaxpr, ShapedArray};

use crate::error::{NnError, Result};
use crate::tree::Tree;

/// Traces `f` on trees of the types `inputs`; returns the program (arguments: the leaves of each
/// input tree in turn; results: the leaves of each output tree in turn) and the output trees'
/// types. An error from `f` is returned as is.
pub fn trace_trees(
    inputs: &[Tree<ShapedArray>],
    f: impl FnOnce(&[Tree<Tensor>]) -> Result<Vec<Tree<Tensor>>>,
) -> Result<(ClosedJaxpr, Vec<Tree<ShapedArray>>)> {
    let avals: Vec<ShapedArray> = inputs.iter().flat_map(Tree::flatten).collect();
    let mut outcome: Result<Vec<Tree<ShapedArray>>> = Ok(Vec::new());
    let program = trace(&avals, |args| {
        let trees = match split(inputs, args) {
            Ok(trees) => trees,
            Err(err) => {
                outcome = Err(err);
                return Vec::new();
            }
        };
        match f(&trees) {
            Ok(outputs) => {
                outcome = Ok(outputs
                    .iter()
                    .map(|t| t.map(&mut |_, x| x.aval().clone()))
                    .collect());
                outputs.iter().flat_map(Tree::flatten).collect()
            }
            Err(err) => {
                outcome = Err(err);
                Vec::new()
            }
        }
    });
    let structures = outcome?;
    Ok((program?, structures))
}

/// `args` cut into trees shaped like `like`.
fn split<T: Clone, U>(like: &[Tree<U>], args: &[T]) -> Result<Vec<Tree<T>>> {
    let total: usize = like.iter().map(Tree::len).sum();
    if total != args.len() {
        return Err(NnError::LeafCount {
            expected: total,
            actual: args.len(),
        });
    }
    let mut at = 0;
    like.iter()
        .map(|tree| {
            let n = tree.len();
            at += n;
            tree.unflatten(args[at - n..at].to_vec())
        })
        .collect()
}

/// Inside a trace: the value of the scalar `loss` program at the leaves of `args` (tree after
/// tree, as `loss` takes them) and its gradient with respect to the tree `args[wrt]`.
pub fn value_and_grad_tree(
    loss: &ClosedJaxpr,
    args: &[&Tree<Tensor>],
    wrt: usize,
) -> Result<(Tensor, Tree<Tensor>)> {
    let leaves: Vec<&Tensor> = args.iter().flat_map(|t| t.leaves()).collect();
    let target = args.get(wrt).ok_or_else(|| {
        NnError::Structure(format!(
            "wrt = {wrt}, but only {} trees were given",
            args.len()
        ))
    })?;
    let offset: usize = args[..wrt].iter().map(|t| t.len()).sum();
    let argnums: Vec<usize> = (offset..offset + target.len()).collect();
    let mut outs = value_and_grad_call(loss, &argnums, &leaves);
    if outs.len() != argnums.len() + 1 {
        return Err(NnError::Structure(format!(
            "value_and_grad of the loss gave {} results for {} gradients (the trace reports why)",
            outs.len(),
            argnums.len()
        )));
    }
    let grads = outs.split_off(1);
    Ok((outs.remove(0), target.unflatten(grads)?))
}

#[cfg(test)]
mod tests {
    use tessera_ir::interp::eval_closed;
    use tessera_ir::{Array, DType};

    use super::*;

    /// `loss(x, p) = sum(x * p.a) + p.b^2`; its gradient in `p` is `{a: x, b: 2 b}`.
    #[test]
    fn gradients_come_back_as_a_tree_of_the_argument_structure() {
        let f = |s: &[i64]| ShapedArray::new(DType::F32, s);
        let p = Tree::node([("a", Tree::Leaf(f(&[2]))), ("b", Tree::Leaf(f(&[])))]);
        let x = Tree::Leaf(f(&[2]));
        let (loss, _) = trace_trees(&[x.clone(), p.clone()], |t| {
            let (x, p) = (t[0].leaf("")?, &t[1]);
            Ok(vec![Tree::Leaf(
                (x * p.leaf("a")?).sum(&[0]) + p.leaf("b")?.integer_pow(2),
            )])
        })
        .unwrap();
        let (step, outs) = trace_trees(&[x, p.clone()], |t| {
            let (value, grads) = value_and_grad_tree(&loss, &[&t[0], &t[1]], 1)?;
            Ok(vec![Tree::Leaf(value), grads])
        })
        .unwrap();
        assert_eq!(outs[1].paths(), p.paths());
        let args = [
            Array::new(DType::F32, &[2], vec![3.0, -1.0]).unwrap(),
            Array::new(DType::F32, &[2], vec![0.5, 2.0]).unwrap(),
            Array::scalar(DType::F32, 4.0),
        ];
        let out = eval_closed(&step, &args).unwrap();
        assert_eq!(out[0].to_vec(), vec![1.5 - 2.0 + 16.0]);
        assert_eq!(out[1].to_vec(), vec![3.0, -1.0]);
        assert_eq!(out[2].to_vec(), vec![8.0]);
        let err = trace_trees(&[p], |t| {
            value_and_grad_tree(&loss, &[&t[0]], 3).map(|_| vec![])
        })
        .unwrap_err();
        assert!(err.to_string().contains("wrt = 3"), "{err}");
    }
}
