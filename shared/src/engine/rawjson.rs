//! Finding one top-level key of a raw JSON object without parsing it.
//!
//! Tool results are the bulk of a transcript (often 95 % of its bytes) and
//! ktr needs only their `type` and `is_error`. Skipping string values with
//! `memchr` is several times faster than a full parse; the input was
//! already validated as JSON by the line parse.

use memchr::memchr2;

/// The raw text of `key`'s value in the JSON object `raw`, if present.
/// Returns `None` for anything that is not a well-formed object.
pub fn top_level<'a>(raw: &'a str, key: &str) -> Option<&'a str> {
    let b = raw.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        let this_key = &raw[i + 1..key_end - 1];
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(b, i + 1);
        let value_end = value_end(b, value_start)?;
        if this_key == key {
            return Some(&raw[value_start..value_end]);
        }
        i = skip_ws(b, value_end);
        match b.get(i) {
            Some(b',') => i += 1,
            _ => return None,
        }
    }
}

/// A top-level string value without escapes (e.g. a block's `type`).
pub fn top_level_str<'a>(raw: &'a str, key: &str) -> Option<&'a str> {
    let v = top_level(raw, key)?;
    let inner = v.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
        i += 1;
    }
    i
}

/// Index just past the closing quote of the string starting at `start`.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        let at = i + memchr2(b'"', b'\\', &b[i..])?;
        if b[at] == b'\\' {
            i = at + 2;
            if i > b.len() {
                return None;
            }
        } else {
            return Some(at + 1);
        }
    }
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
