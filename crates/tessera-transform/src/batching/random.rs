//! Batching of the PRNG primitives. A batched key array is a key array with a
//! leading dimension: `random_bits` and `random_split` draw each key's block after the keys'
//! shape, so moving the batch dimension to the front batches them; `random_fold_in` and
//! `threefry2x32` broadcast their operands elementwise.

use super::{Batched, move_axis, to_front};
use crate::params::Params;
use crate::prim::{Prim, RandomOp};
use crate::trace::Tensor;

/// Batches one PRNG equation; `rank` is the unbatched rank of its (first) result.
pub(super) fn random(
    prim: Prim,
    params: &Params,
    args: &[Batched],
    size: i64,
    rank: usize,
) -> Vec<Batched> {
    let front = |outs: Vec<Tensor>| outs.into_iter().map(|t| (t, Some(0))).collect();
    let Some(op) = prim.random() else {
        return vec![(
            args[0].0.fail(prim.name(), "not a PRNG primitive".into()),
            None,
        )];
    };
    match op {
        RandomOp::Seed | RandomOp::Wrap | RandomOp::Unwrap | RandomOp::Bits | RandomOp::Split => {
            front(Tensor::bind(
                prim,
                params.clone(),
                &[&to_front(&args[0], size)],
            ))
        }
        RandomOp::FoldIn | RandomOp::Threefry2x32 => {
            let lifted: Vec<Tensor> = args.iter().map(|a| lift(a, size, rank)).collect();
            let refs: Vec<&Tensor> = lifted.iter().collect();
            front(Tensor::bind(prim, params.clone(), &refs))
        }
    }
}

/// An elementwise operand of a result of rank `rank`: batched ones get the batch dimension in
/// front (size-1 dimensions standing in for missing ones), unbatched ones a leading 1.
fn lift(arg: &Batched, size: i64, rank: usize) -> Tensor {
    let (t, d) = arg;
    match d {
        Some(d) => {
            let front = move_axis(t, *d, 0);
            if t.rank() - 1 == rank {
                front
            } else {
                let mut shape = vec![size];
                shape.extend(std::iter::repeat_n(1, rank));
                front.reshape(&shape)
            }
        }
        None if t.rank() == 0 => t.clone(),
        None => {
            let mut shape = vec![1];
            shape.extend_from_slice(t.shape());
            t.reshape(&shape)
        }
    }
}
