//! Lone surrogates: `\ud83d` without its pair (what JavaScript writes for
//! half an emoji). Claude Code is JavaScript and loads such a string; a
//! Rust `String` cannot hold one, and `serde_json` refuses to decode it.
//!
//! Inside ktr a lone surrogate `U+D800 + i` stands for the character
//! `U+10F800 + i` (the last 2,048 code points of the private use plane
//! 16, which nothing assigns): a line is *mapped* before it is parsed
//! ([`map_line`]: each lone escape becomes the escaped pair of its
//! stand-in), every text is read, counted, digested and compared as usual,
//! and the candidate writer turns each stand-in back into the escape
//! ([`unmap_json`]), so the new session holds the same UTF-16 string.
//!
//! A file that holds both a lone surrogate and a real character of that
//! range cannot be carried this way (the two would read alike): its plan
//! is blocked ([`Surrogates::reserved`]).

use std::fmt::Write as _;

/// The stand-in of `U+D800`; `U+D800 + i` stands for `BASE + i`.
const BASE: u32 = 0x10_F800;

/// What one line holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Surrogates {
    /// Lone surrogate escapes.
    pub lone: usize,
    /// A real character of the stand-ins' range (raw or escaped).
    pub reserved: bool,
}

/// One `\u` escape's value at `at` (the backslash), if it is one.
fn unit(b: &[u8], at: usize) -> Option<u32> {
    if b.get(at + 1) != Some(&b'u') {
        return None;
    }
    let digits = std::str::from_utf8(b.get(at + 2..at + 6)?).ok()?;
    u32::from_str_radix(digits, 16).ok()
}

fn is_high(u: u32) -> bool {
    (0xD800..=0xDBFF).contains(&u)
}

fn is_low(u: u32) -> bool {
    (0xDC00..=0xDFFF).contains(&u)
}

/// Walk the escapes of a line: `f(at, unit)` for each lone surrogate
/// escape (`at` its backslash; the escape is 6 bytes); returns whether an
/// escaped pair stands for a character of the stand-ins' range. A backslash always starts an
/// escape in JSON (outside strings it is invalid anyway), so the walk
/// never mistakes `\\ud83d` (an escaped backslash, then letters) for one.
fn walk(b: &[u8], mut f: impl FnMut(usize, u32)) -> bool {
    let mut reserved = false;
    let mut i = 0;
    while let Some(j) = memchr::memchr(b'\\', &b[i..]) {
        let at = i + j;
        match unit(b, at) {
            Some(u) if is_high(u) => match unit(b, at + 6) {
                Some(low) if is_low(low) => {
                    reserved |= u >= 0xDBFE;
                    i = at + 12;
                }
                _ => {
                    f(at, u);
                    i = at + 6;
                }
            },
            Some(u) if is_low(u) => {
                f(at, u);
                i = at + 6;
            }
            Some(_) => i = at + 6,
            None => i = at + 2,
        }
        i = i.min(b.len());
    }
    reserved
}

/// [`walk`], visiting only the `\\u` escapes of surrogates: what it
/// finds is the same (a test checks), found several times faster where
/// escapes are dense (a tool result holds a `\\n` every line), since
/// a backslash is searched for only where `\\ud` or `\\uD` is.
///
/// `walk` pairs each backslash with the byte after it, so a backslash
/// starts an escape exactly when the run of backslashes ending at it is
/// odd; an escape's other bytes are never backslashes, so a surrogate
/// escape is never inside another escape, except the low half of a pair,
/// which `paired_until` skips.
fn surrogate_escapes(b: &[u8], mut f: impl FnMut(usize, u32)) -> bool {
    let mut reserved = false;
    let mut paired_until = 0;
    // Built once: a searcher costs more to set up than a short line to search.
    static ESCAPE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\\u"));
    for at in ESCAPE.find_iter(b) {
        if at < paired_until
            || !matches!(b.get(at + 2), Some(b'd' | b'D'))
            || b[..at].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 1
        {
            continue;
        }
        match unit(b, at) {
            Some(u) if is_high(u) => match unit(b, at + 6) {
                Some(low) if is_low(low) => {
                    reserved |= u >= 0xDBFE;
                    paired_until = at + 12;
                }
                _ => f(at, u),
            },
            Some(u) if is_low(u) => f(at, u),
            _ => {}
        }
    }
    reserved
}

