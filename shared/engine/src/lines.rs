//! The lines of a JSON Lines file, each ready to parse: a line shorter than
//! [`span::LONG`] as it is, a longer one as its skeleton ([`span`]: its
//! long strings never held), and lone surrogates mapped ([`lone`]).

use std::io::BufRead;
use std::sync::Arc;

use crate::lone;
use crate::span::{self, ReadAt, skeleton::Skeleton};

/// Where a line is and what it holds.
#[derive(Debug, Clone, Copy)]
pub struct LineAt {
    /// 1-based.
    pub number: usize,
    /// Where the line starts in the input.
    pub offset: u64,
    /// Its length without the newline (and a `\r` before it).
    pub len: usize,
    /// The lone surrogates it holds.
    pub surrogates: lone::Surrogates,
}

/// A line and its bytes to parse (`None`: not valid JSON).
pub type Next<'a> = (LineAt, Option<&'a [u8]>);

/// A line buffer bigger than this is freed after its line is used.
const KEPT: usize = 1 << 20;

/// Reads lines from `input`.
pub(crate) struct Lines<R> {
    input: R,
    /// The file `input` reads, to read a long text again later (`None`:
    /// only the facts of long texts are kept).
    file: Option<Arc<dyn ReadAt>>,
    number: usize,
    offset: u64,
    buf: Vec<u8>,
    ready: Option<Vec<u8>>,
}

impl<R: BufRead> Lines<R> {
    pub fn new(input: R, file: Option<Arc<dyn ReadAt>>) -> Lines<R> {
        Lines {
            input,
            file,
            number: 0,
            offset: 0,
            buf: Vec::with_capacity(1 << 16),
            ready: None,
        }
    }

    /// The next line and its bytes to parse (`None`: a long string in it is
    /// not a valid JSON string, so the line is not valid JSON); `None` at
    /// the end of the input.
    pub fn next_line(&mut self) -> std::io::Result<Option<Next<'_>>> {
        if self.buf.capacity() > KEPT {
            self.buf = Vec::with_capacity(1 << 16);
        }
        self.ready = None;
        let offset = self.offset;
        let file = &self.file;
        let (mut sk, mut fed, mut valid) = (None, Fed::default(), true);
        let Some(read) = read_line(&mut self.input, &mut self.buf, |piece| {
            let sk = sk.get_or_insert_with(|| Skeleton::new(offset, file.clone()));
            valid = valid && sk.feed(piece).is_ok();
            fed.note(piece);
        })?
        else {
            return Ok(None);
        };
        self.number += 1;
        self.offset += read.taken as u64;
        let len = match sk {
            None => trim_newline(&self.buf).len(),
            Some(sk) => {
                match sk.finish() {
                    Ok((skeleton, _)) if valid => self.ready = Some(skeleton),
                    _ => valid = false,
                }
                fed.len - fed.trailing_cr
            }
        };
        let parse: &[u8] = match (&self.ready, valid) {
            (_, false) => &[],
            (Some(skeleton), true) => skeleton,
            (None, true) => trim_newline(&self.buf),
        };
        let (surrogates, mapped) = lone::survey_and_map(parse);
        if mapped.is_some() {
            self.ready = mapped;
        }
        let at = LineAt {
            number: self.number,
            offset,
            len,
            surrogates,
        };
        let bytes = match (&self.ready, valid) {
            (_, false) => None,
            (Some(ready), true) => Some(ready.as_slice()),
            (None, true) => Some(trim_newline(&self.buf)),
        };
        Ok(Some((at, bytes)))
    }
}

/// The one long-line rule of every JSON Lines reader (the scan, verify,
/// recall): a line of [`LONG`] bytes or more is never held whole.
pub(crate) const LONG: usize = span::LONG;

/// What [`read_line`] read.
pub(crate) struct Read {
    /// Bytes taken from the input, the newline included.
    pub taken: usize,
    /// The line was [`LONG`] or longer: handed on a piece at a time.
    pub long: bool,
}

