//! The process heap kept at what is in use (issue 12: flat memory).
//!
//! glibc's allocator gives every thread that allocates its own arena and
//! keeps freed memory for reuse. Verification runs the rebuild on a second
//! thread beside the conservation walk, after prepare's plan in the same
//! process (pointer mode): with the defaults the peak was the sum of two
//! arenas' high-water marks, 20.8 MiB at 20k turns for a plan of 14 MiB.
//! One arena, and freed memory at the top of the heap handed back at once,
//! make it 15.3 MiB at the same speed (measured, release, `bench/chain.py`).

/// Use one malloc arena and return freed memory above 128 KiB at the top
/// of the heap to the system. Call before the first thread starts;
/// calling again does nothing new. Not glibc: nothing to do.
pub fn keep_small() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets allocator parameters; the values are in
    // range, and a refused setting (return 0) leaves glibc's default.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 * 1024);
    }
}
