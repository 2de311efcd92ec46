//! Counting without decoding: where a record's searchable texts lie in
//! its raw JSON line (the same texts [`super::record::parts`] takes
//! apart, as byte ranges of their JSON strings), walked with the fast
//! skipper ([`crate::jsonskip`]: it accepts what `serde_json` accepts, so
//! a line it walks whole is one the decode reads; any other is left to
//! the decode), so that `count` past the limit matches each text where
//! it lies instead of building the record. A string the raw bytes cannot
//! answer for (an escape a regex or a non-ASCII query must see decoded)
//! is decoded alone.

use super::Kind;
use super::query::Query;
use crate::jsonskip::{self, ws};

/// One searchable text: its kind and the raw ranges of its strings (the
/// bytes between their quotes) — or, for a tool call's input (searched as
/// its JSON), the input's whole raw range.
struct Text {
    kind: Kind,
    ranges: Vec<(usize, usize)>,
    json: bool,
}

/// The kind of what only `toolUseResult` holds: counted only when the
/// record's tool output did not match (the result is one match).
const EXTRA: Kind = Kind::ToolResult;

/// How many of the line's texts (of `kinds`; empty: all) hold a match;
/// `None` when the line must be decoded to tell.
pub(crate) fn count(line: &[u8], query: &Query, kinds: &[Kind]) -> Option<u64> {
    // A line that may hold one of recall's own calls (not searched):
    // decoded, where the call is told by its name.
    if memchr::memmem::find(line, super::record::RECALL_CALL).is_some() {
        return None;
    }
    let (mut n, mut result_matched) = (0, false);
    let (texts, extra) = texts(line)?;
    for (i, text) in texts.iter().enumerate() {
        if !kinds.is_empty() && !kinds.contains(&text.kind) {
            continue;
        }
        if extra == Some(i) && result_matched {
            continue;
        }
        // Strings joined into one text: a regex may match across the join.
        if text.ranges.len() > 1 && query.is_regex() {
            return None;
        }
        let mut matched = false;
        for &(start, end) in &text.ranges {
            let hit = match query.raw_string_matches(&line[start..end]) {
                Some(hit) => hit,
                None if text.json => return None,
                None => {
                    let decoded: String = serde_json::from_slice(&line[start - 1..=end]).ok()?;
                    query.find(&decoded).is_some()
                }
            };
            if hit {
                matched = true;
                break;
            }
        }
        result_matched |= matched && text.kind == Kind::ToolResult;
        n += u64::from(matched);
    }
    // The skipper reads bytes; the decode also refuses a line that is not
    // UTF-8 (no hit), which a line with a match is checked for.
    if n > 0 && simdutf8::basic::from_utf8(line).is_err() {
        return None;
    }
    Some(n)
}

/// Calls `on(key, value start)` for each member of the object at `i`
/// (`on` returns where the value ends); returns where the object ends.
fn members<'a>(
    b: &'a [u8],
    i: usize,
    mut on: impl FnMut(&'a [u8], usize) -> Option<usize>,
) -> Option<usize> {
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut i = ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = jsonskip::string(b, i + 1)?;
        let key = &b[i + 1..key_end - 1];
        i = ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let v = ws(b, i + 1);
        i = ws(b, on(key, v)?);
        match b.get(i)? {
            b',' => i = ws(b, i + 1),
            b'}' => return Some(i + 1),
            _ => return None,
        }
    }
}

/// Calls `on(element start)` for each element of the array at `i`.
fn elements(b: &[u8], i: usize, mut on: impl FnMut(usize) -> Option<usize>) -> Option<usize> {
    if b.get(i) != Some(&b'[') {
        return None;
    }
    let mut i = ws(b, i + 1);
    if b.get(i) == Some(&b']') {
        return Some(i + 1);
    }
    loop {
        i = ws(b, on(i)?);
        match b.get(i)? {
            b',' => i = ws(b, i + 1),
            b']' => return Some(i + 1),
            _ => return None,
        }
    }
}

fn skip(b: &[u8], i: usize) -> Option<usize> {
    jsonskip::value(b, i)
}

/// The string at `i`: its content's range and where it ends.
fn string_at(b: &[u8], i: usize) -> Option<((usize, usize), usize)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let end = jsonskip::string(b, i + 1)?;
    Some(((i + 1, end - 1), end))
}

