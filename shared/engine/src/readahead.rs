//! The source read once for both the scan and its digest (issue 25: `ktr
//! plan` within 5× `wc -l`). A second thread reads the file a chunk at a
//! time, hashes each chunk and hands it to the scan through [`Reader`] (a
//! `BufRead`): the scan's core spends no time in `read(2)`, the file is
//! copied out of the page cache once instead of twice, and the digest
//! covers exactly the bytes the scan read.

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::{Scope, ScopedJoinHandle};

use sha2::{Digest as _, Sha256};

/// Bytes read at a time.
const CHUNK: u64 = 1 << 18;

/// Chunks read ahead of the scan at most (memory: about this many chunks,
/// twice: those in flight and those handed back for reuse).
const AHEAD: usize = 8;

/// The scan's side: the chunks, in order.
pub struct Reader {
    chunks: Receiver<io::Result<Vec<u8>>>,
    spent: SyncSender<Vec<u8>>,
    current: Vec<u8>,
    at: usize,
    ended: bool,
}

/// What the reading thread returns: the SHA-256 (hex) of the bytes it
/// read, and how many.
pub type Digested = io::Result<(String, u64)>;

/// Start reading the first `len` bytes of `file` (from its current
/// position, a freshly opened file's start) on a thread of `scope`.
pub fn start<'scope>(
    scope: &'scope Scope<'scope, '_>,
    file: &'scope File,
    len: u64,
) -> (Reader, ScopedJoinHandle<'scope, Digested>) {
    let (to_scan, chunks) = sync_channel::<io::Result<Vec<u8>>>(AHEAD);
    let (spent, to_reuse) = sync_channel::<Vec<u8>>(AHEAD);
    let reading = scope.spawn(move || {
        let mut source = file.take(len);
        let mut hasher = Sha256::new();
        let mut read = 0u64;
        loop {
            let mut chunk = to_reuse.try_recv().unwrap_or_default();
            chunk.clear();
            match source.by_ref().take(CHUNK).read_to_end(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&chunk);
                    read += n as u64;
                    // The scan stopped early (an error): nothing more to read.
                    if to_scan.send(Ok(chunk)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let kind = e.kind();
                    let message = e.to_string();
                    let _ = to_scan.send(Err(e));
                    return Err(io::Error::new(kind, message));
                }
            }
        }
        Ok((ktr_base::fsutil::hex(&hasher.finalize()), read))
    });
    let reader = Reader {
        chunks,
        spent,
        current: Vec::new(),
        at: 0,
        ended: false,
    };
    (reader, reading)
}

impl BufRead for Reader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.at == self.current.len() && !self.ended {
            let spent = std::mem::take(&mut self.current);
            if spent.capacity() > 0 {
                let _ = self.spent.try_send(spent);
            }
            self.at = 0;
            match self.chunks.recv() {
                Ok(Ok(chunk)) => self.current = chunk,
                Ok(Err(e)) => {
                    self.ended = true;
                    return Err(e);
                }
                Err(_) => self.ended = true,
            }
        }
        Ok(&self.current[self.at..])
    }

    fn consume(&mut self, amount: usize) {
        self.at = (self.at + amount).min(self.current.len());
    }
}

impl Read for Reader {
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

    /// A scan that stops early never leaves the reading thread waiting.
    #[test]
    fn a_scan_that_stops_early_ends_the_reading() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&vec![b'x'; 40 * CHUNK as usize]).unwrap();
        file.rewind().unwrap();
        std::thread::scope(|s| {
            let (mut reader, reading) = start(s, &file, 40 * CHUNK);
            assert!(!reader.fill_buf().unwrap().is_empty());
            drop(reader);
            let (_, read) = reading.join().unwrap().unwrap();
            assert!(read < 40 * CHUNK, "{read}");
        });
    }
}
