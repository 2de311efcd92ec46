//! The fixed overhead of a fresh window (issue 8 §1): system prompt, tools
//! and the attachments Claude Code adds on every start. Measured, not
//! guessed: the first reply's usage of a fresh session minus the estimate
//! of its prompt. Remembered per session (`window/<session>.overhead.json`)
//! so the head of a transcript is read once, and globally
//! (`window/overhead.json`) for sessions that did not start fresh (a
//! rebuilt session starts with carried replies).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::account::{DEFAULT_OVERHEAD, Sourced};
use super::usage;
use crate::engine::turns::estimate_tokens;

/// A measurement as remembered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measured {
    /// None: this session did not start fresh (nothing to measure).
    pub tokens: Option<u64>,
    pub session_id: String,
    /// When the measured reply was written.
    pub at: Option<String>,
}

fn session_path(state_dir: &Path, session_id: &str) -> PathBuf {
    state_dir
        .join("window")
        .join(format!("{session_id}.overhead.json"))
}

fn global_path(state_dir: &Path) -> PathBuf {
    state_dir.join("window").join("overhead.json")
}

fn read(path: &Path) -> Option<Measured> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn write(path: &Path, m: &Measured) {
    // A cache: failing to write it only means measuring again next time.
    if let Ok(bytes) = serde_json::to_vec(m) {
        let _ = super::write_cache(path, &bytes);
    }
}

/// The overhead for `session_id`, and where it came from. With
/// `remember`, a new measurement is kept in the state dir (the hooks);
/// without, nothing is written (`ktr plan`, `ktr dirty`).
pub fn resolve(state_dir: &Path, session_id: &str, transcript: &Path, remember: bool) -> Sourced {
    let own = read(&session_path(state_dir, session_id)).or_else(|| {
        let m = measure(session_id, transcript)?;
        if remember {
            write(&session_path(state_dir, session_id), &m);
            if m.tokens.is_some() {
                write(&global_path(state_dir), &m);
            }
        }
        Some(m)
    });
    if let Some(Measured {
        tokens: Some(tokens),
        at,
        ..
    }) = &own
    {
        return Sourced {
            tokens: *tokens,
            source: format!(
                "measured: first reply of this session{} minus its prompt",
                at.as_deref().map(|t| format!(" ({t})")).unwrap_or_default()
            ),
        };
    }
    if let Some(Measured {
        tokens: Some(tokens),
        session_id: other,
        at,
    }) = read(&global_path(state_dir))
    {
        return Sourced {
            tokens,
            source: format!(
                "measured on session {other}{}: its first reply minus its prompt",
                at.map(|t| format!(" ({t})")).unwrap_or_default()
            ),
        };
    }
    Sourced {
        tokens: DEFAULT_OVERHEAD,
        source: "default (13,770 measured on Claude Code 2.1.328 without MCP servers or CLAUDE.md; no fresh start seen yet)".into(),
    }
}

/// Measure from the head of the transcript; None when it cannot be read
/// or holds no reply yet (measured again next time).
fn measure(session_id: &str, transcript: &Path) -> Option<Measured> {
    let head = usage::read_head(transcript).ok().filter(|h| h.replied)?;
    let first = head.first;
    Some(Measured {
        tokens: first.as_ref().map(|f| {
            f.usage
                .tokens
                .saturating_sub(estimate_tokens(&f.prompt_text))
        }),
        at: first.and_then(|f| f.usage.at),
        session_id: session_id.to_string(),
    })
}
