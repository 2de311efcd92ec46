//! The thing that runs Claude Code and gets switched over (SPEC §12): a tmux
//! pane, a systemd service, or a pointer file read by a `claude -p` loop.
//!
//! Three operations, each a compare-and-swap building block:
//! [`Target::identity`] (what runs now), [`Target::switch`] (run another
//! session) and [`Target::health`] (is it really running it). No call can
//! hang (every controller call has a timeout) and none panics: every failure
//! is an [`Error`] whose one-line message is the reason to record.
//!
//! The tmux server is the config's `tmux_socket` (a name for `tmux -L`, a
//! path for `tmux -S`); `KTR_TMUX_SOCKET` overrides it, so a test's whole
//! process tree can be pinned to a private server and never reach a real
//! session.
//!
//! One file per target ([`tmux`], [`systemd`], [`pointer`]); what they
//! share: what runs there ([`running`]) and the health watch ([`health`]).

pub mod discover;
mod hand;
mod health;
mod keep;
mod notice;
mod pointer;
mod running;
mod systemd;
mod tmux;

use std::fmt;
use std::time::Duration;

use crate::pane::Input;
use crate::process::{self, ProcessId};
use ktr_base::config::{Activation, Config, PaneChoice};
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;

pub use hand::{Hand, Offer};
pub use health::Receipt;
pub use keep::{Client, Clients, Keeper};
pub use pointer::Pointer;
pub use running::{Ran, Running, SessionProcess, session_arg};
pub use systemd::{Systemd, UnitState};
pub use tmux::{NoServer, Tmux, resume_line};

use health::watch_until;
use pointer::write_pointer;
use running::{resume_form, session_process};

/// How long an identity query or a tmux command may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// The pane border while a switch is under way (tmux, [`Target::notice`]).
pub const SWITCHING_NOTICE: &str =
    "ktr: switching this Claude Code to the rebuilt session \u{2014} keep typing, no key is lost";
/// The pane border while ktr waits for the person (a draft, a turn).
pub const WAITING_NOTICE: &str = "ktr: the switch waits for you \u{2014} send (or clear) what you typed; it switches after the reply";

/// ktr's notice on a tmux pane's border ([`Target::notice`]): taken down
/// when dropped, unless [`Notice::waiting`] leaves the waiting line up (a
/// stage killed meanwhile leaves it too; the next stage or recovery takes
/// it down).
#[must_use = "the notice is taken down when dropped"]
pub struct Notice<'a> {
    target: &'a Target,
    keep: bool,
}

impl Notice<'_> {
    /// ktr waits for the person: say so, and leave it up.
    pub fn waiting(mut self) {
        if let Target::Tmux(t) = self.target {
            t.show_notice(WAITING_NOTICE);
        }
        self.keep = true;
    }
}

impl Drop for Notice<'_> {
    fn drop(&mut self) {
        if !self.keep {
            self.target.clear_notice();
        }
    }
}

/// One of the three targets, or none found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Tmux(Tmux),
    Systemd(Systemd),
    Pointer(Pointer),
    /// No `tmux_target` configured, no tmux pane, but an interactive
    /// Claude Code in a terminal: the person types the offered line.
    Hand(Hand),
    /// No `tmux_target` configured and the session's Claude Code runs in no
    /// tmux pane ktr could prove its own ([`discover`]): nothing is
    /// switched, and every call says why ([`NoTarget`]).
    Unfound(NoTarget),
}

/// Under a refusal: the session has no target — `tmux_target` is not
/// configured and no tmux pane was found for its Claude Code (`why`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoTarget {
    pub why: String,
}

impl fmt::Display for NoTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no target: {}; run Claude Code inside tmux (or set tmux_target) to have a rebuild switched",
            self.why
        )
    }
}

impl std::error::Error for NoTarget {}

impl NoTarget {
    /// The refusal every call on [`Target::Unfound`] returns.
    fn refusal(&self) -> Error {
        Error::refused(format!("{self}; not switching")).because(self.clone())
    }
}