/// What `line` holds (its raw bytes, before [`map_line`]).
pub fn survey(line: &[u8]) -> Surrogates {
    let mut lone = 0;
    let escaped = surrogate_escapes(line, |_, _| lone += 1);
    Surrogates {
        lone,
        reserved: escaped || reserved_raw(line),
    }
}

/// What `line` holds ([`survey`]) and, when it holds a lone surrogate,
/// the line mapped for the parse ([`map_line`]).
pub(crate) fn survey_and_map(line: &[u8]) -> (Surrogates, Option<Vec<u8>>) {
    let surrogates = survey(line);
    let mapped = (surrogates.lone > 0).then(|| map_line(line)).flatten();
    (surrogates, mapped)
}

/// Whether `line` holds a character of the stand-ins' range written as
/// itself (not escaped).
pub(crate) fn reserved_raw(line: &[u8]) -> bool {
    // U+10F800..U+10FFFF in UTF-8: F4 8F A0..BF xx (F4 alone is rare in
    // text, and one byte is searched for faster than two).
    memchr::memchr_iter(0xF4, line).any(|at| {
        line.get(at + 1) == Some(&0x8F)
            && line.get(at + 2).is_some_and(|b| (0xA0..=0xBF).contains(b))
    })
}

/// `line` with every lone surrogate escape replaced by the escaped pair of
/// its stand-in (`\ud83d` → `\udbfe\udc3d`); `None` when it holds none.
pub fn map_line(line: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    walk(line, |at, unit| {
        let o = out.get_or_insert_with(|| Vec::with_capacity(line.len() + 64));
        o.extend_from_slice(&line[copied..at]);
        let beyond = BASE + (unit - 0xD800) - 0x1_0000;
        let (high, low) = (0xD800 + (beyond >> 10), 0xDC00 + (beyond & 0x3FF));
        o.extend_from_slice(format!("\\u{high:04x}\\u{low:04x}").as_bytes());
        copied = at + 6;
    });
    let mut out = out?;
    out.extend_from_slice(&line[copied..]);
    Some(out)
}

/// The stand-in of the surrogate `unit` (`None` for any other value).
pub fn stand_in(unit: u32) -> Option<char> {
    (0xD800..=0xDFFF)
        .contains(&unit)
        .then(|| char::from_u32(BASE + unit - 0xD800))
        .flatten()
}

/// Whether `c` stands for a lone surrogate.
pub(crate) fn is_stand_in(c: char) -> bool {
    c as u32 >= BASE
}

