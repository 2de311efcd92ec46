//! A record read by walking its line once (`ktr plan` within 5×
//! `wc -l`). Through `serde_json`, a tool result's text was skipped two
//! or three times (the message's content taken raw, split into blocks,
//! each block taken raw again); here every value is skipped once, by
//! [`jsonskip`], and the message's blocks are found on the way.
//!
//! The walk gives the very [`Record`] `serde_json` would, or gives up
//! (`None`) and leaves the line to `serde_json`: on a key written with an
//! escape, a field given twice (`serde_json` refuses the line), a
//! `message` that is not an object, a string holding an unpaired
//! surrogate, or anything that is not valid JSON. The tests and the
//! `record_walk` fuzz target compare the two.

use super::{Content, Lenient, Message, Parent, Raw, Record, Str, origin_of};
use crate::jsonskip::{self, Seen, ws};
use crate::rawjson;
use std::fmt::Write as _;

/// The record on the line `text` and what skipping its values met, or
/// `None` (let `serde_json` decide).
pub(super) fn record(text: &str) -> Option<(Record<'_>, Seen)> {
    let mut r = Record::default();
    let mut seen = Seen::default();
    // One bit per field already given.
    let mut given = 0u32;
    let end = members(text, ws(text.as_bytes(), 0), &mut seen, |key, at, seen| {
        let Some(field) = FIELDS.iter().position(|f| *f == key) else {
            return jsonskip::value(text.as_bytes(), at, seen);
        };
        if given & (1 << field) != 0 {
            return None;
        }
        given |= 1 << field;
        if key == "message" {
            let (message, end) = message(text, at, seen)?;
            r.message = message;
            return Some(end);
        }
        let end = jsonskip::value(text.as_bytes(), at, seen)?;
        set(&mut r, key, &text[at..end])?;
        Some(end)
    })?;
    (ws(text.as_bytes(), end) == text.len()).then_some((r, seen))
}

/// The fields of [`Record`], as the line names them.
const FIELDS: [&str; 20] = [
    "type",
    "subtype",
    "uuid",
    "parentUuid",
    "logicalParentUuid",
    "isSidechain",
    "isMeta",
    "isCompactSummary",
    "turnCompanion",
    "timestamp",
    "cwd",
    "version",
    "gitBranch",
    "userType",
    "entrypoint",
    "promptSource",
    "origin",
    "message",
    "attachment",
    "toolUseResult",
];

/// Field `key` of `r` (not `message`) from its value's JSON text `raw`.
fn set<'a>(r: &mut Record<'a>, key: &str, raw: &'a str) -> Option<()> {
    let text = || Lenient::<Str<'a>>::from_raw(raw);
    let flag = || Lenient::<bool>::from_raw(raw);
    let value = || (raw != "null").then_some(Raw(raw));
    match key {
        "type" => r.kind = text()?,
        "subtype" => r.subtype = text()?,
        "uuid" => r.uuid = text()?,
        "parentUuid" => {
            r.parent_uuid = match text()?.0 {
                Some(s) => Parent::Uuid(s),
                None => Parent::Null,
            };
        }
        "logicalParentUuid" => r.logical_parent_uuid = text()?,
        "isSidechain" => r.is_sidechain = flag(),
        "isMeta" => r.is_meta = flag(),
        "isCompactSummary" => r.is_compact_summary = flag(),
        "turnCompanion" => r.turn_companion = flag(),
        "timestamp" => r.timestamp = text()?,
        "cwd" => r.cwd = text()?,
        "version" => r.version = text()?,
        "gitBranch" => r.git_branch = text()?,
        "userType" => r.user_type = text()?,
        "entrypoint" => r.entrypoint = text()?,
        "promptSource" => r.prompt_source = text()?,
        "origin" => r.origin = origin_of(raw),
        "attachment" => r.attachment = value(),
        "toolUseResult" => r.tool_use_result = value(),
        _ => return None,
    }
    Some(())
}

/// The `message` object at `at` and where it ends (`None`: not an object,
/// or give up).
fn message<'a>(text: &'a str, at: usize, seen: &mut Seen) -> Option<(Message<'a>, usize)> {
    let b = text.as_bytes();
    let mut m = Message::default();
    let end = members(text, at, seen, |key, at, seen| {
        let end = match key {
            "content" => {
                let (content, end) = content(text, at, seen)?;
                m.content = content;
                return Some(end);
            }
            _ => jsonskip::value(b, at, seen)?,
        };
        let raw = &text[at..end];
        match key {
            "role" => m.role = Lenient::<Str<'_>>::from_raw(raw)?.0,
            "id" => m.id = Lenient::<Str<'_>>::from_raw(raw)?.0,
            "model" => m.model = Lenient::<Str<'_>>::from_raw(raw)?.0,
            _ => {}
        }
        Some(end)
    })?;
    Some((m, end))
}

/// `message.content` at `at`: its blocks found as it is skipped.
fn content<'a>(text: &'a str, at: usize, seen: &mut Seen) -> Option<(Content<'a>, usize)> {
    let b = text.as_bytes();
    if b.get(at) != Some(&b'[') {
        let end = jsonskip::value(b, at, seen)?;
        let raw = &text[at..end];
        let content = match b[at] {
            b'"' => Content::Text(rawjson::text(raw)?),
            _ => Content::None,
        };
        return Some((content, end));
    }
    let mut blocks = Vec::new();
    let mut i = ws(b, at + 1);
    if b.get(i) == Some(&b']') {
        return Some((Content::Blocks(blocks), i + 1));
    }
    loop {
        let end = jsonskip::value(b, i, seen)?;
        blocks.push(&text[i..end]);
        i = ws(b, end);
        match b.get(i)? {
            b',' => i = ws(b, i + 1),
            b']' => return Some((Content::Blocks(blocks), i + 1)),
            _ => return None,
        }
    }
}

