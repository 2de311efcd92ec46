//! One pass over a file, line by line, as every JSON Lines reader reads
//! ([`crate::lines::read_line`], one long-line rule): a line shorter than
//! [`crate::lines::LONG`] is handed over whole; a longer one is streamed
//! through the prefilter a piece at a time and handed over as its offset,
//! length, head and first match, so memory stays flat whatever the file
//! holds.

use std::fs::File;
use std::io::{self, BufRead, BufReader};

/// How much of a long line's start is kept (to tell its record type).
pub const HEAD: usize = 4 << 10;

/// The prefilter: where it first matches in some bytes, and how long.
pub type Finder<'a> = &'a dyn Fn(&[u8]) -> Option<(usize, usize)>;

/// One line of the file (without its `\n`).
#[derive(Clone, Copy)]
pub enum Line<'a> {
    /// A line shorter than [`crate::lines::LONG`].
    Whole { offset: u64, bytes: &'a [u8] },
    /// A longer one: where it is, its first bytes, and where the prefilter
    /// first matched (a file offset and length), if it did.
    Long {
        offset: u64,
        len: u64,
        head: &'a [u8],
        first_match: Option<(u64, usize)>,
    },
}

/// What the caller wants next.
#[derive(PartialEq, Eq)]
pub enum Flow {
    Go,
    Stop,
}

/// Read `file` line by line; `find` is the prefilter used on long lines
/// (with `overlap` bytes kept between pieces so a match across a piece
/// edge is seen).
pub fn each_line(
    file: &mut File,
    find: Finder<'_>,
    overlap: usize,
    mut on_line: impl FnMut(Line<'_>) -> Flow,
) -> io::Result<()> {
    let mut input = BufReader::with_capacity(1 << 16, file);
    let mut buf = Vec::with_capacity(1 << 16);
    let mut offset = 0u64;
    loop {
        if let Some(len) = crate::lines::buffered_line(&mut input)? {
            let bytes = &input.buffer()[..len];
            if on_line(Line::Whole { offset, bytes }) == Flow::Stop {
                return Ok(());
            }
            input.consume(len + 1);
            offset += len as u64 + 1;
            continue;
        }
        let mut long = Long {
            len: 0,
            head: Vec::new(),
            first_match: None,
            carry: Vec::new(),
        };
        let Some(read) = crate::lines::read_line(&mut input, &mut buf, |piece| {
            long.feed(offset, piece, find, overlap);
        })?
        else {
            return Ok(());
        };
        let line = if read.long {
            Line::Long {
                offset,
                len: long.len,
                head: &long.head,
                first_match: long.first_match,
            }
        } else {
            Line::Whole {
                offset,
                bytes: buf.strip_suffix(b"\n").unwrap_or(&buf),
            }
        };
        if on_line(line) == Flow::Stop {
            return Ok(());
        }
        offset += read.taken as u64;
    }
}

/// A long line as its pieces go by.
struct Long {
    len: u64,
    head: Vec<u8>,
    first_match: Option<(u64, usize)>,
    /// The last `overlap` bytes searched, searched again before the next
    /// piece.
    carry: Vec<u8>,
}

impl Long {
    fn feed(&mut self, offset: u64, piece: &[u8], find: Finder<'_>, overlap: usize) {
        let room = HEAD.saturating_sub(self.head.len());
        self.head.extend_from_slice(&piece[..room.min(piece.len())]);
        if self.first_match.is_none() {
            // `window` starts at file offset `base`.
            let base = offset + self.len - self.carry.len() as u64;
            let mut window = std::mem::take(&mut self.carry);
            window.extend_from_slice(piece);
            self.first_match = find(&window).map(|(at, n)| (base + at as u64, n));
            let keep = overlap.min(window.len());
            window.drain(..window.len() - keep);
            self.carry = window;
        }
        self.len += piece.len() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lines::LONG;
    use std::io::Write;

    fn lines_of(content: &[u8], needle: &'static [u8]) -> Vec<(u64, u64, Option<u64>)> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(content).unwrap();
        f.sync_all().unwrap();
        let mut f = f;
        use std::io::Seek;
        f.rewind().unwrap();
        let find = |b: &[u8]| memchr::memmem::find(b, needle).map(|at| (at, needle.len()));
        let mut seen = Vec::new();
        each_line(&mut f, &find, needle.len(), |line| {
            seen.push(match line {
                Line::Whole { offset, bytes } => (
                    offset,
                    bytes.len() as u64,
                    find(bytes).map(|m| offset + m.0 as u64),
                ),
                Line::Long {
                    offset,
                    len,
                    first_match,
                    ..
                } => (offset, len, first_match.map(|m| m.0)),
            });
            Flow::Go
        })
        .unwrap();
        seen
    }

    #[test]
    fn short_and_long_lines_keep_their_offsets_and_matches() {
        let mut content = b"ab\n".to_vec();
        let long_at = content.len() as u64;
        let mut long = vec![b'x'; LONG * 2 + 10];
        // A match straddling the first chunk edge.
        long[LONG - 2..LONG + 2].copy_from_slice(b"NEED");
        content.extend_from_slice(&long);
        content.extend_from_slice(b"\nlast NEED");
        let seen = lines_of(&content, b"NEED");
        let last_at = long_at + long.len() as u64 + 1;
        assert_eq!(
            seen,
            vec![
                (0, 2, None),
                (long_at, long.len() as u64, Some(long_at + LONG as u64 - 2)),
                (last_at, 9, Some(last_at + 5)),
            ]
        );
    }

    /// Recall splits lines by the scan's rule ([`crate::lines::read_line`]):
    /// a line shorter than `LONG` bytes is whole, one of `LONG` or more is
    /// long, wherever the file's reads end.
    #[test]
    fn a_line_is_long_from_the_one_rule_on() {
        for n in [LONG - 1, LONG, LONG + 1, 3 * LONG] {
            let mut content = format!("{{\"t\":\"{}\"}}\n", "a".repeat(n - 8)).into_bytes();
            assert_eq!(content.len(), n + 1);
            content.extend_from_slice(b"{}\n");
            let seen = lines_of(&content, b"NEED");
            let want_long = n >= LONG;
            assert_eq!(seen.len(), 2, "{n}");
            assert_eq!(seen[0].1, n as u64, "{n}");
            assert_eq!(seen[1], (n as u64 + 1, 2, None), "{n}");
            let mut f = tempfile::tempfile().unwrap();
            f.write_all(&content).unwrap();
            use std::io::Seek;
            f.rewind().unwrap();
            let mut kinds = Vec::new();
            each_line(&mut f, &|_| None, 0, |line| {
                kinds.push(matches!(line, Line::Long { .. }));
                Flow::Go
            })
            .unwrap();
            assert_eq!(kinds, [want_long, false], "{n}");
        }
    }
}
