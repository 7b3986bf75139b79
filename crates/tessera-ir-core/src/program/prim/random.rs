//! JAX's PRNG primitives over typed `key<fry>` keys: `random_seed`, `random_wrap`,
//! `random_unwrap`, `random_bits`, `random_split`, `random_fold_in`, and the raw
//! `threefry2x32`. Values are bit for bit JAX's with `jax_threefry_partitionable` (the default
//! since JAX 0.5): element `i` of a block drawn from a key is Threefry of the key at the
//! counter `(i >> 32, i & 0xFFFFFFFF)`; `random_bits` XORs the two output words, `random_split`
//! keeps both as the new key, `random_fold_in` hashes the counter `(0, data)`. A key array's
//! draws are the concatenation of each key's (the block's shape after the keys' shape).

use super::random_params::{PrngImpl, RandomParams};
use super::{Prim, arity};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{Result, type_error};
use crate::program::params::Params;

/// The primitives of this family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the primitive of the same name
pub enum RandomOp {
    Seed,
    Wrap,
    Unwrap,
    Bits,
    Split,
    FoldIn,
    Threefry2x32,
}

fn need_key(prim: Prim, x: &ShapedArray) -> Result<()> {
    if x.dtype.is_key() {
        Ok(())
    } else {
        Err(type_error(
            prim.name(),
            format!("needs a key<fry> operand, got {x}; make one with random_wrap or random_seed"),
        ))
    }
}

fn need_u32(prim: Prim, x: &ShapedArray) -> Result<()> {
    if x.dtype == DType::U32 {
        Ok(())
    } else {
        Err(type_error(
            prim.name(),
            format!("needs uint32 operands, got {x}"),
        ))
    }
}

/// The key's shape followed by a block's.
fn block_shape(key: &ShapedArray, block: &[i64]) -> Vec<i64> {
    let mut shape = key.shape.clone();
    shape.extend_from_slice(block);
    shape
}

pub(super) fn abstract_eval(
    prim: Prim,
    op: RandomOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let one = |dtype: DType, shape: &[i64]| Ok(vec![ShapedArray::new(dtype, shape)]);
    let operands = match op {
        RandomOp::FoldIn => 2,
        RandomOp::Threefry2x32 => 4,
        RandomOp::Seed | RandomOp::Wrap | RandomOp::Unwrap | RandomOp::Bits | RandomOp::Split => 1,
    };
    arity(prim, inputs.len(), operands)?;
    match RandomParams::read(prim, params)? {
        // `impl` is `fry`, the only implementation, once read.
        RandomParams::Seed(PrngImpl::Threefry) => {
            if !inputs[0].dtype.is_int() {
                return Err(type_error(
                    prim.name(),
                    format!("needs an integer seed, got {}", inputs[0]),
                ));
            }
            one(DType::KeyFry, &inputs[0].shape)
        }
        RandomParams::Wrap(PrngImpl::Threefry) => {
            let x = &inputs[0];
            need_u32(prim, x)?;
            if let Some((2, lead)) = x.shape.split_last() {
                one(DType::KeyFry, lead)
            } else {
                Err(type_error(
                    prim.name(),
                    format!("needs key data whose last dimension is 2, got {x}"),
                ))
            }
        }
        RandomParams::Unwrap => {
            need_key(prim, &inputs[0])?;
            let mut shape = inputs[0].shape.clone();
            shape.push(2);
            one(DType::U32, &shape)
        }
        RandomParams::Bits { dtype, shape } => {
            need_key(prim, &inputs[0])?;
            one(dtype, &block_shape(&inputs[0], &shape))
        }
        RandomParams::Split { shape } => {
            need_key(prim, &inputs[0])?;
            one(DType::KeyFry, &block_shape(&inputs[0], &shape))
        }
        RandomParams::FoldIn => {
            need_key(prim, &inputs[0])?;
            need_u32(prim, &inputs[1])?;
            let shape =
                super::elementwise::broadcast_shapes(prim, &inputs[0].shape, &inputs[1].shape)?;
            one(DType::KeyFry, &shape)
        }
        RandomParams::Threefry2x32 => {
            let mut shape: Vec<i64> = Vec::new();
            for x in inputs {
                need_u32(prim, x)?;
                shape = super::elementwise::broadcast_shapes(prim, &shape, &x.shape)?;
            }
            let out = ShapedArray::new(DType::U32, &shape);
            Ok(vec![out.clone(), out])
        }
    }
}
