//! Freed memory handed back to the system (issue 12: flat memory).
//!
//! glibc keeps freed memory for reuse, and after a large block is freed it
//! raises its own trim threshold, so a process that planned once keeps
//! that plan's high-water mark. In pointer mode prepare, verify and
//! activate run in one process, and verify runs the rebuild on a second
//! thread (its own malloc arena) beside the conservation walk: the chain's
//! peak was prepare's leftovers plus both checks, 21.4 MiB at 20k turns
//! for a plan of 14 MiB. Handing the leftovers back before verify starts:
//! 16.5 MiB. (One arena for both threads gave 15.7 MiB but made verify
//! about 0.6 s slower at 20k turns: both threads then take one allocator
//! lock. Measured, release, 20k-turn chain, interleaved rounds.)

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
