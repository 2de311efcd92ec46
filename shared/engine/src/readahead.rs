//! The source read once for both the scan and its digest (issue 25: `ktr
//! plan` within 5× `wc -l`). A second thread hashes the file a chunk at a
//! time; the file is copied out of the page cache once, by whichever side
//! needs a chunk first, and the other side takes that copy:
//!
//! - the hashing thread reads the chunks it gets to first and hands them to
//!   the scan through [`Reader`] (a `BufRead`), so that the scan's core
//!   spends no time in `read(2)` while it is the slower side;
//! - when the scan needs a chunk nobody has read yet (the hashing side is
//!   behind: SHA-256 is the slower of the two on a tool-heavy file), the
//!   scan reads it and hands it to the hashing side, which then only hashes
//!   it. The work on the two cores evens out instead of one core copying
//!   everything and the other waiting.
//!
//! Memory: at most [`AHEAD`] chunks waiting on each side. The digest is of
//! the file's first `len` bytes as they were read, the same bytes the scan
//! saw; a file changed meanwhile is noticed by the plan (size and
//! modification time before and after).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, Read};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{Scope, ScopedJoinHandle};

use sha2::{Digest as _, Sha256};

/// Bytes read at a time.
const CHUNK: u64 = 1 << 18;

/// Chunks waiting for a side at most.
const AHEAD: u64 = 8;

/// A chunk as read (`CHUNK` bytes, fewer at the end, none past it),
/// shared by the side that read it and the other.
type Chunk = Arc<Vec<u8>>;

/// A chunk's number and what reading it gave.
type Handed = (u64, io::Result<Chunk>);

/// Who reads.
#[derive(Clone, Copy)]
enum Side {
    Scan,
    Hashing,
}

/// What the two sides share.
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Chunks 0..claimed are read, or being read, by one side.
    claimed: u64,
    /// Chunks 0..hashed are hashed.
    hashed: u64,
    /// Chunks the hashing side read, for the scan, in order.
    to_scan: VecDeque<Handed>,
    /// Chunks the scan read, for the hashing side, in order.
    to_hash: VecDeque<Handed>,
    /// Buffers of chunks both sides are done with.
    spare: Vec<Vec<u8>>,
    /// Chunks read from the file by the scan and by the hashing side.
    reads: [u64; 2],
    /// The scan ended: the hashing side reads the rest itself.
    scan_gone: bool,
    /// The hashing side ended (done, failed): the scan reads the rest
    /// itself.
    hashing_gone: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Change the state and wake the other side.
    fn update<T>(&self, change: impl FnOnce(&mut State) -> T) -> T {
        let out = change(&mut self.lock());
        self.changed.notify_all();
        out
    }

    /// Read chunk `number` of the first `len` bytes of `file` into a spare
    /// buffer (for the scan's side, or the hashing one); the result twice:
    /// for this side and for the other.
    fn read(
        &self,
        side: Side,
        file: &File,
        len: u64,
        number: u64,
    ) -> (io::Result<Chunk>, io::Result<Chunk>) {
        let mut buf = {
            let mut state = self.lock();
            state.reads[side as usize] += 1;
            state.spare.pop().unwrap_or_default()
        };
        match read_chunk(file, len, number, &mut buf) {
            Ok(_) => {
                let chunk = Arc::new(buf);
                (Ok(Arc::clone(&chunk)), Ok(chunk))
            }
            Err(e) => {
                let again = io::Error::new(e.kind(), e.to_string());
                (Err(e), Err(again))
            }
        }
    }

    /// A side is done with `chunk`: its buffer is kept for another chunk
    /// once the other side is done with it too.
    fn done_with(&self, chunk: Chunk) {
        if let Some(buf) = Arc::into_inner(chunk) {
            let mut state = self.lock();
            if state.spare.len() < 2 * AHEAD as usize + 2 {
                state.spare.push(buf);
            }
        }
    }
}

/// The scan's side: the file's chunks, in order.
pub struct Reader<'f> {
    file: &'f File,
    len: u64,
    shared: Arc<Shared>,
    /// The chunk being read and how far.
    current: Chunk,
    at: usize,
    /// The number of the next chunk the scan needs.
    next: u64,
    /// Reading the next chunk failed: every later call fails the same way
    /// (that chunk is nobody's to read again).
    failed: Option<(io::ErrorKind, String)>,
}

/// What the hashing thread returns: the SHA-256 (hex) of the bytes it
/// hashed (read by either side), and how many.
pub type Digested = io::Result<(String, u64)>;

/// Start hashing the first `len` bytes of `file` on a thread of `scope`;
/// the scan reads them through the [`Reader`].
pub fn start<'scope>(
    scope: &'scope Scope<'scope, '_>,
    file: &'scope File,
    len: u64,
) -> (Reader<'scope>, ScopedJoinHandle<'scope, Digested>) {
    let reader = Reader::new(file, len);
    let shared = Arc::clone(&reader.shared);
    let hashing = scope.spawn(move || {
        // However the hashing ends, the scan is told.
        struct Gone<'s>(&'s Shared);
        impl Drop for Gone<'_> {
            fn drop(&mut self) {
                self.0.update(|state| state.hashing_gone = true);
            }
        }
        let _gone = Gone(&shared);
        hash(&shared, file, len)
    });
    (reader, hashing)
}

