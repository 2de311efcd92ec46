//! Huge texts mapped a window at a time (issue 12: one huge message is
//! never held whole).
//!
//! A step over one huge message — `serde_json` walking a 100 MB line, a
//! regex search or a digest of its text — is one library call: no ktr code
//! runs between its first and its last byte to give back what it touched.
//! So the block of a huge text is kept inaccessible (`PROT_NONE`) except
//! for [`SLOTS`] windows of [`WINDOW`] bytes. Touching a byte outside them
//! raises SIGSEGV; [`on_fault`] opens the window around that byte and
//! closes the window opened longest ago (its pages leave the process: the
//! data stays in the spill file). What the process maps of huge texts is
//! then at most `SLOTS × WINDOW` bytes (8 MiB), whatever a step does and
//! however the threads are scheduled. Moving a window costs three system
//! calls: a pass over a 100 MB text moves one 50 times.
//!
//! **Which blocks.** A spilled block that a thread makes or grows to
//! [`MIN`] or more while inside a [`texts`] scope: the steps
//! that read a line or decode, copy or serialize a text open one. Tables
//! (looked up at random) stay plain mappings.
//!
//! **System calls.** The kernel does not fault on a process's behalf:
//! `read(2)` into or `write(2)` from a closed window fails with `EFAULT`.
//! A huge text goes to a file or comes from one through a small buffer
//! ([`super::write_all`], the rereader's `read_at`).
//!
//! **Other faults** (a real bug, a stack overflow) are passed to the
//! handler that was installed before ([`pass_on`]): Rust's own, which
//! reports a stack overflow, or the default, which ends the process.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The bytes one window maps: the largest folio of the page cache (2 MiB
/// on x86-64), at file offsets that are multiples of it. A smaller window
/// splits a large folio between an open and a closed window, and each
/// write fault then dirties the whole folio again: measured, `ktr plan` of
/// a 100 MB prompt (release, ext4 on kernel 6.18): 512 KiB windows 3.3–3.6
/// s (2.7–3.0 s in the kernel), 1 MiB 4.1–5.0 s, 2 MiB 1.1–1.3 s (0.5–0.6 s).
const WINDOW: usize = 2 << 20;

/// Windows open at once. One instruction needs at most two (a copy from one
/// huge text into another, each crossing a window's end); four let the
/// verifier's two threads copy at the same time.
const SLOTS: usize = 4;

/// A text's block is windowed from this size on. Below a huge block, so
/// that a text growing towards one (`serde_json`'s scratch buffer, a line
/// being read) is not mapped whole meanwhile: measured, the chain on a
/// 100 MB prompt peaked at 19.0 MiB when blocks were windowed only from
/// 8 MiB on (the verifier's two threads each growing a 4 MiB block).
pub const MIN: usize = 1 << 20;

/// Windowed blocks at most; a huge text beyond this is a plain mapping.
const MAX_BLOCKS: usize = 32;

/// A slot's start while it is being changed.
const BUSY: usize = 1;

/// Each slot's window: start (0: none, [`BUSY`]) and end.
static SLOT_START: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static SLOT_END: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

/// The slot to take next (the one opened longest ago).
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The windowed blocks: start (0: free entry) and end. Changed only under
/// the heap's lock; read by [`on_fault`] without one.
static BLOCK_START: [AtomicUsize; MAX_BLOCKS] = [const { AtomicUsize::new(0) }; MAX_BLOCKS];
static BLOCK_END: [AtomicUsize; MAX_BLOCKS] = [const { AtomicUsize::new(0) }; MAX_BLOCKS];

/// The SIGSEGV disposition before ours; set once, before ours is installed.
static BEFORE: OnceLock<Disposition> = OnceLock::new();

/// A copy of a `sigaction` (the libc struct is not `Sync`).
#[derive(Clone, Copy)]
struct Disposition {
    handler: libc::sighandler_t,
    flags: libc::c_int,
}

thread_local! {
    /// Live [`Texts`] guards of this thread.
    static TEXTS: Cell<u32> = const { Cell::new(0) };
}

/// While a `Texts` lives, huge blocks this thread makes are windowed.
pub struct Texts(());

/// Window the huge blocks this thread makes or grows until the guard is
/// dropped: around reading a line, decoding, copying or serializing a text.
pub fn texts() -> Texts {
    TEXTS.with(|t| t.set(t.get() + 1));
    Texts(())
}

impl Drop for Texts {
    fn drop(&mut self) {
        TEXTS.with(|t| t.set(t.get().saturating_sub(1)));
    }
}

/// Whether this thread is inside a [`texts`] scope. (False while the
/// thread's locals are gone, at its very end.)
pub(super) fn wanted() -> bool {
    TEXTS.try_with(|t| t.get() > 0).unwrap_or(false)
}

/// Install the fault handler (once; false if it could not be).
pub(super) fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // SAFETY: sigaction reads and fills structs owned here; the handler
        // only makes async-signal-safe calls (mprotect, madvise, atomics).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &raw mut old) != 0 {
                return false;
            }
            let _ = BEFORE.set(Disposition {
                handler: old.sa_sigaction,
                flags: old.sa_flags,
            });
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_fault as *const () as libc::sighandler_t;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&raw mut new.sa_mask);
            libc::sigaction(libc::SIGSEGV, &raw const new, std::ptr::null_mut()) == 0
        }
    })
}

