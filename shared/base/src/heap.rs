//! The process heap kept at what is in use (issue 12: flat memory).
//!
//! Three mechanisms, all set up once by the executables that plan or verify.
//!
//! **Large blocks spill to a file.** A months-long session has hundreds of
//! thousands of records, and planning keeps a few bytes of table for each
//! (the chain's links, the speech events, the turns); a huge typed message
//! is one block of its own size. Once [`spill_into`] named a directory,
//! every block of [`SPILL_MIN`] or more is a shared mapping of its own
//! unlinked file in that directory (`O_TMPFILE`: no name, gone when the
//! process ends, even on SIGKILL) instead of anonymous memory. Its pages
//! then belong to the page cache, which the kernel can write out and drop,
//! and [`release`] unmaps them from the process (the data stays in the
//! file; the next access maps it again). The passes over those tables call
//! [`tick`] once per record, so what the process holds stays at a few MiB
//! whatever the transcript. Nothing changes for code that allocates: a
//! `Vec` stays a `Vec`. Without a directory, or when the directory cannot
//! hold such a file, every block comes from the system allocator as usual.
//!
//! **Huge texts are mapped a window at a time** ([`window`]): a block of
//! [`HUGE_BLOCK`] or more made inside a [`texts`] scope (a huge line, its
//! decoded or serialized text) is inaccessible except for a few small
//! windows that a fault handler moves, so that one library call over the
//! whole text (a parse, a search, a digest) never maps it whole.
//!
//! **Small blocks stay in glibc's heap**, with its mmap threshold fixed
//! ([`setup`]): after a large block is freed glibc raises its mmap and trim
//! thresholds to that block's size, and from then on large tables grow
//! inside the heap, each doubling leaving the old copy's pages behind.
//! Measured, release, interleaved rounds on an idle machine, before spill
//! existed:
//!
//! | | chain peak RSS | chain wall |
//! |---|---|---|
//! | glibc's defaults | 16.9–17.0 MiB | 3.71–3.95 s |
//! | [`setup`]: a fixed 128 KiB mmap threshold | 12.8–13.0 MiB | 3.68–3.83 s |
//! | one arena for all threads (tried, not kept) | 15.7 MiB | verify ~0.6 s slower: one allocator lock |

use std::alloc::{GlobalAlloc, Layout, System};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

mod window;

pub use window::{MIN as WINDOWED_MIN, Texts, texts};

/// Blocks this large or larger spill to a file once [`spill_into`] ran.
pub const SPILL_MIN: usize = 256 * 1024;

/// [`tick`]s between two looks at what the process holds: a pass touches
/// a few pages a record (the end of a table, a hash slot), so the process
/// grows by at most a few MiB between two looks.
const TICKS_PER_LOOK: u32 = 64;

/// What the process may hold (resident, all of it: code, heap, mapped
/// spill pages) before [`tick`] releases the spilled pages. Releasing only
/// then, not at every look, keeps the page faults of a pass few: a page
/// of a table is mapped again only once the budget is used up.
const RESIDENT_BUDGET: u64 = 10 << 20;

/// The size of each spill file: sparse, so it costs nothing on disk until
/// written; a block grows within it by `mremap` without a copy.
const SPILL_FILE_SPAN: usize = 1 << 36;

/// A block this large is one huge message's line or text (or a table of a
/// very long session): growing it releases what is mapped ([`Spill::remap`]).
pub const HUGE_BLOCK: usize = 8 << 20;

/// Live spilled blocks at most; a block beyond this comes from the system.
const MAX_REGIONS: usize = 256;

const PAGE: usize = 4096;

/// The global allocator of every ktr executable (see the module docs).
pub struct Allocator;

/// A live spilled block: where it is mapped, how much is mapped, and its
/// file (kept open to reserve room as the block grows).
#[derive(Clone, Copy)]
struct Region {
    addr: usize,
    len: usize,
    fd: i32,
    /// A huge text's block, mapped a window at a time ([`window`]).
    windowed: bool,
}

struct Spill {
    /// The directory spill files are made in; -1 when spilling is off.
    dir: i32,
    regions: [Region; MAX_REGIONS],
    count: usize,
}

