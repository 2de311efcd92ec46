//! The source read once for both the scan and its digest (`ktr
//! plan` within 5× `wc -l`). A second thread reads the file a chunk at a
//! time, hashes each chunk and hands it to the scan through [`Reader`] (a
//! `BufRead`): the scan's core spends no time in `read(2)` and the file is
//! copied out of the page cache once instead of twice.
//!
//! The scan never waits for that thread: when the next chunk is not there
//! yet (the machine is busy and the thread was not scheduled), the scan
//! reads the chunk itself and drops the thread's copy of it when it comes.
//! Either way the digest is of the file's first `len` bytes as that thread
//! read them; a file changed meanwhile is noticed by the plan (size and
//! modification time before and after).

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::{Scope, ScopedJoinHandle};

use sha2::{Digest as _, Sha256};

/// Bytes read at a time.
const CHUNK: u64 = 1 << 18;

/// Chunks read ahead of the scan at most (memory: about this many chunks,
/// twice: those in flight and those handed back for reuse).
const AHEAD: usize = 8;

/// A chunk: its number and bytes (`CHUNK` of them, fewer at the end).
type Chunk = (u64, Vec<u8>);

/// The scan's side: the file's chunks, in order.
pub(crate) struct Reader<'f> {
    file: &'f File,
    len: u64,
    chunks: Receiver<io::Result<Chunk>>,
    spent: SyncSender<Vec<u8>>,
    /// The chunk being read and how far.
    current: Vec<u8>,
    at: usize,
    /// The number of the next chunk the scan needs.
    next: u64,
    /// The thread's chunks are no longer needed (it ended or failed).
    alone: bool,
}

impl<'f> Reader<'f> {
    /// A reader of the first `len` bytes of `file` that takes the reading
    /// thread's `chunks` and gives their buffers back through `spent`.
    fn new(
        file: &'f File,
        len: u64,
        chunks: Receiver<io::Result<Chunk>>,
        spent: SyncSender<Vec<u8>>,
    ) -> Reader<'f> {
        Reader {
            file,
            len,
            chunks,
            spent,
            current: Vec::new(),
            at: 0,
            next: 0,
            alone: false,
        }
    }
}

/// What the reading thread returns: the SHA-256 (hex) of the bytes it
/// read, and how many.
pub(crate) type Digested = io::Result<(String, u64)>;

/// Start reading the first `len` bytes of `file` on a thread of `scope`.
pub fn start<'scope>(
    scope: &'scope Scope<'scope, '_>,
    file: &'scope File,
    len: u64,
) -> (Reader<'scope>, ScopedJoinHandle<'scope, Digested>) {
    let (to_scan, chunks) = sync_channel::<io::Result<Chunk>>(AHEAD);
    let (spent, to_reuse) = sync_channel::<Vec<u8>>(AHEAD);
    let reading = scope.spawn(move || {
        let mut hasher = Sha256::new();
        let mut read = 0u64;
        let mut number = 0u64;
        // Once the scan is gone (it ended, or stopped at an error), the
        // file is still read to its `len` for the digest.
        let mut scan_gone = false;
        let mut spare = None;
        while read < len {
            let mut chunk = spare
                .take()
                .or_else(|| to_reuse.try_recv().ok())
                .unwrap_or_default();
            let n = match read_chunk(file, len, number, &mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    let kind = e.kind();
                    let message = e.to_string();
                    if !scan_gone {
                        let _ = to_scan.send(Err(e));
                    }
                    return Err(io::Error::new(kind, message));
                }
            };
            hasher.update(&chunk);
            read += n as u64;
            number += 1;
            if scan_gone {
                spare = Some(chunk);
            } else if let Err(back) = to_scan.send(Ok((number - 1, chunk))) {
                scan_gone = true;
                spare = back.0.ok().map(|(_, chunk)| chunk);
            }
        }
        Ok((ktr_base::digest::hex(&hasher.finalize()), read))
    });
    (Reader::new(file, len, chunks, spent), reading)
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

impl Reader<'_> {
    /// The next chunk: the thread's, or read here when it is not there yet.
    fn next_chunk(&mut self) -> io::Result<Vec<u8>> {
        let mut buf = std::mem::take(&mut self.current);
        while !self.alone {
            match self.chunks.try_recv() {
                Ok(Ok((number, chunk))) if number == self.next => {
                    if buf.capacity() > 0 {
                        let _ = self.spent.try_send(buf);
                    }
                    return Ok(chunk);
                }
                // One the scan read itself already.
                Ok(Ok((_, old))) => {
                    let _ = self.spent.try_send(old);
                }
                Ok(Err(e)) => {
                    self.alone = true;
                    return Err(e);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => self.alone = true,
            }
        }
        read_chunk(self.file, self.len, self.next, &mut buf)?;
        Ok(buf)
    }
}

impl BufRead for Reader<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.at == self.current.len() && self.next.saturating_mul(CHUNK) < self.len {
            let chunk = self.next_chunk()?;
            self.current = chunk;
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
            assert_eq!(digested, (ktr_base::digest::sha256_hex(want), len), "{len}");
        }
    }

    /// A scan that stops early never leaves the reading thread waiting,
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
            assert_eq!(digested, (ktr_base::digest::sha256_hex(&body), 40 * CHUNK));
        });
    }

    /// When the thread's chunks are late, the scan reads them itself (here:
    /// all of them, the thread never started) and gets the same bytes.
    #[test]
    fn the_scan_reads_a_late_chunk_itself() {
        let body: Vec<u8> = (0..(2 * CHUNK as usize + 99))
            .map(|i| (i % 251) as u8)
            .collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&body).unwrap();
        let (_to_scan, chunks) = sync_channel(AHEAD);
        let (spent, _to_reuse) = sync_channel(AHEAD);
        let mut reader = Reader::new(&file, body.len() as u64, chunks, spent);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert_eq!(got, body);
    }
}
