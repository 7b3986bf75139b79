//! Element types of device buffers (PJRT's `PJRT_Buffer_Type`).

use crate::sys::PJRT_Buffer_Type as Raw;

/// The element type of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// Booleans, one byte each.
    Pred,
    /// Signed 8-bit integers.
    S8,
    /// Signed 16-bit integers.
    S16,
    /// Signed 32-bit integers.
    S32,
    /// Signed 64-bit integers.
    S64,
    /// Unsigned 8-bit integers.
    U8,
    /// Unsigned 16-bit integers.
    U16,
    /// Unsigned 32-bit integers.
    U32,
    /// Unsigned 64-bit integers.
    U64,
    /// IEEE half floats.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single floats.
    F32,
    /// IEEE double floats.
    F64,
}

impl ElementType {
    /// Every element type, in a fixed order.
    pub const ALL: [ElementType; 13] = [
        Self::Pred,
        Self::S8,
        Self::S16,
        Self::S32,
        Self::S64,
        Self::U8,
        Self::U16,
        Self::U32,
        Self::U64,
        Self::F16,
        Self::BF16,
        Self::F32,
        Self::F64,
    ];

    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        use ElementType::*;
        match self {
            Pred | S8 | U8 => 1,
            S16 | U16 | F16 | BF16 => 2,
            S32 | U32 | F32 => 4,
            S64 | U64 | F64 => 8,
        }
    }

    /// The StableHLO / MLIR spelling (`i1`, `f32`, `ui8`, ...).
    pub fn mlir_name(self) -> &'static str {
        use ElementType::*;
        match self {
            Pred => "i1",
            S8 => "i8",
            S16 => "i16",
            S32 => "i32",
            S64 => "i64",
            U8 => "ui8",
            U16 => "ui16",
            U32 => "ui32",
            U64 => "ui64",
            F16 => "f16",
            BF16 => "bf16",
            F32 => "f32",
            F64 => "f64",
        }
    }

    /// The element type holding `dtype`'s elements on a device (a PRNG key's are its `u32`
    /// words, see [`device_layout`](crate::host::device_layout)).
    pub fn from_dtype(dtype: tessera_ir::DType) -> ElementType {
        use tessera_ir::DType;
        match dtype {
            DType::Bool => ElementType::Pred,
            DType::I8 => ElementType::S8,
            DType::I16 => ElementType::S16,
            DType::I32 => ElementType::S32,
            DType::I64 => ElementType::S64,
            DType::U8 => ElementType::U8,
            DType::U16 => ElementType::U16,
            DType::U32 | DType::KeyFry => ElementType::U32,
            DType::U64 => ElementType::U64,
            DType::BF16 => ElementType::BF16,
            DType::F16 => ElementType::F16,
            DType::F32 => ElementType::F32,
            DType::F64 => ElementType::F64,
            // Never held by a buffer: a token (`psend`'s result) is never a program's argument
            // or result (the verifier refuses one), so no transfer asks for its type.
            DType::Token => ElementType::Pred,
        }
    }

    /// The dtype of this element type's values.
    pub fn dtype(self) -> tessera_ir::DType {
        use tessera_ir::DType;
        match self {
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

    pub(crate) fn to_raw(self) -> Raw {
        use ElementType::*;
        match self {
            Pred => Raw::PJRT_Buffer_Type_PRED,
            S8 => Raw::PJRT_Buffer_Type_S8,
            S16 => Raw::PJRT_Buffer_Type_S16,
            S32 => Raw::PJRT_Buffer_Type_S32,
            S64 => Raw::PJRT_Buffer_Type_S64,
            U8 => Raw::PJRT_Buffer_Type_U8,
            U16 => Raw::PJRT_Buffer_Type_U16,
            U32 => Raw::PJRT_Buffer_Type_U32,
            U64 => Raw::PJRT_Buffer_Type_U64,
            F16 => Raw::PJRT_Buffer_Type_F16,
            BF16 => Raw::PJRT_Buffer_Type_BF16,
            F32 => Raw::PJRT_Buffer_Type_F32,
            F64 => Raw::PJRT_Buffer_Type_F64,
        }
    }

    pub(crate) fn from_raw(raw: Raw) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.to_raw() == raw)
    }
}