/// `json` (a candidate line: `serde_json`'s text, or a value copied raw
/// from a mapped line) with every stand-in, raw or as an escaped pair,
/// turned back into its lone surrogate escape, lowercase as JavaScript
/// writes it. Only for a file that holds lone surrogates: it then holds
/// no real character of the stand-ins' range (its plan is blocked).
pub(crate) fn unmap_json(json: &str) -> std::borrow::Cow<'_, str> {
    let b = json.as_bytes();
    if memchr::memmem::find(b, b"\xF4\x8F").is_none()
        && memchr::memmem::find(b, b"\\udbf").is_none()
    {
        return std::borrow::Cow::Borrowed(json);
    }
    let lone = |out: &mut String, code: u32| {
        let _ = write!(out, "\\u{:04x}", code - BASE + 0xD800);
    };
    let mut out = String::with_capacity(json.len());
    let mut i = 0;
    while let Some(c) = json[i..].chars().next() {
        if c == '\\' {
            match (unit(b, i), unit(b, i + 6)) {
                (Some(high @ 0xDBFE..=0xDBFF), Some(low)) if is_low(low) => {
                    lone(
                        &mut out,
                        0x1_0000 + ((high - 0xD800) << 10) + (low - 0xDC00),
                    );
                    i += 12;
                }
                // Any other escape: the backslash and the character after
                // it (ASCII), so that `\\\\` is never read as the start of one.
                _ => {
                    out.push_str(json.get(i..i + 2).unwrap_or(&json[i..]));
                    i += 2;
                }
            }
            continue;
        }
        if is_stand_in(c) {
            lone(&mut out, c as u32);
        } else {
            out.push(c);
        }
        i += c.len_utf8();
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `line` mapped, parsed, written again by `serde_json` and unmapped
    /// is `line`; so is `line` mapped and unmapped (a value copied raw).
    #[track_caller]
    fn round_trip(line: &str) {
        let mapped = map_line(line.as_bytes()).expect("a lone surrogate");
        let mapped = std::str::from_utf8(&mapped).unwrap();
        let value: serde_json::Value = serde_json::from_str(mapped).expect("mapped parses");
        let back = serde_json::to_string(&value).unwrap();
        assert_eq!(unmap_json(&back), line, "{mapped}");
        assert_eq!(unmap_json(mapped), line, "raw");
    }

    #[test]
    fn lone_surrogates_survive_a_parse_and_a_write() {
        round_trip(r#"{"t":"\ud83d"}"#);
        round_trip(r#"{"t":"\ud83d leading"}"#);
        round_trip(r#"{"t":"trailing \ude00"}"#);
        round_trip(r#"{"t":"\udfff\ud800 two, reversed"}"#);
        round_trip(r#"{"t":"\ud83d\u0000 then a NUL"}"#);
        round_trip(r#"{"t":"\\\ud83d after an escaped backslash, 中文"}"#);
    }

    #[test]
    fn pairs_and_escaped_backslashes_are_not_lone() {
        for line in [
            r#"{"t":"\ud83d\ude00 a pair"}"#,
            r#"{"t":"\\ud83d is text"}"#,
            r#"{"t":"\u00e9 \n \" \\"}"#,
            "{\"t\":\"end\\\\\"}",
        ] {
            assert_eq!(map_line(line.as_bytes()), None, "{line}");
            assert_eq!(survey(line.as_bytes()).lone, 0, "{line}");
        }
    }

    #[test]
    fn the_stand_ins_range_is_noticed_raw_or_escaped() {
        assert!(survey("{\"t\":\"\u{10F83D}\"}".as_bytes()).reserved);
        assert!(survey(br#"{"t":"\udbfe\udc3d"}"#).reserved);
        assert!(!survey(br#"{"t":"\udbfd\udfff \ud83d"}"#).reserved);
        assert_eq!(survey(br#"{"t":"\ud83d \ud83d"}"#).lone, 2);
    }

    /// `survey`'s search of surrogate escapes finds what [`walk`] finds,
    /// on lines made of escapes' pieces in every order (a fixed seed).
    #[test]
    fn the_quick_survey_agrees_with_the_walk() {
        const PIECES: [&str; 14] = [
            "\\", "u", "d", "D", "8", "3", "d8", "de", "00", "c", "ff", "\"", "x", "\\ud83d",
        ];
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200_000 {
            let n = (next() % 24) as usize;
            let line: String = (0..n).map(|_| PIECES[(next() % 14) as usize]).collect();
            let b = line.as_bytes();
            let (mut slow, mut quick) = (Vec::new(), Vec::new());
            let slow_reserved = walk(b, |at, u| slow.push((at, u)));
            let quick_reserved = surrogate_escapes(b, |at, u| quick.push((at, u)));
            assert_eq!((slow, slow_reserved), (quick, quick_reserved), "{line}");
        }
    }

    #[test]
    fn a_truncated_escape_at_the_end_never_panics() {
        for line in [r"\", r"\u", r"\ud83", r"\ud83d\", r"\ud83d\u12"] {
            let _ = map_line(line.as_bytes());
            let _ = survey(line.as_bytes());
        }
    }
}
