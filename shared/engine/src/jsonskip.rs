//! Skipping a JSON value exactly as `serde_json` does when it skips one
//! (`IgnoredAny`, `RawValue`: its `ignore_value`), but faster
//! (`ktr plan` within 5× `wc -l`). A tool result is a long string with an
//! escape every 20 bytes or so; `serde_json` looks at it 8 bytes at a
//! time and starts again after each escape, this looks at it 64 bytes at
//! a time as bit masks ([`block`]): the string's end, its control bytes
//! and its escaped bytes without a loop over the escapes; only `\u` and
//! the rarer escape letters are looked at one by one.
//!
//! The input is text (valid UTF-8). What is accepted is what
//! `serde_json::from_str::<IgnoredAny>` accepts: whitespace is space, tab,
//! `\n` and `\r`; a string holds no byte below 0x20 and only the escapes
//! `\" \\ \/ \b \f \n \r \t \uXXXX` (any four hex digits: a lone surrogate
//! is skipped as `serde_json` skips it); numbers follow the JSON grammar
//! (their value is not looked at); nesting has no limit. The differential
//! tests hold it to that.
//!
//! Its one user is recall's raw count ([`crate::recall`]: where a
//! line's texts lie, without decoding it); the transcript reader decodes
//! with `serde_json`. The API: [`ws`], [`value`], [`string`].

mod block;

use block::{BLOCK, Letters, Plain};

/// Index of the first byte at or after `i` that is not JSON whitespace.
pub(crate) fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\n' | b'\t' | b'\r')) {
        i += 1;
    }
    i
}

/// Index just past the JSON value starting at `i` (no whitespace before
/// it); `None` when no valid value starts there.
pub(crate) fn value(b: &[u8], i: usize) -> Option<usize> {
    // Open arrays and objects (`[` or `{`), innermost last.
    let mut open: Vec<u8> = Vec::new();
    let mut i = i;
    loop {
        // A value.
        i = match *b.get(i)? {
            b'"' => string(b, i + 1)?,
            b'n' => ident(b, i, b"null")?,
            b't' => ident(b, i, b"true")?,
            b'f' => ident(b, i, b"false")?,
            b'-' => number(b, i + 1)?,
            b'0'..=b'9' => number(b, i)?,
            frame @ (b'[' | b'{') => {
                let next = ws(b, i + 1);
                let close = if frame == b'[' { b']' } else { b'}' };
                if b.get(next) == Some(&close) {
                    next + 1
                } else {
                    open.push(frame);
                    i = member(b, next, frame)?;
                    continue;
                }
            }
            _ => return None,
        };
        // After a value: the next member of the innermost open container,
        // or its end (and then that of the one around it).
        loop {
            let Some(&frame) = open.last() else {
                return Some(i);
            };
            i = ws(b, i);
            match (b.get(i)?, frame) {
                (b',', _) => {
                    i = member(b, ws(b, i + 1), frame)?;
                    break;
                }
                (b']', b'[') | (b'}', b'{') => {
                    open.pop();
                    i += 1;
                }
                _ => return None,
            }
        }
    }
}

/// Where the value of the next member of a `frame` starts: at `i` in an
/// array; after `"key":` in an object.
fn member(b: &[u8], i: usize, frame: u8) -> Option<usize> {
    if frame == b'[' {
        return Some(i);
    }
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let i = ws(b, string(b, i + 1)?);
    (b.get(i) == Some(&b':')).then(|| ws(b, i + 1))
}

/// Index just past the literal `word` at `i`.
fn ident(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (b.get(i..i + word.len())? == word).then_some(i + word.len())
}

/// Index just past the number whose digits start at `i` (after any `-`).
fn number(b: &[u8], i: usize) -> Option<usize> {
    let digits = |mut i: usize| {
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        i
    };
    let mut i = match b.get(i)? {
        b'0' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => return None,
        b'0' => i + 1,
        b'1'..=b'9' => digits(i + 1),
        _ => return None,
    };
    if b.get(i) == Some(&b'.') {
        let end = digits(i + 1);
        if end == i + 1 {
            return None;
        }
        i = end;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let end = digits(i);
        if end == i {
            return None;
        }
        i = end;
    }
    Some(i)
}

/// Index just past the closing quote of the string whose first byte
/// (after the opening quote) is at `i`; `None` when it is not a valid
/// JSON string (a control character, a bad escape, no closing quote).
///
/// A block at a time: the string ends at the block's first quote that no
/// backslash escapes; before it, no control byte and every escaped byte
/// one of JSON's escape letters (each `\u` followed by four hex digits).
/// The last bytes of `b` are looked at as a block padded with plain bytes.
pub(crate) fn string(b: &[u8], mut i: usize) -> Option<usize> {
    let mut carry = 0u64;
    let mut padded = [b'a'; BLOCK];
    loop {
        let rest = b.get(i..)?;
        let block = if let Some(block) = rest.first_chunk::<BLOCK>() {
            block
        } else {
            padded[..rest.len()].copy_from_slice(rest);
            &padded
        };
        let Plain {
            quote,
            backslash,
            control,
        } = block::plain(block);
        let escaped = if backslash | carry == 0 {
            0
        } else {
            block::escaped(backslash, &mut carry)
        };
        let ends = quote & !escaped;
        // The string's bytes in this block: those before its end.
        let inside = ends.wrapping_sub(1) & !ends;
        if control & inside != 0 {
            return None;
        }
        let escaped = escaped & inside;
        if escaped != 0 {
            let Letters { common, u } = block::letters(block);
            // `\u` and the rarer letters one at a time.
            let mut one_by_one = escaped & (u | !(common | quote | backslash));
            while one_by_one != 0 {
                escape(b, i + one_by_one.trailing_zeros() as usize)?;
                one_by_one &= one_by_one - 1;
            }
        }
        if ends != 0 {
            return Some(i + ends.trailing_zeros() as usize + 1);
        }
        if rest.len() <= BLOCK {
            // No closing quote.
            return None;
        }
        i += BLOCK;
    }
}

