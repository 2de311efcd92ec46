//! The window as the API measured it: the newest main-chain
//! assistant record's `message.usage`, found by reading only the end of
//! the transcript.
//!
//! `input_tokens + cache_creation_input_tokens + cache_read_input_tokens`
//! is the prompt Claude Code sent for that reply: the window at that
//! moment. Sidechain (subagent) records, `<synthetic>` records (Claude Code
//! writes them with all-zero usage, e.g. "Prompt is too long" when a
//! compaction was blocked) and API error records are skipped. A compaction
//! boundary newer than every usage means the window was rebuilt by Claude
//! Code since: the old number no longer applies.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use serde::{Deserialize, Serialize};

use ktr_base::open::{Links, open_regular};

/// How much of the end of a transcript is read: enough for hundreds of
/// records, bounded however long the file is.
pub const TAIL_BYTES: u64 = 512 * 1024;

/// The first, cheaper read of [`read_tail`].
const FIRST_TRY_BYTES: u64 = 64 * 1024;

/// One measured usage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// input + cache creation + cache read tokens.
    pub tokens: u64,
    /// The record's timestamp, when it has one.
    pub at: Option<String>,
    /// The model that answered.
    pub model: Option<String>,
}

/// What the tail of a transcript says about the window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tail {
    /// The newest usage of the current window, if any.
    pub usage: Option<Usage>,
    /// The newest model id seen on a main-chain reply (also before a boundary).
    pub model: Option<String>,
    /// Why there is no usage (shown to humans when falling back).
    pub missing: Option<&'static str>,
    /// A user record is newer than every reply: the reply to it is not in
    /// the file yet (Claude Code may run the Stop hook a moment before it
    /// has written the reply's record).
    pub reply_pending: bool,
}

/// Read the last [`TAIL_BYTES`] of `path` and find the newest usage.
///
/// # Errors
/// When the file cannot be opened or read.
pub fn read_tail(path: &Path) -> io::Result<Tail> {
    read_tail_seeking(path, &[]).map(|(tail, _)| tail)
}

/// [`read_tail`], and whether the file's last 64 KiB contain one of
/// `needles` (the Stop hook waits for its reply to be flushed; no needle:
/// found). One read of 64 KiB in the common case: the newest reply is
/// nearly always within the last few records; else [`TAIL_BYTES`].
///
/// # Errors
/// When the file cannot be opened or read.
pub fn read_tail_seeking(path: &Path, needles: &[&[u8]]) -> io::Result<(Tail, bool)> {
    // Never blocks in open(2) (a FIFO swapped in for the transcript).
    let mut file = open_regular(path, Links::Refuse)?;
    let near = last_lines(&mut file, FIRST_TRY_BYTES)?;
    let found = needles.is_empty()
        || needles
            .iter()
            .any(|n| memchr::memmem::find(&near, n).is_some());
    let tail = from_tail(&near);
    if tail.usage.is_some() && tail.model.is_some() {
        return Ok((tail, found));
    }
    Ok((from_tail(&last_lines(&mut file, TAIL_BYTES)?), found))
}

