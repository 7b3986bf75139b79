//! Host arrays are Tessera's one array type, [`tessera_ir::Array`]: a dtype, dimensions and
//! the elements' bytes as a device buffer holds them. This module says how one crosses to a
//! device: its PJRT element type and dimensions ([`device_layout`]).

use tessera_ir::DType;

use crate::element_type::ElementType;

pub use tessera_ir::{Block, Element, element_count};

/// A dense row-major array in host memory (the same type the interpreter computes on).
pub type HostArray = tessera_ir::Array;

/// The element type and dimensions `host`'s bytes have on a device: its own, except that a
/// PRNG key array travels as its `u32` words (`u32[..., 2]`, the same bytes).
pub fn device_layout(host: &HostArray) -> (ElementType, Vec<i64>) {
    let mut dims = host.dims().to_vec();
    if host.dtype() == DType::KeyFry {
        dims.push(2);
    }
    (ElementType::from_dtype(host.dtype()), dims)
}
