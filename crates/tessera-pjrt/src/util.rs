//! Small helpers for reading data the plugin hands back.

/// Copies `size` bytes at `ptr` into a `String`, lossily.
///
/// # Safety
/// `ptr` must point to `size` readable bytes, or be null.
pub(crate) unsafe fn string_from_raw(ptr: *const std::os::raw::c_char, size: usize) -> String {
    if ptr.is_null() || size == 0 {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), size) };
    String::from_utf8_lossy(bytes).into_owned()
}