/// The window after the reply to the prompt `prompt_id` (the Stop hook's
/// `prompt_id`, which Claude Code writes on that prompt's user records as
/// `promptId`): `Some` only once the newest prompt in the file's tail is
/// that one and a reply with usage follows it, so the figure is provably
/// the reply that just ended — never an earlier one whose text looks the
/// same. Reads the last 64 KiB, and the last [`TAIL_BYTES`] only when
/// those hold no prompt record.
///
/// # Errors
/// When the file cannot be opened or read.
pub fn read_reply_to(path: &Path, prompt_id: &str) -> io::Result<Option<Tail>> {
    const KEY: &[u8] = b"\"promptId\":\"";
    // The Stop hook polls this while Claude Code flushes the turn: the
    // last 64 KiB nearly always hold the newest prompt record; only a turn
    // longer than that needs the whole tail.
    let mut file = open_regular(path, Links::Refuse)?;
    let mut bytes = last_lines(&mut file, FIRST_TRY_BYTES)?;
    if memchr::memmem::rfind(&bytes, KEY).is_none() {
        bytes = last_lines(&mut file, TAIL_BYTES)?;
    }
    let Some(last) = memchr::memmem::rfind(&bytes, KEY) else {
        return Ok(None);
    };
    let value = &bytes[last + KEY.len()..];
    let newest = value
        .iter()
        .position(|b| *b == b'"')
        .map(|end| &value[..end]);
    if newest != Some(prompt_id.as_bytes()) {
        return Ok(None);
    }
    let needle = [KEY, prompt_id.as_bytes(), b"\""].concat();
    let first = memchr::memmem::find(&bytes, &needle).unwrap_or(last);
    let start = memchr::memrchr(b'\n', &bytes[..first]).map_or(0, |i| i + 1);
    let tail = from_tail(&bytes[start..]);
    Ok((tail.usage.is_some() && !tail.reply_pending).then_some(tail))
}

/// [`read_tail`] with an explicit bound.
///
/// # Errors
/// When the file cannot be opened or read.
#[cfg(test)]
pub(crate) fn read_tail_bounded(path: &Path, limit: u64) -> io::Result<Tail> {
    Ok(from_tail(&last_lines(
        &mut open_regular(path, Links::Refuse)?,
        limit,
    )?))
}

/// The whole lines within the last `limit` bytes of `file`.
fn last_lines(file: &mut File, limit: u64) -> io::Result<Vec<u8>> {
    let len = file.metadata()?.len();
    let start = len.saturating_sub(limit);
    file.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity(usize::try_from(len - start).unwrap_or(0));
    file.take(limit).read_to_end(&mut buf)?;
    // Starting mid-file, the first (partial) line is not a record.
    if start > 0 {
        let first = memchr::memchr(b'\n', &buf).map_or(buf.len(), |i| i + 1);
        buf.drain(..first);
    }
    Ok(buf)
}

/// Find the newest usage in `bytes` (whole JSONL lines), newest line first.
pub(crate) fn from_tail(bytes: &[u8]) -> Tail {
    let mut tail = Tail::default();
    let mut compacted = false;
    let mut seen_reply = false;
    let mut end = bytes.len();
    loop {
        let start = memchr::memrchr(b'\n', &bytes[..end]).map_or(0, |i| i + 1);
        let line = &bytes[start..end];
        if !seen_reply && memchr::memmem::find(line, b"\"type\":\"user\"").is_some() {
            tail.reply_pending = true;
        }
        match read_line(line) {
            Seen::Boundary if tail.usage.is_none() => compacted = true,
            Seen::Reply { usage, model } => {
                seen_reply = true;
                if tail.model.is_none() {
                    tail.model.clone_from(&model);
                }
                if !compacted && tail.usage.is_none() {
                    tail.usage = usage;
                }
            }
            _ => {}
        }
        if tail.model.is_some() && (tail.usage.is_some() || compacted) {
            break;
        }
        if start == 0 {
            break;
        }
        end = start - 1;
    }
    if tail.usage.is_none() {
        tail.missing = Some(if compacted {
            "Claude Code compacted the window after its last reply"
        } else {
            "no reply in the transcript's tail records its usage (older Claude Code, or none yet)"
        });
    }
    tail
}

/// The first reply of a fresh session: its usage is the fixed overhead of
/// a window (system prompt, tools, per-start attachments) plus the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstReply {
    pub usage: Usage,
    /// The texts of the user records before it (the first prompt).
    pub prompt_text: String,
}

/// The head of a transcript: its first reply, if that measures a fresh
/// start, and whether any main-chain reply was seen at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub first: Option<FirstReply>,
    pub replied: bool,
}

