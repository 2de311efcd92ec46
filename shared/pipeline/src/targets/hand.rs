//! The hand target (SPEC §12, "By hand"): the session's Claude Code runs
//! in a terminal ktr has no keyboard for (no tmux pane). ktr never switches
//! it; once the candidate is verified it offers the person the one line to
//! type, `/resume <id>`, and `ktr-ack`'s receipt says it was typed.
//!
//! As a process target its identity is the Claude Code process's pid (what
//! prepare records and activation compares), and what it runs is that
//! process's session ([`super::running`]).

use std::path::PathBuf;

use crate::process::ProcessId;
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;

/// The Claude Code process a person types into (found by
/// [`super::discover`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hand {
    pub claude: ProcessId,
    /// `<state_dir>/bindings`: which session each Claude process serves.
    pub bindings: Option<PathBuf>,
}

impl Hand {
    /// The process's pid while it lives.
    pub(super) fn pid(&self) -> Result<u32> {
        if self.claude.alive() {
            Ok(self.claude.pid)
        } else {
            Err(Error::refused(format!(
                "the session's Claude Code (pid {}) has exited",
                self.claude.pid
            )))
        }
    }

    /// ktr types nothing here: the person does.
    pub(super) fn no_keyboard(&self, what: &str) -> Error {
        Error::refused(format!(
            "{} (Claude Code pid {}) is typed into by the person only; ktr does not {what}",
            Offer::WHERE,
            self.claude.pid
        ))
    }
}

/// The line offered to the person, and what it says around it.
pub struct Offer;

impl Offer {
    /// How the target is named in messages.
    pub const WHERE: &'static str = "the person's terminal (no tmux pane)";

    /// The one line to type.
    pub fn line(session: &SessionId) -> String {
        format!("/resume {session}")
    }

    /// The offer of a rebuild, as the statusline, the Stop hook and `ktr
    /// status` say it.
    pub fn rebuild(candidate: &SessionId, old: &str) -> String {
        format!(
            "rebuilt session ready: type `{}` (with the input line empty) to switch; session {old} stays as it is",
            Offer::line(candidate)
        )
    }

    /// The offer of a rollback.
    pub fn rollback(back: &SessionId, rebuilt: &str) -> String {
        format!(
            "rollback ready: type `{}` (with the input line empty) to go back; the rebuilt session {rebuilt} stays as it is",
            Offer::line(back)
        )
    }
}
