//! The last time ktr found that a session is not the one it switches
//! (`window/not-switched.json`): the compaction guard let Claude Code
//! compact it, or the advice offered no rebuild for it. Their lines stay
//! one short sentence; `ktr status` shows this, the details.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use ktr_base::ids::SessionId;
use ktr_base::open::{Links, cap, read_capped};
use ktr_base::time::now_rfc3339;

/// What was found, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotSwitched {
    /// The session ktr does not switch.
    pub session_id: String,
    /// Why: what the target runs instead (the target's own refusal).
    pub why: String,
    /// When it was found (RFC 3339).
    pub at: String,
}

/// Where it is kept.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("window").join("not-switched.json")
}

/// Keep it (a cache: a failed write only loses the details in `ktr status`).
pub fn record(state_dir: &Path, session: &SessionId, why: &str) {
    let found = NotSwitched {
        session_id: session.to_string(),
        why: why.to_string(),
        at: now_rfc3339(),
    };
    if let Ok(bytes) = serde_json::to_vec(&found) {
        let _ = super::write_cache(&path(state_dir), &bytes);
    }
}

/// The last one kept, if any.
pub fn read(state_dir: &Path) -> Option<NotSwitched> {
    let bytes = read_capped(&path(state_dir), cap::CACHE, Links::Refuse).ok()??;
    serde_json::from_slice(&bytes).ok()
}
