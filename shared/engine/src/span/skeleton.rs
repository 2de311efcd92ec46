//! The skeleton of a long line: the line with each string value of
//! [`LONG`] raw bytes or more replaced by its token ([`super`]), built as
//! the line streams by. Only strings shorter than that are held (and the
//! bytes between strings); a long one is decoded once for its facts and
//! forgotten.

use std::sync::Arc;

use super::decode::{Decoder, Invalid};
use super::{FactsBuilder, LONG, ReadAt, Source};

/// Where the string being read goes.
enum Text {
    /// Held: shorter than [`LONG`] so far (or a key).
    Held(Vec<u8>),
    /// Decoded as it comes: a long value.
    Span(Box<(Decoder, FactsBuilder)>),
}

/// A string being read: where it started (its first raw byte, in the line)
/// and whether its last byte was an escape's backslash.
struct Open {
    start: u64,
    /// Raw bytes inside the quotes so far.
    len: u64,
    key: bool,
    escaped: bool,
    text: Text,
}

/// A line's skeleton, being built.
pub(crate) struct Skeleton {
    out: Vec<u8>,
    /// Open `{` and `[`.
    stack: Vec<u8>,
    expect_key: bool,
    open: Option<Open>,
    /// Raw bytes of the line taken so far.
    pos: u64,
    /// Where the line starts in its file, and the file (to read spans
    /// again), if known.
    base: u64,
    file: Option<Arc<dyn ReadAt>>,
    spans: usize,
}

impl Skeleton {
    /// A skeleton of the line at `base` in `file` (`None`: its spans
    /// cannot be read again, only their facts are kept).
    pub fn new(base: u64, file: Option<Arc<dyn ReadAt>>) -> Skeleton {
        Skeleton {
            out: Vec::new(),
            stack: Vec::new(),
            expect_key: false,
            open: None,
            pos: 0,
            base,
            file,
            spans: 0,
        }
    }

    /// The next raw bytes of the line.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<(), Invalid> {
        let mut i = 0;
        while i < chunk.len() {
            i = if self.open.is_some() {
                self.string(chunk, i)?
            } else {
                self.outside(chunk, i)
            };
        }
        self.pos += chunk.len() as u64;
        Ok(())
    }

    /// The skeleton and how many spans it holds; a string left open is
    /// invalid.
    pub fn finish(self) -> Result<(Vec<u8>, usize), Invalid> {
        if self.open.is_some() {
            return Err(Invalid);
        }
        Ok((self.out, self.spans))
    }

    /// Bytes between strings: copied, the structure followed (is the next
    /// string a key?). Returns where the next string starts, or the end.
    fn outside(&mut self, chunk: &[u8], from: usize) -> usize {
        for (j, &b) in chunk[from..].iter().enumerate() {
            let i = from + j;
            self.out.push(b);
            match b {
                b'{' => {
                    self.stack.push(b);
                    self.expect_key = true;
                }
                b'[' => {
                    self.stack.push(b);
                    self.expect_key = false;
                }
                b'}' | b']' => {
                    self.stack.pop();
                    self.expect_key = false;
                }
                b',' => self.expect_key = self.stack.last() == Some(&b'{'),
                b':' => self.expect_key = false,
                b'"' => {
                    self.open = Some(Open {
                        start: self.pos + i as u64 + 1,
                        len: 0,
                        key: self.expect_key,
                        escaped: false,
                        text: Text::Held(Vec::new()),
                    });
                    return i + 1;
                }
                _ => {}
            }
        }
        chunk.len()
    }

    /// Bytes of the open string from `from`: up to its closing quote (then
    /// closed) or the end of the chunk. Returns where reading goes on.
    fn string(&mut self, chunk: &[u8], from: usize) -> Result<usize, Invalid> {
        let open = self.open.as_mut().ok_or(Invalid)?;
        let mut j = from;
        let end = loop {
            if open.escaped {
                if j >= chunk.len() {
                    break None;
                }
                open.escaped = false;
                j += 1;
                continue;
            }
            match memchr::memchr2(b'"', b'\\', &chunk[j..]) {
                None => break None,
                Some(k) if chunk[j + k] == b'\\' => {
                    open.escaped = true;
                    j += k + 1;
                }
                Some(k) => break Some(j + k),
            }
        };
        let inside = &chunk[from..end.unwrap_or(chunk.len())];
        push_inside(open, inside)?;
        match end {
            Some(quote) => {
                self.close()?;
                Ok(quote + 1)
            }
            None => Ok(chunk.len()),
        }
    }

    /// The open string ended: held, it is copied; a span gives its token.
    fn close(&mut self) -> Result<(), Invalid> {
        let open = self.open.take().ok_or(Invalid)?;
        match open.text {
            Text::Held(bytes) => {
                self.out.extend_from_slice(&bytes);
                self.out.push(b'"');
            }
            Text::Span(span) => {
                let (decoder, mut facts) = *span;
                decoder.finish(&mut |s| facts.push(s))?;
                let raw_len = open.len;
                let source = self.file.clone().map(|file| Source {
                    file,
                    at: self.base + open.start,
                    len: raw_len,
                });
                let token = super::register(facts.finish(raw_len), source);
                let escaped = serde_json::to_string(&token).map_err(|_| Invalid)?;
                // The opening quote is already out.
                self.out.extend_from_slice(&escaped.as_bytes()[1..]);
                self.spans += 1;
            }
        }
        Ok(())
    }
}

/// Take `inside` (raw bytes of the open string): held, or decoded once the
/// string is a long value.
fn push_inside(open: &mut Open, inside: &[u8]) -> Result<(), Invalid> {
    open.len += inside.len() as u64;
    if let Text::Held(held) = &mut open.text {
        held.extend_from_slice(inside);
        if held.len() < LONG || open.key {
            return Ok(());
        }
        let held = std::mem::take(held);
        let mut decoder = Decoder::default();
        let mut facts = FactsBuilder::default();
        decoder.feed(&held, &mut |s| facts.push(s))?;
        open.text = Text::Span(Box::new((decoder, facts)));
        return Ok(());
    }
    if let Text::Span(span) = &mut open.text {
        let (decoder, facts) = &mut **span;
        decoder.feed(inside, &mut |s| facts.push(s))?;
    }
    Ok(())
}
