//! The process heap kept at what is in use (issue 12: flat memory).
//!
//! glibc keeps freed memory for reuse, and after a large block is freed it
//! raises its mmap and trim thresholds to that block's size: from then on
//! large tables grow inside the heap, each doubling leaves the old copy's
//! pages behind, and nothing goes back to the system. In pointer mode
//! prepare, verify and activate run in one process, and verify runs the
//! rebuild on a second thread (its own malloc arena) beside the
//! conservation walk: the 20k-turn chain peaked at 16.9 MiB for a plan of
//! 12 MiB. Measured, release, interleaved rounds on an idle machine:
//!
//! | | chain peak RSS | chain wall |
//! |---|---|---|
//! | glibc's defaults | 16.9–17.0 MiB | 3.71–3.95 s |
//! | [`setup`]: a fixed 128 KiB mmap threshold | 12.8–13.0 MiB | 3.68–3.83 s |
//! | one arena for all threads (tried, not kept) | 15.7 MiB | verify ~0.6 s slower: one allocator lock |

/// Blocks of 128 KiB and more are mapped on their own: they grow by
/// `mremap` (no copy left behind) and go back to the system when freed.
/// Call first in an executable that plans or verifies.
pub fn setup() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter; the value is in
    // range, and a refused setting (return 0) leaves glibc's default.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Return the free memory of the heap to the system (`malloc_trim`).
/// Costs a walk over the free lists: call it between stages, not in loops.
pub fn hand_back() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory; it has no
    // preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}
