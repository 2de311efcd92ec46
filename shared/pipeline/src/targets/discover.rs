//! The target is found, not configured (SPEC §12, "Discovery"): the tmux
//! pane a session's Claude Code process runs in. The process's own
//! environment is the hint — tmux gives every pane's process `TMUX`
//! (`<socket path>,<server pid>,<session>`) and `TMUX_PANE` (`%N`) — and
//! the hint is taken only when that server's `#{pane_pid}` of that pane
//! is the Claude Code process itself or one of its ancestors: a process
//! that inherited a stale `TMUX` (started in one pane, now elsewhere)
//! never gets another pane typed into.
//!
//! What is found fills a config whose `tmux_target` was not set
//! ([`settle`]); a configured `tmux_target` always wins. Also filled: an
//! unset `claude_workdir`, from the process's working directory.
//!
//! No pane, but a live interactive Claude Code (a controlling terminal,
//! no `-p`/`--print`): the hand target ([`Found::Terminal`],
//! [`super::Hand`]) — the person types the line ktr offers.

use std::path::{Path, PathBuf};

use super::{CONTROL_TIMEOUT, Tmux};
use crate::operation::{Store, locate_state_dir};
use crate::process::{self, ProcessId};
use ktr_base::config::{Activation, Config, PaneChoice, encode_project_name};
use ktr_base::error::Result;
use ktr_base::ids::OperationId;

/// Where a session's Claude Code runs, as far as ktr can switch it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// In this tmux pane (`target` is the pane id `%N`, `socket` its
    /// server's socket path).
    Pane(Tmux),
    /// In no tmux pane ktr could prove its own, but interactive in a
    /// terminal: the person types `/resume <id>` (why no pane, in one line).
    Terminal(ProcessId, String),
    /// In no tmux pane ktr could prove its own and no terminal (why, in one
    /// line): not switched.
    Nowhere(String),
}

/// Whether process `pid` is an interactive Claude Code a person types
/// into: it has a controlling terminal and its command line has no
/// `-p`/`--print` (a `claude -p` run reads no line from anybody).
fn reads_a_terminal(pid: u32) -> bool {
    let terminal = process::stat(pid).is_some_and(|s| s.tty_nr != 0);
    let printing = process::cmdline(pid)
        .is_some_and(|argv| argv.iter().skip(1).any(|a| a == "-p" || a == "--print"));
    terminal && !printing
}

/// [`pane_of`], and when no pane is found for a live interactive Claude
/// Code, [`Found::Terminal`].
pub fn where_of(claude: ProcessId, bindings: Option<PathBuf>) -> Found {
    match pane_of(claude, bindings) {
        Found::Nowhere(why) if claude.alive() && reads_a_terminal(claude.pid) => {
            Found::Terminal(claude, why)
        }
        found => found,
    }
}

