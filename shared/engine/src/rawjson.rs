//! Finding one top-level key of a raw JSON object without parsing it, the
//! elements of a raw array, and the text of a raw string.
//!
//! Tool results are the bulk of a transcript (often 95 % of its bytes) and
//! ktr needs only their `type` and `is_error`. Skipping string values with
//! `memchr` is several times faster than a full parse; the input was
//! already validated as JSON by the line parse.

use std::borrow::Cow;

use memchr::memchr;

use crate::jsonskip::ws;

/// The raw text of `key`'s value in the JSON object `raw`, if present.
/// Returns `None` for anything that is not a well-formed object.
pub(crate) fn top_level<'a>(raw: &'a str, key: &str) -> Option<&'a str> {
    let b = raw.as_bytes();
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = ws(b, i);
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        let this_key = &raw[i + 1..key_end - 1];
        i = ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value_start = ws(b, i + 1);
        let value_end = value_end(b, value_start)?;
        if this_key == key {
            return Some(&raw[value_start..value_end]);
        }
        i = ws(b, value_end);
        match b.get(i) {
            Some(b',') => i += 1,
            _ => return None,
        }
    }
}

/// `raw` with the value of its top-level `key` replaced by the raw JSON
/// `value`, every other byte as it was; `None` when `raw` is not a
/// well-formed object or has no such key.
pub fn with_top_level(raw: &str, key: &str, value: &str) -> Option<String> {
    let old = top_level(raw, key)?;
    let start = old.as_ptr() as usize - raw.as_ptr() as usize;
    let end = start + old.len();
    Some(format!("{}{value}{}", &raw[..start], &raw[end..]))
}

/// A top-level string value without escapes (e.g. a block's `type`).
pub(crate) fn top_level_str<'a>(raw: &'a str, key: &str) -> Option<&'a str> {
    let v = top_level(raw, key)?;
    let inner = v.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

/// The text of the JSON string `raw` (quotes included; JSON that `serde_json`
/// has validated): borrowed when it holds no escape. `None` when `raw`
/// is not a string or holds an unpaired surrogate escape (which `serde_json`
/// refuses to decode into a string too).
pub fn text(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    let b = inner.as_bytes();
    let Some(first) = memchr(b'\\', b) else {
        return Some(Cow::Borrowed(inner));
    };
    let mut out = String::with_capacity(inner.len());
    let mut i = 0;
    let mut next = Some(first);
    while let Some(at) = next {
        // Backslashes and the escapes' letters are ASCII: `at` and the end
        // of each escape are character boundaries.
        out.push_str(&inner[i..at]);
        let (ch, len) = escape(b.get(at + 1..)?)?;
        out.push(ch);
        i = at + 1 + len;
        next = memchr(b'\\', &b[i..]).map(|j| i + j);
    }
    out.push_str(&inner[i..]);
    Some(Cow::Owned(out))
}

/// Whether every escape in the JSON text `raw` is the one `serde_json`
/// (and JavaScript's `JSON.stringify`) writes: `\"`, `\\`, `\b`, `\f`,
/// `\n`, `\r`, `\t`, and `\u00xx` (lowercase) for the other control
/// characters. Then decoding a string of `raw` and writing it again gives
/// the same bytes.
pub(crate) fn canonical_escapes(raw: &[u8]) -> bool {
    let mut i = 0;
    while let Some(j) = memchr(b'\\', raw.get(i..).unwrap_or_default()) {
        let at = i + j;
        match raw.get(at + 1) {
            Some(b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't') => i = at + 2,
            Some(b'u') => {
                let Some(digits) = raw.get(at + 2..at + 6) else {
                    return false;
                };
                let lower = digits
                    .iter()
                    .all(|d| matches!(d, b'0'..=b'9' | b'a'..=b'f'));
                match hex4(digits) {
                    Some(v)
                        if lower && v < 0x20 && !matches!(v, 0x08 | 0x09 | 0x0A | 0x0C | 0x0D) =>
                    {
                        i = at + 6;
                    }
                    _ => return false,
                }
            }
            _ => return false,
        }
    }
    true
}

