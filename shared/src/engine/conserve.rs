//! Independent verification of a candidate (SPEC §10, ktr-verify).
//!
//! Two checks. The *structural* check reads the candidate line by line as
//! plain JSON and compares it with the manifest and with a fresh,
//! deterministic rebuild from the frozen backup. The *conservation* check
//! is written independently of the selector: it reads the backup its own
//! simple way (`serde_json::Value`, naive tag removal) and demands that every
//! piece of real user/assistant text is found in the candidate, unless the
//! plan said it left that record out.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use regex::Regex;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::config::Config;
use crate::engine::candidate::{ITEM_NAMESPACE, ManifestEntry};
use crate::engine::plan::{self, LeftOut};
use crate::engine::transcript::is_timestamp;
use crate::error::{Error, Result};
use crate::fsutil::{sha256_file, sha256_hex};

/// What the operation recorded at prepare time.
pub struct Expected<'a> {
    pub session_id: &'a str,
    pub candidate_sha256: &'a str,
    pub manifest: &'a [ManifestEntry],
    pub left_out: &'a [LeftOut],
}

/// What verification checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ConservationCounts {
    pub candidate_lines: usize,
    pub source_pieces_checked: usize,
    pub source_records_left_out: usize,
    pub source_records_elided: usize,
}

/// Verify `candidate` against the frozen `backup`.
pub fn check(
    config: &Config,
    backup: &Path,
    candidate: &Path,
    expected: &Expected<'_>,
) -> Result<ConservationCounts> {
    let digest = sha256_file(candidate)?;
    if digest != expected.candidate_sha256 {
        return Err(fail(format!(
            "candidate digest {digest} differs from the recorded {}",
            expected.candidate_sha256
        )));
    }
    let bytes = std::fs::read(candidate).map_err(|e| Error::io_at("read", candidate, &e))?;
    let texts = check_structure(&bytes, expected)?;
    let rebuilt = plan::build(config, backup, Some(expected.session_id))?;
    if rebuilt.candidate.bytes() != bytes {
        return Err(fail(
            "candidate differs from a fresh rebuild of the frozen backup",
        ));
    }
    let carried: Vec<Carried<'_>> = texts
        .iter()
        .zip(expected.manifest)
        .map(|(text, m)| Carried {
            source_line: m.source_line,
            text,
        })
        .collect();
    let conservation = conserve(backup, &carried, expected, &config.reply_tool_pattern)?;
    Ok(ConservationCounts {
        candidate_lines: texts.len(),
        source_pieces_checked: conservation.checked,
        source_records_left_out: conservation.left_out,
        source_records_elided: conservation.elided,
    })
}

fn fail(message: impl std::fmt::Display) -> Error {
    Error::refused(format!("verification failed: {message}"))
}

/// Check every candidate line; return the carried texts in order.
fn check_structure(bytes: &[u8], expected: &Expected<'_>) -> Result<Vec<String>> {
    let text = std::str::from_utf8(bytes).map_err(|_| fail("candidate is not UTF-8"))?;
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    if lines.len() != expected.manifest.len() {
        return Err(fail(format!(
            "candidate has {} lines, manifest {}",
            lines.len(),
            expected.manifest.len()
        )));
    }
    let mut previous: Option<String> = None;
    let mut texts = Vec::with_capacity(lines.len());
    for (i, (line, entry)) in lines.iter().zip(expected.manifest).enumerate() {
        let at = |what: &str| fail(format!("line {}: {what}", i + 1));
        let v: Value = serde_json::from_str(line).map_err(|_| at("not JSON"))?;
        let kind = v["type"].as_str().unwrap_or("");
        if kind != entry.role.as_str() {
            return Err(at(&format!(
                "type {kind:?} does not match the manifest role {}",
                entry.role
            )));
        }
        let source = entry
            .source_uuid
            .clone()
            .unwrap_or_else(|| format!("line-{}", entry.source_line));
        let uuid = Uuid::new_v5(
            &ITEM_NAMESPACE,
            format!("{}:{i}:{source}", expected.session_id).as_bytes(),
        )
        .to_string();
        if v["uuid"].as_str() != Some(uuid.as_str()) || entry.uuid != uuid {
            return Err(at(
                "uuid is not the one derived from session, position and source",
            ));
        }
        if v["parentUuid"].as_str().map(str::to_string) != previous {
            return Err(at("parentUuid does not point at the previous line"));
        }
        if v["sessionId"].as_str() != Some(expected.session_id) {
            return Err(at("sessionId is not the new session id"));
        }
        if !v["timestamp"].as_str().is_some_and(is_timestamp) {
            return Err(at("timestamp missing or not ISO-8601"));
        }
        let meta_ok = kind == "attachment" || v["isMeta"] == Value::Bool(false);
        if v["isSidechain"] != Value::Bool(false) || !meta_ok {
            return Err(at("isSidechain/isMeta must be false"));
        }
        let carried = match kind {
            "attachment" => startup_context_text(&v, entry).ok_or_else(|| {
                at("an attachment line must be a SessionStart context carried as the startup snapshot")
            })?,
            _ => carried_text(&v)
                .ok_or_else(|| at("content is not plain text (tool, thinking or image block?)"))?,
        };
        if sha256_hex(carried.as_bytes()) != entry.carried_sha256 {
            return Err(at("text differs from the manifest digest"));
        }
        previous = Some(uuid);
        texts.push(carried);
    }
    Ok(texts)
}