/// Every string value inside the value at `i`.
fn strings(b: &[u8], i: usize, out: &mut Vec<(usize, usize)>) -> Option<usize> {
    match b.get(i)? {
        b'"' => {
            let (range, end) = string_at(b, i)?;
            out.push(range);
            Some(end)
        }
        b'[' => elements(b, i, |e| strings(b, e, out)),
        b'{' => members(b, i, |_, v| strings(b, v, out)),
        _ => skip(b, i),
    }
}

/// The searchable texts of a line, as [`super::record::parts`] finds them.
/// Each value is walked once when the record's `type` came before it (as
/// Claude Code writes records), else skipped and walked after.
/// With them, the index of what only `toolUseResult` holds, if any.
fn texts(b: &[u8]) -> Option<(Vec<Text>, Option<usize>)> {
    let (mut kind, mut meta, mut later, mut content, mut attachment) =
        (None, false, None, None, None);
    let mut tool_use_result = None;
    let mut out = Vec::new();
    let i = ws(b, 0);
    let end = members(b, i, |key, v| {
        match key {
            b"type" => {
                let (range, end) = string_at(b, v)?;
                kind = Some(range);
                return Some(end);
            }
            b"isMeta" => meta = b.get(v..v + 4) == Some(b"true"),
            b"message" => match kind.map(|(s, e)| &b[s..e]) {
                Some(b"user") => return message_texts(b, v, Kind::User, &mut out),
                Some(b"assistant") => return message_texts(b, v, Kind::Assistant, &mut out),
                Some(_) => {}
                None => later = Some(v),
            },
            b"content" => content = Some(v),
            b"attachment" => attachment = Some(v),
            b"toolUseResult" => tool_use_result = Some(v),
            _ => {}
        }
        skip(b, v)
    })?;
    // Nothing but whitespace after the record (else the decode refuses it).
    if ws(b, end) != b.len() {
        return None;
    }
    let kind = kind.map(|(s, e)| &b[s..e]);
    let mut extra = None;
    match kind {
        Some(b"user") => {
            if let Some(m) = later {
                message_texts(b, m, Kind::User, &mut out)?;
            }
            if meta {
                for t in out.iter_mut().filter(|t| t.kind == Kind::User) {
                    t.kind = Kind::Injection;
                }
            }
            if out.iter().any(|t| t.kind == Kind::ToolResult)
                && let Some(v) = tool_use_result
            {
                let ranges = tool_use_result_ranges(b, v)?;
                if !ranges.is_empty() {
                    extra = Some(out.len());
                    out.push(text(EXTRA, ranges, false));
                }
            }
        }
        Some(b"assistant") => {
            if let Some(m) = later {
                message_texts(b, m, Kind::Assistant, &mut out)?;
            }
        }
        Some(b"system") => {
            if let Some((range, _)) = content.and_then(|c| string_at(b, c)) {
                out.push(text(Kind::Injection, vec![range], false));
            }
        }
        Some(b"attachment") => {
            if let Some(a) = attachment {
                let mut ranges = Vec::new();
                strings(b, a, &mut ranges)?;
                out.push(text(Kind::Injection, ranges, false));
            }
        }
        _ => out.clear(),
    }
    Some((out, extra))
}

/// The strings of the `toolUseResult` fields only it holds
/// ([`super::record::TOOL_USE_RESULT_FIELDS`]; a Read's `file`: its path).
fn tool_use_result_ranges(b: &[u8], v: usize) -> Option<Vec<(usize, usize)>> {
    let mut ranges = Vec::new();
    match b.get(v)? {
        b'"' => ranges.push(string_at(b, v)?.0),
        b'{' => {
            members(b, v, |key, v| {
                let named = |k: &str| k.as_bytes() == key;
                if key == b"file" && b.get(v) == Some(&b'{') {
                    return members(b, v, |key, v| {
                        if key == b"filePath"
                            && let Some((range, end)) = string_at(b, v)
                        {
                            ranges.push(range);
                            return Some(end);
                        }
                        skip(b, v)
                    });
                }
                if super::record::TOOL_USE_RESULT_FIELDS
                    .iter()
                    .any(|k| named(k))
                    && key != b"file"
                {
                    return strings(b, v, &mut ranges);
                }
                skip(b, v)
            })?;
        }
        _ => {}
    }
    Some(ranges)
}

fn text(kind: Kind, ranges: Vec<(usize, usize)>, json: bool) -> Text {
    Text { kind, ranges, json }
}