/// Make `[start, end)` (a live spilled block, page-aligned) a windowed
/// block: nothing of it mapped until touched. Under the heap's lock. False
/// when the table is full (the block stays a plain mapping).
pub(super) fn add(start: usize, end: usize) -> bool {
    let Some(entry) = (0..MAX_BLOCKS).find(|&i| BLOCK_START[i].load(Ordering::Acquire) == 0) else {
        return false;
    };
    shut(start, end);
    BLOCK_END[entry].store(end, Ordering::Release);
    BLOCK_START[entry].store(start, Ordering::Release);
    true
}

/// The windowed block `[start, end)` moves to `[new_start, new_end)`
/// (`mremap`): its windows are closed first ([`close_in`]); the moved
/// block is all inaccessible, as before. Under the heap's lock.
pub(super) fn moved(start: usize, new_start: usize, new_end: usize) {
    if let Some(i) = entry_of(start) {
        BLOCK_START[i].store(0, Ordering::Release);
        BLOCK_END[i].store(new_end, Ordering::Release);
        BLOCK_START[i].store(new_start, Ordering::Release);
    }
}

/// The windowed block starting at `start` is freed: forget it and its
/// windows. Under the heap's lock, before it is unmapped.
pub(super) fn remove(start: usize, end: usize) {
    close_in(start, end);
    if let Some(i) = entry_of(start) {
        BLOCK_START[i].store(0, Ordering::Release);
    }
}

fn entry_of(start: usize) -> Option<usize> {
    (0..MAX_BLOCKS).find(|&i| BLOCK_START[i].load(Ordering::Acquire) == start)
}

/// Close every window inside `[start, end)`: before the block moves or is
/// freed, so that no slot names an address that is no longer the block's
/// (and a moved block is one mapping again, as `mremap` needs). A slot
/// another thread is changing is waited for.
pub(super) fn close_in(start: usize, end: usize) {
    for k in 0..SLOTS {
        loop {
            let from = SLOT_START[k].load(Ordering::Acquire);
            if from == BUSY {
                std::thread::yield_now();
                continue;
            }
            if from < start || from >= end {
                break;
            }
            if SLOT_START[k]
                .compare_exchange(from, BUSY, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                shut(from, SLOT_END[k].load(Ordering::Acquire));
                SLOT_START[k].store(0, Ordering::Release);
                break;
            }
        }
    }
}

/// Make `[from, to)` inaccessible and drop its pages from the process (in
/// that order: once inaccessible, nothing maps them again).
fn shut(from: usize, to: usize) {
    // SAFETY: a range of a live spilled block (a shared file mapping):
    // the file keeps the bytes.
    unsafe {
        libc::mprotect(from as *mut libc::c_void, to - from, libc::PROT_NONE);
        libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_DONTNEED);
    }
}

/// The windowed block holding `addr`.
fn block_of(addr: usize) -> Option<(usize, usize)> {
    (0..MAX_BLOCKS).find_map(|i| {
        let start = BLOCK_START[i].load(Ordering::Acquire);
        let end = BLOCK_END[i].load(Ordering::Acquire);
        (start != 0 && start <= addr && addr < end).then_some((start, end))
    })
}

/// Open the window around `addr` if it lies in a windowed block, closing
/// the window opened longest ago. False: not ours, or not openable.
fn open(addr: usize) -> bool {
    let Some((start, end)) = block_of(addr) else {
        return false;
    };
    let from = start + (addr - start) / WINDOW * WINDOW;
    let to = (from + WINDOW).min(end);
    let k = loop {
        let k = NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS;
        let old = SLOT_START[k].load(Ordering::Acquire);
        if old != BUSY
            && SLOT_START[k]
                .compare_exchange(old, BUSY, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            if old != 0 {
                shut(old, SLOT_END[k].load(Ordering::Acquire));
            }
            break k;
        }
        std::hint::spin_loop();
    };
    // SAFETY: a window of a live windowed block.
    let opened = unsafe {
        libc::mprotect(
            from as *mut libc::c_void,
            to - from,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    } == 0;
    if opened {
        SLOT_END[k].store(to, Ordering::Release);
        SLOT_START[k].store(from, Ordering::Release);
    } else {
        SLOT_START[k].store(0, Ordering::Release);
    }
    opened
}

/// The SIGSEGV handler: a window of a huge text, or someone else's fault.
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    if !open(addr) {
        // SAFETY: called from the signal handler with its own arguments.
        unsafe { pass_on(sig, info, context) };
    }
}

/// Hand a fault that is not a window's to the disposition before ours:
/// a handler is called as the kernel would have; the default (or ignoring,
/// which the kernel does not honour for a fault) is restored, and the
/// returning access faults again and ends the process as it would have.
unsafe fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let before = BEFORE.get().copied();
    match before {
        Some(d) if d.handler != libc::SIG_DFL && d.handler != libc::SIG_IGN => {
            // SAFETY: the address of the handler installed before ours,
            // with the signature its flags say it has.
            unsafe {
                if d.flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(d.handler);
                    f(sig, info, context);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(d.handler);
                    f(sig);
                }
            }
        }
        _ => {
            // SAFETY: restores the default disposition from a local struct.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGSEGV, &raw const default, std::ptr::null_mut());
            }
        }
    }
}