static SPILL: Mutex<Spill> = Mutex::new(Spill {
    dir: -1,
    regions: [Region {
        addr: 0,
        len: 0,
        fd: -1,
        windowed: false,
    }; MAX_REGIONS],
    count: 0,
});

/// Set once a block was spilled: until then `dealloc` need not look.
static SPILLED_EVER: AtomicBool = AtomicBool::new(false);

/// Huge texts are windowed: the fault handler is installed.
static WINDOWS: AtomicBool = AtomicBool::new(false);

static TICKS: AtomicU32 = AtomicU32::new(0);

/// `/proc/self/statm`, opened by [`spill_into`]; -1 before.
static STATM: AtomicI32 = AtomicI32::new(-1);

fn spill() -> std::sync::MutexGuard<'static, Spill> {
    SPILL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn pages(len: usize) -> usize {
    len.div_ceil(PAGE) * PAGE
}

impl Spill {
    fn find(&self, addr: usize) -> Option<usize> {
        self.regions[..self.count]
            .iter()
            .position(|r| r.addr == addr)
    }

    /// Record a new mapping (false: the table is full).
    fn insert(&mut self, region: Region) -> bool {
        if self.count == MAX_REGIONS {
            return false;
        }
        self.regions[self.count] = region;
        self.count += 1;
        SPILLED_EVER.store(true, Ordering::Release);
        true
    }

    /// Unmap every block's pages from the process (see [`release`]).
    fn release(&self) {
        for r in &self.regions[..self.count] {
            // SAFETY: a live shared file mapping: MADV_DONTNEED drops the
            // process's page-table entries only, the file keeps the bytes.
            unsafe {
                libc::madvise(r.addr as *mut libc::c_void, r.len, libc::MADV_DONTNEED);
            }
        }
    }
}

// The slow system calls (making room on disk, unmapping a block and closing
// its file, which drops its pages) run outside the lock: the other threads'
// releases must not wait for them. Under the lock only the
// table changes, with the calls that move a mapping (`mremap`), so that a
// release never advises an address that is no longer the block's.