/// The hashing side: every chunk in order, read here or taken from the
/// scan.
fn hash(shared: &Shared, file: &File, len: u64) -> Digested {
    let mut hasher = Sha256::new();
    let mut read = 0u64;
    let mut number = 0u64;
    while number.saturating_mul(CHUNK) < len {
        let from_scan = {
            let mut state = shared.lock();
            loop {
                if state.to_hash.front().is_some_and(|(n, _)| *n == number) {
                    break state.to_hash.pop_front().map(|(_, chunk)| chunk);
                }
                if state.scan_gone {
                    state.claimed = state.claimed.max(number + 1);
                    break None;
                }
                // Read it here unless the scan has not taken what was read
                // for it yet (or it is the scan's, being read now).
                if state.claimed == number && state.to_scan.len() < AHEAD as usize {
                    state.claimed += 1;
                    break None;
                }
                state = shared.wait(state);
            }
        };
        let chunk = if let Some(chunk) = from_scan {
            chunk?
        } else {
            let (here, for_scan) = shared.read(Side::Hashing, file, len, number);
            shared.update(|state| {
                if !state.scan_gone {
                    state.to_scan.push_back((number, for_scan));
                }
            });
            here?
        };
        if chunk.is_empty() {
            // The file is shorter than `len` now.
            break;
        }
        hasher.update(&chunk[..]);
        read += chunk.len() as u64;
        number += 1;
        shared.done_with(chunk);
        shared.update(|state| state.hashed = number);
    }
    Ok((ktr_base::fsutil::hex(&hasher.finalize()), read))
}