/// Escape letters that stand alone (`\n`, `\"` …); `u` takes four hex
/// digits after it.
const SIMPLE: [bool; 256] = {
    let mut t = [false; 256];
    let mut k = 0;
    let letters = b"\"\\/bfnrt";
    while k < letters.len() {
        t[letters[k] as usize] = true;
        k += 1;
    }
    t
};

/// Index just past the escape whose letter is at `i` (after its `\\`).
#[inline]
fn escape(b: &[u8], i: usize) -> Option<usize> {
    let letter = *b.get(i)?;
    if SIMPLE[usize::from(letter)] {
        return Some(i + 1);
    }
    let digits = b.get(i + 1..i + 5)?;
    if letter != b'u' || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    Some(i + 5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IgnoredAny;

    /// What `serde_json` says of `text` as one value (with whitespace
    /// around it), and what [`value`] says.
    #[track_caller]
    fn agrees(text: &str) {
        let theirs = serde_json::from_str::<IgnoredAny>(text).is_ok();
        let b = text.as_bytes();
        let start = ws(b, 0);
        let ours = value(b, start).is_some_and(|end| ws(b, end) == b.len());
        assert_eq!(ours, theirs, "{text:?}");
    }

    #[test]
    fn accepts_and_refuses_what_serde_json_does() {
        for text in [
            "null",
            "true",
            "false",
            "nul",
            "nulll",
            "tru",
            "-",
            "-0",
            "01",
            "0",
            "10",
            "1.",
            "1.5",
            "1e",
            "1e+",
            "1e+5",
            "1E-05",
            "-1.0e3",
            ".5",
            "+1",
            "1x",
            "\"\"",
            "\"a\"",
            "\"a",
            "\"\\u12\"",
            "\"\\u12G4\"",
            "\"\\uD800\"",
            "\"\\q\"",
            "\"\\/\"",
            "\"a\tb\"",
            "\"\u{7f}\u{80}é中\"",
            "[]",
            "[ ]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "[1,2]",
            "{}",
            "{ }",
            "{\"a\":1}",
            "{\"a\" : [ {} , [] ] }",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{1:2}",
            "{\"a\":1 \"b\":2}",
            "[}",
            "{]",
            "[[[[[[]]]]]]",
            "[[[[[[]]]]]",
            " \r\n\t1 ",
            "1 2",
            "",
        ] {
            agrees(text);
        }
    }

    #[test]
    fn strings_across_blocks_agree_at_every_offset() {
        // An escape, a quote or a control character at every position of
        // a block and across the block's end.
        for special in [
            "\\n", "\\\"", "\\\\", "\\u00e9", "\\ud83d", "\\x", "\u{1}", "\"", "é",
        ] {
            for at in 0..2 * BLOCK + 3 {
                let text = format!("\"{}{special}{}\"", "a".repeat(at), "b".repeat(70));
                agrees(&text);
                let cut = format!("\"{}{special}", "a".repeat(at));
                agrees(&cut);
            }
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        agrees(&deep);
        // Objects and arrays mixed, deeply nested, closed right and wrong.
        for depth in [63, 64, 65, 130] {
            let opens: String = (0..depth)
                .map(|k| if k % 3 == 0 { "{\"k\":" } else { "[" })
                .collect();
            let closes: String = (0..depth)
                .rev()
                .map(|k| if k % 3 == 0 { "}" } else { "]" })
                .collect();
            agrees(&format!("{opens}1{closes}"));
            agrees(&format!("{opens}1{}", closes.replacen(']', "}", 1)));
            agrees(&format!("{opens}1{}", &closes[1..]));
        }
    }

    #[test]
    fn strings_dense_with_escapes_agree() {
        // Pseudo-random strings of escapes, runs of backslashes, quotes,
        // hex digits and control bytes, crossing block ends anywhere.
        let pieces = [
            "a", "é", "\\", "\\\\", "\\n", "\\\"", "\\u", "\\ud83d", "\\uDE00", "\\u00e9", "0f",
            "\\x", "\"", "\u{1}", "\t", "\\/", "\\b", "u", "\\\\\\",
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for _ in 0..20_000 {
            let mut text = String::from("\"");
            let plain = next(100);
            text.push_str(&"p".repeat(plain));
            for _ in 0..next(40) {
                // Mostly valid pieces, so that many strings get far.
                let k = if next(8) == 0 {
                    next(pieces.len())
                } else {
                    next(10)
                };
                text.push_str(pieces[k]);
            }
            if next(4) != 0 {
                text.push('"');
            }
            agrees(&text);
            agrees(&format!("[{text}, 1]"));
        }
    }
}
