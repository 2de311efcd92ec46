//! The fixed overhead of a fresh window (issue 8 §1): system prompt, tools
//! and the attachments Claude Code adds on every start. Measured, not
//! guessed, from one of two receipts:
//!
//! - a fresh start: the first reply's usage minus the estimate of its
//!   prompt;
//! - a rebuild: the first reply's usage in the rebuilt session minus
//!   Claude Code's own count of the carried conversation when it resumed
//!   it (the `context_tokens` of `SessionStart(resume)`, kept by `ktr-ack`
//!   as [`Receipt`]) minus the new prompt. On 2.1.328 that count is *not*
//!   the new window: ktr's candidates carry no `usage`, and for such a
//!   transcript Claude Code reports its rough estimate of the messages
//!   alone (no system prompt, no tools, no per-start attachments), so
//!   `context_tokens − the operation's estimate` would be about zero; the
//!   first reply after the switch is what the new window really measured.
//!
//! Remembered per session (`window/<session>.overhead.json`) so the
//! transcript is read once, and globally (`window/overhead.json`, the
//! newest measurement of either kind) for sessions that were measured
//! neither way (e.g. resumed from before ktr was installed).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::account::{DEFAULT_OVERHEAD, Sourced};
use super::usage;
use crate::turns::estimate_tokens;
use ktr_base::error::Result;
use ktr_base::open::{Links, cap, read_capped};

/// Below this the numbers are not what the measurement assumes (13,770
/// measured with no MCP servers and no CLAUDE.md): not used.
const MIN_PLAUSIBLE: u64 = 1000;

/// A measurement as remembered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measured {
    /// None: nothing (plausible) to measure in this session.
    pub tokens: Option<u64>,
    pub session_id: String,
    /// When the measured reply was written.
    pub at: Option<String>,
    /// Set when measured after a rebuild.
    #[serde(default)]
    pub rebuilt: Option<Rebuilt>,
}

/// The numbers of a measurement after a rebuild.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rebuilt {
    pub operation: String,
    /// The first reply's usage in the rebuilt session.
    pub first_reply: u64,
    /// Claude Code's count of the carried conversation at resume.
    pub context_tokens: u64,
    /// Estimate of the prompt(s) sent with that first reply.
    pub prompt: u64,
    /// ktr's own estimate of the carried conversation (shown beside).
    #[serde(default)]
    pub carried_estimate: Option<u64>,
}

/// What `ktr-ack` keeps of Claude Code's receipt for a rebuilt session
/// (`window/<session>.receipt.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub operation: String,
    /// `context_tokens` of `SessionStart(resume)`.
    pub context_tokens: u64,
    /// The operation's `estimated_tokens` (ktr's formula estimate of the
    /// carried conversation), shown beside Claude Code's count.
    pub carried_estimate: Option<u64>,
    /// Where the candidate ended when Claude Code resumed it: what Claude
    /// Code appends (its per-start attachments, the next turns) follows.
    pub offset: u64,
    pub at: String,
}

fn session_path(state_dir: &Path, session_id: &str) -> PathBuf {
    state_dir
        .join("window")
        .join(format!("{session_id}.overhead.json"))
}

fn global_path(state_dir: &Path) -> PathBuf {
    state_dir.join("window").join("overhead.json")
}

fn receipt_path(state_dir: &Path, session_id: &str) -> PathBuf {
    state_dir
        .join("window")
        .join(format!("{session_id}.receipt.json"))
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&read_capped(path, cap::CACHE, Links::Refuse).ok()??).ok()
}

fn write(path: &Path, m: &Measured) {
    // A cache: failing to write it only means measuring again next time.
    if let Ok(bytes) = serde_json::to_vec(m) {
        let _ = super::write_cache(path, &bytes);
    }
}

/// Keep Claude Code's receipt for the rebuilt session `session_id`
/// (`ktr-ack`).
///
/// # Errors
/// When the state dir's `window/` folder or the file cannot be written.
pub fn remember_receipt(state_dir: &Path, session_id: &str, receipt: &Receipt) -> Result<()> {
    let bytes = serde_json::to_vec(receipt).expect("a receipt serializes");
    super::write_cache(&receipt_path(state_dir, session_id), &bytes)
}

