//! Conversions between interpreter arrays (`tessera_ir::Array`) and PJRT host arrays, for
//! every dtype: what crosses between the reference interpreter and devices.

use tessera_ir::{Array, DType, Elem};
use tessera_pjrt::{ElementType, HostArray};

/// An array that could not be converted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConvertError(pub String);

/// The PJRT element type of an IR dtype.
pub fn element_type(dtype: DType) -> ElementType {
    match dtype {
        DType::Bool => ElementType::Pred,
        DType::I8 => ElementType::S8,
        DType::I16 => ElementType::S16,
        DType::I32 => ElementType::S32,
        DType::I64 => ElementType::S64,
        DType::U8 => ElementType::U8,
        DType::U16 => ElementType::U16,
        DType::U32 => ElementType::U32,
        DType::U64 => ElementType::U64,
        DType::BF16 => ElementType::BF16,
        DType::F16 => ElementType::F16,
        DType::F32 => ElementType::F32,
        DType::F64 => ElementType::F64,
        // A key's two words.
        DType::KeyFry => ElementType::U32,
    }
}

/// The IR dtype of a PJRT element type (every element type has one; keys travel as `U32`
/// words, see [`from_host`]).
pub fn dtype_of(ty: ElementType) -> DType {
    match ty {
        ElementType::Pred => DType::Bool,
        ElementType::S8 => DType::I8,
        ElementType::S16 => DType::I16,
        ElementType::S32 => DType::I32,
        ElementType::S64 => DType::I64,
        ElementType::U8 => DType::U8,
        ElementType::U16 => DType::U16,
        ElementType::U32 => DType::U32,
        ElementType::U64 => DType::U64,
        ElementType::F16 => DType::F16,
        ElementType::BF16 => DType::BF16,
        ElementType::F32 => DType::F32,
        ElementType::F64 => DType::F64,
    }
}

/// Host bytes as an interpreter array of their own element type (exact). A key array's
/// words come back as `u32[..., 2]`; read them as keys with [`from_host`].
pub fn to_array(host: &HostArray) -> Result<Array, ConvertError> {
    from_host(host, dtype_of(host.element_type()))
}

/// An interpreter array as host bytes (integers exactly, whatever their width).
pub fn to_host(array: &Array) -> Result<HostArray, ConvertError> {
    let dtype = array.dtype;
    let mut bytes = Vec::with_capacity(array.data.len() * dtype.size_in_bytes());
    for &e in array.data.iter() {
        let v = || e.to_f64(dtype);
        match dtype {
            // Integers: the low bytes of the exact two's-complement value.
            DType::Bool | DType::U8 | DType::I8 | DType::I16 | DType::I32 | DType::I64 => {
                let bytes_of = (e.to_int(dtype) as i64).to_ne_bytes();
                bytes.extend(low_bytes(&bytes_of, dtype.size_in_bytes()));
            }
            DType::U16 | DType::U32 | DType::U64 => {
                let bytes_of = (e.to_int(dtype) as u64).to_ne_bytes();
                bytes.extend(low_bytes(&bytes_of, dtype.size_in_bytes()));
            }
            DType::BF16 => bytes.extend(half::bf16::from_f64(v()).to_bits().to_ne_bytes()),
            DType::F16 => bytes.extend(half::f16::from_f64(v()).to_bits().to_ne_bytes()),
            DType::F32 => bytes.extend((v() as f32).to_ne_bytes()),
            DType::F64 => bytes.extend(v().to_ne_bytes()),
            DType::KeyFry => {
                let words = e.bits();
                bytes.extend(((words >> 32) as u32).to_ne_bytes());
                bytes.extend((words as u32).to_ne_bytes());
            }
        }
    }
    let mut shape = array.shape();
    if array.dtype.is_key() {
        shape.push(2);
    }
    HostArray::from_bytes(element_type(array.dtype), &shape, bytes)
        .map_err(|e| ConvertError(e.to_string()))
}

/// The `size` least significant of a value's native-endian bytes.
fn low_bytes(bytes: &[u8; 8], size: usize) -> &[u8] {
    if cfg!(target_endian = "little") {
        &bytes[..size]
    } else {
        &bytes[8 - size..]
    }
}

/// Host bytes as an interpreter array of `dtype` (integers exactly).
pub fn from_host(host: &HostArray, dtype: DType) -> Result<Array, ConvertError> {
    let size = dtype.size_in_bytes();
    let float = |v: f64| Elem::from_f64(dtype, v);
    let int = |v: i128| Elem::from_int(dtype, v);
    let elems: Vec<Elem> = host
        .bytes()
        .chunks_exact(size)
        .map(|c| {
            let mut b8 = [0u8; 8];
            b8[..size].copy_from_slice(c);
            let (b2, b4) = (
                [c[0], c.get(1).copied().unwrap_or(0)],
                [b8[0], b8[1], b8[2], b8[3]],
            );
            match dtype {
                DType::Bool | DType::U8 => int(i128::from(c[0])),
                DType::I8 => int(i128::from(c[0] as i8)),
                DType::I16 => int(i128::from(i16::from_ne_bytes(b2))),
                DType::U16 => int(i128::from(u16::from_ne_bytes(b2))),
                DType::I32 => int(i128::from(i32::from_ne_bytes(b4))),
                DType::U32 => int(i128::from(u32::from_ne_bytes(b4))),
                DType::I64 => int(i128::from(i64::from_ne_bytes(b8))),
                DType::U64 => int(i128::from(u64::from_ne_bytes(b8))),
                DType::F32 => float(f64::from(f32::from_ne_bytes(b4))),
                DType::F64 => float(f64::from_ne_bytes(b8)),
                DType::BF16 => float(f64::from(half::bf16::from_bits(u16::from_ne_bytes(b2)))),
                DType::F16 => float(f64::from(half::f16::from_bits(u16::from_ne_bytes(b2)))),
                // The two words of a key: 8 bytes, high word first.
                DType::KeyFry => {
                    let hi = u32::from_ne_bytes(b4);
                    let lo = u32::from_ne_bytes([b8[4], b8[5], b8[6], b8[7]]);
                    Elem::from_bits((u64::from(hi) << 32) | u64::from(lo))
                }
            }
        })
        .collect();
    let dims = host.dims();
    let dims = if dtype.is_key() {
        dims.split_last().map_or(dims, |(_, lead)| lead)
    } else {
        dims
    };
    Array::from_elem_vec(dtype, dims, elems).map_err(|e| ConvertError(e.to_string()))
}
