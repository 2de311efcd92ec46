//! After a compaction, the offer: when the window begins after a
//! compaction boundary whose summary replaced turns of this transcript,
//! the next Stop hook says how many turns are only in Claude Code's
//! summary now and that a rebuild restores them word for word (or that
//! `ktr recall` still finds them, when the rebuild would not fit) — once
//! per boundary.
//!
//! Bounded like the rest of the Stop hook, and reading nothing more: the
//! turns before the boundary come from the hooks' running account
//! (`window/<session>.running.json`), which counts them as it reads the
//! bytes appended since the last call (the advice brings it up to date a
//! moment before, or, when a notice was shown instead, the offer itself:
//! one step of at most 8 MiB a Stop), used once it has caught up;
//! the boundary already offered is kept in `window/<session>.offered`
//! (its uuid).
//!
//! Also, once each, context Claude Code dropped without a boundary
//! ([`ktr_engine::window::cleared`]: a microcompaction, tool results
//! cleared, a reply whose usage fell by more than half), with what a
//! rebuild would carry; the finding said is kept in
//! `window/<session>.cleared`.

use std::path::{Path, PathBuf};

use crate::operation::Store;
use crate::window_cache;
use ktr_base::config::Config;
use ktr_base::ids::SessionId;
use ktr_base::open::{Links, cap, read_capped};
use ktr_engine::window;

/// The most the offer reads past the advice's step: what Claude Code
/// appended for the reply while the hook ran.
const APPENDED_SINCE: u64 = 1 << 20;

/// How the Stop hook's line says to ask for the rebuild.
pub const ASK: &str = "say REBUILD to ask for it";

fn marker(state_dir: &Path, session: &SessionId, suffix: &str) -> PathBuf {
    state_dir.join("window").join(format!("{session}.{suffix}"))
}

/// The offer for this session's newest compaction boundary, once, and
/// the newest silent clearing, once (None when there is neither, the
/// boundary summarised nothing of this file, they were said
/// already, advice is off — `advise_at_percent = 0` — or ktr has no state
/// dir yet).
///
/// `read`: bring the running account up to date first (at most one step,
/// when the advice did not run this time); else use it as the advice left
/// it, once it has caught up.
pub fn offer(
    config_arg: Option<&Path>,
    session: &SessionId,
    transcript: &Path,
    read: bool,
) -> Option<String> {
    let config = Config::for_transcript(config_arg, transcript).ok()?;
    if config.advise_at_percent == 0 {
        return None;
    }
    // Remembered in the state dir, which the offer never creates (the
    // statusline and the other hooks do): the Stop hook's fast path makes
    // nothing.
    if !config.state_dir.is_dir() {
        return None;
    }
    Store::open(&config.state_dir).ok()?;
    // One step a Stop: the advice's, or this one.
    if read {
        window_cache::running::advance(
            &config,
            session,
            transcript,
            ktr_engine::window::running::STEP_BYTES,
        )
        .ok()?;
    }
    // Claude Code may have appended a few records (its own, for the reply
    // that just ended) after the advice's step: read those too — at most
    // what one reply adds, never a whole step again.
    let running = match window_cache::running::caught_up(&config, session, transcript) {
        Some(running) => running,
        None if !read => {
            let (running, caught_up) =
                window_cache::running::advance(&config, session, transcript, APPENDED_SINCE)
                    .ok()?;
            caught_up.then_some(running)?
        }
        None => return None,
    };
    // Each finding once: its key is kept in its marker.
    let new = |suffix: &str, key: &str| {
        let path = marker(&config.state_dir, session, suffix);
        let said = read_capped(&path, cap::CACHE, Links::Refuse)
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).trim().to_string());
        (said.as_deref() != Some(key)).then_some(path)
    };
    let boundary = running
        .boundary
        .clone()
        .filter(|_| running.summarised_turns > 0)
        .and_then(|b| new("offered", &b).map(|path| (path, b)));
    let cleared = running
        .clearing
        .last
        .clone()
        .and_then(|c| new("cleared", &c.key).map(|path| (path, c)));
    if boundary.is_none() && cleared.is_none() {
        return None;
    }
    let w = window_cache::for_hook(
        &config,
        session,
        transcript,
        None,
        None,
        &window_cache::compaction::setting(),
    )
    .ok()??;
    let mut lines = Vec::new();
    // Where the target does not run this session a rebuild could never
    // switch it: nothing is offered, recall is named (as the advice does).
    let switched = !matches!(
        super::next::Next::of(&config, session, &w),
        super::next::Next::NotSwitched | super::next::Next::NoTarget
    );
    let offer = if switched {
        window::offer(&w, ASK)
    } else {
        window::summarised(&w).map(|what| {
            format!(
                "{what}; this session is not the one ktr switches (see ktr status), but `ktr recall` still finds them word for word"
            )
        })
    };
    if let Some((path, key)) = boundary
        && let Some(line) = offer
        && window_cache::write_cache(&path, key.as_bytes()).is_ok()
    {
        lines.push(format!("ktr: {line}"));
    }
    if let Some((path, c)) = cleared
        && window_cache::write_cache(&path, c.key.as_bytes()).is_ok()
    {
        lines.push(format!(
            "ktr: {}",
            window::cleared::said(&c, running.turns, w.after_rebuild_tokens, ASK)
        ));
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}