impl Target {
    /// The configured target (`activation`); `KTR_TMUX_SOCKET` overrides
    /// a configured `tmux_socket`. tmux without a configured `tmux_target`:
    /// the pane [`discover::settle`] found (its exact server), else
    /// [`Target::Unfound`].
    pub fn from_config(config: &Config) -> Target {
        let tmux = |socket| {
            Target::Tmux(Tmux {
                program: "tmux".into(),
                socket,
                target: config.tmux_target.clone(),
                bindings: Some(crate::binding::dir(&config.state_dir)),
            })
        };
        match config.activation {
            Activation::Tmux => match &config.pane {
                PaneChoice::Configured => tmux(
                    std::env::var("KTR_TMUX_SOCKET")
                        .ok()
                        .filter(|s| !s.is_empty())
                        .or_else(|| config.tmux_socket.clone()),
                ),
                PaneChoice::Found => tmux(config.tmux_socket.clone()),
                PaneChoice::NotFound(why) => Target::Unfound(NoTarget { why: why.clone() }),
                PaneChoice::ByHand { pid, start_time } => Target::Hand(Hand {
                    claude: ProcessId {
                        pid: *pid,
                        start_time: *start_time,
                    },
                    bindings: Some(crate::binding::dir(&config.state_dir)),
                }),
                PaneChoice::Find => Target::Unfound(NoTarget {
                    why: "the session's Claude Code process was not looked at".into(),
                }),
            },
            Activation::Systemd => Target::Systemd(Systemd {
                systemctl: "systemctl".into(),
                user: config.systemd_user,
                unit: config.systemd_unit.clone(),
                pointer: config.resume_pointer_path.clone(),
                restart_timeout: Duration::from_secs_f64(config.systemd_restart_timeout_seconds),
            }),
            Activation::Pointer => Target::Pointer(Pointer {
                path: config.resume_pointer_path.clone(),
            }),
        }
    }

    /// What runs now: the tmux pane pid, the unit's `MainPID` (`0` when it is
    /// stopped), or the pointer content (empty when there is no pointer yet).
    pub fn identity(&self) -> Result<String> {
        match self {
            Target::Tmux(t) => t.pane_pid().map(|p| p.to_string()),
            Target::Systemd(s) => s.main_pid().map(|p| p.to_string()),
            Target::Pointer(p) => p.read(),
            Target::Hand(h) => h.pid().map(|p| p.to_string()),
            Target::Unfound(n) => Err(n.refusal()),
        }
    }

    /// Run session `session_id` in the target, as `config` says
    /// (`resume_command`, `resume_env`, `claude_workdir`).
    pub fn switch(&self, session_id: &SessionId, config: &Config) -> Result<()> {
        SessionId::parse(session_id)?;
        match self {
            Target::Tmux(t) => t.respawn(session_id, config),
            Target::Systemd(s) => s.restart_on(session_id),
            Target::Pointer(p) => write_pointer(&p.path, session_id),
            Target::Hand(h) => Err(h.no_keyboard("switch it")),
            Target::Unfound(n) => Err(n.refusal()),
        }
    }

    /// What the target runs now: its identity, and (when it can be found)
    /// the session and the process running it.
    pub fn running(&self) -> Result<Running> {
        let identity = self.identity()?;
        match self {
            Target::Pointer(_) => Ok(Running {
                session: (!identity.is_empty()).then(|| identity.clone()),
                identity,
                root: None,
                process: None,
            }),
            Target::Unfound(n) => Err(n.refusal()),
            Target::Tmux(_) | Target::Systemd(_) | Target::Hand(_) => {
                let root = identity.parse::<u32>().ok().filter(|p| *p > 0);
                let bindings = match self {
                    Target::Tmux(t) => t.bindings.as_deref(),
                    Target::Hand(h) => h.bindings.as_deref(),
                    _ => None,
                };
                let process = root.and_then(|root| session_process(root, bindings));
                Ok(Running {
                    session: process.as_ref().map(|p| p.session.clone()),
                    identity,
                    root,
                    process,
                })
            }
        }
    }