/// Read chunk `number` of the first `len` bytes of `file` into `buf`
/// (replacing what it held): how many bytes (0 past the end).
fn read_chunk(file: &File, len: u64, number: u64, buf: &mut Vec<u8>) -> io::Result<usize> {
    let from = number.saturating_mul(CHUNK).min(len);
    let want = usize::try_from((len - from).min(CHUNK)).unwrap_or(0);
    buf.resize(want, 0);
    let mut done = 0;
    while done < want {
        match file.read_at(&mut buf[done..], from + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(done);
    Ok(done)
}

impl<'f> Reader<'f> {
    fn new(file: &'f File, len: u64) -> Reader<'f> {
        Reader {
            file,
            len,
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
            current: Arc::default(),
            at: 0,
            next: 0,
            failed: None,
        }
    }

    /// The next chunk: the hashing side's, or read here when nobody has
    /// read it yet (and the hashing side is not too far behind to take it).
    fn next_chunk(&mut self) -> io::Result<Chunk> {
        let number = self.next;
        let shared = &*self.shared;
        let mut state = shared.lock();
        loop {
            if state.to_scan.front().is_some_and(|(n, _)| *n == number) {
                let handed = state.to_scan.pop_front().map(|(_, chunk)| chunk);
                drop(state);
                shared.changed.notify_all();
                return handed.unwrap_or_else(|| Ok(Arc::default()));
            }
            let alone = state.hashing_gone;
            if alone || (state.claimed == number && number - state.hashed < AHEAD) {
                if !alone {
                    state.claimed += 1;
                }
                drop(state);
                let (here, for_hashing) = shared.read(Side::Scan, self.file, self.len, number);
                if !alone {
                    shared.update(|state| state.to_hash.push_back((number, for_hashing)));
                }
                return here;
            }
            state = shared.wait(state);
        }
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        self.shared.update(|state| {
            state.scan_gone = true;
            state.to_scan.clear();
        });
    }
}

impl BufRead for Reader<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.at == self.current.len() && self.next.saturating_mul(CHUNK) < self.len {
            if let Some((kind, message)) = &self.failed {
                return Err(io::Error::new(*kind, message.clone()));
            }
            let chunk = self.next_chunk().inspect_err(|e| {
                self.failed = Some((e.kind(), e.to_string()));
            })?;
            let old = std::mem::replace(&mut self.current, chunk);
            self.shared.done_with(old);
            self.at = 0;
            if self.current.is_empty() {
                // The file is shorter than `len` now: the end.
                self.next = u64::MAX;
            } else {
                self.next += 1;
            }
        }
        Ok(&self.current[self.at..])
    }

    fn consume(&mut self, amount: usize) {
        self.at = (self.at + amount).min(self.current.len());
    }
}

impl Read for Reader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};

    /// The scan reads every byte in order, chunk boundaries included, and
    /// the digest is the file's: also when the file is longer than `len`
    /// (only `len` bytes are read) and when it is empty.
    #[test]
    fn the_scan_reads_what_is_digested() {
        let body: Vec<u8> = (0..(3 * CHUNK as usize + 12_345))
            .map(|i| {
                if i % 97 == 0 {
                    b'\n'
                } else {
                    b'a' + (i % 26) as u8
                }
            })
            .collect();
        for len in [0, 1, CHUNK, body.len() as u64 - 7] {
            let mut file = tempfile::tempfile().unwrap();
            file.write_all(&body).unwrap();
            file.rewind().unwrap();
            let (lines, digested) = std::thread::scope(|s| {
                let (mut reader, reading) = start(s, &file, len);
                let mut lines = Vec::new();
                let mut line = Vec::new();
                while reader.read_until(b'\n', &mut line).unwrap() > 0 {
                    lines.extend_from_slice(&line);
                    line.clear();
                }
                (lines, reading.join().unwrap().unwrap())
            });
            let want = &body[..len as usize];
            assert_eq!(lines, want, "{len}");
            assert_eq!(digested, (ktr_base::fsutil::sha256_hex(want), len), "{len}");
        }
    }

    /// A scan that stops early never leaves the hashing thread waiting,
    /// and the digest is still of the whole `len`.
    #[test]
    fn a_scan_that_stops_early_ends_the_reading() {
        let body = vec![b'x'; 40 * CHUNK as usize];
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&body).unwrap();
        std::thread::scope(|s| {
            let (mut reader, reading) = start(s, &file, 40 * CHUNK);
            assert!(!reader.fill_buf().unwrap().is_empty());
            drop(reader);
            let digested = reading.join().unwrap().unwrap();
            assert_eq!(digested, (ktr_base::fsutil::sha256_hex(&body), 40 * CHUNK));
        });
    }

    /// When nobody has read a chunk yet, the scan reads it itself (here:
    /// all of them, no hashing side) and gets the same bytes.
    #[test]
    fn the_scan_reads_a_late_chunk_itself() {
        let body: Vec<u8> = (0..(2 * CHUNK as usize + 99))
            .map(|i| (i % 251) as u8)
            .collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&body).unwrap();
        let mut reader = Reader::new(&file, body.len() as u64);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert_eq!(got, body);
    }

    /// Each chunk is read from the file once, by one side or the other,
    /// whichever side is the slower, and both get every byte in order.
    #[test]
    fn every_chunk_is_read_once_and_both_sides_get_it() {
        let chunks = 12;
        let body: Vec<u8> = (0..(chunks * CHUNK as usize + 777))
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&body).unwrap();
        let want_digest = (ktr_base::fsutil::sha256_hex(&body), body.len() as u64);
        let mut by_scan = 0;
        for round in 0..16 {
            let (got, digested, reads) = std::thread::scope(|s| {
                let (mut reader, reading) = start(s, &file, body.len() as u64);
                let shared = Arc::clone(&reader.shared);
                let mut got = Vec::new();
                loop {
                    let n = reader.fill_buf().unwrap().len();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&reader.fill_buf().unwrap()[..n]);
                    reader.consume(n);
                    if round % 3 == 0 {
                        // A slow scan: the hashing side reads ahead.
                        std::thread::sleep(std::time::Duration::from_micros(300));
                    }
                }
                drop(reader);
                let digested = reading.join().unwrap().unwrap();
                let reads = shared.lock().reads;
                (got, digested, reads)
            });
            assert!(got == body, "round {round}: the scan's bytes differ");
            assert_eq!(digested, want_digest, "round {round}");
            let [scan, hashing] = reads;
            assert_eq!(
                scan + hashing,
                chunks as u64 + 1,
                "round {round}: {reads:?}"
            );
            by_scan += scan;
        }
        // The scan never sleeps in most rounds and hashing is slower than
        // copying lines: the scan reads some chunks itself.
        assert!(by_scan > 0, "the scan never read a chunk itself");
    }

    /// When the hashing side has ended (here: failed), the scan reads
    /// every chunk itself, however far ahead.
    #[test]
    fn a_scan_left_alone_reads_the_rest() {
        let body = vec![b'y'; 3 * AHEAD as usize * CHUNK as usize];
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&body).unwrap();
        let mut reader = Reader::new(&file, body.len() as u64);
        reader.shared.update(|state| state.hashing_gone = true);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert!(got == body);
    }

    /// A chunk the scan failed to read is nobody's to read again: asking
    /// again fails again instead of waiting for it forever.
    #[test]
    fn a_failed_read_fails_again_instead_of_waiting() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t");
            std::fs::write(&path, vec![b'z'; 3 * CHUNK as usize]).unwrap();
            // Open for writing only: every read fails (EBADF).
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            // No hashing side (and not gone): the scan claims the chunk.
            let mut reader = Reader::new(&file, 3 * CHUNK);
            let first = reader.fill_buf().map(<[u8]>::len).map_err(|e| e.kind());
            let again = reader.fill_buf().map(<[u8]>::len).map_err(|e| e.kind());
            let _ = done.send((first, again));
        });
        let (first, again) = finished
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the scan waited for a chunk nobody will read");
        assert!(first.is_err(), "{first:?}");
        assert_eq!(again, first);
    }
}
