//! The allocator Tessera's programs run with, for programs of your own: [`use_jemalloc!`](crate::use_jemalloc)
//! makes jemalloc the whole process's `malloc` (Rust's allocations and, its symbols unprefixed,
//! the C `malloc` the PJRT plugin calls), with freed pages kept for reuse.
//!
//! Why: XLA's CPU runtime allocates each execution's temporaries through `malloc`. glibc maps a
//! large block afresh and unmaps it when freed, so every step page-faults its temporaries in
//! again (about 70,000 faults a step for the Llama of `cargo xtask bench --checkpoints`, and
//! about 250 a step even for the 8-device MLP step of `cargo xtask bench --compare-jax`).
//! jemalloc with `oversize_threshold:0` keeps blocks of 8 MiB and more in the arenas that keep
//! freed pages instead of returning them to the kernel at once. docs/profiling.md ("Page faults
//! of XLA's temporaries") has the measurements.
//!
//! On Linux with glibc only (elsewhere the macro expands to nothing). A program that already
//! declares a `#[global_allocator]` cannot use it (Rust allows one per program).

#[cfg(all(target_os = "linux", not(target_env = "musl")))]
pub use tikv_jemallocator::Jemalloc;

/// Makes jemalloc the program's allocator, with `oversize_threshold:0` (see [`crate::alloc`]).
/// Call it once, at the top level of a binary crate:
///
/// ```standalone_crate
/// tessera::use_jemalloc!();
///
/// fn main() {
///     let v = vec![1u8; 1 << 20]; // allocated by jemalloc
///     assert_eq!(v.len(), 1 << 20);
/// }
/// ```
///
/// `MALLOC_CONF` in the environment overrides the option when the program starts.
#[macro_export]
macro_rules! use_jemalloc {
    () => {
        #[cfg(all(target_os = "linux", not(target_env = "musl")))]
        #[global_allocator]
        static TESSERA_JEMALLOC: $crate::alloc::Jemalloc = $crate::alloc::Jemalloc;

        /// jemalloc's options, read when it starts (its documented `malloc_conf` symbol).
        #[cfg(all(target_os = "linux", not(target_env = "musl")))]
        #[allow(unsafe_code, non_upper_case_globals)]
        #[unsafe(no_mangle)]
        pub static malloc_conf: Option<&'static std::ffi::c_char> =
            // SAFETY: a pointer to the first byte of a static NUL-terminated string is a valid
            // reference.
            Some(unsafe { &*c"oversize_threshold:0".as_ptr() });
    };
}