/// A message's texts; where the message ends.
fn message_texts(b: &[u8], m: usize, said: Kind, out: &mut Vec<Text>) -> Option<usize> {
    if b.get(m) != Some(&b'{') {
        return skip(b, m);
    }
    members(b, m, |key, v| {
        if key == b"content" {
            content_texts(b, v, said, None, out)
        } else {
            skip(b, v)
        }
    })
}

/// A content: a string, or a list of blocks. `inner`: the kind every
/// text of a tool result's content takes.
fn content_texts(
    b: &[u8],
    v: usize,
    said: Kind,
    inner: Option<Kind>,
    out: &mut Vec<Text>,
) -> Option<usize> {
    match b.get(v)? {
        b'"' => {
            let (range, end) = string_at(b, v)?;
            out.push(text(inner.unwrap_or(said), vec![range], false));
            Some(end)
        }
        b'[' => elements(b, v, |e| block(b, e, said, inner, out)),
        _ => skip(b, v),
    }
}

/// One block's text, walked where its value is once its `type` is known.
fn block_value(
    b: &[u8],
    kind: &[u8],
    key: &[u8],
    v: usize,
    said: Kind,
    inner: Option<Kind>,
    out: &mut Vec<Text>,
) -> Option<usize> {
    match (kind, key) {
        (b"text", b"text") => {
            let (range, end) = string_at(b, v)?;
            out.push(text(inner.unwrap_or(said), vec![range], false));
            Some(end)
        }
        (b"thinking", b"thinking") => {
            let (range, end) = string_at(b, v)?;
            if range.1 > range.0 {
                out.push(text(Kind::Thinking, vec![range], false));
            }
            Some(end)
        }
        (b"tool_use", b"input") => {
            let end = skip(b, v)?;
            out.push(text(Kind::ToolUse, vec![(v, end)], true));
            Some(end)
        }
        (b"tool_result", b"content") => content_texts(b, v, said, Some(Kind::ToolResult), out),
        _ => skip(b, v),
    }
}

