//! What was appended to the source after prepare froze it (SPEC §10,
//! ktr-activate's compare-and-swap).
//!
//! Claude Code keeps writing a session's transcript after the Stop hook
//! that scheduled a rebuild: the turn's `stop_hook_summary` and
//! `turn_duration`, the attachments recording hook output (ktr's own Stop
//! hook line among them: `hook_success`, `hook_system_message`), per-start
//! records, file-only bookkeeping. None of that is carried by a rebuild, so
//! none of it is a change: the candidate still holds every word. What is a
//! change: speech (user or assistant text, a `queued_command` attachment, a
//! channel message, a queued prompt) — the operation goes back to `pending`
//! — and tool traffic (`tool_use`, `tool_result`), which means a turn is
//! running.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::operation::Operation;
use ktr_base::config::Config;
use ktr_base::digest::sha256_prefix;
use ktr_base::open::{Links, open_regular};

/// At most this much appended after the freeze is looked at; more is a change.
const APPENDED_CAP: u64 = 1 << 20;

/// How the source changed since prepare froze it, for the history; `writing`
/// when it may only be a line still being written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub why: String,
    pub writing: bool,
}

impl Change {
    fn new(why: impl Into<String>) -> Change {
        Change {
            why: why.into(),
            writing: false,
        }
    }
}

/// The records appended after the freeze that the rebuild would not carry
/// anyway, named for the history (`attachment hook_success`, `system
/// stop_hook_summary`, …), in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Residue(pub Vec<String>);

impl Residue {
    /// `; appended after prepare, carried by no rebuild: 2 × attachment
    /// hook_success, system turn_duration`, or nothing when none was.
    pub fn note(&self) -> String {
        if self.0.is_empty() {
            return String::new();
        }
        let mut counted: Vec<(&str, usize)> = Vec::new();
        for name in &self.0 {
            match counted.iter_mut().find(|(n, _)| *n == name) {
                Some((_, count)) => *count += 1,
                None => counted.push((name, 1)),
            }
        }
        let named: Vec<String> = counted
            .iter()
            .map(|(name, count)| match count {
                1 => (*name).to_string(),
                n => format!("{n} \u{d7} {name}"),
            })
            .collect();
        format!(
            "; appended after prepare, carried by no rebuild: {}",
            named.join(", ")
        )
    }
}

/// [`source_change`], with a line still being written given until
/// `stable_file_seconds` to end: Claude Code appends a turn's closing
/// records after the Stop hook, and a look at that instant sees half of one.
pub(crate) fn settled_source_change(
    op: &Operation,
    source: &Path,
    config: &Config,
) -> Result<Residue, String> {
    settled(Duration::from_secs_f64(config.stable_file_seconds), || {
        source_change(op, source)
    })
}

/// Look until the answer is not a line being written or `limit` passed.
fn settled(
    limit: Duration,
    mut look: impl FnMut() -> Result<Residue, Change>,
) -> Result<Residue, String> {
    let until = Instant::now() + limit;
    loop {
        match look() {
            Err(c) if c.writing && Instant::now() < until => {
                thread::sleep(Duration::from_millis(20));
            }
            answer => return answer.map_err(|c| c.why),
        }
    }
}

/// How the source changed since prepare froze it, or the residue appended
/// since when it is still what was frozen: the same bytes, or those bytes
/// followed only by whole records the rebuild would not carry.
fn source_change(op: &Operation, source: &Path) -> Result<Residue, Change> {
    use std::os::unix::fs::FileExt;
    let (Some(frozen), Some(frozen_len)) = (
        op.source_sha256.as_ref(),
        op.stats.as_ref().map(|s| s.source_bytes),
    ) else {
        return Err(Change::new("no frozen digest recorded"));
    };
    let file = open_regular(source, Links::Refuse)
        .map_err(|_| Change::new("the source cannot be opened"))?;
    let len = file
        .metadata()
        .map(|m| m.len())
        .map_err(|_| Change::new("the source cannot be measured"))?;
    if len < frozen_len {
        return Err(Change::new(format!(
            "the source is shorter ({len} < {frozen_len} bytes)"
        )));
    }
    if len - frozen_len > APPENDED_CAP {
        return Err(Change::new(format!("{} bytes appended", len - frozen_len)));
    }
    if !sha256_prefix(&file, frozen_len).is_ok_and(|(d, n)| n == frozen_len && d == *frozen) {
        return Err(Change::new("the frozen part was rewritten"));
    }
    let mut appended = vec![0; usize::try_from(len - frozen_len).unwrap_or(0)];
    file.read_exact_at(&mut appended, frozen_len)
        .map_err(|_| Change::new("the appended bytes cannot be read"))?;
    residue_only(&appended)
}

