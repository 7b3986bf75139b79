//! Host values crossing to and from devices. A host array is the interpreter's array
//! (`tessera_pjrt::HostArray` is `tessera_ir::Array`), so values cross as they are; only PRNG
//! keys change form, since devices hold them as their `u32` words.

use tessera_ir::{Array, DType};
use tessera_pjrt::HostArray;

/// An array that could not be converted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConvertError(pub String);

/// `array` as devices take it: itself, or a key array's words (`u32[..., 2]`, the same bytes).
pub fn to_host(array: &Array) -> Result<HostArray, ConvertError> {
    Ok(array.clone().key_words())
}

/// A value read back from a device as the program's `dtype`: itself when it has that dtype,
/// keys from their words for a key dtype. Anything else is an error naming both types.
pub fn from_host(host: &HostArray, dtype: DType) -> Result<Array, ConvertError> {
    if host.dtype() == dtype {
        return Ok(host.clone());
    }
    if dtype.is_key() {
        return host
            .clone()
            .keys_from_words()
            .map_err(|e| ConvertError(e.to_string()));
    }
    Err(ConvertError(format!(
        "a device value of {:?}{:?} was read where the program has {dtype:?}",
        host.dtype(),
        host.dims()
    )))
}