fn block(
    b: &[u8],
    e: usize,
    said: Kind,
    inner: Option<Kind>,
    out: &mut Vec<Text>,
) -> Option<usize> {
    if b.get(e) != Some(&b'{') {
        return skip(b, e);
    }
    let mut kind: Option<(usize, usize)> = None;
    let mut later: Vec<(&[u8], usize)> = Vec::new();
    let end = members(b, e, |key, v| {
        if key == b"type" {
            let (range, end) = string_at(b, v)?;
            kind = Some(range);
            return Some(end);
        }
        if let Some((s, k)) = kind {
            return block_value(b, &b[s..k], key, v, said, inner, out);
        }
        if matches!(key, b"text" | b"thinking" | b"input" | b"content") {
            later.push((key, v));
        }
        skip(b, v)
    })?;
    let kind = kind.map_or(&b""[..], |(s, k)| &b[s..k]);
    for (key, v) in later {
        block_value(b, kind, key, v, said, inner, out)?;
    }
    Some(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recall::record;

    /// The raw count agrees with decoding the record and matching each
    /// part (or says the line must be decoded); returns whether it counted.
    #[track_caller]
    fn agrees(line: &str, query: &Query) -> bool {
        let decoded = record::decode(line.as_bytes()).unwrap();
        let want = record::parts(&decoded)
            .iter()
            .filter(|p| p.kind != Kind::Image && query.find(&p.text).is_some())
            .count() as u64;
        let got = count(line.as_bytes(), query, &[]);
        let want = if decoded.get("toolUseResult").is_some() {
            // One match per result: its output or what only toolUseResult holds.
            let parts = record::parts(&decoded);
            let result = parts
                .iter()
                .filter(|p| p.kind == Kind::ToolResult)
                .any(|p| query.find(&p.text).is_some());
            want - parts
                .iter()
                .filter(|p| p.kind == Kind::ToolResult && query.find(&p.text).is_some())
                .count() as u64
                + u64::from(result)
        } else {
            want
        };
        assert!(
            got.is_none_or(|n| n == want),
            "{line}: {got:?}, {want} decoded"
        );
        got.is_some()
    }

    /// Recall's own call holds only the query: never a hit (decoded, the
    /// call is told by its name; raw, such a line is left to the decode).
    /// Any other tool's call with the same input is one.
    #[test]
    fn recalls_own_call_is_not_searched() {
        let query = Query::literal("lazy dog").unwrap();
        let call = |name: &str| {
            format!(
                r#"{{"type":"assistant","message":{{"content":[{{"type":"tool_use","id":"t","name":"{name}","input":{{"query":"lazy dog","limit":1}}}}]}}}}"#
            )
        };
        for name in [
            "mcp__ktr__thread_rebuild_recall",
            "mcp__plugin_ktr_ktr__thread_rebuild_recall_get",
        ] {
            let line = call(name);
            let decoded = record::decode(line.as_bytes()).unwrap();
            assert!(record::parts(&decoded).is_empty(), "{name}");
            assert_eq!(count(line.as_bytes(), &query, &[]), None, "{name}");
        }
        assert!(agrees(&call("Bash"), &query));
        assert_eq!(count(call("Bash").as_bytes(), &query, &[]), Some(1));
    }

    /// A line that is not JSON (the decode refuses it: no hit) is never
    /// counted raw.
    #[test]
    fn a_line_that_is_not_json_is_not_counted_raw() {
        let query = Query::literal("worker").unwrap();
        for line in [
            r#"{"type":"user","message":{"content":"the worker \q"}}"#,
            r#"{"type":"user","message":{"content":"the worker"},"n":01}"#,
            r#"{"type":"user","message":{"content":"the worker"}} x"#,
        ] {
            assert!(record::decode(line.as_bytes()).is_none(), "{line}");
            assert_eq!(count(line.as_bytes(), &query, &[]), None, "{line}");
        }
        let not_utf8 = b"{\"type\":\"user\",\"message\":{\"content\":\"the worker \xff\"}}";
        assert!(record::decode(not_utf8).is_none());
        assert_eq!(count(not_utf8, &query, &[]), None);
    }

    #[test]
    fn the_raw_count_is_the_decoded_count() {
        let lines = [
            r#"{"type":"user","uuid":"worker-1","cwd":"/worker","message":{"role":"user","content":"the worker\nstopped"}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"worker?"},{"type":"text","text":"a \"worker\" n"},{"type":"tool_use","id":"t","name":"Bash","input":{"command":"grep worker","n":1}}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"worker 日志"},{"type":"text","text":"none"}]}]},"toolUseResult":{"stdout":"worker"}}"#,
            r#"{"type":"system","content":"Worker said \\n"}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"e","content":"edited"}]},"toolUseResult":{"filePath":"/w","originalFile":"old worker code","file":{"filePath":"/src/worker.rs","content":"x"},"structuredPatch":[{"lines":["-worker"]}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"e","content":"Error: no worker"}]},"toolUseResult":"Error: no worker"}"#,
            r#"{"type":"attachment","attachment":{"type":"hook","content":["a worker","b"]}}"#,
            r#"{"message":{"content":"worker"},"type":"user","isMeta":true}"#,
        ];
        for q in [
            Query::literal("worker").unwrap(),
            Query::literal("n").unwrap(),
            Query::literal("日志").unwrap(),
        ] {
            for line in lines {
                assert!(agrees(line, &q), "a literal is counted raw: {line}");
            }
        }
        for q in [
            Query::regex(r"work\w+\s").unwrap(),
            Query::regex(r"said \\n").unwrap(),
        ] {
            for line in lines {
                agrees(line, &q);
            }
        }
    }

    #[test]
    fn a_regex_is_counted_raw_beside_escapes_and_decoded_where_it_must_be() {
        let beside = [
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":"a\ntimeout retry\n\tb"}]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"\u65e5志 timeout queue\"x\""}]}}"#,
            r#"{"type":"user","message":{"content":"日志 \\timeout retry 轮转\n"}}"#,
        ];
        let q = Query::regex("timeout (retry|queue)").unwrap();
        for line in beside {
            assert!(agrees(line, &q), "counted without decoding: {line}");
        }
        // A match across an escape, one that starts inside one, one in a
        // key or across a key and its value, one a `\b` sees differently
        // raw: counted as the decoded texts tell.
        let lines = [
            r#"{"type":"user","message":{"content":"timeout\nretry; a\nretry"}}"#,
            r#"{"type":"user","message":{"content":"x","timeout retry":"y"},"timeout":"retry"}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"\u0041retry \nretry"}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":"日志\u65e5志轮转"}]}}"#,
        ];
        for q in [
            r"timeout\sretry",
            r"\w+retry",
            r"\bretry",
            r"timeout.{0,8}retry",
            r"日志(轮转)?",
            r"志轮转",
            "timeout (retry|queue)",
        ] {
            let q = Query::regex(q).unwrap();
            for line in lines.iter().chain(&beside) {
                agrees(line, &q);
            }
        }
    }
}