/// The residue in `appended`, or the first thing in it that is a change:
/// a line not yet complete, a line that is not a JSON object, speech, tool
/// traffic.
pub(crate) fn residue_only(appended: &[u8]) -> Result<Residue, Change> {
    if !appended.is_empty() && !appended.ends_with(b"\n") {
        return Err(Change {
            why: format!(
                "{} bytes appended, the last line not yet complete",
                appended.len()
            ),
            writing: true,
        });
    }
    let mut residue = Residue::default();
    for line in appended.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let record = serde_json::from_slice::<Value>(line)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| Change::new("a line that is not a JSON object appended"))?;
        match appended_record(&record) {
            Appended::Residue(name) => residue.0.push(name),
            Appended::Speech(what) => {
                return Err(Change::new(format!("{what} appended")));
            }
            Appended::Turn(what) => {
                return Err(Change::new(format!("{what} appended: a turn is running")));
            }
        }
    }
    Ok(residue)
}

/// What one appended record is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Appended {
    /// Carried by no rebuild: named `type subtype`.
    Residue(String),
    /// Someone spoke (described).
    Speech(String),
    /// Tool traffic or the model working: a turn is running (described).
    Turn(String),
}

/// Classify one appended record. Unknown records holding a `message`, or
/// without a `type`, count as speech: only what is known to carry no words
/// is let through.
pub(super) fn appended_record(record: &Value) -> Appended {
    let kind = record["type"].as_str();
    let named = |sub: Option<&str>| {
        let kind = kind.unwrap_or("(none)");
        sub.map_or_else(|| kind.to_string(), |s| format!("{kind} {s}"))
    };
    let described = |sub: Option<&str>| {
        format!(
            "a record of type {}{}",
            kind.unwrap_or("(none)"),
            sub.map_or(String::new(), |s| format!(" ({s})"))
        )
    };
    match kind {
        Some("user") => user_record(record, &described),
        Some("assistant") => assistant_record(record, &described),
        Some("attachment") => {
            let sub = record["attachment"]["type"].as_str();
            if sub == Some("queued_command") || sub.is_none() {
                Appended::Speech(described(sub))
            } else {
                Appended::Residue(named(sub))
            }
        }
        Some("queue-operation") if record["operation"].as_str() == Some("enqueue") => {
            Appended::Speech(described(Some("enqueue: a queued prompt")))
        }
        Some(_) if record.get("message").is_none() => {
            Appended::Residue(named(record["subtype"].as_str()))
        }
        _ => Appended::Speech(described(record["subtype"].as_str())),
    }
}

/// A `user` record: a tool result (or a subagent's record) means a turn is
/// running; anything else with or without text is treated as speech
/// (typed prompts, channel messages, slash commands, interruptions).
fn user_record(record: &Value, described: &dyn Fn(Option<&str>) -> String) -> Appended {
    let blocks = record["message"]["content"].as_array();
    let tool_result = blocks
        .into_iter()
        .flatten()
        .any(|b| b["type"].as_str() == Some("tool_result"));
    if tool_result {
        Appended::Turn(described(Some("tool_result")))
    } else if record["isSidechain"].as_bool() == Some(true) {
        Appended::Turn(described(Some("sidechain")))
    } else {
        Appended::Speech(described(None))
    }
}