/// The next line of `input`: a line shorter than [`LONG`] is left in
/// `buf` (its newline included); a longer one is handed to `long` a piece
/// at a time, without its final `\n`, and `buf` freed. `None` at the end.
pub(crate) fn read_line<R: BufRead>(
    input: &mut R,
    buf: &mut Vec<u8>,
    mut long: impl FnMut(&[u8]),
) -> std::io::Result<Option<Read>> {
    buf.clear();
    let (read, ended) = read_until_or(input, buf, LONG)?;
    if read == 0 {
        return Ok(None);
    }
    if ended && trim_newline(buf).len() < LONG {
        return Ok(Some(Read {
            taken: read,
            long: false,
        }));
    }
    long(if ended { trim_lf(buf) } else { &buf[..] });
    let mut taken = read;
    if !ended {
        loop {
            let available = fill(input)?;
            if available.is_empty() {
                break;
            }
            let (body, used, done) = match memchr::memchr(b'\n', available) {
                Some(i) => (&available[..i], i + 1, true),
                None => (available, available.len(), false),
            };
            long(body);
            input.consume(used);
            taken += used;
            if done {
                break;
            }
        }
    }
    *buf = Vec::new();
    Ok(Some(Read { taken, long: true }))
}

/// The length (without its `\n`) of the next line of `input` when it
/// lies whole in the reader's buffer, to be used there without a copy
/// (`input.buffer()`, then `consume(len + 1)`); `None`: read it with
/// [`read_line`] (the same rule: a line of [`LONG`] or more is never
/// handed over whole).
pub(crate) fn buffered_line<R: std::io::Read>(
    input: &mut std::io::BufReader<R>,
) -> std::io::Result<Option<usize>> {
    let available = fill(input)?;
    Ok(memchr::memchr(b'\n', available).filter(|&i| i < LONG))
}

/// Bytes of a line fed so far, and how many `\r` end them.
#[derive(Default)]
struct Fed {
    len: usize,
    trailing_cr: usize,
}

impl Fed {
    fn note(&mut self, bytes: &[u8]) {
        self.len += bytes.len();
        let cr = bytes.iter().rev().take_while(|&&b| b == b'\r').count();
        self.trailing_cr = if cr == bytes.len() {
            self.trailing_cr + cr
        } else {
            cr
        };
    }
}