/// Every string *value* of the JSON text `raw` (quotes included; keys are
/// skipped), in order. `raw` is JSON the line parse has validated: a quote
/// outside a string always opens one.
pub(crate) fn string_values(raw: &str) -> impl Iterator<Item = &str> {
    let b = raw.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        loop {
            let start = i + memchr(b'"', b.get(i..)?)?;
            let end = string_end(b, start)?;
            i = end;
            if b.get(ws(b, end)) != Some(&b':') {
                return Some(&raw[start..end]);
            }
        }
    })
}

/// The character an escape stands for and the bytes it takes after its
/// backslash.
fn escape(b: &[u8]) -> Option<(char, usize)> {
    let kind = *b.first()?;
    if let Some(plain) = simple_escape(kind) {
        return Some((plain, 1));
    }
    if kind != b'u' {
        return None;
    }
    let high = hex4(b.get(1..5)?)?;
    match high {
        0xD800..=0xDBFF => {
            let low = match b.get(5..11)? {
                [b'\\', b'u', digits @ ..] => hex4(digits)?,
                _ => return None,
            };
            if !(0xDC00..=0xDFFF).contains(&low) {
                return None;
            }
            let code = 0x1_0000 + ((high - 0xD800) << 10) + (low - 0xDC00);
            Some((char::from_u32(code)?, 11))
        }
        _ => Some((char::from_u32(high)?, 5)),
    }
}

/// The character a one-letter JSON escape (`\n`, `\"`, …) stands for.
pub(crate) fn simple_escape(kind: u8) -> Option<char> {
    Some(match kind {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        _ => return None,
    })
}

fn hex4(digits: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(digits.get(..4)?).ok()?;
    u32::from_str_radix(s, 16).ok()
}

/// Index just past the closing quote of the string starting at `start`.
///
/// Only quotes are searched for (a tool result holds a backslash every
/// 20 bytes or so, a quote far less often): a quote is escaped exactly
/// when an odd run of backslashes ends right before it, because each
/// backslash escapes the byte after it.
pub(crate) fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        let at = i + memchr(b'"', b.get(i..)?)?;
        if escaped(b, start + 1, at) {
            i = at + 1;
        } else {
            return Some(at + 1);
        }
    }
}

/// Whether an odd run of backslashes, none before `from`, ends right
/// before `at`.
pub(crate) fn escaped(b: &[u8], from: usize, at: usize) -> bool {
    b[from..at]
        .iter()
        .rev()
        .take_while(|&&c| c == b'\\')
        .count()
        % 2
        == 1
}

