//! JAX's PRNG primitives over typed `key<fry>` keys: `random_seed`, `random_wrap`,
//! `random_unwrap`, `random_bits`, `random_split`, `random_fold_in`, and the raw
//! `threefry2x32`. Values are bit for bit JAX's with `jax_threefry_partitionable` (the default
//! since JAX 0.5): element `i` of a block drawn from a key is Threefry of the key at the
//! counter `(i >> 32, i & 0xFFFFFFFF)`; `random_bits` XORs the two output words, `random_split`
//! keeps both as the new key, `random_fold_in` hashes the counter `(0, data)`. A key array's
//! draws are the concatenation of each key's (the block's shape after the keys' shape).

use super::random_params::{PrngImpl, RandomParams};
use super::threefry::{counter, pack_key, threefry2x32, unpack_key};
use super::{Prim, arity};
use crate::array::{Array, Elem};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::params::Params;

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

pub(super) fn eval(op: RandomOp, inputs: &[Array], outputs: &[ShapedArray]) -> Result<Vec<Array>> {
    let out = &outputs[0];
    let x = &inputs[0];
    let elems: Vec<Elem> = match op {
        RandomOp::Seed => x
            .elem_vec()
            .into_iter()
            .map(|s| seed_key(s, x.dtype()))
            .collect(),
        RandomOp::Wrap => {
            let words: Vec<u32> = x.to_int_vec().iter().map(|&w| w as u32).collect();
            words
                .chunks_exact(2)
                .map(|w| pack_key([w[0], w[1]]))
                .collect()
        }
        RandomOp::Unwrap => x
            .elem_vec()
            .into_iter()
            .flat_map(|k| unpack_key(k).map(|w| Elem::from_int(DType::U32, i128::from(w))))
            .collect(),
        RandomOp::Bits | RandomOp::Split => {
            let keys = x.len().max(1);
            let per_key = (out.size() / keys) as u64;
            let mut elems = Vec::with_capacity(out.size());
            for k in x.elem_vec() {
                for i in 0..per_key {
                    let y = threefry2x32(unpack_key(k), counter(i));
                    elems.push(if op == RandomOp::Split {
                        pack_key(y)
                    } else {
                        bits_value(y, out.dtype)
                    });
                }
            }
            elems
        }
        RandomOp::FoldIn => {
            let dims: Vec<usize> = out.shape.iter().map(|&d| d as usize).collect();
            let keys = broadcast(&inputs[0], &dims)?;
            let data = broadcast(&inputs[1], &dims)?;
            keys.iter()
                .zip(data.iter())
                .map(|(&k, &d)| {
                    let word = d.to_int(inputs[1].dtype()) as u32;
                    pack_key(threefry2x32(unpack_key(k), [0, word]))
                })
                .collect()
        }
        RandomOp::Threefry2x32 => {
            let dims: Vec<usize> = out.shape.iter().map(|&d| d as usize).collect();
            let args = inputs
                .iter()
                .map(|a| broadcast(a, &dims))
                .collect::<Result<Vec<_>>>()?;
            let ys: Vec<[u32; 2]> = (0..out.size())
                .map(|i| {
                    let w = |a: usize| args[a][i].to_int(DType::U32) as u32;
                    threefry2x32([w(0), w(1)], [w(2), w(3)])
                })
                .collect();
            let word = |k: usize| ys.iter().map(|y| i128::from(y[k])).collect();
            return Ok(vec![
                Array::from_int_vec(DType::U32, &out.shape, word(0))?,
                Array::from_int_vec(DType::U32, &out.shape, word(1))?,
            ]);
        }
    };
    Ok(vec![Array::from_elem_vec(out.dtype, &out.shape, elems)?])
}

/// `random_seed` of threefry (JAX's `threefry_seed`): the words `(seed >> 32, seed & 0xFFFFFFFF)`
/// of the seed's bits (the high word is 0 for seeds of 32 bits or fewer).
fn seed_key(seed: Elem, dtype: DType) -> Elem {
    let bits = super::numeric::bits_of(seed, dtype);
    let high = if dtype.size_in_bytes() == 8 {
        (bits >> 32) as u32
    } else {
        0
    };
    pack_key([high, bits as u32])
}

/// `random_bits`' value of one draw: the XOR of Threefry's two words, truncated to 8 or 16
/// bits, or both words for 64 (high first).
fn bits_value(y: [u32; 2], dtype: DType) -> Elem {
    let x = y[0] ^ y[1];
    let value = if dtype == DType::U64 {
        (u64::from(y[0]) << 32) | u64::from(y[1])
    } else {
        u64::from(x)
    };
    // Wrapping to U8 or U16 keeps the low bits.
    Elem::from_int(dtype, i128::from(value))
}

/// The values of `a` broadcast to `dims`, row-major.
fn broadcast(a: &Array, dims: &[usize]) -> Result<Vec<Elem>> {
    a.elems()
        .broadcast(ndarray::IxDyn(dims))
        .map(|v| v.iter().copied().collect())
        .ok_or_else(|| IrError::Eval(format!("cannot broadcast {:?} to {dims:?}", a.shape())))
}