/// The overhead for `session_id`, and where it came from: this session's
/// own measurement (fresh start, or its first reply after the rebuild
/// that made it), else the newest one of any session, else the default.
/// With `remember`, a new measurement is kept in the state dir (the
/// hooks); without, nothing is written (`ktr plan`, `ktr dirty`).
pub fn resolve(state_dir: &Path, session_id: &str, transcript: &Path, remember: bool) -> Sourced {
    // A session cached as "nothing to measure" before ktr-ack kept its
    // receipt (the statusline may run first) is measured again.
    let cached = read::<Measured>(&session_path(state_dir, session_id)).filter(|m| {
        m.tokens.is_some() || m.rebuilt.is_some() || !receipt_path(state_dir, session_id).exists()
    });
    let own = cached.or_else(|| {
        let m = measure(state_dir, session_id, transcript)?;
        if remember {
            write(&session_path(state_dir, session_id), &m);
            if m.tokens.is_some() {
                write(&global_path(state_dir), &m);
            }
        }
        Some(m)
    });
    if let Some(m) = own.as_ref().filter(|m| m.tokens.is_some()) {
        return sourced(m, None);
    }
    // Why this session's own measurement after a rebuild was not used.
    let unused = own
        .as_ref()
        .and_then(|m| m.rebuilt.as_ref())
        .map(|r| {
            format!(
                "; this session's first reply after the rebuild gave no plausible overhead ({} − context_tokens {} − prompt {})",
                r.first_reply, r.context_tokens, r.prompt
            )
        })
        .unwrap_or_default();
    if let Some(m) = read::<Measured>(&global_path(state_dir)).filter(|m| m.tokens.is_some()) {
        let mut s = sourced(&m, Some(&m.session_id));
        s.source.push_str(&unused);
        return s;
    }
    Sourced {
        tokens: DEFAULT_OVERHEAD,
        source: format!(
            "default (13,770 measured on Claude Code 2.1.328 without MCP servers or CLAUDE.md; neither a fresh start nor a rebuild measured yet){unused}"
        ),
    }
}

/// How a measurement reads (`other`: measured on another session).
fn sourced(m: &Measured, other: Option<&str>) -> Sourced {
    let at =
        m.at.as_deref()
            .map(|t| format!(" ({t})"))
            .unwrap_or_default();
    let whose = other.map_or_else(|| "this session".to_string(), |id| format!("session {id}"));
    let source = match &m.rebuilt {
        Some(r) => format!(
            "measured after the rebuild {}: first reply of {whose} {}{at} − Claude Code's context_tokens {} at resume (its count of the carried conversation{}) − prompt {}",
            r.operation,
            r.first_reply,
            r.context_tokens,
            r.carried_estimate
                .map(|e| format!("; ktr estimated {e}"))
                .unwrap_or_default(),
            r.prompt
        ),
        None => format!("measured: first reply of {whose}{at} minus its prompt"),
    };
    Sourced {
        tokens: m.tokens.unwrap_or(DEFAULT_OVERHEAD),
        source,
    }
}

