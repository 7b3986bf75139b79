//! Conversions between interpreter arrays (`tessera_ir::Array`) and PJRT host arrays, for
//! every dtype: what crosses between the reference interpreter and devices.

use tessera_ir::{Array, DType};
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

/// An interpreter array as host bytes.
pub fn to_host(array: &Array) -> Result<HostArray, ConvertError> {
    let mut bytes = Vec::with_capacity(array.data.len() * array.dtype.size_in_bytes());
    for &v in array.data.iter() {
        match array.dtype {
            DType::Bool | DType::U8 => bytes.push(v as u8),
            DType::I8 => bytes.extend((v as i8).to_ne_bytes()),
            DType::I16 => bytes.extend((v as i16).to_ne_bytes()),
            DType::I32 => bytes.extend((v as i32).to_ne_bytes()),
            DType::I64 => bytes.extend((v as i64).to_ne_bytes()),
            DType::U16 => bytes.extend((v as u16).to_ne_bytes()),
            DType::U32 => bytes.extend((v as u32).to_ne_bytes()),
            DType::U64 => bytes.extend((v as u64).to_ne_bytes()),
            DType::BF16 => bytes.extend(half::bf16::from_f64(v).to_bits().to_ne_bytes()),
            DType::F16 => bytes.extend(half::f16::from_f64(v).to_bits().to_ne_bytes()),
            DType::F32 => bytes.extend((v as f32).to_ne_bytes()),
            DType::F64 => bytes.extend(v.to_ne_bytes()),
            DType::KeyFry => {
                let words = v.to_bits();
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

/// Host bytes as an interpreter array of `dtype`.
pub fn from_host(host: &HostArray, dtype: DType) -> Result<Array, ConvertError> {
    let size = dtype.size_in_bytes();
    let values: Vec<f64> = host
        .bytes()
        .chunks_exact(size)
        .map(|c| {
            let mut b8 = [0u8; 8];
            b8[..size].copy_from_slice(c);
            match dtype {
                DType::Bool | DType::U8 => f64::from(c[0]),
                DType::I8 => f64::from(c[0] as i8),
                DType::I16 => f64::from(i16::from_ne_bytes([c[0], c[1]])),
                DType::U16 => f64::from(u16::from_ne_bytes([c[0], c[1]])),
                DType::I32 => f64::from(i32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
                DType::U32 => f64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
                DType::F32 => f64::from(f32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
                DType::I64 => i64::from_ne_bytes(b8) as f64,
                DType::U64 => u64::from_ne_bytes(b8) as f64,
                DType::F64 => f64::from_ne_bytes(b8),
                DType::BF16 => f64::from(half::bf16::from_bits(u16::from_ne_bytes([c[0], c[1]]))),
                DType::F16 => f64::from(half::f16::from_bits(u16::from_ne_bytes([c[0], c[1]]))),
                // The two words of a key: 8 bytes, high word first.
                DType::KeyFry => {
                    let hi = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
                    let lo = u32::from_ne_bytes([c[4], c[5], c[6], c[7]]);
                    f64::from_bits((u64::from(hi) << 32) | u64::from(lo))
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
    Array::new(dtype, dims, values).map_err(|e| ConvertError(e.to_string()))
}