/// Walk the object at `at`: `each(key, value_start, seen)` skips or reads
/// each member's value and says where it ends. Returns the index past the
/// closing brace; `None` when the object is not valid JSON, a key holds
/// an escape, or `each` gave up.
fn members<'a>(
    text: &'a str,
    at: usize,
    seen: &mut Seen,
    mut each: impl FnMut(&'a str, usize, &mut Seen) -> Option<usize>,
) -> Option<usize> {
    let b = text.as_bytes();
    if b.get(at) != Some(&b'{') {
        return None;
    }
    let mut i = ws(b, at + 1);
    if b.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = jsonskip::string(b, i + 1, seen)?;
        let key = &text[i + 1..key_end - 1];
        if key.contains('\\') {
            return None;
        }
        i = ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = ws(b, each(key, ws(b, i + 1), seen)?);
        match b.get(i)? {
            b',' => i = ws(b, i + 1),
            b'}' => return Some(i + 1),
            _ => return None,
        }
    }
}

/// The walk against `serde_json` on `text`: `Ok(true)` both read the same
/// record, `Ok(false)` the walk gave up, `Err` they differ (a defect).
pub fn check(text: &str) -> Result<bool, String> {
    let theirs = serde_json::from_str::<Record<'_>>(text).ok();
    match (record(text).map(|(r, _)| r), theirs) {
        (Some(ours), Some(theirs)) if shown(&ours) == shown(&theirs) => Ok(true),
        (Some(ours), Some(theirs)) => Err(format!(
            "the walk read {text:?} as {} but serde_json as {}",
            shown(&ours),
            shown(&theirs)
        )),
        (Some(ours), None) => Err(format!(
            "the walk read {text:?}, which serde_json refuses, as {}",
            shown(&ours)
        )),
        (None, _) => Ok(false),
    }
}

/// Everything a [`Record`] holds, written out.
fn shown(r: &Record<'_>) -> String {
    let mut s = String::new();
    let lenient = [
        &r.kind,
        &r.subtype,
        &r.uuid,
        &r.logical_parent_uuid,
        &r.timestamp,
        &r.cwd,
        &r.version,
        &r.git_branch,
        &r.user_type,
        &r.entrypoint,
        &r.prompt_source,
    ];
    for l in lenient {
        write!(s, "{:?};", l.0).unwrap();
    }
    for f in [
        &r.is_sidechain,
        &r.is_meta,
        &r.is_compact_summary,
        &r.turn_companion,
    ] {
        write!(s, "{:?};", f.0).unwrap();
    }
    write!(
        s,
        "{:?};{:?};{:?};{:?};",
        r.parent_uuid,
        r.origin.as_ref().map(|o| &o.kind.0),
        r.attachment.map(|a| a.get()),
        r.tool_use_result.map(|a| a.get())
    )
    .unwrap();
    let m = &r.message;
    write!(s, "{:?};{:?};{:?};", m.role, m.id, m.model).unwrap();
    match &m.content {
        Content::None => s.push_str("none"),
        Content::Text(t) => write!(s, "text {t:?}").unwrap(),
        Content::Blocks(b) => write!(s, "blocks {b:?}").unwrap(),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk gives what `serde_json` gives, or gives up.
    #[track_caller]
    fn agrees(text: &str) -> bool {
        check(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_record_walked_is_the_record_serde_json_reads() {
        let walked = [
            r#"{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"hi \u00e9 \n"}}"#,
            r#" { "type" : "assistant" , "parentUuid" : "p" , "isSidechain" : true , "isMeta" : 1 , "message" : { "id" : "m" , "model" : "x" , "content" : [ { "type" : "text" , "text" : "a" } , 5 , "s" , [ ] ] } } "#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"a\"b\\c\/\u0041","is_error":true}]},"toolUseResult":{"stdout":"x","n":[1,2.5e-3,-0,true,false,null]}}"#,
            r#"{"type":"attachment","attachment":{"type":"queued_command","prompt":"p"},"toolUseResult":null,"origin":{"kind":"human"}}"#,
            r#"{"type":"user","origin":"nope","message":{"content":[]},"unknown":{"type":"x"},"unknown":1}"#,
            r#"{"type":5,"uuid":["x"],"parentUuid":{"a":1},"message":{"content":{"a":1},"role":null,"role":"user"}}"#,
            "{}",
            r#"{"message":{}}"#,
            r#"{"type":"user","message":{"content":"\ud83d\ude00"}}"#,
        ];
        for text in walked {
            assert!(agrees(text), "gave up on {text:?}");
        }
    }

    #[test]
    fn what_the_walk_is_unsure_of_is_left_to_serde_json() {
        for text in [
            r#"{"type":"user","type":"user"}"#,
            r#"{"typ\u0065":"user"}"#,
            r#"{"type":"user","message":"text"}"#,
            r#"{"type":"user","message":null}"#,
            r#"{"type":"user","message":{"content":"\ud83d"}}"#,
            r#"{"uuid":"\udc00"}"#,
            r#"{"type":"user",}"#,
            r#"{"type":"user"} x"#,
            r#"{"type":"user""#,
            r#"{"type":"us	er"}"#,
            r#"{"message":{"content":[1,]}}"#,
            r#"{"message":{"content":[1 2]}}"#,
            r#"{"toolUseResult":01}"#,
            "[1]",
            r#"{"a":1}{"#,
        ] {
            assert!(!agrees(text), "walked {text:?}");
        }
    }
}