/// The hint of process `pid`'s environment: the tmux socket path and the
/// pane id, when both are there.
fn hint(pid: u32) -> Option<(String, String)> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let var = |name: &str| {
        environ
            .split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(format!("{name}=").as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let tmux = var("TMUX")?;
    // `<socket path>,<server pid>,<session index>`: the path may hold a
    // comma, the two numbers never do.
    let mut parts = tmux.rsplitn(3, ',');
    let (_, _, socket) = (parts.next()?, parts.next()?, parts.next()?);
    let pane = var("TMUX_PANE")?;
    let pane_ok = pane
        .strip_prefix('%')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    (socket.starts_with('/') && pane_ok).then(|| (socket.to_string(), pane))
}

/// Whether `ancestor` is `pid` or one of its ancestors.
fn is_self_or_ancestor(ancestor: u32, pid: u32) -> bool {
    let mut current = pid;
    for _ in 0..64 {
        if current == ancestor {
            return true;
        }
        match process::stat(current) {
            Some(s) if s.ppid > 0 && s.ppid != current => current = s.ppid,
            _ => return false,
        }
    }
    false
}

/// The tmux pane Claude Code process `claude` runs in ([`Found`]).
pub fn pane_of(claude: ProcessId, bindings: Option<PathBuf>) -> Found {
    if !claude.alive() {
        return Found::Nowhere(format!(
            "the session's Claude Code (pid {}) has exited",
            claude.pid
        ));
    }
    let Some((socket, pane)) = hint(claude.pid) else {
        return Found::Nowhere(format!(
            "the session's Claude Code (pid {}) does not run inside tmux (no TMUX and TMUX_PANE in its environment)",
            claude.pid
        ));
    };
    let tmux = Tmux {
        program: "tmux".into(),
        socket: Some(socket),
        target: pane,
        bindings,
    };
    let argv = tmux.argv(&["display-message", "-p", "-t", &tmux.target, "#{pane_pid}"]);
    let said = process::run_checked(&argv, CONTROL_TIMEOUT);
    let pane_pid = said
        .as_deref()
        .ok()
        .and_then(|out| out.trim().parse::<u32>().ok());
    match pane_pid {
        Some(p) if p > 0 && is_self_or_ancestor(p, claude.pid) => Found::Pane(tmux),
        Some(p) => Found::Nowhere(format!(
            "the session's Claude Code (pid {}) names tmux pane {} of server {} in its environment, but that pane runs pid {p}, not it nor an ancestor of it",
            claude.pid,
            tmux.target,
            tmux.socket.as_deref().unwrap_or_default()
        )),
        None => Found::Nowhere(format!(
            "the session's Claude Code (pid {}) names tmux pane {} of server {} in its environment, but tmux does not show that pane ({})",
            claude.pid,
            tmux.target,
            tmux.socket.as_deref().unwrap_or_default(),
            said.err().map_or_else(String::new, |e| e.message)
        )),
    }
}

/// Fill what `config` leaves to the session's Claude Code process
/// `claude`: an unset `tmux_target` (tmux activation) becomes the pane it
/// runs in ([`PaneChoice::Found`], else [`PaneChoice::NotFound`] with
/// why); an unset `claude_workdir` becomes its working directory when
/// that encodes to `project_dir`'s name. Anything configured stays.
pub fn settle(config: &mut Config, claude: Option<ProcessId>) {
    if !config.claude_workdir_set
        && let Some(cwd) = claude.and_then(|c| process::cwd(c.pid))
        && config
            .project_dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy() == encode_project_name(&cwd))
    {
        config.claude_workdir = cwd;
    }
    if config.activation != Activation::Tmux || config.pane != PaneChoice::Find {
        return;
    }
    let found = match claude {
        Some(claude) => where_of(claude, Some(crate::binding::dir(&config.state_dir))),
        None => Found::Nowhere(
            "the Claude Code process of the session is not known (no hook of it recorded one)"
                .into(),
        ),
    };
    match found {
        Found::Pane(tmux) => {
            config.tmux_target = tmux.target;
            config.tmux_socket = tmux.socket;
            config.pane = PaneChoice::Found;
        }
        Found::Terminal(claude, _) => {
            config.pane = PaneChoice::ByHand {
                pid: claude.pid,
                start_time: claude.start_time,
            };
        }
        Found::Nowhere(why) => config.pane = PaneChoice::NotFound(why),
    }
}

/// The config that serves the session of `transcript`, settled from the
/// Claude Code process that ran this hook (its parent, past `sh -c`).
pub(crate) fn hook_config(explicit: Option<&Path>, transcript: &Path) -> Result<Config> {
    let mut config = Config::for_transcript(explicit, transcript)?;
    settle(&mut config, process::runner_of(std::process::id()));
    Ok(config)
}

/// The config a stage works on operation `id` with: the one that serves
/// the operation's session — its transcript (`given`: prepare is started
/// with it) — settled from the Claude Code process its Stop hook recorded. An
/// operation not bound to a session has only the config file's.
pub(crate) fn operation_config(
    explicit: Option<&Path>,
    id: &OperationId,
    given: Option<&Path>,
) -> Result<Config> {
    let store = Store::open(&locate_state_dir(explicit)?)?;
    // The Stop hook that started this stage saves the operation's session,
    // transcript and process under the lock it holds meanwhile: past the
    // lock, the operation says them.
    store.with_lock(|_| Ok(()))?;
    let op = store.load(id)?;
    let Some(transcript) = given.or(op.transcript_path.as_deref()) else {
        return Config::load(explicit);
    };
    let mut config = Config::for_transcript(explicit, transcript)?;
    let claude = op.claude;
    settle(&mut config, claude);
    Ok(config)
}
