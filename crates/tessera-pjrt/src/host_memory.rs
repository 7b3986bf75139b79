//! Host memory that PJRT's CPU buffers can share without a copy: [`AlignedBytes`] is a byte
//! allocation aligned as XLA's CPU runtime wants its buffers (64 bytes), so
//! [`crate::Buffer::from_aligned_bytes`] can hand it to the plugin zero-copy (the buffer then
//! owns it until the plugin is done with it), and a CPU buffer's own memory can be read in place
//! ([`crate::Buffer::host_memory`]). Transports between processes send from and receive into
//! these, with no staging copy.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::Mutex;

/// The alignment XLA's CPU runtime gives its own buffers.
pub const ALIGNMENT: usize = 64;

/// Allocations at least this large are kept for reuse when dropped: a fresh one is new pages the
/// kernel must fault in and zero on first touch, which costs more than the transfer into it.
const POOLED_FROM: usize = 1 << 20;
/// At most this many bytes wait in the pool.
const POOL_BYTES: usize = 1 << 30;

/// Freed large allocations `(address, len)`, for [`AlignedBytes::recycled`].
static POOL: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

fn pool() -> std::sync::MutexGuard<'static, Vec<(usize, usize)>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A type with the alignment, for an aligned dangling pointer of empty buffers.
#[repr(align(64))]
struct Aligned;

/// A zero-initialised, 64-byte-aligned byte buffer on the heap.
pub struct AlignedBytes {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the allocation is owned and reached only through `&self` / `&mut self`.
unsafe impl Send for AlignedBytes {}
// SAFETY: shared access is read-only.
unsafe impl Sync for AlignedBytes {}

impl AlignedBytes {
    /// `len` zero bytes (large allocations come from the system already zeroed, untouched).
    pub fn zeroed(len: usize) -> AlignedBytes {
        if len == 0 {
            return AlignedBytes {
                ptr: NonNull::<Aligned>::dangling().cast(),
                len: 0,
            };
        }
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout);
        };
        AlignedBytes { ptr, len }
    }

    /// `len` bytes to be overwritten: a freed allocation of that size if one is waiting (its
    /// pages already mapped; it holds the old bytes), else zeroed memory.
    pub fn recycled(len: usize) -> AlignedBytes {
        let reuse = {
            let mut pool = pool();
            pool.iter()
                .position(|&(_, l)| l == len)
                .map(|i| pool.swap_remove(i))
        };
        match reuse.and_then(|(addr, len)| Some((NonNull::new(addr as *mut u8)?, len))) {
            Some((ptr, len)) => AlignedBytes { ptr, len },
            None => AlignedBytes::zeroed(len),
        }
    }

    /// A copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> AlignedBytes {
        let mut out = AlignedBytes::zeroed(bytes.len());
        out.copy_from_slice(bytes);
        out
    }

    fn layout(len: usize) -> Layout {
        // Only a size near isize::MAX makes no layout; no allocator could serve it either, so
        // it fails as an allocation failure does (as `Vec` does).
        Layout::from_size_align(len, ALIGNMENT)
            .unwrap_or_else(|_| std::alloc::handle_alloc_error(Layout::new::<Aligned>()))
    }
}

impl std::ops::Deref for AlignedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised bytes (or is dangling with `len` 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBytes {
    fn clone(&self) -> Self {
        AlignedBytes::copy_of(self)
    }
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        if self.len >= POOLED_FROM {
            let mut pool = pool();
            let held: usize = pool.iter().map(|&(_, l)| l).sum();
            if held + self.len <= POOL_BYTES {
                pool.push((self.ptr.as_ptr() as usize, self.len));
                return;
            }
        }
        if self.len > 0 {
            // SAFETY: allocated in `zeroed` with this layout.
            unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) };
        }
    }
}

impl std::fmt::Debug for AlignedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBytes({} bytes)", self.len)
    }
}

/// Host allocations of at least this many bytes are checked against the memory available
/// ([`ensure_available`]); smaller ones are not worth reading `/proc/meminfo` for.
pub const CHECKED_FROM: u64 = 256 << 20;

/// Refuses an allocation of `bytes` for `what` that the machine has no memory for now: with
/// Linux's overcommit the allocation itself would succeed, and the kernel would kill the
/// process when the pages are touched. Allocations under [`CHECKED_FROM`] and machines that do
/// not report `MemAvailable` pass unchecked.
pub fn ensure_available(bytes: u64, what: impl FnOnce() -> String) -> crate::Result<()> {
    if bytes < CHECKED_FROM {
        return Ok(());
    }
    match tessera_ir::interp::memory::available_now() {
        Some(available) if bytes > available => Err(crate::PjrtError::HostMemory {
            what: what(),
            bytes,
            available,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_zeroed_and_copied() {
        for len in [0, 1, 100, 1 << 20] {
            let mut a = AlignedBytes::zeroed(len);
            assert_eq!(a.as_ptr() as usize % ALIGNMENT, 0, "{len}");
            assert!(a.iter().all(|&b| b == 0));
            if len > 0 {
                a[len - 1] = 7;
                assert_eq!(a.clone()[len - 1], 7);
            }
        }
    }

    #[test]
    fn a_recycled_allocation_has_the_size_asked_for() {
        let len = 3 << 20;
        drop(AlignedBytes::zeroed(len));
        let again = AlignedBytes::recycled(len);
        assert_eq!(again.len(), len);
        assert_eq!(again.as_ptr() as usize % ALIGNMENT, 0);
        assert_eq!(AlignedBytes::recycled(len + 64).len(), len + 64);
    }
}