    /// Refuse unless the target runs the session being rebuilt: for tmux
    /// and systemd the pane's process / the unit's `MainPID` or one of its
    /// descendants is `claude` (the Claude Code process whose Stop hook
    /// scheduled the rebuild); for a pointer, the pointer names `session`.
    /// The reason names both sides; nothing is touched.
    pub fn check_runs(&self, claude: Option<ProcessId>, session: &SessionId) -> Result<Running> {
        let running = self.running()?;
        let short = |s: &str| s.chars().take(8).collect::<String>() + "…";
        if let Target::Pointer(p) = self {
            if running.session.as_deref() == Some(session.as_str()) {
                return Ok(running);
            }
            return Err(Error::refused(format!(
                "pointer file {} names session {}, not session {session}; not switching",
                p.path.display(),
                running.session.as_deref().unwrap_or("(none)")
            )));
        }
        let Some(root) = running.root else {
            return Err(Error::refused(format!(
                "{self} runs nothing (identity {:?}), not the Claude of session {session}; not switching",
                running.identity
            )));
        };
        let inside =
            claude.filter(|c| c.alive() && process::with_descendants(root).contains(&c.pid));
        if inside.is_some() {
            return Ok(running);
        }
        let theirs = running.session.as_deref().map_or_else(
            || "session unknown".to_string(),
            |s| format!("session {}", short(s)),
        );
        let ours = match claude {
            Some(c) if !c.alive() => format!(" (pid {}, which has exited)", c.pid),
            Some(c) => format!(" (pid {})", c.pid),
            None => " (no Claude process was recorded by its Stop hook)".to_string(),
        };
        Err(Error::refused(format!(
            "target {self} runs pid {root} ({theirs}), not the Claude of session {session}{ours}; not switching"
        )))
    }

    /// Put back what the target ran before a switch (`ran`, recorded by
    /// [`Running::ran`]): tmux respawns the same command line in the same
    /// directory when it names the session (else `resume_command` for
    /// it); systemd and pointer write the pointer back (and restart).
    pub fn restore(&self, ran: &Ran, config: &Config) -> Result<()> {
        SessionId::parse(&ran.session)?;
        match self {
            Target::Tmux(t) => {
                let argv = resume_form(&ran.argv, &ran.session)
                    .unwrap_or_else(|| config.resume_argv(&ran.session));
                let workdir = ran
                    .cwd
                    .clone()
                    .filter(|d| d.is_dir())
                    .unwrap_or_else(|| config.claude_workdir.clone());
                t.respawn_argv(argv, &workdir, config)
            }
            Target::Systemd(_) | Target::Pointer(_) | Target::Unfound(_) | Target::Hand(_) => {
                self.switch(&ran.session, config)
            }
        }
    }

