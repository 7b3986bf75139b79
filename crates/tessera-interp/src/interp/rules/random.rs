//! Evaluation rules of the `random` family (moved from the core crate's `prim/random.rs`).

use tessera_ir_core::array::{Array, Elem};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::dtype::DType;
use tessera_ir_core::error::{IrError, Result};
use tessera_ir_core::prim::random::RandomOp;
use tessera_ir_core::prim::threefry::{counter, pack_key, threefry2x32, unpack_key};

pub(crate) fn eval(op: RandomOp, inputs: &[Array], outputs: &[ShapedArray]) -> Result<Vec<Array>> {
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
    let bits = tessera_ir_core::prim::numeric::bits_of(seed, dtype);
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