/// The text of a carried `SessionStart` context, only for a startup snapshot
/// entry whose attachment is exactly such a context.
fn startup_context_text(v: &Value, entry: &ManifestEntry) -> Option<String> {
    let a = v.get("attachment")?;
    if entry.kind != crate::engine::turns::ItemKind::StartupSnapshot
        || a["type"] != "hook_additional_context"
        || a["hookEvent"] != "SessionStart"
    {
        return None;
    }
    match &a["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.as_str().or_else(|| p["text"].as_str()))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// The text of a candidate line, only if the message is exactly one text.
fn carried_text(v: &Value) -> Option<String> {
    let message = v.get("message")?.as_object()?;
    if v["type"].as_str()? == "user" {
        message.get("content")?.as_str().map(str::to_string)
    } else {
        let blocks = message.get("content")?.as_array()?;
        match blocks.as_slice() {
            [only] if only["type"] == "text" && only.as_object()?.len() == 2 => {
                only["text"].as_str().map(str::to_string)
            }
            _ => None,
        }
    }
}

/// What the conservation check counted.
#[derive(Debug)]
pub struct Conservation {
    pub checked: usize,
    pub left_out: usize,
    pub elided: usize,
}

/// The injected elements of SPEC §5 (data shared with the selector; the
/// removal logic below is this module's own).
const TAGS: &[&str] = crate::engine::classify::INJECTED_TAGS;

/// One carried text and the source line its manifest entry names.
#[derive(Debug, Clone, Copy)]
pub struct Carried<'a> {
    pub source_line: usize,
    pub text: &'a str,
}

/// Every piece of real speech in the backup must be in one of the carried
/// texts, unless the plan left its record out.
///
/// Linear in the size of the backup and the candidate. One pass over the
/// backup walks a cursor over `carried` (in candidate order): the pieces of
/// source line `n` are looked for, in order, in the texts whose manifest
/// entry names line `n`. A piece not found that way (a duplicated record,
/// a candidate out of source order, pieces in another order) is kept aside;
/// at the end one Aho-Corasick pass over every carried text must find each
/// of them somewhere. So a piece passes exactly when it occurs in some
/// carried text, as the check always demanded, without a search per piece.
pub fn conserve(
    backup: &Path,
    carried: &[Carried<'_>],
    expected: &Expected<'_>,
    reply_tool: &Regex,
) -> Result<Conservation> {
    let left_out: HashSet<usize> = expected.left_out.iter().map(|l| l.line).collect();
    let elided: HashSet<usize> = expected
        .manifest
        .iter()
        .filter(|m| m.elided_chars > 0)
        .map(|m| m.source_line)
        .collect();
    let file = File::open(backup).map_err(|e| Error::io_at("open", backup, &e))?;
    let mut result = Conservation {
        checked: 0,
        left_out: 0,
        elided: 0,
    };
    let tags = Tags::new();
    let mut cursor = 0;
    let mut aside: Vec<(usize, String)> = Vec::new();
    for (n, line) in BufReader::new(file).split(b'\n').enumerate() {
        let number = n + 1;
        let line = line.map_err(|e| Error::io_at("read", backup, &e))?;
        let Ok(v) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        let pieces = speech_pieces(&v, reply_tool, &tags);
        if pieces.is_empty() {
            continue;
        }
        if left_out.contains(&number) {
            result.left_out += 1;
            continue;
        }
        if elided.contains(&number) {
            result.elided += 1;
            continue;
        }
        while carried.get(cursor).is_some_and(|c| c.source_line < number) {
            cursor += 1;
        }
        let own_end = carried[cursor..]
            .iter()
            .position(|c| c.source_line != number)
            .map_or(carried.len(), |p| cursor + p);
        let mut within = InOrder::new(&carried[cursor..own_end]);
        for piece in pieces {
            result.checked += 1;
            if !within.find(&piece) {
                aside.push((number, piece));
            }
        }
        cursor = own_end;
    }
    if let Some((number, piece)) = missing_anywhere(carried, aside) {
        let preview: String = piece.chars().take(80).collect();
        return Err(fail(format!(
            "conservation: text of source line {number} is missing from the candidate: {preview:?}"
        )));
    }
    Ok(result)
}

/// Finds pieces one after another in a run of texts, never looking back.
struct InOrder<'a> {
    texts: &'a [Carried<'a>],
    text: usize,
    offset: usize,
}

