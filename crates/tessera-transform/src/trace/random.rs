//! `jax.random` in the tracing API: typed threefry keys and the samplers built on
//! them exactly as JAX builds them, so the same key gives JAX's numbers bit for bit
//! (`jax.random.normal(jax.random.PRNGKey(0), (3,))` included; see `tests/random_pjrt.rs`).
//!
//! Keys are `key<fry>` tensors: [`key`] from an integer seed (`jax.random.key`),
//! [`wrap_key_data`] from the `u32[..., 2]` data of a `jax.random.PRNGKey`, [`key_data`] back.

use super::Tensor;
use crate::dtype::DType;
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

fn fry() -> Params {
    Params::new().with("impl", ParamValue::Name("fry".into()))
}

/// A key from an integer seed (`jax.random.key(seed)`; its data is `jax.random.PRNGKey(seed)`).
pub fn key(seed: &Tensor) -> Tensor {
    Tensor::bind1(Prim::RandomSeed, fry(), &[seed])
}

/// A key from its data, `u32[..., 2]` (`jax.random.wrap_key_data`).
pub fn wrap_key_data(data: &Tensor) -> Tensor {
    Tensor::bind1(Prim::RandomWrap, fry(), &[data])
}

/// A key's data, `u32[..., 2]` (`jax.random.key_data`).
pub fn key_data(key: &Tensor) -> Tensor {
    Tensor::bind1(Prim::RandomUnwrap, Params::new(), &[key])
}

/// `num` new keys from `key`, stacked along a new leading dimension (`jax.random.split`).
pub fn split(key: &Tensor, num: i64) -> Tensor {
    let params = Params::new().with("shape", ParamValue::ints(&[num]));
    Tensor::bind1(Prim::RandomSplit, params, &[key])
}

/// A new key from `key` and integer `data` (`jax.random.fold_in`).
pub fn fold_in(key: &Tensor, data: &Tensor) -> Tensor {
    Tensor::bind1(
        Prim::RandomFoldIn,
        Params::new(),
        &[key, &data.astype(DType::U32)],
    )
}

/// Uniform random `u32` bits of `shape` (`jax.random.bits`).
pub fn bits(key: &Tensor, shape: &[i64]) -> Tensor {
    let params = Params::new()
        .with("bit_width", ParamValue::Int(32))
        .with("shape", ParamValue::ints(shape));
    Tensor::bind1(Prim::RandomBits, params, &[key])
}

/// Uniform `f32` values in `[minval, maxval)` (`jax.random.uniform`): 23 random mantissa bits
/// under the exponent of 1.0, minus 1, scaled.
pub fn uniform(key: &Tensor, shape: &[i64], minval: f64, maxval: f64) -> Tensor {
    let raw = bits(key, shape);
    let u32_literal = |v: f64| raw.literal_strong(v, DType::U32);
    let mantissa = raw.shift_right_logical(&u32_literal(9.0));
    let one_bits = u32_literal(f64::from(1.0f32.to_bits()));
    let floats = Tensor::bind1(Prim::Or, Params::new(), &[&mantissa, &one_bits])
        .bitcast_convert_type(DType::F32)
        - 1.0;
    let lo = raw.literal_strong(minval, DType::F32);
    let hi = raw.literal_strong(maxval, DType::F32);
    let scaled = &(&floats * &(&hi - &lo)) + &lo;
    lo.maximum(&scaled)
}

/// Standard normal `f32` values (`jax.random.normal`): `√2 erf⁻¹(u)` for `u` uniform in
/// `(-1, 1)`.
pub fn normal(key: &Tensor, shape: &[i64]) -> Tensor {
    let below_one = f64::from(f32::from_bits((-1.0f32).to_bits() - 1));
    let u = uniform(key, shape, below_one, 1.0);
    &u.erf_inv() * f64::from(std::f32::consts::SQRT_2)
}

/// `true` with probability `p` (`jax.random.bernoulli`).
pub fn bernoulli(key: &Tensor, p: f64, shape: &[i64]) -> Tensor {
    let u = uniform(key, shape, 0.0, 1.0);
    u.lt(&u.literal_strong(p, DType::F32))
}

/// Samples from the categorical distributions of `logits` along `axis` (`jax.random.categorical`
/// with its default Gumbel-max sampling): `argmax(logits - log(-log(u)))`.
pub fn categorical(key: &Tensor, logits: &Tensor, axis: i64) -> Tensor {
    let u = uniform(key, logits.shape(), f64::from(f32::MIN_POSITIVE), 1.0);
    let gumbel = -&(-&u.log()).log();
    let scores = &gumbel + &logits.astype(DType::F32);
    let rank = logits.rank() as i64;
    let axis = if axis < 0 { axis + rank } else { axis };
    let params = Params::new()
        .with("axes", ParamValue::ints(&[axis]))
        .with("index_dtype", ParamValue::Name("int32".into()));
    Tensor::bind1(Prim::Argmax, params, &[&scores])
}
