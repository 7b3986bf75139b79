//! How an array's elements sit in its bytes: each dtype's own width, native-endian, as a device
//! buffer holds them (2 bytes per `bf16`, 1 per `bool`; a PRNG key is its two `u32` words, high
//! word first, so a key array's bytes are those of its `u32[..., 2]` words). `encode` and
//! `decode` convert one element between its bytes and its [`Elem`]; [`Element`] reads and
//! writes plain Rust values.

use super::elem::Elem;
use crate::dtype::DType;

/// Plain Rust element types whose bytes are an array's bytes (see the module docs).
pub trait Element: Copy + 'static {
    /// The dtype whose elements this type holds.
    const DTYPE: DType;
    /// Appends the native-endian bytes of `self`.
    fn put(self, out: &mut Vec<u8>);
    /// Reads one element from native-endian bytes.
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                let mut raw = [0u8; size_of::<$t>()];
                raw.copy_from_slice(&bytes[..size_of::<$t>()]);
                <$t>::from_ne_bytes(raw)
            }
        }
    };
}
element!(f32, F32);
element!(f64, F64);
element!(i8, I8);
element!(i16, I16);
element!(i32, I32);
element!(i64, I64);
element!(u8, U8);
element!(u16, U16);
element!(u32, U32);
element!(u64, U64);
element!(half::bf16, BF16);
element!(half::f16, F16);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn put(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
    fn get(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// Appends the bytes of `e`, an element of `dtype`.
pub(super) fn encode(dtype: DType, e: Elem, out: &mut Vec<u8>) {
    let bits = e.bits();
    let float = || f64::from_bits(bits);
    match dtype {
        // Integers: the low bytes of the two's-complement value.
        DType::Bool | DType::I8 | DType::U8 => out.push(bits as u8),
        DType::I16 | DType::U16 => (bits as u16).put(out),
        DType::I32 | DType::U32 => (bits as u32).put(out),
        DType::I64 | DType::U64 => bits.put(out),
        // Floats: the value is already rounded to the dtype, so each conversion is exact.
        DType::BF16 => crate::dtype::bf16_from_f64(float()).put(out),
        DType::F16 => crate::dtype::f16_from_f64(float()).put(out),
        DType::F32 => (float() as f32).put(out),
        DType::F64 => float().put(out),
        DType::KeyFry => {
            ((bits >> 32) as u32).put(out);
            (bits as u32).put(out);
        }
        // A token has no bytes.
        DType::Token => {}
    }
}

/// The element of `dtype` whose bytes start `bytes`.
pub(super) fn decode(dtype: DType, bytes: &[u8]) -> Elem {
    let int = |v: i128| Elem::from_int(dtype, v);
    let float = |v: f64| Elem::from_bits(v.to_bits());
    match dtype {
        DType::Bool => int(i128::from(bytes[0] != 0)),
        DType::U8 => int(i128::from(bytes[0])),
        DType::I8 => int(i128::from(bytes[0] as i8)),
        DType::I16 => int(i128::from(i16::get(bytes))),
        DType::U16 => int(i128::from(u16::get(bytes))),
        DType::I32 => int(i128::from(i32::get(bytes))),
        DType::U32 => int(i128::from(u32::get(bytes))),
        DType::I64 => int(i128::from(i64::get(bytes))),
        DType::U64 => int(i128::from(u64::get(bytes))),
        DType::BF16 => float(f64::from(half::bf16::get(bytes))),
        DType::F16 => float(f64::from(half::f16::get(bytes))),
        DType::F32 => float(f64::from(f32::get(bytes))),
        DType::F64 => float(f64::get(bytes)),
        DType::Token => Elem::from_bits(0),
        DType::KeyFry => {
            let (hi, lo) = (u32::get(bytes), u32::get(&bytes[4..]));
            Elem::from_bits((u64::from(hi) << 32) | u64::from(lo))
        }
    }
}

/// The number of elements of a shape (1 for a scalar; a negative extent counts as 0; a count
/// past `usize::MAX` saturates, so no buffer can match it).
pub fn element_count(dims: &[i64]) -> usize {
    dims.iter()
        .map(|&d| usize::try_from(d.max(0)).unwrap_or(usize::MAX))
        .fold(1, usize::saturating_mul)
}

/// Reverses each element's bytes (each word's, for a key): native-endian to little-endian and
/// back on a big-endian host.
fn swap_bytes(dtype: DType, bytes: &mut [u8]) {
    let word = if dtype.is_key() {
        4
    } else {
        dtype.size_in_bytes()
    };
    bytes.chunks_exact_mut(word).for_each(<[u8]>::reverse);
}

impl super::Array {
    /// The bytes with each element little-endian (as files such as safetensors store them): the
    /// array's own bytes on a little-endian host.
    pub fn to_le_bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        if cfg!(target_endian = "little") {
            std::borrow::Cow::Borrowed(self.bytes())
        } else {
            let mut bytes = self.bytes().to_vec();
            swap_bytes(self.dtype(), &mut bytes);
            std::borrow::Cow::Owned(bytes)
        }
    }

    /// The array of `dtype` and `dims` whose elements' little-endian bytes are `bytes`.
    pub fn from_le_bytes(dtype: DType, dims: &[i64], mut bytes: Vec<u8>) -> crate::Result<Self> {
        if cfg!(target_endian = "big") {
            swap_bytes(dtype, &mut bytes);
        }
        super::Array::from_bytes(dtype, dims, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_round_trips_through_its_bytes() {
        let cases: [(DType, f64); 8] = [
            (DType::BF16, -1.5),
            (DType::F16, 0.333_251_953_125),
            (DType::F32, f64::from(0.1_f32)),
            (DType::F64, 0.1),
            (DType::I8, -7.0),
            (DType::U16, 65535.0),
            (DType::Bool, 1.0),
            (DType::I32, -2_147_483_648.0),
        ];
        for (dtype, x) in cases {
            let e = Elem::from_f64(dtype, x);
            let mut out = Vec::new();
            encode(dtype, e, &mut out);
            assert_eq!(out.len(), dtype.size_in_bytes(), "{dtype:?}");
            assert_eq!(decode(dtype, &out), e, "{dtype:?}");
        }
        let big = Elem::from_int(DType::I64, -(1 << 60) - 1);
        let mut out = Vec::new();
        encode(DType::I64, big, &mut out);
        assert_eq!(out, (-(1_i64 << 60) - 1).to_ne_bytes());
        assert_eq!(decode(DType::I64, &out), big);
    }

    #[test]
    fn a_key_is_its_two_words_high_first() {
        let key = Elem::from_bits(0x0000_0001_0000_0002);
        let mut out = Vec::new();
        encode(DType::KeyFry, key, &mut out);
        let words: Vec<u32> = out.chunks(4).map(u32::get).collect();
        assert_eq!(words, [1, 2]);
        assert_eq!(decode(DType::KeyFry, &out), key);
    }
}