impl<'a> InOrder<'a> {
    fn new(texts: &'a [Carried<'a>]) -> Self {
        InOrder {
            texts,
            text: 0,
            offset: 0,
        }
    }
    fn find(&mut self, piece: &str) -> bool {
        let finder = memchr::memmem::Finder::new(piece.as_bytes());
        while let Some(c) = self.texts.get(self.text) {
            if let Some(at) = finder.find(&c.text.as_bytes()[self.offset..]) {
                self.offset += at + piece.len();
                return true;
            }
            self.text += 1;
            self.offset = 0;
        }
        false
    }
}

/// The first (by source line) of `aside` that occurs in no carried text:
/// one overlapping Aho-Corasick pass over the texts for all of them.
fn missing_anywhere(
    carried: &[Carried<'_>],
    mut aside: Vec<(usize, String)>,
) -> Option<(usize, String)> {
    if aside.is_empty() {
        return None;
    }
    aside.sort_by(|a, b| a.1.cmp(&b.1));
    aside.dedup_by(|a, b| {
        a.1 == b.1 && {
            b.0 = b.0.min(a.0);
            true
        }
    });
    let automaton = aho_corasick::AhoCorasick::new(aside.iter().map(|(_, p)| p.as_str()))
        .expect("pieces are plain strings");
    let mut found = vec![false; aside.len()];
    let mut left = aside.len();
    for c in carried {
        for m in automaton.find_overlapping_iter(c.text) {
            let seen = &mut found[m.pattern().as_usize()];
            if !*seen {
                *seen = true;
                left -= 1;
            }
        }
        if left == 0 {
            return None;
        }
    }
    aside
        .into_iter()
        .zip(found)
        .filter(|(_, f)| !f)
        .map(|(a, _)| a)
        .min_by_key(|(line, _)| *line)
}

/// This reader's own idea of the speech in a record: pieces of text that
/// must survive a rebuild.
fn speech_pieces(v: &Value, reply_tool: &Regex, tags: &Tags) -> Vec<String> {
    if v["isSidechain"] == Value::Bool(true) {
        return Vec::new();
    }
    let message = &v["message"];
    let content = if message.is_object() {
        &message["content"]
    } else {
        message
    };
    match v["type"].as_str() {
        Some("assistant") => {
            if message["model"] == "<synthetic>" || v["isMeta"] == Value::Bool(true) {
                return Vec::new();
            }
            let mut out = Vec::new();
            for block in blocks(content) {
                match block["type"].as_str() {
                    Some("text") => out.extend(block["text"].as_str().map(str::to_string)),
                    Some("tool_use")
                        if block["name"]
                            .as_str()
                            .is_some_and(|n| reply_tool.is_match(n)) =>
                    {
                        out.extend(block["input"]["text"].as_str().map(str::to_string));
                    }
                    _ => {}
                }
            }
            if let Some(s) = content.as_str() {
                out.push(s.to_string());
            }
            trimmed(out)
        }
        Some("user") => user_pieces(v, content, tags),
        Some("attachment") => {
            let a = &v["attachment"];
            let prompt = a["prompt"].as_str().unwrap_or("").trim();
            let mode = a["commandMode"].as_str().unwrap_or("prompt");
            if a["type"] != "queued_command" || mode != "prompt" || prompt.starts_with('/') {
                return Vec::new();
            }
            trimmed(vec![prompt.to_string()])
        }
        _ => Vec::new(),
    }
}

fn user_pieces(v: &Value, content: &Value, tags: &Tags) -> Vec<String> {
    if v["isCompactSummary"] == Value::Bool(true) {
        return Vec::new(); // machine text; carried or counted as dropped
    }
    let mut texts: Vec<String> = Vec::new();
    for block in blocks(content) {
        match block["type"].as_str() {
            Some("tool_result") => {
                let result = match &block["content"] {
                    Value::String(s) => s.clone(),
                    other => blocks(other)
                        .filter_map(|b| b["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                };
                return match result.split_once("the user said:\n") {
                    Some((_, words)) if block["is_error"] == Value::Bool(true) => {
                        trimmed(vec![words.to_string()])
                    }
                    _ => Vec::new(),
                };
            }
            Some("text") => texts.extend(block["text"].as_str().map(str::to_string)),
            _ => {}
        }
    }
    if let Some(s) = content.as_str() {
        texts.push(s.to_string());
    }
    let joined = texts.join("\n");
    let origin = v["origin"]["kind"].as_str();
    if matches!(origin, Some("task-notification" | "peer"))
        || joined.trim_start().starts_with("<teammate-message")
    {
        return Vec::new();
    }
    if v["isMeta"] == Value::Bool(true) {
        return if joined.trim_start().starts_with("<channel") {
            trimmed(vec![joined])
        } else {
            Vec::new()
        };
    }
    // Naive removal, block by block: every known injected element, wherever it stands.
    let mut pieces = Vec::new();
    for text in &texts {
        let mut rest = text.as_str();
        while let Some((before, tag, inner, after)) = tags.next_element(rest) {
            pieces.push(before.to_string());
            if tag == "command-args" || tag == "command-name" {
                pieces.push(inner.trim().trim_start_matches('/').to_string());
            }
            rest = after;
        }
        pieces.push(rest.to_string());
    }
    trimmed(pieces)
}

/// The opening and closing strings of [`TAGS`].
struct Tags {
    opens: aho_corasick::AhoCorasick,
    closes: Vec<String>,
}

impl Tags {
    fn new() -> Tags {
        let opens = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostFirst)
            .build(TAGS.iter().map(|t| format!("<{t}>")))
            .expect("tag names are plain strings");
        Tags {
            opens,
            closes: TAGS.iter().map(|t| format!("</{t}>")).collect(),
        }
    }

    /// The first injected element of `s`: (before, tag, inner, after).
    /// One scan for the opening of any tag, one for its closing.
    fn next_element<'s>(&self, s: &'s str) -> Option<(&'s str, &'static str, &'s str, &'s str)> {
        let m = self.opens.find(s)?;
        let i = m.pattern().as_usize();
        let close = &self.closes[i];
        let end = memchr::memmem::find(&s.as_bytes()[m.end()..], close.as_bytes())? + m.end();
        Some((
            &s[..m.start()],
            TAGS[i],
            &s[m.end()..end],
            &s[end + close.len()..],
        ))
    }
}

fn blocks(content: &Value) -> impl Iterator<Item = &Value> {
    content.as_array().into_iter().flatten()
}

fn trimmed(pieces: Vec<String>) -> Vec<String> {
    pieces
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}
