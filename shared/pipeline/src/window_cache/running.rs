//! The hooks' running account (`window/<session>.running.json`): loaded,
//! brought up to date by the engine ([`ktr_engine::window::running`]) from
//! the bytes appended since, and saved when it moved.

use std::path::{Path, PathBuf};

use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;
use ktr_base::open::{Links, cap, read_capped};
use ktr_engine::window::running::{self, Running};

/// Where the running account of `session_id` is kept.
pub fn path(state_dir: &Path, session_id: &SessionId) -> PathBuf {
    state_dir
        .join("window")
        .join(format!("{session_id}.running.json"))
}

/// The account kept for `session_id`, if it reads.
fn kept(state_dir: &Path, session_id: &SessionId) -> Option<Running> {
    read_capped(&path(state_dir, session_id), cap::CACHE, Links::Refuse)
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice::<Running>(&b).ok())
}

/// Load the account, bring it up to date by at most `step` bytes and save
/// it when it moved. Returns the account and whether it caught up.
///
/// # Errors
/// When the transcript cannot be read or the account cannot be saved.
pub fn advance(
    config: &Config,
    session_id: &SessionId,
    transcript: &Path,
    step: u64,
) -> Result<(Running, bool)> {
    let file_path = path(&config.state_dir, session_id);
    let kept = kept(&config.state_dir, session_id);
    let (now, caught_up) = running::advance(config, kept.clone(), transcript, step)?;
    // Saved when it read something (as before the engine stopped writing).
    if kept.as_ref().map_or(0, |k| k.offset) != now.offset {
        let bytes = serde_json::to_vec(&now).map_err(|e| Error::io(e.to_string()))?;
        super::write_cache(&file_path, &bytes)?;
    }
    Ok((now, caught_up))
}

/// The kept account, when it is caught up with `transcript` (every byte
/// read): what the hooks already know, without reading the transcript.
pub fn caught_up(config: &Config, session_id: &SessionId, transcript: &Path) -> Option<Running> {
    let kept = kept(&config.state_dir, session_id)?;
    let len = std::fs::metadata(transcript).ok()?.len();
    (kept.transcript == transcript && kept.format == running::FORMAT && kept.offset == len)
        .then_some(kept)
}

/// The account brought up to date without saving it (`ktr status`, which
/// writes nothing): None when it cannot catch up in one step.
pub fn peek(config: &Config, session_id: &SessionId, transcript: &Path) -> Option<Running> {
    let kept = kept(&config.state_dir, session_id);
    let (now, caught_up) = running::advance(config, kept, transcript, running::STEP_BYTES).ok()?;
    caught_up.then_some(now)
}
