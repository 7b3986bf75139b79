//! One element of an array as the interpreter's rules see it: an [`Elem`], the 64 bits of its
//! value in the dtype's own domain. Floating dtypes hold an `f64` already rounded to the dtype's
//! precision; integers their exact two's-complement value (so `i64` and `u64` are exact over their
//! whole range, and wrap as XLA's do); booleans 0 or 1; a PRNG key its two words.

use crate::dtype::DType;

/// One element: the 64 bits of a value, read in the domain of the array's dtype (see the module
/// docs). All-zero bits are zero in every dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Elem(u64);

impl Elem {
    /// Zero in every dtype.
    pub const ZERO: Elem = Elem(0);

    /// `x` rounded to `dtype` (floats to their precision, integers by truncation and wrap-around,
    /// booleans to 0/1).
    pub fn from_f64(dtype: DType, x: f64) -> Elem {
        let x = dtype.round(x);
        match storage(dtype) {
            Storage::Float => Elem(x.to_bits()),
            Storage::Unsigned => Elem(x as u64),
            Storage::Signed => Elem(x as i64 as u64),
        }
    }

    /// The exact integer `v` wrapped to `dtype` as XLA wraps (modulo 2^bits); booleans are
    /// `v != 0`, floats the nearest value.
    pub fn from_int(dtype: DType, v: i128) -> Elem {
        use DType::*;
        let bits = match dtype {
            Bool => u64::from(v != 0),
            I8 => v as i8 as i64 as u64,
            I16 => v as i16 as i64 as u64,
            I32 => v as i32 as i64 as u64,
            I64 => v as i64 as u64,
            U8 => u64::from(v as u8),
            U16 => u64::from(v as u16),
            U32 => u64::from(v as u32),
            U64 => v as u64,
            // A key's integer is its packed words.
            KeyFry => v as u64,
            Token => 0,
            F64 => return Elem::from_f64(dtype, v as f64),
            // Rounded once: through an f64 rounded to odd, which then rounds to the narrower
            // float as a direct conversion would.
            BF16 | F16 | F32 => return Elem::from_f64(dtype, round_to_odd(v)),
        };
        Elem(bits)
    }

    /// The value as an `f64` (integers past 2^53 round to the nearest `f64`).
    pub fn to_f64(self, dtype: DType) -> f64 {
        match storage(dtype) {
            Storage::Float => f64::from_bits(self.0),
            Storage::Unsigned => self.0 as f64,
            Storage::Signed => self.0 as i64 as f64,
        }
    }

    /// The value as an exact integer (floats truncated toward zero, NaN as 0).
    pub fn to_int(self, dtype: DType) -> i128 {
        match storage(dtype) {
            Storage::Float => f64::from_bits(self.0) as i128,
            Storage::Unsigned => i128::from(self.0),
            Storage::Signed => i128::from(self.0 as i64),
        }
    }

    /// `self + other` in `dtype`: integers exactly and wrapping, floats rounded to the dtype.
    pub fn add(self, other: Elem, dtype: DType) -> Elem {
        if is_exact_int(dtype) {
            Elem::from_int(dtype, self.to_int(dtype).wrapping_add(other.to_int(dtype)))
        } else {
            Elem::from_f64(dtype, self.to_f64(dtype) + other.to_f64(dtype))
        }
    }

    /// The larger of `self` and `other` in `dtype` (for floats, a NaN loses, as `f64::max`).
    pub fn max(self, other: Elem, dtype: DType) -> Elem {
        if is_exact_int(dtype) {
            Elem::from_int(dtype, self.to_int(dtype).max(other.to_int(dtype)))
        } else {
            Elem::from_f64(dtype, self.to_f64(dtype).max(other.to_f64(dtype)))
        }
    }

    /// The smaller of `self` and `other` in `dtype` (for floats, a NaN loses, as `f64::min`).
    pub fn min(self, other: Elem, dtype: DType) -> Elem {
        if is_exact_int(dtype) {
            Elem::from_int(dtype, self.to_int(dtype).min(other.to_int(dtype)))
        } else {
            Elem::from_f64(dtype, self.to_f64(dtype).min(other.to_f64(dtype)))
        }
    }

    /// The raw bits (an `f64`'s bits for floating dtypes, the two's-complement value for
    /// integers).
    pub fn bits(self) -> u64 {
        self.0
    }

    /// An element from raw bits (see [`Elem::bits`]).
    pub fn from_bits(bits: u64) -> Elem {
        Elem(bits)
    }
}

/// `v` as an `f64` rounded to odd: exact when it fits, else the neighbour toward `v` whose last
/// mantissa bit is 1 (so a second rounding to a narrower float is correct).
fn round_to_odd(v: i128) -> f64 {
    let nearest = v as f64;
    let back = nearest as i128;
    if back == v || nearest.to_bits() & 1 == 1 {
        return nearest;
    }
    let bits = nearest.to_bits();
    // Away from zero when the nearest value fell short of `v` in magnitude, else toward zero.
    let outward = (back < v) == (nearest > 0.0);
    f64::from_bits(if outward { bits + 1 } else { bits - 1 })
}

/// How a dtype's values sit in an [`Elem`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Storage {
    /// An `f64` (floating dtypes, and PRNG keys, whose two words are packed into its bits).
    Float,
    /// A zero-extended unsigned integer (and booleans).
    Unsigned,
    /// A sign-extended signed integer.
    Signed,
}

pub(super) fn storage(dtype: DType) -> Storage {
    use DType::*;
    match dtype {
        BF16 | F16 | F32 | F64 | KeyFry | Token => Storage::Float,
        Bool | U8 | U16 | U32 | U64 => Storage::Unsigned,
        I8 | I16 | I32 | I64 => Storage::Signed,
    }
}

/// Whether `dtype`'s values are integers held exactly (signed, unsigned and booleans): rules
/// compute on [`Array::ints`](super::Array::ints) for these.
pub fn is_exact_int(dtype: DType) -> bool {
    storage(dtype) != Storage::Float
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_wrap_and_floats_round() {
        assert_eq!(Elem::from_int(DType::I8, 200).to_int(DType::I8), -56);
        assert_eq!(
            Elem::from_int(DType::U32, -1).to_int(DType::U32),
            4294967295
        );
        assert_eq!(
            Elem::from_f64(DType::F32, 0.1).to_f64(DType::F32),
            f64::from(0.1_f32)
        );
        assert_eq!(Elem::from_f64(DType::Bool, 3.0).to_int(DType::Bool), 1);
    }

    #[test]
    fn integers_convert_to_narrow_floats_with_one_rounding() {
        // 2^60 + 2^36 + 1 lies just above the midpoint of two f32 values; rounding through the
        // nearest f64 would land on the midpoint and round to even, down.
        let v = (1_i128 << 60) + (1 << 36) + 1;
        let want = f64::from(v as f32);
        assert_eq!(Elem::from_int(DType::F32, v).to_f64(DType::F32), want);
        assert_eq!(want, ((1_i128 << 60) + (1 << 37)) as f64);
        assert_eq!(round_to_odd(-v), -round_to_odd(v));
    }
}
