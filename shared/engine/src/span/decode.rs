//! Decoding the inside of a JSON string a piece at a time: the raw bytes
//! go in as they are read, in pieces cut anywhere (inside an escape, inside
//! a character); decoded text comes out. Lone surrogates come out as their
//! stand-ins ([`crate::lone`]), as everywhere else in ktr.

use crate::lone;

/// The raw bytes were not the inside of a valid JSON string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

/// Raw bytes taken in and not decoded yet are at most this many (a whole
/// surrogate pair's escape is 12).
const PENDING_MAX: usize = 16;

/// A decoder of one JSON string's inside.
#[derive(Default)]
pub(crate) struct Decoder {
    /// Raw bytes not decoded yet: the start of an escape or of a character.
    pending: Vec<u8>,
    out: String,
}

impl Decoder {
    /// Decode `raw`, the next bytes of the string; `f` gets the text.
    pub(crate) fn feed(&mut self, raw: &[u8], f: &mut dyn FnMut(&str)) -> Result<(), Invalid> {
        let mut raw = raw;
        if !self.pending.is_empty() {
            // The pending unit, completed from the front of `raw`.
            let take = raw.len().min(PENDING_MAX);
            let mut joined = std::mem::take(&mut self.pending);
            let before = joined.len();
            joined.extend_from_slice(&raw[..take]);
            let used = self.decode(&joined, false)?;
            if used <= before {
                // Still cut short: only possible when `raw` was all taken.
                if take < raw.len() || joined.len() > PENDING_MAX {
                    return Err(Invalid);
                }
                self.pending = joined[used..].to_vec();
                self.flush(f);
                return Ok(());
            }
            raw = &raw[used - before..];
        }
        let used = self.decode(raw, false)?;
        self.pending.extend_from_slice(&raw[used..]);
        if self.pending.len() > PENDING_MAX {
            return Err(Invalid);
        }
        self.flush(f);
        Ok(())
    }

    /// The string ended: decode what is pending.
    pub fn finish(mut self, f: &mut dyn FnMut(&str)) -> Result<(), Invalid> {
        let pending = std::mem::take(&mut self.pending);
        if self.decode(&pending, true)? != pending.len() {
            return Err(Invalid);
        }
        self.flush(f);
        Ok(())
    }

    fn flush(&mut self, f: &mut dyn FnMut(&str)) {
        if !self.out.is_empty() {
            f(&self.out);
            self.out.clear();
        }
    }

    /// Decode as much of `b` as is complete (all of it when `last`) into
    /// `out`; returns the bytes used.
    fn decode(&mut self, b: &[u8], last: bool) -> Result<usize, Invalid> {
        let mut i = 0;
        while i < b.len() {
            let end = memchr::memchr(b'\\', &b[i..]).map_or(b.len(), |j| i + j);
            match std::str::from_utf8(&b[i..end]) {
                Ok(s) => self.plain(s)?,
                Err(e) => {
                    let valid = &b[i..i + e.valid_up_to()];
                    self.plain(std::str::from_utf8(valid).map_err(|_| Invalid)?)?;
                    return if e.error_len().is_none() && end == b.len() && !last {
                        Ok(i + e.valid_up_to()) // a character cut by the read
                    } else {
                        Err(Invalid)
                    };
                }
            }
            i = end;
            if i == b.len() {
                break;
            }
            match escape(&b[i..], last)? {
                Some((c, len)) => {
                    self.out.push(c);
                    i += len;
                }
                None => return Ok(i), // an escape cut by the read
            }
        }
        Ok(i)
    }

    fn plain(&mut self, s: &str) -> Result<(), Invalid> {
        // A raw control character is not allowed inside a JSON string.
        if s.bytes().any(|c| c < 0x20) {
            return Err(Invalid);
        }
        self.out.push_str(s);
        Ok(())
    }
}

