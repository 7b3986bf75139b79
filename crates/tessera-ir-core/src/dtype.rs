//! Element types: their jaxpr spellings (`f32`), numpy names (`float32`) and value rules.

use std::fmt;

/// An element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// Booleans.
    Bool,
    /// Signed integers.
    I8,
    /// Signed integers.
    I16,
    /// Signed integers.
    I32,
    /// Signed integers.
    I64,
    /// Unsigned integers.
    U8,
    /// Unsigned integers.
    U16,
    /// Unsigned integers.
    U32,
    /// Unsigned integers.
    U64,
    /// bfloat16.
    BF16,
    /// IEEE half.
    F16,
    /// IEEE single.
    F32,
    /// IEEE double.
    F64,
    /// A threefry PRNG key (`key<fry>`): physically two `u32` words. The
    /// interpreter holds each key as one value whose 64 bits are the two words (`DType::round`
    /// leaves it alone); lowering gives a key array of shape `S` the type `tensor<S x 2 x ui32>`.
    KeyFry,
    /// An abstract token (JAX's `abstract_token`, printed `Tok`): the result of `psend`, taken
    /// by `precv` to order the pair. It has no elements a program can compute with; its type
    /// is always a scalar (printed without a shape). Not in [`DType::ALL`] (not an array
    /// element type); the SPMD interpreter holds a token as the value its `psend` sends.
    Token,
}

impl DType {
    /// Every dtype.
    pub const ALL: [DType; 14] = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
        DType::KeyFry,
    ];

    /// The jaxpr spelling: `f32`, `i32`, `bool`, `bf16`.
    pub fn short_name(self) -> &'static str {
        use DType::*;
        match self {
            Bool => "bool",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            U8 => "u8",
            U16 => "u16",
            U32 => "u32",
            U64 => "u64",
            BF16 => "bf16",
            F16 => "f16",
            F32 => "f32",
            F64 => "f64",
            KeyFry => "key<fry>",
            Token => "Tok",
        }
    }

    /// The numpy name used in params and oracle files: `float32`, `int32`, `bool`, `bfloat16`.
    pub fn numpy_name(self) -> &'static str {
        use DType::*;
        match self {
            Bool => "bool",
            I8 => "int8",
            I16 => "int16",
            I32 => "int32",
            I64 => "int64",
            U8 => "uint8",
            U16 => "uint16",
            U32 => "uint32",
            U64 => "uint64",
            BF16 => "bfloat16",
            F16 => "float16",
            F32 => "float32",
            F64 => "float64",
            KeyFry => "key<fry>",
            Token => "token",
        }
    }

    /// Parses either spelling (`Tok` is the token type).
    pub fn parse(text: &str) -> Option<DType> {
        if text == "Tok" {
            return Some(DType::Token);
        }
        DType::ALL
            .into_iter()
            .find(|d| d.short_name() == text || d.numpy_name() == text)
    }

    /// The abstract token type?
    pub fn is_token(self) -> bool {
        matches!(self, DType::Token)
    }

    /// Floating point?
    pub fn is_float(self) -> bool {
        matches!(self, DType::BF16 | DType::F16 | DType::F32 | DType::F64)
    }

    /// Signed or unsigned integer?
    pub fn is_int(self) -> bool {
        !self.is_float() && !matches!(self, DType::Bool | DType::KeyFry | DType::Token)
    }

    /// A PRNG key type?
    pub fn is_key(self) -> bool {
        matches!(self, DType::KeyFry)
    }

    /// Unsigned integer?
    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        use DType::*;
        match self {
            Bool | I8 | U8 => 1,
            I16 | U16 | BF16 | F16 => 2,
            I32 | U32 | F32 => 4,
            I64 | U64 | F64 | KeyFry => 8,
            Token => 0,
        }
    }

    /// Rounds a value to what this dtype can hold (floats to their precision, integers by
    /// truncation and wrap-around, booleans to 0/1).
    pub fn round(self, x: f64) -> f64 {
        use DType::*;
        match self {
            Bool => f64::from(u8::from(x != 0.0)),
            F64 => x,
            F32 => f64::from(x as f32),
            F16 => f64::from(f16_from_f64(x)),
            BF16 => f64::from(bf16_from_f64(x)),
            I8 => f64::from(x as i64 as i8),
            I16 => f64::from(x as i64 as i16),
            I32 => f64::from(x as i64 as i32),
            I64 => x.trunc(),
            U8 => f64::from(x as i64 as u8),
            U16 => f64::from(x as i64 as u16),
            U32 => f64::from(x as i64 as u32),
            U64 => (x as u64) as f64,
            KeyFry | Token => x,
        }
    }
}

/// `x` rounded once to the nearest `bfloat16`, ties to even (overflowing to infinity, NaN
/// staying NaN). `half::bf16::from_f64` reads only the top 32 bits of `x`, so a value just above
/// a tie whose excess lies in the low bits rounded down; this rounds `x` to an `f32` rounded to
/// odd first, whose 24 bits keep the tie decision, then to nearest even, which is then correct.
pub fn bf16_from_f64(x: f64) -> half::bf16 {
    half::bf16::from_f32(f32_round_to_odd(x))
}

/// `x` rounded once to the nearest IEEE half, ties to even (see [`bf16_from_f64`]; `half`'s own
/// conversion reads the top 32 bits, or rounds through an `f32` twice on x86 with F16C).
pub fn f16_from_f64(x: f64) -> half::f16 {
    half::f16::from_f32(f32_round_to_odd(x))
}

/// `x` as an `f32` rounded to odd: truncated toward zero, with the last mantissa bit set when
/// that was inexact (values past `f32::MAX` give `f32::MAX`, below the least subnormal that
/// subnormal). Rounding this to a format of at most 22 bits of precision rounds as `x` would.
fn f32_round_to_odd(x: f64) -> f32 {
    let nearest = x as f32;
    if x.is_nan() || f64::from(nearest) == x {
        return nearest;
    }
    let mut bits = nearest.to_bits();
    if f64::from(nearest).abs() > x.abs() {
        // Rounded away from zero (perhaps to infinity): step back one unit toward zero.
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

impl DType {
    /// The dtype reductions of this dtype accumulate in: `f32` for `bf16` and `f16` (as XLA's
    /// CPU backend does), the dtype itself otherwise.
    pub fn accumulation(self) -> DType {
        match self {
            DType::BF16 | DType::F16 => DType::F32,
            other => other,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}
