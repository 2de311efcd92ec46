//! The turn gate (SPEC §10): a switch never interrupts a turn.
//!
//! `ktr-prompt` ([`crate::stages::prompt`]), the Claude Code
//! `UserPromptSubmit` hook, runs synchronously before a prompt is sent and
//! before its user record reaches the transcript. While an operation is
//! scheduled, being prepared or verified, it marks (under the coordinator
//! lock) that a turn of the source session began after the scheduling
//! Stop; activation takes the same lock and goes back to `pending` instead
//! of switching. While the target is being switched (`activating`,
//! `rolling_back`) it refuses prompts of the session being switched away
//! from; the refused text is recorded and the new session names it
//! ([`resend_notice`], shown by `ktr-ack`).
//!
//! A prompt queued during a reply runs the hook at enqueue time, before the
//! Stop that ends the reply, and is answered after that Stop: its user
//! record is newer than the scheduling Stop. [`turn_since_stop`] therefore
//! also reads the tail of the live transcript.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::SystemTime;

use serde::Deserialize;

use crate::operation::{Operation, Status};
use ktr_base::error::{Error, Result};
use ktr_base::time::parse_rfc3339;

/// How much of the transcript's end [`newer_prompt`] reads.
const TAIL_BYTES: u64 = 1 << 20;

/// The statuses in which a prompt matters: from the scheduling Stop to the
/// end of the switch, and while an offer of the hand target stands (a
/// prompt makes it stale: [`crate::stages::prompt`] withdraws it).
pub fn watched(status: Status) -> bool {
    matches!(
        status,
        Status::Scheduled
            | Status::Running
            | Status::Verifying
            | Status::Activating
            | Status::Offered
            | Status::RollbackScheduled
            | Status::RollingBack
            | Status::RollbackOffered
    )
}

/// The session whose prompts the gate watches for `op`: the source while a
/// rebuild is on its way, the candidate while a rollback is. None when the
/// operation is in no switching window (an unbound session matches none).
pub(crate) fn gated_session(op: &Operation) -> Option<&str> {
    match op.status {
        _ if !watched(op.status) => None,
        Status::Scheduled
        | Status::Running
        | Status::Verifying
        | Status::Activating
        | Status::Offered => Some(op.session_id.as_deref().unwrap_or("")),
        _ => Some(op.candidate.as_ref().map_or("", |c| c.session_id.as_str())),
    }
}

/// Whether a prompt of the gated session is refused now (the target is
/// being switched away from it).
pub fn switching(status: Status) -> bool {
    matches!(status, Status::Activating | Status::RollingBack)
}

/// What the new session tells the human when the gate refused prompts
/// during the switch: each text, to send again. None when none was refused.
pub(crate) fn resend_notice(op: &Operation) -> Option<String> {
    if op.blocked_prompts.is_empty() {
        return None;
    }
    let texts: Vec<String> = op
        .blocked_prompts
        .iter()
        .map(|p| format!("\u{201c}{}\u{201d}", p.text))
        .collect();
    Some(format!(
        "ktr: sent during the switch and NOT delivered — please send again: {}",
        texts.join(", ")
    ))
}

/// Why `op` must not switch now because a turn of its source began after
/// the scheduling Stop: the prompt hook saw one, or the live transcript
/// holds a user record (a prompt, a queued prompt, a tool result) newer
/// than that Stop. None when no turn began.
pub(crate) fn turn_since_stop(op: &Operation, source: &Path) -> Result<Option<String>> {
    if let Some(at) = &op.turn_started_at {
        return Ok(Some(format!(
            "a prompt of the source session was submitted at {at}, after the Stop that scheduled the rebuild"
        )));
    }
    let Some(since) = op.scheduled_at.as_deref().and_then(parse_rfc3339) else {
        return Ok(None);
    };
    Ok(newer_prompt(source, since)?.map(|at| {
        format!(
            "the transcript holds a user record of {at}, newer than the Stop that scheduled the rebuild (a turn is running or queued)"
        )
    }))
}