/// Read the first [`TAIL_BYTES`] of `path`: the first main-chain reply with
/// usage, when nothing but user records and non-speech came before it (a
/// fresh start; a rebuilt session starts with carried replies instead).
///
/// # Errors
/// When the file cannot be opened or read.
pub(crate) fn read_head(path: &Path) -> io::Result<Head> {
    let mut buf = Vec::new();
    open_regular(path, Links::Refuse)?
        .take(TAIL_BYTES)
        .read_to_end(&mut buf)?;
    Ok(Head {
        replied: memchr::memmem::find(&buf, b"\"assistant\"").is_some(),
        first: first_reply(&buf),
    })
}

/// The first reply written after byte `offset` of `path` (bounded read of
/// [`TAIL_BYTES`]): in a rebuilt session, with `offset` the length of the
/// candidate ktr wrote, the first request of the new window (carried
/// records never hold usage). Replies without usage (`<synthetic>`, API
/// errors) are skipped; a compaction boundary ends the search.
///
/// # Errors
/// When the file cannot be opened or read.
pub(crate) fn read_reply_after(path: &Path, offset: u64) -> io::Result<Option<FirstReply>> {
    let mut file = open_regular(path, Links::Refuse)?;
    // One byte before the offset: when it is not a newline, the offset is
    // inside a line, and that line is not a record of its own.
    let start = offset.saturating_sub(1);
    file.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    file.take(TAIL_BYTES).read_to_end(&mut buf)?;
    if offset > 0 {
        let first = memchr::memchr(b'\n', &buf).map_or(buf.len(), |i| i + 1);
        buf.drain(..first);
    }
    Ok(scan_first(&buf, true))
}

/// [`read_head`] on bytes.
pub(crate) fn first_reply(bytes: &[u8]) -> Option<FirstReply> {
    scan_first(bytes, false)
}

/// The first main-chain reply with usage and the user texts before it.
/// With `skip_unmeasured`, replies without usage are passed over (after a
/// rebuild); without, such a reply first means "not a measurable start".
fn scan_first(bytes: &[u8], skip_unmeasured: bool) -> Option<FirstReply> {
    let mut prompt_text = String::new();
    for line in bytes.split(|b| *b == b'\n') {
        let mapped = crate::lone::map_line(line);
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(mapped.as_deref().unwrap_or(line))
        else {
            continue;
        };
        let main_chain = v["isSidechain"] != true && v.get("agentId").is_none();
        match v["type"].as_str() {
            Some("user") if main_chain && v["isMeta"] != true => {
                user_text(&v["message"]["content"], &mut prompt_text);
            }
            Some("assistant") if main_chain => {
                let Ok(parsed) = serde_json::from_value::<Line>(v) else {
                    return None;
                };
                match reply_of(parsed) {
                    Seen::Reply {
                        usage: Some(usage), ..
                    } => return Some(FirstReply { usage, prompt_text }),
                    _ if skip_unmeasured => {}
                    // A synthetic or usage-less reply first: not a measurable start.
                    _ => return None,
                }
            }
            Some("system") if v["subtype"] == "compact_boundary" => return None,
            _ => {}
        }
    }
    None
}

fn user_text(content: &serde_json::Value, out: &mut String) {
    match content {
        serde_json::Value::String(s) => out.push_str(s),
        serde_json::Value::Array(blocks) => {
            for b in blocks.iter().filter(|b| b["type"] == "text") {
                out.push_str(b["text"].as_str().unwrap_or(""));
            }
        }
        _ => {}
    }
}

/// What one line tells.
enum Seen {
    Nothing,
    Boundary,
    Reply {
        usage: Option<Usage>,
        model: Option<String>,
    },
}

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: Option<String>,
    subtype: Option<String>,
    #[serde(rename = "isSidechain")]
    sidechain: Option<bool>,
    #[serde(rename = "isApiErrorMessage")]
    api_error: Option<bool>,
    #[serde(rename = "agentId")]
    agent_id: Option<String>,
    timestamp: Option<String>,
    message: Option<Message>,
}

#[derive(Deserialize)]
struct Message {
    model: Option<String>,
    usage: Option<RawUsage>,
}