/// Map a new block of `size` bytes in a fresh unlinked file.
fn map(size: usize) -> Option<*mut u8> {
    if size > SPILL_FILE_SPAN {
        return None;
    }
    let len = pages(size);
    let fd = {
        let s = spill();
        if s.dir < 0 || s.count == MAX_REGIONS {
            return None;
        }
        // SAFETY: a plain system call on the directory `SPILL` owns.
        unsafe {
            libc::openat(
                s.dir,
                c".".as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        }
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: plain system calls on a descriptor this function owns; the
    // mapping is recorded before it is handed out and unmapped only after
    // it is taken out of the table.
    unsafe {
        // The room is reserved up front: a page of a sparse file that the
        // file system cannot place (a full disk) would be SIGBUS when first
        // written, not an error; here it is a block from the system
        // allocator instead.
        let sized = libc::ftruncate(fd, SPILL_FILE_SPAN as libc::off_t) == 0 && reserve(fd, 0, len);
        let addr = if sized {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        } else {
            libc::MAP_FAILED
        };
        if addr != libc::MAP_FAILED {
            let mut s = spill();
            let start = addr as usize;
            let windowed = windowed(len) && window::add(start, start + len);
            if s.insert(Region {
                addr: start,
                len,
                fd,
                windowed,
            }) {
                return Some(addr.cast());
            }
            if windowed {
                window::remove(start, start + len);
            }
            drop(s);
            libc::munmap(addr, len);
        }
        libc::close(fd);
    }
    None
}

/// The spilled block at `addr`, if it is one.
fn region_at(addr: usize) -> Option<Region> {
    let s = spill();
    s.find(addr).map(|i| s.regions[i])
}

/// Grow or shrink the spilled block `r` to `size` bytes (same file, maybe
/// moved). Called by the thread that owns the block.
fn remap(r: Region, size: usize) -> Option<*mut u8> {
    if size > SPILL_FILE_SPAN {
        return None;
    }
    let len = pages(size);
    if len > r.len && !reserve(r.fd, r.len, len - r.len) {
        return None;
    }
    let mut s = spill();
    let i = s.find(r.addr)?;
    let was_windowed = s.regions[i].windowed;
    if was_windowed {
        // `mremap` moves one mapping: the block's windows are closed first.
        window::close_in(r.addr, r.addr + r.len);
    }
    if len > r.len && len >= HUGE_BLOCK {
        // A huge block grows while it is written (a long line read, a
        // huge text decoded or serialized): what was written so far, of it
        // and of the others, is not needed in memory meanwhile.
        s.release();
    }
    // SAFETY: `r` is a live mapping of a file at least `len` bytes long.
    let addr = unsafe {
        libc::mremap(
            r.addr as *mut libc::c_void,
            r.len,
            len,
            libc::MREMAP_MAYMOVE,
        )
    };
    if addr == libc::MAP_FAILED {
        return None;
    }
    let start = addr as usize;
    let windowed = if was_windowed {
        window::moved(r.addr, start, start + len);
        true
    } else {
        windowed(len) && window::add(start, start + len)
    };
    s.regions[i] = Region {
        addr: start,
        len,
        fd: r.fd,
        windowed,
    };
    Some(addr.cast())
}

/// Free the spilled block at `addr` (false: not a spilled block).
fn unmap(addr: usize) -> bool {
    let region = {
        let mut s = spill();
        let Some(i) = s.find(addr) else {
            return false;
        };
        s.count -= 1;
        let r = s.regions[i];
        s.regions[i] = s.regions[s.count];
        if r.windowed {
            window::remove(r.addr, r.addr + r.len);
        }
        r
    };
    // SAFETY: a live mapping made by `map`/`remap`, no longer in the table.
    unsafe {
        libc::munmap(region.addr as *mut libc::c_void, region.len);
        libc::close(region.fd);
    }
    true
}

/// Whether a new or grown block of `len` bytes is to be windowed: a text's
/// (made inside a [`texts`] scope) of [`window::MIN`] or more, with the
/// fault handler there.
fn windowed(len: usize) -> bool {
    len >= window::MIN && WINDOWS.load(Ordering::Acquire) && window::wanted()
}

/// Reserve `len` bytes of `fd` from `offset` on disk (false: no room).
fn reserve(fd: i32, offset: usize, len: usize) -> bool {
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return false;
    };
    // SAFETY: fallocate on a descriptor owned by the caller.
    unsafe { libc::fallocate(fd, 0, offset, len) == 0 }
}

/// A new block for `layout` in a spill file, if it is large enough and
/// spilling is on.
fn spilled(layout: Layout) -> Option<*mut u8> {
    (layout.size() >= SPILL_MIN && layout.align() <= PAGE)
        .then(|| map(layout.size()))
        .flatten()
}

// SAFETY: every block is either the system allocator's (passed through
// unchanged) or a spilled mapping recorded in `SPILL` under its lock;
// `dealloc`/`realloc` tell them apart by looking the address up, so a block
// is always returned to the allocator that made it.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        spilled(layout).unwrap_or_else(|| unsafe { System.alloc(layout) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // A fresh file reads as zeros: no pages are touched.
        // SAFETY: forwarded with the caller's layout.
        spilled(layout).unwrap_or_else(|| unsafe { System.alloc_zeroed(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= SPILL_MIN && SPILLED_EVER.load(Ordering::Acquire) && unmap(ptr as usize)
        {
            return;
        }
        // SAFETY: not a spilled block, so the system allocator made it.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let big_before = layout.size() >= SPILL_MIN;
        let big_after = new_size >= SPILL_MIN && layout.align() <= PAGE;
        if big_before
            && SPILLED_EVER.load(Ordering::Acquire)
            && let Some(r) = region_at(ptr as usize)
        {
            if big_after && let Some(p) = remap(r, new_size) {
                return p;
            }
            // SAFETY: the block is live and `layout` describes it.
            return unsafe { self.moved(ptr, layout, new_size) };
        }
        if big_after && !big_before {
            // SAFETY: as above.
            return unsafe { self.moved(ptr, layout, new_size) };
        }
        // SAFETY: a system block, resized by the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

impl Allocator {
    /// `realloc` by a new block, a copy and a free (between the system
    /// allocator and a spill file).
    unsafe fn moved(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `new_size` is non-zero and valid for `layout.align()`
        // (GlobalAlloc::realloc's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid layout.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live and at least this long.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

/// Fix glibc's mmap threshold at 128 KiB: blocks that size and larger are
/// mapped on their own, grow by `mremap` and go back to the system when
/// freed. Call first in an executable that plans or verifies.
pub fn setup() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter; the value is in
    // range, and a refused setting (return 0) leaves glibc's default.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Spill large blocks into unlinked files in `dir` from now on (the state
/// directory: on disk, where ktr may write). False when `dir` cannot hold
/// them (no `O_TMPFILE` there, not a directory): blocks then stay in memory.
pub fn spill_into(dir: &Path) -> bool {
    if !files_may_be_sparse_and_large() {
        return false;
    }
    let Ok(handle) = std::fs::File::open(dir) else {
        return false;
    };
    // Probe once, so that a directory without O_TMPFILE support fails here
    // and not on every large block.
    // SAFETY: plain system calls on descriptors owned here.
    let fd = unsafe {
        let probe = libc::openat(
            handle.as_raw_fd(),
            c".".as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        );
        if probe < 0 {
            return false;
        }
        libc::close(probe);
        libc::fcntl(handle.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0)
    };
    if fd < 0 {
        return false;
    }
    let mut s = spill();
    if s.dir >= 0 {
        // SAFETY: the previous directory descriptor is owned by `SPILL`.
        unsafe { libc::close(s.dir) };
    }
    s.dir = fd;
    WINDOWS.store(window::install(), Ordering::Release);
    if STATM.load(Ordering::Acquire) < 0
        && let Ok(statm) = std::fs::File::open("/proc/self/statm")
    {
        STATM.store(
            std::os::fd::IntoRawFd::into_raw_fd(statm),
            Ordering::Release,
        );
    }
    true
}

/// A file-size limit (`ulimit -f`) below a spill file's span would make
/// its `ftruncate` raise SIGXFSZ: spill only without one.
fn files_may_be_sparse_and_large() -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &raw mut limit) } == 0;
    known && (limit.rlim_cur == libc::RLIM_INFINITY || limit.rlim_cur >= SPILL_FILE_SPAN as u64)
}

/// The bytes the process holds now (`/proc/self/statm`), if known.
fn resident() -> Option<u64> {
    let fd = STATM.load(Ordering::Acquire);
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 96];
    // SAFETY: reads into a local buffer of the given length from a
    // descriptor owned by `STATM` for the life of the process.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    let text = std::str::from_utf8(buf.get(..usize::try_from(n).ok()?)?).ok()?;
    let pages: u64 = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some(pages * PAGE as u64)
}

/// Unmap every spilled block's pages from the process; their data stays in
/// the files and comes back on the next access (a minor fault from the page
/// cache). Cheap: the kernel walks only what is mapped.
pub fn release() {
    if !SPILLED_EVER.load(Ordering::Acquire) {
        return;
    }
    spill().release();
}

/// Bytes a huge copy or read moves between two [`look`]s.
pub const LOOK_EVERY: usize = 1 << 20;

/// Look at what the process holds now and, over [`RESIDENT_BUDGET`],
/// [`release`] the spilled pages. For the steps that move a huge block a
/// MiB at a time ([`push_str`], reading a huge line).
pub fn look() {
    if SPILLED_EVER.load(Ordering::Relaxed) && resident().is_none_or(|r| r > RESIDENT_BUDGET) {
        release();
    }
}

/// Append `src` to `dst`; a huge `src` a MiB at a time with a [`look`]
/// after each, so that copying a huge text does not map both copies whole.
pub fn push_str(dst: &mut String, src: &str) {
    if src.len() < HUGE_BLOCK {
        dst.push_str(src);
        return;
    }
    let _texts = texts();
    dst.reserve_exact(src.len());
    let mut rest = src;
    while !rest.is_empty() {
        let mut cut = rest.len().min(LOOK_EVERY);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        dst.push_str(&rest[..cut]);
        rest = &rest[cut..];
        look();
    }
}

/// `w.write_all(bytes)`; `bytes` that may be a windowed block (a text of
/// [`WINDOWED_MIN`] or more: see [`window`]) through a small buffer, as the
/// kernel cannot fault a closed window in for `write(2)`.
pub fn write_all(w: &mut dyn std::io::Write, bytes: &[u8]) -> std::io::Result<()> {
    if bytes.len() < WINDOWED_MIN {
        return w.write_all(bytes);
    }
    let mut piece = Vec::with_capacity(BOUNCE);
    for chunk in bytes.chunks(BOUNCE) {
        piece.clear();
        piece.extend_from_slice(chunk);
        w.write_all(&piece)?;
    }
    Ok(())
}

/// The small buffer huge texts pass through on their way to and from files.
pub const BOUNCE: usize = 64 << 10;

/// `src` as a `String`, copied the way [`push_str`] copies.
pub fn copied(src: &str) -> String {
    let mut out = String::new();
    push_str(&mut out, src);
    out
}

/// One record of a pass over large tables: every [`TICKS_PER_LOOK`]th call
/// looks at what the process holds and, over [`RESIDENT_BUDGET`],
/// [`release`]s the spilled pages.
pub fn tick() {
    if TICKS
        .fetch_add(1, Ordering::Relaxed)
        .is_multiple_of(TICKS_PER_LOOK)
    {
        look();
    }
}

/// Return the free memory of the heap to the system (`malloc_trim`) and
/// unmap spilled pages. Costs a walk over the free lists: call it between
/// stages, not in loops.
pub fn hand_back() {
    release();
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory; it has no
    // preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether blocks spill now (for `ktr doctor` and the tests).
pub fn spilling() -> bool {
    spill().dir >= 0
}

/// A `Vec` of records that is read with a [`tick`] an element when it is
/// serialized or dropped (a drop reads every element that owns something),
/// so that a long one is not mapped whole at once. For the per-record lists
/// that outlive a pass, such as a capped plan's left-out records.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Table<T>(pub Vec<T>);

impl<T> Default for Table<T> {
    fn default() -> Table<T> {
        Table(Vec::new())
    }
}

impl<T> std::ops::Deref for Table<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Table<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

impl<T: serde::Serialize> serde::Serialize for Table<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().inspect(|_| tick()))
    }
}

