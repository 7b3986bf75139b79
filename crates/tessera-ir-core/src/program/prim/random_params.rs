//! The parameters of the PRNG primitives, read and checked once into one typed value per
//! equation ([`RandomParams::read`]); the shape rule and the lowering read its fields, never the
//! printed parameters (the interpreter and batching need none: the result type carries them).
//!
//! What JAX prints: `random_seed[impl=fry]`, `random_wrap[impl=fry]`,
//! `random_bits[bit_width=32 shape=(3,)]`, `random_split[shape=(2,)]`; `random_unwrap`,
//! `random_fold_in` and `threefry2x32` have no parameters. Every one JAX prints is required.

use super::{Prim, RandomOp};
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::program::params::{ParamValue, Params};

/// The typed parameters of one PRNG primitive (the variant names the primitive).
#[derive(Debug, Clone, PartialEq)]
pub enum RandomParams {
    /// `random_seed`: the implementation of the keys it makes.
    Seed(PrngImpl),
    /// `random_wrap`: the implementation of the keys it makes.
    Wrap(PrngImpl),
    /// `random_unwrap` (no parameters).
    Unwrap,
    /// `random_bits`.
    Bits {
        /// The draws' dtype, from `bit_width` (8, 16, 32 or 64): `uint8` ... `uint64`.
        dtype: DType,
        /// `shape`: each key's block of draws (the result is the keys' shape, then this).
        shape: Vec<i64>,
    },
    /// `random_split`.
    Split {
        /// `shape`: each key's block of new keys.
        shape: Vec<i64>,
    },
    /// `random_fold_in` (no parameters).
    FoldIn,
    /// `threefry2x32` (no parameters).
    Threefry2x32,
}

/// A PRNG implementation (JAX's `impl`): only Threefry-2x32, printed `fry`, exists here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrngImpl {
    /// `fry`: Threefry-2x32 with JAX's partitionable counters.
    Threefry,
}

impl RandomParams {
    /// The typed parameters of `prim`, a PRNG primitive. A missing or malformed parameter (an
    /// `impl` other than `fry`, a `bit_width` other than 8, 16, 32 or 64, a negative dimension in
    /// `shape`) is an error naming it.
    ///
    /// The value is read once and kept with the parameters.
    pub fn read(prim: Prim, params: &Params) -> Result<Self> {
        params.typed([prim as usize, 0], |params| {
            Self::read_printed(prim, params)
        })
    }

    fn read_printed(prim: Prim, params: &Params) -> Result<Self> {
        let op = prim
            .random()
            .ok_or_else(|| type_error(prim.name(), "is not a PRNG primitive"))?;
        Ok(match op {
            RandomOp::Seed => RandomParams::Seed(prng_impl(prim, params)?),
            RandomOp::Wrap => RandomParams::Wrap(prng_impl(prim, params)?),
            RandomOp::Unwrap => RandomParams::Unwrap,
            RandomOp::Bits => RandomParams::Bits {
                dtype: bits_dtype(prim, params)?,
                shape: block_shape(prim, params)?,
            },
            RandomOp::Split => RandomParams::Split {
                shape: block_shape(prim, params)?,
            },
            RandomOp::FoldIn => RandomParams::FoldIn,
            RandomOp::Threefry2x32 => RandomParams::Threefry2x32,
        })
    }
}

fn param_error(prim: Prim, key: &str, expected: String) -> IrError {
    IrError::Param {
        prim: prim.name().into(),
        param: key.into(),
        expected,
    }
}

/// `impl`: `fry`, the only implementation (JAX prints it on `random_seed` and `random_wrap`).
fn prng_impl(prim: Prim, params: &Params) -> Result<PrngImpl> {
    match params.get("impl") {
        Some(ParamValue::Name(n)) if n == "fry" => Ok(PrngImpl::Threefry),
        other => Err(param_error(
            prim,
            "impl",
            format!(
                "`fry` (threefry2x32, the only PRNG implemented), got {}",
                other.map_or("nothing".into(), ToString::to_string)
            ),
        )),
    }
}

/// The dtype of `random_bits`' draws, from `bit_width`: 8, 16, 32 or 64.
fn bits_dtype(prim: Prim, params: &Params) -> Result<DType> {
    let value = params.get("bit_width");
    match value.and_then(ParamValue::as_int) {
        Some(8) => Ok(DType::U8),
        Some(16) => Ok(DType::U16),
        Some(32) => Ok(DType::U32),
        Some(64) => Ok(DType::U64),
        Some(_) | None => Err(param_error(
            prim,
            "bit_width",
            format!(
                "8, 16, 32 or 64, got {}",
                value.map_or("nothing".into(), ToString::to_string)
            ),
        )),
    }
}

/// `shape`: a tuple of dimensions ≥ 0.
fn block_shape(prim: Prim, params: &Params) -> Result<Vec<i64>> {
    let shape = params.ints(prim.name(), "shape")?;
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(param_error(
            prim,
            "shape",
            format!("a tuple of dimensions ≥ 0, got {d} in {shape:?}"),
        ));
    }
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(prim: Prim, pairs: &[(&str, ParamValue)]) -> Result<RandomParams> {
        let params = pairs
            .iter()
            .fold(Params::new(), |p, (k, v)| p.with(k, v.clone()));
        RandomParams::read(prim, &params)
    }

    /// The error of reading `pairs` for `prim`, which must name `param`.
    fn refused(prim: Prim, pairs: &[(&str, ParamValue)], param: &str) {
        match read(prim, pairs) {
            Err(IrError::Param { param: p, .. }) if p == param => {}
            other => panic!("{prim:?} {pairs:?}: expected an error naming {param}, got {other:?}"),
        }
    }

    #[test]
    fn printed_parameters_are_read() {
        let bits = [
            ("bit_width", ParamValue::Int(16)),
            ("shape", ParamValue::ints(&[3, 0])),
        ];
        assert_eq!(
            read(Prim::RandomBits, &bits).unwrap(),
            RandomParams::Bits {
                dtype: DType::U16,
                shape: vec![3, 0]
            }
        );
        let fry = [("impl", ParamValue::Name("fry".into()))];
        assert_eq!(
            read(Prim::RandomWrap, &fry).unwrap(),
            RandomParams::Wrap(PrngImpl::Threefry)
        );
        assert_eq!(read(Prim::RandomFoldIn, &[]).unwrap(), RandomParams::FoldIn);
    }

    #[test]
    fn missing_or_malformed_parameters_are_errors_naming_them() {
        let shape = ("shape", ParamValue::ints(&[2]));
        refused(Prim::RandomBits, std::slice::from_ref(&shape), "bit_width");
        for width in [ParamValue::Int(12), ParamValue::Name("32".into())] {
            refused(
                Prim::RandomBits,
                &[("bit_width", width), shape.clone()],
                "bit_width",
            );
        }
        refused(
            Prim::RandomBits,
            &[("bit_width", ParamValue::Int(32))],
            "shape",
        );
        refused(Prim::RandomSplit, &[], "shape");
        refused(
            Prim::RandomSplit,
            &[("shape", ParamValue::ints(&[2, -1]))],
            "shape",
        );
        refused(Prim::RandomSeed, &[], "impl");
        refused(
            Prim::RandomWrap,
            &[("impl", ParamValue::Name("rbg".into()))],
            "impl",
        );
        refused(
            Prim::RandomWrap,
            &[("impl", ParamValue::Str("fry".into()))],
            "impl",
        );
    }
}
