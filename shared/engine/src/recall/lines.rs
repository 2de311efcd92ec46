//! One pass over a file, line by line, in a fixed buffer: a line that fits
//! is handed over whole; a longer one is streamed through the prefilter in
//! chunks and handed over as its offset, length, head and first match, so
//! memory stays flat whatever the file holds.

use std::fs::File;
use std::io::{self, Read};

/// The buffer: lines up to this size are handed over whole.
pub const BUFFER: usize = 4 << 20;
/// How much of a long line's start is kept (to tell its record type).
pub const HEAD: usize = 4 << 10;

/// The prefilter: where it first matches in some bytes, and how long.
pub type Finder<'a> = &'a dyn Fn(&[u8]) -> Option<(usize, usize)>;

/// One line of the file (without its `\n`).
#[derive(Clone, Copy)]
pub enum Line<'a> {
    /// A line that fits the buffer.
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
/// (with `overlap` bytes kept between chunks so a match across a chunk
/// edge is seen).
pub fn each_line(
    file: &mut File,
    find: Finder<'_>,
    overlap: usize,
    mut on_line: impl FnMut(Line<'_>) -> Flow,
) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    let (mut start, mut end, mut offset) = (0usize, 0usize, 0u64);
    let mut eof = false;
    loop {
        if let Some(nl) = memchr::memchr(b'\n', &buf[start..end]) {
            let line = Line::Whole {
                offset,
                bytes: &buf[start..start + nl],
            };
            if on_line(line) == Flow::Stop {
                return Ok(());
            }
            start += nl + 1;
            offset += nl as u64 + 1;
            continue;
        }
        if eof {
            if start < end
                && on_line(Line::Whole {
                    offset,
                    bytes: &buf[start..end],
                }) == Flow::Stop
            {
                return Ok(());
            }
            return Ok(());
        }
        if start > 0 {
            buf.copy_within(start..end, 0);
            end -= start;
            start = 0;
        }
        if end == buf.len() {
            let (len, head, first_match, at_eof) =
                long_line(file, &mut buf, offset, find, overlap)?;
            if on_line(Line::Long {
                offset,
                len,
                head: &head,
                first_match,
            }) == Flow::Stop
            {
                return Ok(());
            }
            offset += len + 1;
            (start, end, eof) = (0, at_eof.1, at_eof.0);
            continue;
        }
        let n = read_some(file, &mut buf[end..])?;
        if n == 0 {
            eof = true;
        }
        end += n;
    }
}

type LongLine = (u64, Vec<u8>, Option<(u64, usize)>, (bool, usize));

/// Stream a line longer than the (full) buffer to its end. Returns its
/// length, head, first prefilter match, and (eof, bytes after the line
/// left at the start of `buf`).
fn long_line(
    file: &mut File,
    buf: &mut [u8],
    offset: u64,
    find: Finder<'_>,
    overlap: usize,
) -> io::Result<LongLine> {
    let head = buf[..HEAD.min(buf.len())].to_vec();
    let overlap = overlap.min(buf.len() / 2);
    // `buf[..end]` holds line bytes starting at file offset `base`.
    let (mut base, mut end) = (offset, buf.len());
    let mut first_match = None;
    loop {
        let nl = memchr::memchr(b'\n', &buf[..end]);
        let upto = nl.unwrap_or(end);
        if first_match.is_none() {
            first_match = find(&buf[..upto]).map(|(at, n)| (base + at as u64, n));
        }
        if let Some(nl) = nl {
            let len = base + nl as u64 - offset;
            buf.copy_within(nl + 1..end, 0);
            return Ok((len, head, first_match, (false, end - nl - 1)));
        }
        let keep = overlap.min(end);
        buf.copy_within(end - keep..end, 0);
        base += (end - keep) as u64;
        let n = read_some(file, &mut buf[keep..])?;
        end = keep + n;
        if n == 0 {
            let len = base + end as u64 - offset;
            return Ok((len, head, first_match, (true, 0)));
        }
    }
}

fn read_some(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let mut long = vec![b'x'; BUFFER * 2 + 10];
        // A match straddling the first chunk edge.
        long[BUFFER - 2..BUFFER + 2].copy_from_slice(b"NEED");
        content.extend_from_slice(&long);
        content.extend_from_slice(b"\nlast NEED");
        let seen = lines_of(&content, b"NEED");
        let last_at = long_at + long.len() as u64 + 1;
        assert_eq!(
            seen,
            vec![
                (0, 2, None),
                (
                    long_at,
                    long.len() as u64,
                    Some(long_at + BUFFER as u64 - 2)
                ),
                (last_at, 9, Some(last_at + 5)),
            ]
        );
    }
}