/// An `assistant` record: text (not Claude Code's own `<synthetic>`
/// notices) is speech; tool calls and thinking mean a turn is running.
fn assistant_record(record: &Value, described: &dyn Fn(Option<&str>) -> String) -> Appended {
    if record["message"]["model"].as_str() == Some("<synthetic>") {
        return Appended::Residue("assistant <synthetic>".into());
    }
    let blocks: Vec<&Value> = record["message"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let has = |kind: &str| blocks.iter().any(|b| b["type"].as_str() == Some(kind));
    if has("text") || blocks.is_empty() {
        Appended::Speech(described(None))
    } else if has("tool_use") {
        Appended::Turn(described(Some("tool_use")))
    } else {
        Appended::Turn(described(Some("thinking")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(records: &[Value]) -> Vec<u8> {
        records
            .iter()
            .map(|r| format!("{r}\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[track_caller]
    fn residue(records: &[Value]) -> Vec<String> {
        residue_only(&lines(records))
            .unwrap_or_else(|c| panic!("a change: {}", c.why))
            .0
    }

    #[track_caller]
    fn change(records: &[Value]) -> String {
        residue_only(&lines(records)).expect_err("not a change").why
    }

    fn attachment(kind: &str) -> Value {
        serde_json::json!({"type": "attachment", "attachment": {"type": kind}})
    }

    #[test]
    fn what_claude_code_writes_after_the_stop_hook_is_residue() {
        // ktr's own Stop-hook line, recorded by Claude Code after the
        // freeze (9 of ~75 rebuilds went back to pending on it).
        let after_stop = [
            serde_json::json!({"type": "system", "subtype": "stop_hook_summary"}),
            attachment("hook_success"),
            attachment("hook_system_message"),
            serde_json::json!({"type": "system", "subtype": "turn_duration", "durationMs": 5}),
            attachment("prompt_snapshot"),
            serde_json::json!({"type": "last-prompt"}),
            serde_json::json!({"type": "cost-state"}),
            serde_json::json!({"type": "queue-operation", "operation": "dequeue"}),
            serde_json::json!({"type": "assistant", "message": {"model": "<synthetic>",
                "content": [{"type": "text", "text": "No response requested."}]}}),
        ];
        assert_eq!(
            residue(&after_stop),
            [
                "system stop_hook_summary",
                "attachment hook_success",
                "attachment hook_system_message",
                "system turn_duration",
                "attachment prompt_snapshot",
                "last-prompt",
                "cost-state",
                "queue-operation",
                "assistant <synthetic>",
            ]
        );
        assert!(residue(&[]).is_empty());
    }

    #[test]
    fn the_residue_is_named_once_per_kind_for_the_history() {
        let note = Residue(vec![
            "attachment hook_success".into(),
            "system stop_hook_summary".into(),
            "attachment hook_success".into(),
        ])
        .note();
        assert_eq!(
            note,
            "; appended after prepare, carried by no rebuild: 2 \u{d7} attachment hook_success, system stop_hook_summary"
        );
        assert_eq!(Residue::default().note(), "");
    }

    #[test]
    fn appended_speech_is_a_change() {
        let typed =
            serde_json::json!({"type": "user", "message": {"role": "user", "content": "hi"}});
        assert_eq!(change(&[typed]), "a record of type user appended");
        let channel = serde_json::json!({"type": "user", "isMeta": true,
            "origin": {"kind": "channel"}, "message": {"role": "user",
            "content": "<channel source=\"plugin:telegram:telegram\">\nhi\n</channel>"}});
        assert_eq!(change(&[channel]), "a record of type user appended");
        assert_eq!(
            change(&[attachment("hook_success"), attachment("queued_command")]),
            "a record of type attachment (queued_command) appended"
        );
        let said = serde_json::json!({"type": "assistant", "message": {"content": [{"type": "text", "text": "ok"}]}});
        assert_eq!(change(&[said]), "a record of type assistant appended");
        let queued = serde_json::json!({"type": "queue-operation", "operation": "enqueue"});
        assert!(change(&[queued]).contains("a queued prompt"));
    }

    #[test]
    fn appended_tool_traffic_means_a_turn_is_running() {
        let call = serde_json::json!({"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Bash"}]}});
        assert_eq!(
            change(&[call]),
            "a record of type assistant (tool_use) appended: a turn is running"
        );
        let result = serde_json::json!({"type": "user", "message": {"content": [{"type": "tool_result", "content": "x"}]}});
        assert_eq!(
            change(&[result]),
            "a record of type user (tool_result) appended: a turn is running"
        );
        let thinking = serde_json::json!({"type": "assistant", "message": {"content": [{"type": "thinking", "thinking": ""}]}});
        assert!(change(&[thinking]).contains("a turn is running"));
    }

    #[test]
    fn what_cannot_be_known_to_carry_no_words_is_a_change() {
        for (line, why) in [
            (
                &b"{\"type\":\"system\",\"message\":{}}\n"[..],
                "a record of type system appended",
            ),
            (
                b"{\"subtype\":\"no type\"}\n",
                "a record of type (none) (no type) appended",
            ),
            (
                b"{\"type\":\"attachment\"}\n",
                "a record of type attachment appended",
            ),
            (b"not json\n", "a line that is not a JSON object appended"),
            (b"[1]\n", "a line that is not a JSON object appended"),
        ] {
            assert_eq!(
                residue_only(line).unwrap_err().why,
                why,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        let half = residue_only(b"{\"type\":\"sys").unwrap_err();
        assert_eq!(
            (half.why.as_str(), half.writing),
            ("12 bytes appended, the last line not yet complete", true)
        );
    }

    #[test]
    fn a_line_being_written_is_given_until_the_limit_to_end() {
        let writing = || {
            Err(Change {
                why: "half a line".into(),
                writing: true,
            })
        };
        // It ends on the third look: then what it is decides.
        let mut looks = 0;
        let answer = settled(Duration::from_secs(5), || {
            looks += 1;
            if looks < 3 {
                writing()
            } else {
                Ok(Residue::default())
            }
        });
        assert_eq!((answer, looks), (Ok(Residue::default()), 3));
        // It never ends: the limit passes and the change stands.
        let started = Instant::now();
        let answer = settled(Duration::from_millis(100), writing);
        assert_eq!(answer, Err("half a line".to_string()));
        assert!(started.elapsed() >= Duration::from_millis(100));
        // Any other change is not waited for.
        let started = Instant::now();
        let answer = settled(Duration::from_secs(30), || {
            Err(Change::new("the frozen part was rewritten"))
        });
        assert_eq!(answer, Err("the frozen part was rewritten".to_string()));
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
