//! Which session a running Claude Code process serves now (SPEC §12).
//!
//! A Claude Code process names the session it started with on its command
//! line (`--resume S`) and gives it to its MCP servers
//! (`CLAUDE_CODE_SESSION_ID`), but `/resume <id>` switches the same process
//! to another session without changing either (measured on 2.1.328).
//! `ktr-ack`, the `SessionStart` (resume) hook, records every resume here,
//! keyed by the process (pid + start time, so a reused pid never inherits
//! it): `<state_dir>/claude/<pid>.json`. Whatever ties a process to a
//! session — what a target runs, the session the MCP server serves, the
//! in-place switch's health check — reads it before the command line.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::process::ProcessId;
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, ensure_private_dir, write_atomic};
use ktr_base::ids::SessionId;
use ktr_base::open::{Links, read_capped};
use ktr_base::time::{now_rfc3339, parse_rfc3339};

/// The largest binding file read.
const CAP: u64 = 4096;

/// One process's current session, as its last `SessionStart` (resume) said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub claude: ProcessId,
    pub session_id: String,
    /// When `ktr-ack` recorded it (RFC 3339, ms).
    pub at: String,
}

impl Binding {
    /// When it was recorded (None when unreadable).
    pub fn time(&self) -> Option<SystemTime> {
        parse_rfc3339(&self.at)
    }
}

/// The bindings' directory's name in a state dir.
pub const DIR: &str = "claude";

/// The bindings' directory in a state dir.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join(DIR)
}

fn file(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.json"))
}

/// Record that `claude` serves `session_id` now (0600, atomic), and forget
/// the bindings of processes that are gone. The state dir must exist.
pub fn record(state_dir: &Path, claude: ProcessId, session_id: &SessionId) -> Result<Binding> {
    if !state_dir.is_dir() {
        return Err(Error::refused(format!(
            "state dir {} does not exist",
            state_dir.display()
        )));
    }
    let home = ktr_base::config::home_dir();
    ktr_base::state_dir::claim(state_dir, ktr_base::state_dir::place_of_home(&home))?;
    let dir = dir(state_dir);
    ensure_private_dir(&dir, 0o700)?;
    let binding = Binding {
        claude,
        session_id: session_id.to_string(),
        at: now_rfc3339(),
    };
    let bytes = serde_json::to_vec(&binding).map_err(|e| Error::io(e.to_string()))?;
    write_atomic(&file(&dir, claude.pid), &bytes, 0o600, Existing::Replace)?;
    prune(&dir);
    Ok(binding)
}

/// The session `claude` serves according to its last resume, if that very
/// process recorded one.
pub fn of(bindings: &Path, claude: ProcessId) -> Option<Binding> {
    let bytes = read_capped(&file(bindings, claude.pid), CAP, Links::Refuse).ok()??;
    let binding: Binding = serde_json::from_slice(&bytes).ok()?;
    (binding.claude == claude).then_some(binding)
}

/// [`of`] for a live pid.
pub fn of_pid(bindings: &Path, pid: u32) -> Option<Binding> {
    of(bindings, ProcessId::of(pid)?)
}

/// The transcript a command defaults to when none is named (`ktr dirty`,
/// `ktr status`, doctor): the session the Claude Code process that ran
/// this one serves (its binding: after a rollback or a `/resume`, the
/// session it runs now), else the newest transcript in `project_dir`
/// (two with the same mtime cannot be told apart by it).
///
/// # Errors
/// When `project_dir` is unusable or holds no transcript.
pub fn default_transcript(config: &ktr_base::config::Config) -> Result<PathBuf> {
    let bound = crate::process::runner_of(std::process::id())
        .and_then(|claude| of(&dir(&config.state_dir), claude))
        .and_then(|b| SessionId::parse(&b.session_id).ok())
        .map(|s| config.project_dir.join(format!("{s}.jsonl")))
        .and_then(|p| ktr_engine::plan::resolve_transcript(config, Some(&p)).ok());
    match bound {
        Some(path) => Ok(path),
        None => ktr_engine::plan::resolve_transcript(config, None),
    }
}

/// Remove the bindings of processes that no longer run. Only what ktr
/// wrote goes: a regular file named `<pid>.json` (never a link) that
/// holds a binding of that pid; anything else in the folder stays.
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .filter(|n| !n.starts_with('+'))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dead = read_capped(&entry.path(), CAP, Links::Refuse)
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice::<Binding>(&b).ok())
            .is_some_and(|b| b.claude.pid == pid && !b.claude.alive());
        if dead {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_follows_the_very_process_and_no_pid_reuse() {
        let state = tempfile::tempdir().unwrap();
        let me = ProcessId::of(std::process::id()).unwrap();
        let s = "5e55e55e-0000-4000-8000-000000000001";
        record(state.path(), me, &SessionId::parse(s).unwrap()).unwrap();
        let found = of(&dir(state.path()), me).unwrap();
        assert_eq!((found.session_id.as_str(), found.claude), (s, me));
        assert!(found.time().is_some());
        assert_eq!(of_pid(&dir(state.path()), me.pid), Some(found));
        // Another process under the same pid (another start time): none.
        let reused = ProcessId {
            start_time: me.start_time + 1,
            ..me
        };
        assert_eq!(of(&dir(state.path()), reused), None);
        // The newest resume wins.
        let t = "5e55e55e-0000-4000-8000-000000000002";
        record(state.path(), me, &SessionId::parse(t).unwrap()).unwrap();
        assert_eq!(of(&dir(state.path()), me).unwrap().session_id, t);
    }

    #[test]
    fn the_bindings_of_processes_that_are_gone_are_forgotten() {
        let state = tempfile::tempdir().unwrap();
        let d = dir(state.path());
        std::fs::create_dir_all(&d).unwrap();
        let gone = ProcessId {
            pid: u32::MAX - 7,
            start_time: 1,
        };
        let stale = Binding {
            claude: gone,
            session_id: "x".into(),
            at: now_rfc3339(),
        };
        std::fs::write(file(&d, gone.pid), serde_json::to_vec(&stale).unwrap()).unwrap();
        let me = ProcessId::of(std::process::id()).unwrap();
        record(
            state.path(),
            me,
            &SessionId::parse("5e55e55e-0000-4000-8000-000000000001").unwrap(),
        )
        .unwrap();
        assert!(!file(&d, gone.pid).exists());
        assert!(file(&d, me.pid).exists());
    }

    #[test]
    fn without_a_state_dir_nothing_is_created() {
        let missing = Path::new("/nonexistent/ktr-state");
        let me = ProcessId::of(std::process::id()).unwrap();
        assert!(record(missing, me, &SessionId::parse("x").unwrap()).is_err());
        assert!(!missing.exists());
    }
}