/// `input.fill_buf()`, tried again when interrupted.
fn fill<R: BufRead>(input: &mut R) -> std::io::Result<&[u8]> {
    loop {
        match input.fill_buf() {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    input.fill_buf()
}

/// `BufRead::read_until(b'\n')`, but stopping once `buf` holds more than
/// `limit` bytes: (bytes read, the line ended here or the input did).
fn read_until_or<R: BufRead>(
    input: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<(usize, bool)> {
    let mut read = 0;
    loop {
        let available = fill(input)?;
        if available.is_empty() {
            return Ok((read, true));
        }
        let (used, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        buf.extend_from_slice(&available[..used]);
        input.consume(used);
        read += used;
        if done {
            return Ok((read, true));
        }
        if buf.len() > limit {
            return Ok((read, false));
        }
    }
}

/// `buf` without its newline and any `\r` before it.
pub(crate) fn trim_newline(buf: &[u8]) -> &[u8] {
    let mut end = buf.len();
    while end > 0 && matches!(buf[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &buf[..end]
}

/// `buf` without its final `\n` only (a skeleton keeps `\r`: whitespace).
fn trim_lf(buf: &[u8]) -> &[u8] {
    buf.strip_suffix(b"\n").unwrap_or(buf)
}

/// The skeleton of the line at `at` (its `len` bytes, without the
/// newline) in `file`, read a chunk at a time: `None` when a long string
/// in it is not a valid JSON string.
pub(crate) fn skeleton_at(
    file: &Arc<dyn ReadAt>,
    offset: u64,
    len: u64,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut sk = Skeleton::new(offset, Some(file.clone()));
    let mut buf = vec![0u8; 1 << 16];
    let mut done = 0u64;
    let mut valid = true;
    while done < len {
        let want = usize::try_from(len - done).map_or(buf.len(), |n| n.min(buf.len()));
        let n = file.read_at(&mut buf[..want], offset + done)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        valid = valid && sk.feed(&buf[..n]).is_ok();
        done += n as u64;
    }
    Ok(sk
        .finish()
        .ok()
        .filter(|_| valid)
        .map(|(skeleton, _)| skeleton))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<(usize, usize, Option<Vec<u8>>)> {
        let mut r = Lines::new(input, None);
        let mut out = Vec::new();
        while let Some((at, bytes)) = r.next_line().unwrap() {
            out.push((at.offset as usize, at.len, bytes.map(<[u8]>::to_vec)));
        }
        out
    }

    #[test]
    fn short_lines_are_read_as_they_are() {
        assert_eq!(
            lines(b"{\"a\":1}\r\n\n{\"b\":2}"),
            vec![
                (0, 7, Some(b"{\"a\":1}".to_vec())),
                (9, 0, Some(Vec::new())),
                (10, 7, Some(b"{\"b\":2}".to_vec()))
            ]
        );
    }

    #[test]
    fn a_long_line_is_read_as_its_skeleton_and_the_next_line_after_it() {
        let text = "x\\\"y ".repeat(span::LONG / 4);
        let long = format!("{{\"k\":\"short\",\"t\":\"{text}\",\"n\":[1,2]}}\r\n");
        let input = format!("{long}{{\"next\":true}}\n");
        let got = lines(input.as_bytes());
        assert_eq!(got.len(), 2);
        let (offset, len, bytes) = &got[0];
        assert_eq!((*offset, *len), (0, long.len() - 2));
        let skeleton = String::from_utf8(bytes.clone().unwrap()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&skeleton).unwrap();
        assert_eq!(v["k"], "short");
        assert_eq!(v["n"], serde_json::json!([1, 2]));
        let token = v["t"].as_str().unwrap();
        assert!(span::has(token), "{skeleton}");
        assert!(skeleton.len() < 1000, "{} bytes", skeleton.len());
        let decoded: String = serde_json::from_str(&format!("\"{text}\"")).unwrap();
        assert_eq!(span::bytes(token), decoded.len() as u64);
        assert_eq!(span::head(token), decoded[..4096]);
        assert_eq!(
            span::sha256(token).unwrap(),
            ktr_base::digest::sha256_hex(decoded.as_bytes())
        );
        assert_eq!(got[1], (long.len(), 13, Some(b"{\"next\":true}".to_vec())));
    }

    #[test]
    fn a_long_line_with_an_invalid_long_string_is_not_valid() {
        let bad = format!("{{\"t\":\"{}\\q\"}}\n{{}}\n", "a".repeat(span::LONG));
        let got = lines(bad.as_bytes());
        assert_eq!(got[0].2, None);
        assert_eq!(got[1].2, Some(b"{}".to_vec()));
    }

    /// The token of a long text made of `piece` repeated, read from memory.
    fn long_token(piece: &str) -> (String, String) {
        let text = piece.repeat(span::LONG / piece.len() + 1);
        let line = format!("{{\"t\":\"{text}\"}}");
        let file: Arc<dyn ReadAt> = Arc::new(line.clone().into_bytes());
        let skeleton = skeleton_at(&file, 0, line.len() as u64).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&skeleton).unwrap();
        (v["t"].as_str().unwrap().to_string(), text)
    }

    #[test]
    fn a_long_text_is_searched_and_elided_a_piece_at_a_time() {
        let (token, text) = long_token("ignore previous instructions; 中文 words ");
        let pattern = regex::Regex::new("ignore previous").unwrap();
        let stamped = format!("stamp ignore previous\n{token}");
        let whole = format!("stamp ignore previous\n{text}");
        assert_eq!(
            span::count_matches(&stamped, &pattern).unwrap(),
            pattern.find_iter(&whole).count()
        );
        let (count, head, tail) = span::ends(&token, 10).unwrap();
        assert_eq!(count, text.chars().count());
        assert_eq!(head, text.chars().take(10).collect::<String>());
        assert_eq!(tail, text.chars().skip(count - 10).collect::<String>());
        assert_eq!(span::counts(&token), crate::counts::Counts::of(&text));
        assert!(!span::blank(&token));
    }

    #[test]
    fn a_long_text_is_read_again_from_its_file_and_copied_raw() {
        let text = "é\\u00e9 \\/ 中 ".repeat(span::LONG / 8);
        let line = format!("{{\"t\":\"{text}\"}}");
        let file: Arc<dyn ReadAt> = Arc::new(line.clone().into_bytes());
        let skeleton = skeleton_at(&file, 0, line.len() as u64).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&skeleton).unwrap();
        let token = v["t"].as_str().unwrap().to_string();
        let decoded: String = serde_json::from_str(&format!("\"{text}\"")).unwrap();
        assert_eq!(span::expand(&token).unwrap(), decoded);
        // Frozen (the startup snapshot), it is read again on any thread,
        // whose span table knows nothing of it.
        let frozen = span::Frozen::of(&format!("head\n\n{token}")).unwrap();
        let again = std::thread::spawn(move || frozen.expand().unwrap())
            .join()
            .unwrap();
        assert_eq!(again, format!("head\n\n{decoded}"));
        let json = serde_json::to_string(&format!("stamp\n{token}")).unwrap();
        let mut out = Vec::new();
        span::expand_json(&json, &mut |b| {
            out.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("\"stamp\\n{text}\"")
        );
    }
}