/// The API's field names.
#[allow(clippy::struct_field_names)]
#[derive(Deserialize)]
struct RawUsage {
    input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

fn read_line(line: &[u8]) -> Seen {
    let boundary = memchr::memmem::find(line, b"compact_boundary").is_some();
    let reply = memchr::memmem::find(line, b"\"assistant\"").is_some();
    if !boundary && !reply {
        return Seen::Nothing;
    }
    // Lenient: a line that does not have the expected shape says nothing.
    let mapped = crate::lone::map_line(line);
    let Ok(parsed) = serde_json::from_slice::<Line>(mapped.as_deref().unwrap_or(line)) else {
        return Seen::Nothing;
    };
    match parsed.kind.as_deref() {
        Some("system") if parsed.subtype.as_deref() == Some("compact_boundary") => Seen::Boundary,
        Some("assistant") => reply_of(parsed),
        _ => Seen::Nothing,
    }
}

fn reply_of(line: Line) -> Seen {
    let side = line.sidechain == Some(true) || line.agent_id.is_some();
    let Some(message) = line.message else {
        return Seen::Nothing;
    };
    if side || message.model.as_deref() == Some("<synthetic>") || line.api_error == Some(true) {
        return Seen::Nothing;
    }
    let usage = message.usage.and_then(|u| {
        let tokens = u.input_tokens?
            + u.cache_creation_input_tokens.unwrap_or(0)
            + u.cache_read_input_tokens.unwrap_or(0);
        Some(Usage {
            tokens,
            at: line.timestamp,
            model: message.model.clone(),
        })
    });
    Seen::Reply {
        usage,
        model: message.model,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply(tokens: u64, extra: &serde_json::Value) -> String {
        let mut v = json!({"type": "assistant", "timestamp": format!("t{tokens}"),
            "message": {"model": "claude-opus-5-5", "role": "assistant",
                "usage": {"input_tokens": tokens, "cache_creation_input_tokens": 1,
                          "cache_read_input_tokens": 2, "output_tokens": 10}}});
        for (k, val) in extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        v.to_string()
    }

    fn tail_of(lines: &[String]) -> Tail {
        from_tail(lines.join("\n").as_bytes())
    }

    #[track_caller]
    fn assert_tokens(tail: &Tail, tokens: u64) {
        assert_eq!(
            tail.usage.as_ref().map(|u| u.tokens),
            Some(tokens),
            "{tail:?}"
        );
    }

    #[test]
    fn newest_main_chain_usage_wins() {
        let lines = [
            reply(100, &json!({})),
            reply(500, &json!({})),
            r#"{"type":"user"}"#.into(),
        ];
        let tail = tail_of(&lines);
        assert_tokens(&tail, 503);
        assert_eq!(tail.usage.unwrap().at.as_deref(), Some("t500"));
        assert_eq!(tail.model.as_deref(), Some("claude-opus-5-5"));
    }

    #[test]
    fn sidechain_subagent_synthetic_and_api_errors_are_ignored() {
        let synthetic = json!({"type": "assistant", "isApiErrorMessage": true,
            "message": {"model": "<synthetic>", "usage": {"input_tokens": 0}}})
        .to_string();
        let lines = [
            reply(700, &json!({})),
            reply(9, &json!({"isSidechain": true})),
            reply(8, &json!({"agentId": "a1"})),
            reply(7, &json!({"isApiErrorMessage": true})),
            synthetic,
        ];
        assert_tokens(&tail_of(&lines), 703);
    }

    #[test]
    fn a_newer_compaction_boundary_hides_older_usage() {
        let boundary = json!({"type": "system", "subtype": "compact_boundary"}).to_string();
        let tail = tail_of(&[reply(900, &json!({})), boundary.clone()]);
        assert!(tail.usage.is_none());
        assert!(tail.missing.unwrap().contains("compacted"));
        assert_eq!(tail.model.as_deref(), Some("claude-opus-5-5"));
        // A reply after the boundary measures the new window.
        assert_tokens(
            &tail_of(&[reply(900, &json!({})), boundary, reply(40, &json!({}))]),
            43,
        );
    }

    #[test]
    fn a_prompt_newer_than_every_reply_means_the_reply_is_pending() {
        let prompt = json!({"type": "user", "message": {"content": "next"}}).to_string();
        assert!(tail_of(&[reply(5, &json!({})), prompt.clone()]).reply_pending);
        assert!(!tail_of(&[prompt, reply(5, &json!({}))]).reply_pending);
    }

    #[test]
    fn no_usage_at_all_says_so() {
        let old = json!({"type": "assistant", "message": {"model": "claude-3", "content": []}});
        let tail = tail_of(&[old.to_string(), "not json".into(), String::new()]);
        assert!(tail.usage.is_none());
        assert!(tail.missing.unwrap().contains("no reply"));
        assert_eq!(tail.model.as_deref(), Some("claude-3"));
        assert_eq!(
            from_tail(b""),
            Tail {
                missing: tail.missing,
                ..Tail::default()
            }
        );
    }

    #[test]
    fn the_first_reply_of_a_fresh_start_measures_the_overhead() {
        let prompt = json!({"type": "user", "message": {"content": "hello there"}}).to_string();
        let meta = json!({"type": "user", "isMeta": true, "message": {"content": "caveat"}});
        let att = json!({"type": "attachment", "attachment": {"type": "skill_listing"}});
        let lines = [
            meta.to_string(),
            prompt,
            att.to_string(),
            reply(13_000, &json!({})),
            reply(1, &json!({})),
        ];
        let first = first_reply(lines.join("\n").as_bytes()).unwrap();
        assert_eq!(first.usage.tokens, 13_003);
        assert_eq!(first.prompt_text, "hello there");
        // A carried (usage-less) reply first: a rebuilt session, not a fresh start.
        let carried = json!({"type": "assistant", "message": {"model": "m", "content": []}});
        let lines = [carried.to_string(), reply(13_000, &json!({}))];
        assert_eq!(first_reply(lines.join("\n").as_bytes()), None);
    }

    #[test]
    fn the_first_reply_after_a_rebuild_is_found_past_the_carried_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let carried_reply = json!({"type": "assistant", "message": {"model": "m", "content": []}});
        let carried = format!(
            "{}\n{carried_reply}\n",
            json!({"type": "user", "message": {"content": "carried question"}})
        );
        let synthetic = reply(
            0,
            &json!({"message": {"model": "<synthetic>", "usage": {"input_tokens": 0}}}),
        );
        let after = [
            json!({"type": "attachment", "attachment": {"type": "skill_listing"}}).to_string(),
            synthetic,
            json!({"type": "user", "message": {"content": "new prompt"}}).to_string(),
            reply(40_000, &json!({})),
            reply(50_000, &json!({})),
        ];
        std::fs::write(&path, format!("{carried}{}\n", after.join("\n"))).unwrap();
        let offset = carried.len() as u64;
        let first = read_reply_after(&path, offset).unwrap().unwrap();
        assert_eq!(first.usage.tokens, 40_003);
        assert_eq!(
            first.prompt_text, "new prompt",
            "carried texts are not the prompt"
        );
        // An offset inside a line: that line is skipped, not misread.
        let first = read_reply_after(&path, offset - 3).unwrap().unwrap();
        assert_eq!(first.prompt_text, "new prompt");
        // No reply since the rebuild yet.
        std::fs::write(&path, &carried).unwrap();
        assert_eq!(read_reply_after(&path, offset).unwrap(), None);
    }

    #[test]
    fn the_bounded_read_skips_the_partial_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let body = format!("{}\n{}\n", reply(1, &json!({})), reply(2000, &json!({})));
        std::fs::write(&path, &body).unwrap();
        assert_tokens(&read_tail(&path).unwrap(), 2003);
        // Only the last line fits: the cut-off first line is not misread.
        let last_len = body.lines().last().unwrap().len() as u64 + 1;
        assert_tokens(&read_tail_bounded(&path, last_len + 5).unwrap(), 2003);
        assert!(read_tail_bounded(&path, 10).unwrap().usage.is_none());
    }
}