/// Measure from the transcript; None when it cannot be read or holds no
/// measurable reply yet (measured again next time). A fresh start is
/// measured from its head; a rebuilt session (with `ktr-ack`'s receipt)
/// from its first reply after the candidate ktr wrote.
fn measure(state_dir: &Path, session_id: &str, transcript: &Path) -> Option<Measured> {
    let head = usage::read_head(transcript).ok().filter(|h| h.replied)?;
    let measured = |tokens, at| Measured {
        tokens,
        at,
        session_id: session_id.to_string(),
        rebuilt: None,
    };
    if let Some(first) = head.first {
        let tokens = first
            .usage
            .tokens
            .saturating_sub(estimate_tokens(&first.prompt_text));
        return Some(measured(Some(tokens), first.usage.at));
    }
    let Some(receipt) = read::<Receipt>(&receipt_path(state_dir, session_id)) else {
        return Some(measured(None, None));
    };
    let first = usage::read_reply_after(transcript, receipt.offset).ok()??;
    let prompt = estimate_tokens(&first.prompt_text);
    let tokens = first
        .usage
        .tokens
        .checked_sub(receipt.context_tokens + prompt)
        .filter(|t| *t >= MIN_PLAUSIBLE);
    Some(Measured {
        rebuilt: Some(Rebuilt {
            operation: receipt.operation,
            first_reply: first.usage.tokens,
            context_tokens: receipt.context_tokens,
            prompt,
            carried_estimate: receipt.carried_estimate,
        }),
        ..measured(tokens, first.usage.at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply(tokens: u64, at: &str) -> String {
        json!({"type": "assistant", "timestamp": at,
            "message": {"model": "claude-opus-5-5", "role": "assistant", "content": [],
                "usage": {"input_tokens": tokens, "output_tokens": 10}}})
        .to_string()
    }

    fn user(text: &str) -> String {
        json!({"type": "user", "message": {"content": text}}).to_string()
    }

    /// A state dir and a rebuilt transcript: carried records (no usage),
    /// then what Claude Code appended (`after`). Returns the offset.
    fn rebuilt(dir: &Path, after: &[String]) -> (PathBuf, PathBuf, u64) {
        let state = dir.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let path = dir.join("new.jsonl");
        let carried_reply = json!({"type": "assistant", "message": {"model": "m", "content": []}});
        let carried = format!("{}\n{carried_reply}\n", user("carried question"));
        let mut body = carried.clone();
        for line in after {
            body.push_str(line);
            body.push('\n');
        }
        std::fs::write(&path, body).unwrap();
        (state, path, carried.len() as u64)
    }

    fn receipt(offset: u64, context_tokens: u64) -> Receipt {
        Receipt {
            operation: "op-1".into(),
            context_tokens,
            carried_estimate: Some(9000),
            offset,
            at: "2026-11-30T10:00:00Z".into(),
        }
    }

    #[test]
    fn a_fresh_start_is_measured_from_its_first_reply() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fresh.jsonl");
        std::fs::write(
            &path,
            format!("{}\n{}\n", user("hello"), reply(13_770, "T1")),
        )
        .unwrap();
        let s = resolve(&dir.path().join("state"), "fresh", &path, false);
        assert_eq!(s.tokens, 13_770 - estimate_tokens("hello"));
        assert_eq!(
            s.source,
            "measured: first reply of this session (T1) minus its prompt"
        );
    }

    #[test]
    fn after_a_rebuild_the_first_reply_minus_the_receipt_is_the_overhead() {
        let dir = tempfile::tempdir().unwrap();
        let attachment = json!({"type": "attachment", "attachment": {"type": "skill_listing"}});
        let (state, path, offset) = rebuilt(
            dir.path(),
            &[
                attachment.to_string(),
                user("next prompt"),
                reply(20_000, "T2"),
                reply(25_000, "T3"),
            ],
        );
        // Before ktr-ack's receipt: nothing to measure, and that is cached.
        let before = resolve(&state, "new", &path, true);
        assert_eq!(before.tokens, DEFAULT_OVERHEAD);
        remember_receipt(&state, "new", &receipt(offset, 3000)).unwrap();
        let s = resolve(&state, "new", &path, true);
        let prompt = estimate_tokens("next prompt");
        assert_eq!(s.tokens, 20_000 - 3000 - prompt, "{}", s.source);
        assert_eq!(
            s.source,
            format!(
                "measured after the rebuild op-1: first reply of this session 20000 (T2) − Claude Code's context_tokens 3000 at resume (its count of the carried conversation; ktr estimated 9000) − prompt {prompt}"
            )
        );
        // Remembered for sessions measured neither way.
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, format!("{}\n", user("no reply yet"))).unwrap();
        let s = resolve(&state, "other", &other, false);
        assert_eq!(s.tokens, 20_000 - 3000 - prompt);
        assert!(
            s.source
                .starts_with("measured after the rebuild op-1: first reply of session new 20000"),
            "{}",
            s.source
        );
    }

    #[test]
    fn no_reply_since_the_rebuild_or_implausible_numbers_fall_back_and_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let (state, path, offset) = rebuilt(dir.path(), &[]);
        remember_receipt(&state, "new", &receipt(offset, 3000)).unwrap();
        let s = resolve(&state, "new", &path, true);
        assert_eq!(s.tokens, DEFAULT_OVERHEAD);
        assert!(
            !session_path(&state, "new").exists(),
            "measured again later"
        );
        // A first reply smaller than the carried count: not an overhead.
        let mut body = std::fs::read_to_string(&path).unwrap();
        body.push_str(&format!("{}\n{}\n", user("p"), reply(3500, "T4")));
        std::fs::write(&path, body).unwrap();
        let s = resolve(&state, "new", &path, true);
        assert_eq!(s.tokens, DEFAULT_OVERHEAD);
        assert!(
            s.source.contains(
                "this session's first reply after the rebuild gave no plausible overhead (3500 − context_tokens 3000"
            ),
            "{}",
            s.source
        );
        assert!(!global_path(&state).exists());
    }
}