/// The escape at the start of `b` (its backslash first): the character and
/// its length, or `None` when more bytes are needed to tell (not `last`).
fn escape(b: &[u8], last: bool) -> Result<Option<(char, usize)>, Invalid> {
    let Some(&kind) = b.get(1) else {
        return if last { Err(Invalid) } else { Ok(None) };
    };
    let plain = match (kind, crate::rawjson::simple_escape(kind)) {
        (_, Some(plain)) => plain,
        (b'u', None) => return unicode(b, last),
        _ => return Err(Invalid),
    };
    Ok(Some((plain, 2)))
}

fn hex4(b: &[u8]) -> Result<u32, Invalid> {
    let s = std::str::from_utf8(b).map_err(|_| Invalid)?;
    u32::from_str_radix(s, 16).map_err(|_| Invalid)
}

/// A `\uXXXX` escape, paired with the next one when it is a high surrogate
/// followed by a low one; a lone surrogate gives its stand-in.
fn unicode(b: &[u8], last: bool) -> Result<Option<(char, usize)>, Invalid> {
    let Some(digits) = b.get(2..6) else {
        return if last { Err(Invalid) } else { Ok(None) };
    };
    let unit = hex4(digits)?;
    if (0xD800..=0xDBFF).contains(&unit) {
        let rest = &b[6..];
        let may_pair =
            rest.first().is_none_or(|&c| c == b'\\') && rest.get(1).is_none_or(|&c| c == b'u');
        if may_pair && rest.len() < 6 && !last {
            return Ok(None); // the pair's second half may follow
        }
        if rest.get(..2) == Some(b"\\u")
            && let Some(low) = rest.get(2..6).and_then(|d| hex4(d).ok())
            && (0xDC00..=0xDFFF).contains(&low)
        {
            let code = 0x1_0000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
            return char::from_u32(code).map(|c| Some((c, 12))).ok_or(Invalid);
        }
    }
    let c = char::from_u32(unit)
        .or_else(|| lone::stand_in(unit))
        .ok_or(Invalid)?;
    Ok(Some((c, 6)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `raw` decoded in pieces of `size` bytes.
    fn decoded(raw: &[u8], size: usize) -> Result<String, Invalid> {
        let mut out = String::new();
        let mut d = Decoder::default();
        for piece in raw.chunks(size) {
            d.feed(piece, &mut |s| out.push_str(s))?;
        }
        d.finish(&mut |s| out.push_str(s))?;
        Ok(out)
    }

    #[test]
    fn every_cut_decodes_like_serde() {
        let raw =
            r#"plain q\"\\\/\b\f\n\r\t \u00e9\u00E9 中文 \ud83d\ude00 \uD83D\uDE00 😀 end\u0000"#;
        let want: String = serde_json::from_str(&format!("\"{raw}\"")).unwrap();
        for size in 1..=raw.len() {
            assert_eq!(
                decoded(raw.as_bytes(), size).as_deref(),
                Ok(want.as_str()),
                "{size}"
            );
        }
    }

    #[test]
    fn lone_surrogates_decode_to_their_stand_ins_at_every_cut() {
        let raw = r"\ud83d a \ude00\ud83d b \ud83d";
        let line = format!(r#"{{"t":"{raw}"}}"#);
        let mapped = lone::map_line(line.as_bytes()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&mapped).unwrap();
        for size in 1..=raw.len() {
            assert_eq!(decoded(raw.as_bytes(), size).unwrap(), v["t"], "{size}");
        }
    }

    #[test]
    fn invalid_insides_are_refused() {
        for raw in [
            &b"\\q"[..],
            b"\\u12",
            b"\\u12zz",
            b"a\nb",
            b"\xff",
            b"\\",
            b"\xe4\xb8",
        ] {
            for size in 1..=raw.len() {
                assert_eq!(decoded(raw, size), Err(Invalid), "{raw:?} {size}");
            }
        }
    }
}