/// Index just past the value starting at `start`.
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match b.get(start)? {
        b'"' => string_end(b, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = start;
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
            {
                i += 1;
            }
            Some(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_after_big_values() {
        let raw = r#"{"tool_use_id":"t\"1","content":[{"type":"text","text":"a}\\\"]"}],"type":"tool_result","is_error":true}"#;
        assert_eq!(top_level_str(raw, "type"), Some("tool_result"));
        assert_eq!(top_level(raw, "is_error"), Some("true"));
        assert_eq!(top_level(raw, "missing"), None);
        assert_eq!(
            top_level_str(r#"{ "type" : "text" }"#, "type"),
            Some("text")
        );
    }

    #[test]
    fn one_top_level_value_is_replaced_and_nothing_else() {
        let raw = r#"{"message":{"sessionId":"inner"},"sessionId":"old", "uuid":"u"}"#;
        assert_eq!(
            with_top_level(raw, "sessionId", "\"new\"").as_deref(),
            Some(r#"{"message":{"sessionId":"inner"},"sessionId":"new", "uuid":"u"}"#)
        );
        assert_eq!(
            with_top_level(r#"{"parentUuid":null}"#, "parentUuid", "\"p\"").as_deref(),
            Some(r#"{"parentUuid":"p"}"#)
        );
        assert_eq!(with_top_level(r#"{"uuid":"u"}"#, "sessionId", "1"), None);
        assert_eq!(with_top_level("[1]", "sessionId", "1"), None);
    }

    #[test]
    fn canonical_escapes_are_the_ones_serde_writes() {
        for c in (0u32..0x80).chain([0xE9, 0x4F60, 0x1F600]) {
            let s = char::from_u32(c).unwrap().to_string();
            let json = serde_json::to_string(&s).unwrap();
            assert!(canonical_escapes(json.as_bytes()), "{json}");
        }
        assert!(canonical_escapes(br#"{"a":"\\u00e9 \\/ \" \u001f"}"#));
        for raw in [
            r"\u00e9",
            r"\/",
            r"\u000a",
            r"\u001F",
            r"\u0008",
            r"\ud83d\ude00",
            r"\u007f",
            r"\u00",
        ] {
            assert!(!canonical_escapes(raw.as_bytes()), "{raw}");
        }
    }

    #[test]
    fn string_values_are_every_value_and_no_key() {
        let raw = r#"{"a":"x\"y","b":[1,"\\",{"c" : "\u00e9"}],"d":{"e":"f"},"g":true}"#;
        let values: Vec<&str> = string_values(raw).collect();
        assert_eq!(values, [r#""x\"y""#, r#""\\""#, r#""\u00e9""#, r#""f""#]);
        assert_eq!(string_values("[]").count(), 0);
    }

    #[test]
    fn agrees_with_serde_on_every_value() {
        let raw = r#"{"a":1.5e3,"b":null,"c":{"d":[1,{"e":"}"}]},"f":"x"}"#;
        let v: serde_json::Value = serde_json::from_str(raw).unwrap();
        for key in ["a", "b", "c", "f"] {
            let found: serde_json::Value =
                serde_json::from_str(top_level(raw, key).unwrap()).unwrap();
            assert_eq!(found, v[key], "{key}");
        }
    }

    #[test]
    fn texts_decode_as_serde_decodes_them() {
        for raw in [
            r#""plain""#,
            r#""a\"b\\c\/d\b\f\n\r\t""#,
            r#""\u00e9\u00E9 \u4e2d \ud83d\ude00 \uD83D\uDE00 end""#,
            r#""\u0000x""#,
            r#""""#,
            r#""中文\n""#,
        ] {
            let want: String = serde_json::from_str(raw).unwrap();
            assert_eq!(text(raw).as_deref(), Some(want.as_str()), "{raw}");
        }
        assert!(matches!(text(r#""no escape""#), Some(Cow::Borrowed(_))));
        // Unpaired surrogates: serde refuses them as strings, and so does this.
        for raw in [
            r#""\ud83d""#,
            r#""\ud83dx""#,
            r#""\ude00""#,
            r#""\ud83d\u0041""#,
            r#""\ud83d\n""#,
        ] {
            assert!(serde_json::from_str::<String>(raw).is_err(), "{raw}");
            assert_eq!(text(raw), None, "{raw}");
        }
        for raw in ["", "x", "1", r#""\""#, r#""\q""#, r#""\u12""#] {
            assert_eq!(text(raw), None, "{raw}");
        }
    }

    #[test]
    fn a_huge_text_decodes_whole() {
        let original: String = (0..400_000)
            .map(|i| format!("line {i} \"q\" 中\t\u{1F600}\n"))
            .collect();
        assert!(original.len() >= 8 << 20);
        let raw = serde_json::to_string(&original).unwrap();
        assert_eq!(text(&raw).as_deref(), Some(original.as_str()));
    }

    /// The quote search ends a string where walking its escapes one by
    /// one does, on strings made of escapes' pieces (a fixed seed).
    #[test]
    fn string_end_agrees_with_walking_the_escapes() {
        fn walked(b: &[u8]) -> Option<usize> {
            let mut i = 1;
            while i < b.len() {
                match b[i] {
                    b'\\' => i += 2,
                    b'"' => return Some(i + 1),
                    _ => i += 1,
                }
            }
            None
        }
        const PIECES: [&str; 6] = ["\\", "\"", "a", "\\\"", "\\\\", "u"];
        let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..100_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = (seed % 16) as usize;
            let mut s = String::from("\"");
            let mut x = seed;
            for _ in 0..n {
                s.push_str(PIECES[(x % 6) as usize]);
                x /= 6;
            }
            assert_eq!(string_end(s.as_bytes(), 0), walked(s.as_bytes()), "{s}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        for raw in [
            "",
            "[]",
            "{",
            r#"{"a""#,
            r#"{"a":"x"#,
            "{\"a\\",
            r#"{"b":[1,"#,
            r#"{"b":{"#,
        ] {
            assert_eq!(top_level(raw, "a"), None, "{raw}");
        }
        // Input is pre-validated JSON; a truncated scalar at the very end still reads.
        assert_eq!(top_level(r#"{"a":1"#, "a"), Some("1"));
    }
}