    /// Show `text` on a tmux pane's border until the returned notice is
    /// dropped (a status-line message would be cleared by the next key).
    /// Nothing for the other targets (no screen).
    pub fn notice(&self, text: &str) -> Notice<'_> {
        if let Target::Tmux(t) = self {
            t.show_notice(text);
        }
        Notice {
            target: self,
            keep: false,
        }
    }

    /// The text of ktr's notice on a tmux pane's border, if one is shown.
    pub fn shown_notice(&self) -> Option<String> {
        match self {
            Target::Tmux(t) => t.notice(),
            Target::Systemd(_) | Target::Pointer(_) | Target::Unfound(_) | Target::Hand(_) => None,
        }
    }

    /// Put `text` on a tmux pane's border and leave it up (the next stage,
    /// or `ktr-prompt` at the person's next prompt, takes it down).
    pub(crate) fn show_lasting_notice(&self, text: &str) {
        if let Target::Tmux(t) = self {
            t.show_notice(text);
        }
    }

    /// Paste the text of `file` into a tmux pane's input line (bracketed,
    /// not sent); the other targets have no keyboard.
    pub(crate) fn paste_file(&self, file: &std::path::Path) -> Result<()> {
        match self {
            Target::Tmux(t) => t.paste_file(file),
            Target::Systemd(_) | Target::Pointer(_) | Target::Unfound(_) | Target::Hand(_) => Err(
                Error::refused(format!("{self} has no keyboard to paste into")),
            ),
        }
    }

    /// Take ktr's notice off a tmux pane's border.
    pub(crate) fn clear_notice(&self) {
        if let Target::Tmux(t) = self {
            t.clear_notice();
        }
    }

    /// What a stage killed during a switch may have left on a tmux pane:
    /// ktr's notice, and (versions before the in-place switch) its keyboard
    /// turned off (`select-pane -d`).
    pub(crate) fn release_input(&self) {
        if let Target::Tmux(t) = self {
            t.clear_notice();
            let on = t.argv(&["select-pane", "-e", "-t", &t.target]);
            let _ = process::run_checked(&on, CONTROL_TIMEOUT);
        }
    }

    /// Switch the Claude Code in a tmux pane to `session_id` in place:
    /// type `/resume <id>` and Enter into it. Only a tmux pane has a
    /// keyboard; the other targets refuse (they switch by [`Target::switch`]).
    pub(crate) fn type_resume(&self, session_id: &SessionId) -> Result<()> {
        SessionId::parse(session_id)?;
        match self {
            Target::Tmux(t) => t.type_resume(session_id),
            Target::Systemd(_) | Target::Pointer(_) | Target::Unfound(_) | Target::Hand(_) => Err(
                Error::refused(format!("{self} has no keyboard to type /resume into")),
            ),
        }
    }

    /// Hold the keyboard of every tmux client showing the pane with a
    /// popup running `program` (`ktr-keep`) until the returned keeper is
    /// finished, then replay the keys typed meanwhile into the pane
    /// ([`Keeper`]). Files under `dir`; each recorder finishes by itself
    /// after `max`. Nothing for the other targets.
    pub fn keep_keys(
        &self,
        program: &std::path::Path,
        dir: &std::path::Path,
        max: Duration,
    ) -> Keeper {
        match self {
            Target::Tmux(t) => t.keep_keys(program, dir, max),
            Target::Systemd(_) | Target::Pointer(_) | Target::Unfound(_) | Target::Hand(_) => {
                Keeper::none()
            }
        }
    }

    /// Delete `count` characters before the cursor of a tmux pane's input
    /// line (ktr's own `/resume <id>` given back after a collision).
    pub fn backspace(&self, count: usize) -> Result<()> {
        match self {
            Target::Tmux(t) => t.backspace(count),
            Target::Systemd(_) | Target::Pointer(_) | Target::Unfound(_) | Target::Hand(_) => {
                Ok(())
            }
        }
    }

    /// What the human sees in the input area: tmux only (the other targets
    /// have no screen; None).
    pub fn input(&self) -> Result<Option<Input>> {
        match self {
            Target::Tmux(t) => {
                let argv = t.argv(&["capture-pane", "-p", "-t", &t.target]);
                let screen = process::run_checked(&argv, CONTROL_TIMEOUT)?;
                Ok(Some(Input::of_screen(&screen)))
            }
            Target::Systemd(_) | Target::Pointer(_) | Target::Unfound(_) | Target::Hand(_) => {
                Ok(None)
            }
        }
    }

    /// Whether the target really runs `session_id`. tmux and systemd: over
    /// `wait`, a live process whose command line (or a descendant's)
    /// contains the id must appear and then stay the same process. Pointer:
    /// the content equals the id. Returns the identity seen when healthy.
    pub fn health(&self, session_id: &SessionId, wait: Duration) -> Result<String> {
        self.health_until(session_id, wait, None)
    }

    /// [`Target::health`], ending early on Claude Code's [`Receipt`]
    /// (process targets; a pointer has no process to prove anything).
    pub(crate) fn health_until(
        &self,
        session_id: &SessionId,
        wait: Duration,
        receipt: Option<Receipt<'_>>,
    ) -> Result<String> {
        match self {
            Target::Tmux(t) => watch_until(session_id, wait, || t.pane_pid(), receipt),
            Target::Systemd(s) => {
                watch_until(session_id, wait, || s.main_pid(), receipt).map_err(|mut e| {
                    e.message = format!("{}; {}", e.message, s.why_down());
                    e
                })
            }
            Target::Unfound(n) => Err(n.refusal()),
            Target::Hand(h) => Err(h.no_keyboard("watch a switch")),
            Target::Pointer(p) => {
                let now = p.read()?;
                if *session_id == now {
                    Ok(now)
                } else {
                    Err(Error::refused(format!(
                        "pointer {} names {now:?}, not {session_id}",
                        p.path.display()
                    )))
                }
            }
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tmux(t) => match &t.socket {
                Some(s) if s.contains('/') => write!(f, "tmux pane {} (server -S {s})", t.target),
                Some(s) => write!(f, "tmux pane {} (server -L {s})", t.target),
                None => write!(f, "tmux pane {} (default server)", t.target),
            },
            Target::Systemd(s) => write!(f, "systemd unit {}", s.unit),
            Target::Pointer(p) => write!(f, "pointer file {}", p.path.display()),
            Target::Hand(h) => write!(f, "{} (Claude Code pid {})", Offer::WHERE, h.claude.pid),
            Target::Unfound(_) => f.write_str("no target"),
        }
    }
}