impl<T> Drop for Table<T> {
    fn drop(&mut self) {
        if std::mem::needs_drop::<T>() {
            for item in self.0.drain(..) {
                tick();
                drop(item);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// The heap tests one at a time: they measure the process.
    static SERIAL: Mutex<()> = Mutex::new(());

    /// Spill into the system's temp dir (it outlives every test; the files
    /// have no name). Tests that hold huge blocks take it too.
    pub(crate) fn spilling_for_test() -> std::sync::MutexGuard<'static, ()> {
        let guard = SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        assert!(
            spill_into(&std::env::temp_dir()),
            "O_TMPFILE in the temp dir"
        );
        guard
    }

    #[test]
    fn spilled_tables_keep_their_bytes_through_growth_release_and_free() {
        let _serial = spilling_for_test();
        // Grows from system memory into a spill file, then within it.
        let mut v: Vec<u64> = Vec::new();
        for i in 0..2_000_000u64 {
            v.push(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            if i % 4096 == 0 {
                release();
            }
        }
        release();
        assert!(
            v.iter()
                .enumerate()
                .all(|(i, &x)| x == (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        );
        // Zeroed blocks read as zeros; shrinking back below the threshold
        // copies into system memory.
        let z = vec![0u32; 1 << 20];
        assert!(z.iter().all(|&x| x == 0));
        v.truncate(10);
        v.shrink_to_fit();
        assert_eq!(v[9], 9u64.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }

    /// Run `work(t)` on `n` threads at once, `t` in `0..n`; wait for all.
    fn on_threads(n: u8, work: fn(u8)) {
        let workers: Vec<_> = (0..n)
            .map(|t| std::thread::spawn(move || work(t)))
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    }

    #[test]
    fn threads_growing_freeing_and_releasing_spilled_blocks_keep_their_bytes() {
        let _serial = spilling_for_test();
        on_threads(4, |t| {
            let t = u64::from(t);
            for round in 0..6u64 {
                let seed = t * 1000 + round;
                let mut v: Vec<u64> = Vec::new();
                for i in 0..(150_000 + 20_000 * round) {
                    v.push(i ^ seed);
                    if i % 1024 == 0 {
                        tick();
                    }
                }
                release();
                assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 ^ seed));
                v.truncate(1000);
                v.shrink_to_fit();
                assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 ^ seed));
            }
        });
    }

    #[test]
    fn only_a_directory_that_can_hold_unnamed_files_is_spilled_into() {
        let _serial = spilling_for_test();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(!spill_into(&file));
        assert!(!spill_into(&dir.path().join("missing")));
        assert!(
            !spill_into(Path::new("/proc/self")),
            "procfs has no O_TMPFILE"
        );
        // A refused directory leaves spilling as it was.
        assert!(spilling());
        let v = vec![7u8; 1 << 20];
        assert!(v.iter().all(|&b| b == 7));
    }

    /// A text of `len` bytes made inside a [`texts`] scope (windowed).
    fn windowed_text(len: usize, seed: u8) -> Vec<u8> {
        let _texts = texts();
        let mut v = Vec::new();
        for i in 0..len {
            v.push((i % 251) as u8 ^ seed);
        }
        v
    }

    #[track_caller]
    fn assert_text(v: &[u8], seed: u8) {
        assert!(
            v.iter()
                .enumerate()
                .all(|(i, &b)| b == (i % 251) as u8 ^ seed),
            "a windowed text keeps its bytes"
        );
    }

    #[test]
    fn a_huge_text_is_never_mapped_whole_whatever_reads_it() {
        let _serial = spilling_for_test();
        let before = resident_kib();
        // Written, grown, read in one pass and searched: nothing in between
        // releases anything, and yet only the windows stay mapped.
        let mut v = windowed_text(96 << 20, 0);
        let after_write = resident_kib();
        assert_text(&v, 0);
        assert!(memchr::memmem::find(&v, b"not in there").is_none());
        let after_read = resident_kib();
        // Other tests may run meanwhile; 96 MiB is far above what they hold.
        for (what, kib) in [("written", after_write), ("read", after_read)] {
            assert!(
                kib < before + 32 * 1024,
                "{what}: {kib} KiB resident (before: {before} KiB)"
            );
        }
        // Shrunk below a huge block and grown again: still its bytes.
        v.truncate(1 << 20);
        v.shrink_to_fit();
        assert_text(&v, 0);
        v.resize(20 << 20, 0);
        assert_text(&v[..1 << 20], 0);
    }

    #[test]
    fn threads_copying_between_windowed_texts_keep_every_byte() {
        let _serial = spilling_for_test();
        on_threads(3, |t| {
            let a = windowed_text(24 << 20, t);
            let b = {
                let _texts = texts();
                a.clone()
            };
            assert_text(&b, t);
            assert_eq!(a, b);
        });
    }

    #[test]
    fn a_windowed_text_is_written_to_a_file_through_a_small_buffer() {
        let _serial = spilling_for_test();
        // The smallest windowed text and a huge one.
        for len in [WINDOWED_MIN + 1, 20 << 20] {
            let text = windowed_text(len, 7);
            // Another text moves every window away from this one.
            drop(windowed_text(10 << 20, 1));
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out");
            let mut file = std::fs::File::create(&path).unwrap();
            write_all(&mut file, &text).expect("no EFAULT from a closed window");
            drop(file);
            let back = std::fs::read(&path).unwrap();
            assert_eq!(back.len(), text.len());
            assert_text(&back, 7);
        }
    }

    #[test]
    fn a_fault_that_is_not_a_window_still_ends_the_process() {
        let _serial = spilling_for_test();
        let _text = windowed_text(10 << 20, 1);
        // SAFETY: the child only maps a page and touches it (async-signal-
        // safe calls) before it dies; the parent waits for it.
        unsafe {
            let child = libc::fork();
            assert!(child >= 0);
            if child == 0 {
                let page = libc::mmap(
                    std::ptr::null_mut(),
                    PAGE,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                std::ptr::write_volatile(page.cast::<u8>(), 1);
                libc::_exit(0);
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(child, &raw mut status, 0), child);
            assert!(
                libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
                "status {status:#x}"
            );
        }
    }

    #[test]
    fn a_released_table_is_not_resident() {
        let _serial = spilling_for_test();
        let mut big = vec![0u8; 64 << 20];
        for (i, b) in big.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        release();
        // Other tests may be running; 64 MiB just written is far above
        // anything they hold.
        assert!(
            resident_kib() < 48 * 1024,
            "{} KiB resident",
            resident_kib()
        );
        assert!(big.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }
}
