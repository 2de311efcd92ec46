//! The fixed overhead of a fresh window: system prompt, tools
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
//! The measurement reads only the transcript; the pipeline remembers it
//! per session and globally (its window caches, `ktr_pipeline::window_cache`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::account::{DEFAULT_OVERHEAD, Sourced};
use super::usage;
use crate::turns::estimate_tokens;

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

/// The overhead for a session and where it came from: its own
/// measurement (`own`: a fresh start, or its first reply after the rebuild
/// that made it), else the newest one of any session (`newest`, asked only
/// when needed), else the default. The pipeline keeps both in its window
/// caches.
pub fn pick(own: Option<&Measured>, newest: impl FnOnce() -> Option<Measured>) -> Sourced {
    if let Some(m) = own.filter(|m| m.tokens.is_some()) {
        return sourced(m, None);
    }
    // Why this session's own measurement after a rebuild was not used.
    let unused = own
        .and_then(|m| m.rebuilt.as_ref())
        .map(|r| {
            format!(
                "; this session's first reply after the rebuild gave no plausible overhead ({} − context_tokens {} − prompt {})",
                r.first_reply, r.context_tokens, r.prompt
            )
        })
        .unwrap_or_default();
    if let Some(m) = newest().filter(|m| m.tokens.is_some()) {
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
/// measured from its head; a rebuilt session (with `ktr-ack`'s `receipt`)
/// from its first reply after the candidate ktr wrote.
pub fn measure(session_id: &str, transcript: &Path, receipt: Option<Receipt>) -> Option<Measured> {
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
    let Some(receipt) = receipt else {
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
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn reply(tokens: u64, at: &str) -> String {
        json!({"type": "assistant", "timestamp": at,
            "message": {"model": "claude-opus-5-5", "role": "assistant", "content": [],
                "usage": {"input_tokens": tokens, "output_tokens": 10}}})
        .to_string()
    }

    pub(crate) fn user(text: &str) -> String {
        json!({"type": "user", "message": {"content": text}}).to_string()
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
        let m = measure("fresh", &path, None).unwrap();
        let s = pick(Some(&m), || None);
        assert_eq!(s.tokens, 13_770 - estimate_tokens("hello"));
        assert_eq!(
            s.source,
            "measured: first reply of this session (T1) minus its prompt"
        );
    }

    #[test]
    fn no_measurement_falls_back_to_the_newest_then_the_default() {
        let newest = Measured {
            tokens: Some(15_000),
            session_id: "other".into(),
            at: Some("T0".into()),
            rebuilt: None,
        };
        let s = pick(None, || Some(newest.clone()));
        assert_eq!(s.tokens, 15_000);
        assert_eq!(
            s.source,
            "measured: first reply of session other (T0) minus its prompt"
        );
        let s = pick(None, || None);
        assert_eq!(s.tokens, DEFAULT_OVERHEAD);
        assert!(
            s.source.starts_with("default (13,770 measured"),
            "{}",
            s.source
        );
    }
}
