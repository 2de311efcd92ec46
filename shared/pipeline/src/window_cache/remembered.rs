//! The window size the statusline reported for a session
//! (`window/<session>.json`): Claude Code's own number, kept for the hooks
//! and `ktr plan`, which are not told it.

use std::path::{Path, PathBuf};

use ktr_base::ids::SessionId;
use ktr_base::open::{Links, cap, read_capped};
use ktr_base::time::now_rfc3339;
use ktr_engine::window::size::Remembered;

/// Where the statusline's report for `session_id` is kept.
pub fn path(state_dir: &Path, session_id: &SessionId) -> PathBuf {
    state_dir.join("window").join(format!("{session_id}.json"))
}

/// The remembered report, if any (unreadable or foreign content reads as none).
pub fn read(state_dir: &Path, session_id: &SessionId) -> Option<Remembered> {
    let bytes = read_capped(&path(state_dir, session_id), cap::CACHE, Links::Refuse).ok()??;
    serde_json::from_slice::<Remembered>(&bytes)
        .ok()
        .filter(|r| r.context_window_size > 0)
}

/// Keep the reported size (written only when it changed). A cache: a
/// failed write only means the model heuristics are used.
pub(crate) fn remember(state_dir: &Path, session_id: &SessionId, tokens: u64, model: Option<&str>) {
    if read(state_dir, session_id).is_some_and(|r| r.context_window_size == tokens) {
        return;
    }
    let r = Remembered {
        context_window_size: tokens,
        model_id: model.map(str::to_string),
        at: now_rfc3339(),
    };
    if let Ok(bytes) = serde_json::to_vec(&r) {
        let _ = super::write_cache(&path(state_dir, session_id), &bytes);
    }
}