/// The timestamp of a `user` record (or a queued prompt) in the last
/// [`TAIL_BYTES`] of `path` that is newer than `since`.
pub(crate) fn newer_prompt(path: &Path, since: SystemTime) -> Result<Option<String>> {
    let mut file = ktr_base::open::open_regular(path, ktr_base::open::Links::Refuse)
        .map_err(|e| Error::io_at("open", path, &e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io_at("stat", path, &e))?
        .len();
    let start = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))
        .map_err(|e| Error::io_at("seek", path, &e))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)
        .map_err(|e| Error::io_at("read", path, &e))?;
    // A window that starts mid-line skips that partial line.
    let whole = if start > 0 {
        tail.iter()
            .position(|b| *b == b'\n')
            .map_or(&tail[..0], |i| &tail[i + 1..])
    } else {
        &tail[..]
    };
    #[derive(Deserialize)]
    struct Head<'a> {
        #[serde(rename = "type", default)]
        kind: Option<&'a str>,
        #[serde(default)]
        operation: Option<&'a str>,
        #[serde(default)]
        timestamp: Option<&'a str>,
        #[serde(rename = "isSidechain", default)]
        sidechain: Option<bool>,
    }
    for line in whole.split(|b| *b == b'\n').rev() {
        let Ok(head) = serde_json::from_slice::<Head>(line) else {
            continue;
        };
        let prompt = match head.kind {
            Some("user") => head.sidechain != Some(true),
            Some("queue-operation") => head.operation == Some("enqueue"),
            _ => false,
        };
        let Some(at) = head.timestamp.filter(|_| prompt) else {
            continue;
        };
        if parse_rfc3339(at).is_some_and(|t| t > since) {
            return Ok(Some(at.to_string()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript(lines: &[serde_json::Value]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn at(s: &str) -> SystemTime {
        parse_rfc3339(s).unwrap()
    }

    #[test]
    fn a_user_record_after_the_stop_is_a_turn() {
        let (_d, path) = transcript(&[
            serde_json::json!({"type": "user", "timestamp": "2026-11-30T03:41:27.427Z"}),
            serde_json::json!({"type": "queue-operation", "operation": "enqueue", "timestamp": "2026-11-30T03:41:28.924Z"}),
            serde_json::json!({"type": "assistant", "timestamp": "2026-11-30T03:41:31.086Z"}),
            serde_json::json!({"type": "queue-operation", "operation": "dequeue", "timestamp": "2026-11-30T03:41:31.414Z"}),
            serde_json::json!({"type": "system", "timestamp": "2026-11-30T03:41:31.500Z"}),
            serde_json::json!({"type": "user", "timestamp": "2026-11-30T03:41:31.572Z"}),
        ]);
        let stop = at("2026-11-30T03:41:31.265Z");
        assert_eq!(
            newer_prompt(&path, stop).unwrap().as_deref(),
            Some("2026-11-30T03:41:31.572Z")
        );
        assert_eq!(
            newer_prompt(&path, at("2026-11-30T03:41:31.600Z")).unwrap(),
            None
        );
    }

    #[test]
    fn records_after_the_stop_that_are_no_prompt_do_not_count() {
        let (_d, path) = transcript(&[
            serde_json::json!({"type": "user", "timestamp": "2026-11-30T03:41:27.427Z"}),
            serde_json::json!({"type": "queue-operation", "operation": "dequeue", "timestamp": "2026-11-30T03:41:32.000Z"}),
            serde_json::json!({"type": "system", "subtype": "turn_duration", "timestamp": "2026-11-30T03:41:32.000Z"}),
            serde_json::json!({"type": "user", "isSidechain": true, "timestamp": "2026-11-30T03:41:32.000Z"}),
            serde_json::json!({"type": "user", "timestamp": "not a time"}),
        ]);
        assert_eq!(
            newer_prompt(&path, at("2026-11-30T03:41:31.265Z")).unwrap(),
            None
        );
    }

    #[test]
    fn only_the_tail_is_read_and_a_cut_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let old = serde_json::json!({"type": "user", "timestamp": "2026-11-30T05:00:00.000Z", "pad": "x".repeat(TAIL_BYTES as usize)});
        let new = serde_json::json!({"type": "assistant", "timestamp": "2026-11-30T05:00:01.000Z"});
        std::fs::write(&path, format!("{old}\n{new}\n")).unwrap();
        // The big user record starts before the window: it is not seen.
        assert_eq!(
            newer_prompt(&path, at("2026-11-30T04:00:00.000Z")).unwrap(),
            None
        );
    }

    #[test]
    fn the_hook_mark_wins_and_no_schedule_time_means_no_transcript_check() {
        let (_d, path) = transcript(&[
            serde_json::json!({"type": "user", "timestamp": "2026-11-30T03:41:31.572Z"}),
        ]);
        let mut op = Operation::default();
        assert_eq!(turn_since_stop(&op, &path).unwrap(), None);
        op.scheduled_at =
            Some(ktr_base::time::Timestamp::parse("2026-11-30T03:41:31.265Z").unwrap());
        assert!(
            turn_since_stop(&op, &path)
                .unwrap()
                .unwrap()
                .contains("newer than the Stop")
        );
        op.turn_started_at =
            Some(ktr_base::time::Timestamp::parse("2026-11-30T03:41:31.300Z").unwrap());
        assert!(
            turn_since_stop(&op, &path)
                .unwrap()
                .unwrap()
                .contains("was submitted at")
        );
    }
}
