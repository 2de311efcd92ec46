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

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::pane::Input;
use crate::process::{self, ProcessId};
use ktr_base::config::{Activation, Config};
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, ensure_private_dir, write_atomic};
use ktr_base::ids::SessionId;

/// How long an identity query or a tmux command may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// The status line while a pane's input is held during a switch.
const HOLD_NOTICE: &str = "ktr: switching this Claude Code session over; keys typed now are NOT sent: type again in a moment";

/// The keyboard of a tmux pane, off while it is switched; back on when
/// dropped (also when the stage fails; a stage killed meanwhile leaves it
/// off, and the next ktr command's recovery turns it back on).
#[must_use = "input comes back when the hold is dropped"]
pub struct InputHold {
    on: Vec<String>,
}

impl Drop for InputHold {
    fn drop(&mut self) {
        let _ = process::run_checked(&self.on, CONTROL_TIMEOUT);
    }
}
/// How often health is sampled.
const HEALTH_POLL: Duration = Duration::from_millis(50);

/// A tmux pane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tmux {
    /// The tmux program (`tmux`).
    pub program: String,
    /// Server socket: a name (`tmux -L NAME`) or a path with a `/`
    /// (`tmux -S PATH`); None = the default server.
    pub socket: Option<String>,
    /// Pane target, e.g. `cc:0.0`.
    pub target: String,
}

/// A systemd service whose start script reads the pointer file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Systemd {
    /// The systemctl program (`systemctl`).
    pub systemctl: String,
    /// The user's service manager (`systemctl --user`) instead of the system's.
    pub user: bool,
    pub unit: String,
    pub pointer: PathBuf,
    pub restart_timeout: Duration,
}

/// A pointer file naming the session a `claude -p --resume` loop uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    pub path: PathBuf,
}

/// One of the three targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Tmux(Tmux),
    Systemd(Systemd),
    Pointer(Pointer),
}

impl Target {
    /// The configured target (`activation`); `KTR_TMUX_SOCKET` overrides
    /// `tmux_socket`.
    pub fn from_config(config: &Config) -> Target {
        match config.activation {
            Activation::Tmux => Target::Tmux(Tmux {
                program: "tmux".into(),
                socket: std::env::var("KTR_TMUX_SOCKET")
                    .ok()
                    .filter(|s| !s.is_empty())
                    .or_else(|| config.tmux_socket.clone()),
                target: config.tmux_target.clone(),
            }),
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
        }
    }

    /// Run session `session_id` in the target, as `config` says
    /// (`resume_command`, `resume_env`, `claude_workdir`).
    pub fn switch(&self, session_id: &str, config: &Config) -> Result<()> {
        SessionId::parse(session_id)?;
        match self {
            Target::Tmux(t) => t.respawn(session_id, config),
            Target::Systemd(s) => s.restart_on(session_id),
            Target::Pointer(p) => write_pointer(&p.path, session_id),
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
            Target::Tmux(_) | Target::Systemd(_) => {
                let root = identity.parse::<u32>().ok().filter(|p| *p > 0);
                let process = root.and_then(session_process);
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
    pub fn check_runs(&self, claude: Option<ProcessId>, session: &str) -> Result<Running> {
        let running = self.running()?;
        let short = |s: &str| s.chars().take(8).collect::<String>() + "…";
        if let Target::Pointer(p) = self {
            if running.session.as_deref() == Some(session) {
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
            Target::Systemd(_) | Target::Pointer(_) => self.switch(&ran.session, config),
        }
    }

    /// Keep the human's keys away from a tmux pane while it is switched
    /// (`select-pane -d`: tmux discards them, nothing is echoed, and the
    /// status line says why). Without it a prompt whose Enter reached the
    /// old Claude Code in its last moments would die with it, and keys typed
    /// into the starting one are dropped by its terminal setup. Input comes
    /// back when the returned hold is dropped. None for the other targets
    /// (no keyboard) and when tmux refused.
    pub fn hold_input(&self) -> Option<InputHold> {
        let Target::Tmux(t) = self else {
            return None;
        };
        let off = t.argv(&["select-pane", "-d", "-t", &t.target]);
        process::run_checked(&off, CONTROL_TIMEOUT).ok()?;
        // Shown to an attached human (a server without clients has no
        // status line; that is not an error).
        let notice = t.argv(&[
            "display-message",
            "-d",
            "5000",
            "-t",
            &t.target,
            HOLD_NOTICE,
        ]);
        let _ = process::run_checked(&notice, CONTROL_TIMEOUT);
        Some(InputHold {
            on: t.argv(&["select-pane", "-e", "-t", &t.target]),
        })
    }

    /// Turn a tmux pane's keyboard back on (a hold whose stage was killed).
    pub fn release_input(&self) {
        if let Target::Tmux(t) = self {
            drop(InputHold {
                on: t.argv(&["select-pane", "-e", "-t", &t.target]),
            });
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
            Target::Systemd(_) | Target::Pointer(_) => Ok(None),
        }
    }

    /// Whether the target really runs `session_id`. tmux and systemd: over
    /// `wait`, a live process whose command line (or a descendant's)
    /// contains the id must appear and then stay the same process. Pointer:
    /// the content equals the id. Returns the identity seen when healthy.
    pub fn health(&self, session_id: &str, wait: Duration) -> Result<String> {
        self.health_until(session_id, wait, None)
    }

    /// [`Target::health`], ending early on Claude Code's [`Receipt`]
    /// (process targets; a pointer has no process to prove anything).
    pub fn health_until(
        &self,
        session_id: &str,
        wait: Duration,
        receipt: Option<Receipt<'_>>,
    ) -> Result<String> {
        match self {
            Target::Tmux(t) => watch_until(session_id, wait, || t.pane_pid(), receipt),
            Target::Systemd(s) => watch_until(session_id, wait, || s.main_pid(), receipt),
            Target::Pointer(p) => {
                let now = p.read()?;
                if now == session_id {
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
        }
    }
}

impl Tmux {
    fn argv(&self, args: &[&str]) -> Vec<String> {
        let mut argv = vec![self.program.clone()];
        if let Some(socket) = &self.socket {
            let flag = if socket.contains('/') { "-S" } else { "-L" };
            argv.extend([flag.to_string(), socket.clone()]);
        }
        argv.extend(args.iter().map(std::string::ToString::to_string));
        argv
    }

    /// `#{pane_pid}` of the target pane; an error when the pane is gone or dead.
    fn pane_pid(&self) -> Result<u32> {
        let argv = self.argv(&[
            "display-message",
            "-p",
            "-t",
            &self.target,
            "#{pane_pid} #{pane_dead}",
        ]);
        let out = process::run_checked(&argv, CONTROL_TIMEOUT)?;
        let mut words = out.split_whitespace();
        let pid = words
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .filter(|p| *p > 0);
        match (pid, words.next()) {
            (Some(_), Some("1")) => {
                Err(Error::refused(format!("tmux pane {} is dead", self.target)))
            }
            (Some(pid), _) => Ok(pid),
            (None, _) => Err(Error::refused(format!(
                "tmux pane {} not found (tmux printed {out:?})",
                self.target
            ))),
        }
    }

    /// `tmux set-option -p -t T remain-on-exit on`, then
    /// `tmux respawn-pane -k -t T -c WORKDIR [-e K=V…] -- argv…`.
    fn respawn(&self, session_id: &str, config: &Config) -> Result<()> {
        let workdir = &config.claude_workdir;
        if !workdir.is_dir() {
            return Err(Error::refused(format!(
                "claude_workdir {} is not a directory; fix it before switching",
                workdir.display()
            )));
        }
        self.respawn_argv(config.resume_argv(session_id), workdir, config)
    }

    /// Respawn the pane running `resume` in `workdir`, with `resume_env`.
    fn respawn_argv(&self, resume: Vec<String>, workdir: &Path, config: &Config) -> Result<()> {
        if resume.len() < 2 {
            // tmux would hand a single word to a shell; never do that.
            return Err(Error::config("resume_command must have at least two words"));
        }
        // Keep the pane when the resumed Claude exits at once: with tmux's
        // default a dying process takes its pane (and maybe the session)
        // with it, and the fallback would have nothing to respawn.
        let keep = self.argv(&[
            "set-option",
            "-p",
            "-t",
            &self.target,
            "remain-on-exit",
            "on",
        ]);
        process::run_checked(&keep, CONTROL_TIMEOUT)?;
        let mut argv = self.argv(&["respawn-pane", "-k", "-t", &self.target, "-c"]);
        argv.push(workdir.to_string_lossy().into_owned());
        for (k, v) in &config.resume_env {
            argv.extend(["-e".to_string(), format!("{k}={v}")]);
        }
        argv.push("--".into());
        argv.extend(resume);
        process::run_checked(&argv, CONTROL_TIMEOUT).map(drop)
    }
}

impl Systemd {
    /// `systemctl [--user] ARGS…`.
    fn argv(&self, args: &[&str]) -> Vec<String> {
        let mut argv = vec![self.systemctl.clone()];
        if self.user {
            argv.push("--user".into());
        }
        argv.extend(args.iter().map(|a| (*a).to_string()));
        argv
    }

    /// `MainPID` of the unit (`0` when it is not running).
    fn main_pid(&self) -> Result<u32> {
        let argv = self.argv(&["show", "-p", "MainPID", "--value", &self.unit]);
        let out = process::run_checked(&argv, CONTROL_TIMEOUT)?;
        out.parse().map_err(|_| {
            Error::io(format!(
                "systemctl gave no MainPID for {} (got {out:?})",
                self.unit
            ))
        })
    }

    /// The unit's load and run state (`systemctl show` prints defaults with
    /// exit 0 even for a unit that does not exist: `LoadState=not-found`).
    pub fn state(&self) -> Result<UnitState> {
        let argv = self.argv(&[
            "show",
            "-p",
            "LoadState",
            "-p",
            "ActiveState",
            "-p",
            "SubState",
            "-p",
            "Result",
            "-p",
            "MainPID",
            &self.unit,
        ]);
        let out = process::run_checked(&argv, CONTROL_TIMEOUT)?;
        let mut state = UnitState::default();
        for line in out.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim().to_string();
            match key {
                "LoadState" => state.load = value,
                "ActiveState" => state.active = value,
                "SubState" => state.sub = value,
                "Result" => state.result = value,
                "MainPID" => state.main_pid = value.parse().unwrap_or(0),
                _ => {}
            }
        }
        Ok(state)
    }

    /// Write the pointer, then `systemctl reset-failed` (a unit that
    /// crash-looped into its start limit refuses every start until then)
    /// and `systemctl restart`. When the restart fails the pointer is put
    /// back, so the next ordinary restart does not resume a session that
    /// never ran; the error says what state the unit is in.
    fn restart_on(&self, session_id: &str) -> Result<()> {
        let before = match fs::read(&self.pointer) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io_at("read pointer", &self.pointer, &e)),
        };
        write_pointer(&self.pointer, session_id)?;
        let _ =
            process::run_with_timeout(&self.argv(&["reset-failed", &self.unit]), CONTROL_TIMEOUT);
        let restart = self.argv(&["restart", &self.unit]);
        let Err(e) = process::run_checked(&restart, self.restart_timeout) else {
            return Ok(());
        };
        let state = self.state().map_or_else(
            |s| format!("state unknown: {}", s.message),
            |s| s.to_string(),
        );
        let put_back = match before {
            Some(bytes) => write_atomic(&self.pointer, &bytes, 0o600, Existing::Replace),
            None => fs::remove_file(&self.pointer)
                .map_err(|e| Error::io_at("remove pointer", &self.pointer, &e)),
        };
        let pointer = match put_back {
            Ok(()) => "pointer put back".to_string(),
            Err(p) => format!("pointer NOT put back: {}", p.message),
        };
        Err(Error::io(format!(
            "{} (unit {}: {state}); {pointer}",
            e.message, self.unit
        )))
    }
}

/// What `systemctl show` says about a unit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitState {
    /// `loaded`, `not-found`, `masked`, …
    pub load: String,
    /// `active`, `inactive`, `failed`, `activating`, …
    pub active: String,
    pub sub: String,
    /// `success`, `exit-code`, `start-limit-hit`, …
    pub result: String,
    pub main_pid: u32,
}

impl fmt::Display for UnitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, {}/{}, result {}, MainPID {}",
            self.load, self.active, self.sub, self.result, self.main_pid
        )
    }
}

/// What a target runs (see [`Target::running`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// The identity ([`Target::identity`]).
    pub identity: String,
    /// The pane's process / `MainPID` (tmux, systemd; None when stopped).
    pub root: Option<u32>,
    /// The session it runs: the pointer's content, or the id after
    /// `--resume` / `-r` / `--session-id` on the command line of the root
    /// process or a descendant. None when it cannot be found (e.g. a plain
    /// `claude` that started a new session).
    pub session: Option<String>,
    /// The process whose command line names the session.
    pub process: Option<SessionProcess>,
}

/// A process running a Claude Code session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionProcess {
    pub pid: u32,
    pub session: String,
    pub argv: Vec<String>,
    pub cwd: Option<PathBuf>,
}

/// What the target ran before a switch: the fallback and a rollback put
/// exactly this back.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ran {
    /// The session it ran.
    pub session: String,
    /// The command line of the process running it (tmux, systemd; empty for a pointer).
    #[serde(default)]
    pub argv: Vec<String>,
    /// That process's working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
}

impl Running {
    /// What to record before switching away from `session`: the process
    /// found running it, or just the session (pointer, or a command line
    /// that does not name it).
    pub fn ran(&self, session: &str) -> Ran {
        match &self.process {
            Some(p) if p.session == session => Ran {
                session: session.to_string(),
                argv: p.argv.clone(),
                cwd: p.cwd.clone(),
            },
            _ => Ran {
                session: session.to_string(),
                argv: Vec::new(),
                cwd: None,
            },
        }
    }

    /// One line for doctor and status: `pid N (session S: argv…)`.
    pub fn describe(&self) -> String {
        match (&self.process, self.root) {
            (Some(p), _) => format!(
                "pid {} runs session {} ({})",
                p.pid,
                p.session,
                shorten(&p.argv.join(" "), 100)
            ),
            (None, Some(root)) => format!(
                "pid {root} ({}); no session id on its command line",
                shorten(&process::cmdline(root).unwrap_or_default().join(" "), 100)
            ),
            (None, None) => match &self.session {
                Some(s) => format!("session {s}"),
                None if self.identity.is_empty() || self.identity == "0" => {
                    "nothing (stopped, or no pointer yet)".to_string()
                }
                None => format!("identity {:?}", self.identity),
            },
        }
    }
}

/// The first process (breadth first from `root`) whose command line names
/// a session.
fn session_process(root: u32) -> Option<SessionProcess> {
    process::with_descendants(root).into_iter().find_map(|pid| {
        let argv = process::cmdline(pid)?;
        let session = session_arg(&argv)?;
        Some(SessionProcess {
            pid,
            session,
            cwd: process::cwd(pid),
            argv,
        })
    })
}

/// The session id a Claude Code command line names: the value of
/// `--resume`, `-r` or `--session-id` (also `--opt=value`), if it is a
/// valid session id.
pub fn session_arg(argv: &[String]) -> Option<String> {
    let mut words = argv.iter().skip(1);
    while let Some(word) = words.next() {
        let value = match word.split_once('=') {
            Some(("--resume" | "--session-id", v)) => Some(v.to_string()),
            _ if matches!(word.as_str(), "--resume" | "-r" | "--session-id") => {
                words.next().cloned()
            }
            _ => None,
        };
        if let Some(v) = value.filter(|v| SessionId::parse(v).is_ok()) {
            return Some(v);
        }
    }
    None
}

/// `argv` as a command that resumes `session`: unchanged when it already
/// says `--resume S` / `-r S`; with `--session-id S` (which starts a new
/// session under that id and is refused for an existing one, measured on
/// 2.1.328) turned into `--resume S`; None when it does not name `session`.
fn resume_form(argv: &[String], session: &str) -> Option<Vec<String>> {
    if argv.len() < 2 || session_arg(argv).as_deref() != Some(session) {
        return None;
    }
    let mut out = argv.to_vec();
    for (i, word) in argv.iter().enumerate() {
        if word == "--session-id" && argv.get(i + 1).is_some_and(|v| v == session) {
            out[i] = "--resume".into();
        } else if word.strip_prefix("--session-id=") == Some(session) {
            out[i] = format!("--resume={session}");
        }
    }
    Some(out)
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    s.chars().take(max).collect::<String>() + "…"
}

impl Pointer {
    fn read(&self) -> Result<String> {
        match fs::read_to_string(&self.path) {
            Ok(text) => Ok(text.trim().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(Error::io_at("read pointer", &self.path, &e)),
        }
    }
}

/// Atomically write `session_id` into a pointer file (0600), creating its
/// directory (0700) if it does not exist yet.
fn write_pointer(path: &Path, session_id: &str) -> Result<()> {
    if let Some(parent) = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty() && !p.exists())
    {
        ensure_private_dir(parent, 0o700)?;
    }
    write_atomic(
        path,
        format!("{session_id}\n").as_bytes(),
        0o600,
        Existing::Replace,
    )
}

/// Claude Code's own proof that it loaded the session: `received()` gives
/// the time `ktr-ack` recorded the `SessionStart` (resume) receipt, once it
/// did; the process must then stay alive for `min_life` from that time.
pub struct Receipt<'a> {
    pub received: &'a mut dyn FnMut() -> Result<Option<SystemTime>>,
    pub min_life: Duration,
}

/// Sample `pid_of` until `wait` ends. Healthy: one process kept running
/// `session_id` the whole time (replaced or gone → error). With a
/// `receipt`, healthy as soon as the receipt is in and the process stayed
/// alive `min_life` after it (counted from the receipt's own time, never
/// from before the process was first seen, up to the last sample that saw
/// it alive); no receipt by the end of `wait` is an error.
fn watch_until(
    session_id: &str,
    wait: Duration,
    pid_of: impl Fn() -> Result<u32>,
    mut receipt: Option<Receipt<'_>>,
) -> Result<String> {
    let deadline = Instant::now() + wait;
    let mut healthy_pid: Option<(u32, Instant)> = None;
    let mut received_at: Option<Instant> = None;
    loop {
        let looked = Instant::now();
        let observed = pid_of().and_then(|pid| runs_session(pid, session_id).map(|()| pid));
        match (observed, healthy_pid.map(|(pid, _)| pid)) {
            (Ok(pid), None) => healthy_pid = Some((pid, looked)),
            (Ok(pid), Some(first)) if pid != first => {
                return Err(Error::refused(format!(
                    "process {first} running {session_id} was replaced by {pid} during the health check"
                )));
            }
            (Err(e), Some(first)) => {
                return Err(Error::refused(format!(
                    "process {first} running {session_id} did not stay healthy: {}",
                    e.message
                )));
            }
            (Err(e), None) if Instant::now() >= deadline => {
                return Err(Error::refused(format!(
                    "{session_id} never became healthy within {:.1} s: {}",
                    wait.as_secs_f64(),
                    e.message
                )));
            }
            (Ok(_), Some(_)) | (Err(_), None) => {}
        }
        if let (Some((pid, seen)), Some(r)) = (healthy_pid, receipt.as_mut()) {
            if received_at.is_none() {
                received_at = (r.received)()?.map(|at| {
                    let ago = SystemTime::now().duration_since(at).unwrap_or_default();
                    Instant::now().checked_sub(ago).unwrap_or(seen).max(seen)
                });
            }
            if received_at.is_some_and(|at| looked.saturating_duration_since(at) >= r.min_life) {
                return Ok(pid.to_string());
            }
        }
        if Instant::now() >= deadline {
            return match (healthy_pid.map(|(pid, _)| pid), &receipt, received_at) {
                (Some(pid), None, _) => Ok(pid.to_string()),
                (Some(_), Some(_), None) => Err(Error::refused(format!(
                    "Claude Code did not report SessionStart (resume) for {session_id} within {:.1} s although ktr-ack is installed",
                    wait.as_secs_f64()
                ))),
                _ => Err(Error::refused(format!(
                    "{session_id} did not live healthcheck_min_seconds after its receipt within {:.1} s (healthcheck_seconds)",
                    wait.as_secs_f64()
                ))),
            };
        }
        // Wake up when the minimum life is over rather than up to a poll later.
        let life_over = match (received_at, &receipt) {
            (Some(at), Some(r)) => (at + r.min_life).saturating_duration_since(Instant::now()),
            _ => HEALTH_POLL,
        };
        thread::sleep(
            HEALTH_POLL
                .min(life_over)
                .min(deadline.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1)),
        );
    }
}

/// `pid` is alive and it (or a descendant, for wrapper scripts) has the
/// session id on its command line.
fn runs_session(pid: u32, session_id: &str) -> Result<()> {
    if !process::pid_alive(pid) {
        return Err(Error::refused(format!("process {pid} is not running")));
    }
    let found = process::with_descendants(pid)
        .into_iter()
        .filter_map(process::cmdline)
        .any(|argv| argv.iter().any(|a| a.contains(session_id)));
    if found {
        Ok(())
    } else {
        let shown = process::cmdline(pid).unwrap_or_default().join(" ");
        Err(Error::refused(format!(
            "process {pid} ({}) does not run session {session_id}",
            shown.chars().take(120).collect::<String>()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_string()).collect()
    }

    #[test]
    fn the_session_is_read_from_resume_r_and_session_id() {
        let s = "5d1c9a8e-3b7f-4e2a-9c61-0f2b7d4e8a13";
        for words in [
            vec!["claude", "--resume", s],
            vec!["claude", "--model", "x", "-r", s],
            vec!["claude", &format!("--resume={s}")],
            vec!["claude", "--session-id", s, "--verbose"],
        ] {
            assert_eq!(session_arg(&argv(&words)).as_deref(), Some(s), "{words:?}");
        }
        assert_eq!(session_arg(&argv(&["claude"])), None);
        assert_eq!(session_arg(&argv(&["sleep", "3600"])), None);
        assert_eq!(session_arg(&argv(&["claude", "--resume"])), None);
        assert_eq!(session_arg(&argv(&["claude", "--resume", "../x"])), None);
        assert_eq!(
            session_arg(&argv(&[s, s])),
            None,
            "argv[0] is not an option value"
        );
    }

    #[test]
    fn what_ran_is_restored_as_a_resume_of_the_same_session() {
        let s = "aaaaaaaa-1111-4222-8333-444444444444";
        let same = argv(&["/bin/claude", "--model", "opus", "--resume", s]);
        assert_eq!(resume_form(&same, s), Some(same.clone()));
        assert_eq!(
            resume_form(&argv(&["claude", "--session-id", s, "--verbose"]), s),
            Some(argv(&["claude", "--resume", s, "--verbose"]))
        );
        assert_eq!(
            resume_form(&argv(&["claude", &format!("--session-id={s}")]), s),
            Some(argv(&["claude", &format!("--resume={s}")]))
        );
        assert_eq!(
            resume_form(&argv(&["claude"]), s),
            None,
            "a plain start: resume_command"
        );
        assert_eq!(
            resume_form(&argv(&["claude", "--resume", "other"]), s),
            None
        );
    }

    const SESSION: &str = "5e55e55e-0000-4000-8000-000000000001";

    /// A process with `SESSION` on its command line that lives `seconds`
    /// (reaped by a thread as soon as it exits); returns its pid.
    fn claude_for(seconds: f64) -> u32 {
        let mut child = std::process::Command::new("sh")
            .args(["-c", &format!("sleep {seconds}; :"), SESSION])
            .spawn()
            .unwrap();
        let pid = child.id();
        thread::spawn(move || child.wait());
        pid
    }

    fn end(pid: u32) {
        // SAFETY: kill(2) on a pid this test started; no memory involved.
        unsafe { libc::kill(i32::try_from(pid).unwrap(), libc::SIGTERM) };
    }

    /// Watch `pid` for `wait` seconds with a receipt that arrives
    /// `receipt_after` seconds in (never when None) and a minimum life of
    /// `min_life` seconds after it; the result and how long it took.
    fn watch_pid(
        pid: u32,
        wait: f64,
        min_life: f64,
        receipt_after: Option<f64>,
    ) -> (Result<String>, Duration) {
        let (started, wall) = (Instant::now(), SystemTime::now());
        let mut received = || {
            Ok(receipt_after
                .filter(|s| started.elapsed().as_secs_f64() >= *s)
                .map(|s| wall + Duration::from_secs_f64(s)))
        };
        let result = watch_until(
            SESSION,
            Duration::from_secs_f64(wait),
            || Ok(pid),
            Some(Receipt {
                received: &mut received,
                min_life: Duration::from_secs_f64(min_life),
            }),
        );
        end(pid);
        (result, started.elapsed())
    }

    #[test]
    fn a_receipt_and_the_minimum_life_end_the_health_check_early() {
        let pid = claude_for(10.0);
        let (result, took) = watch_pid(pid, 5.0, 0.3, Some(0.2));
        assert_eq!(result.unwrap(), pid.to_string());
        assert!(took < Duration::from_secs(2), "took {took:?}");
        assert!(took >= Duration::from_millis(500), "took {took:?}");
    }

    /// Watch a live claude whose receipt, recorded `at` seconds into the
    /// watch (negative: before it), is noticed `noticed` seconds in; how
    /// long the watch took.
    fn watch_receipt(at: f64, noticed: f64, min_life: f64) -> Duration {
        let pid = claude_for(10.0);
        let (started, wall) = (Instant::now(), SystemTime::now());
        let recorded = if at < 0.0 {
            wall - Duration::from_secs_f64(-at)
        } else {
            wall + Duration::from_secs_f64(at)
        };
        let mut received = || Ok((started.elapsed().as_secs_f64() >= noticed).then_some(recorded));
        let result = watch_until(
            SESSION,
            Duration::from_secs(5),
            || Ok(pid),
            Some(Receipt {
                received: &mut received,
                min_life: Duration::from_secs_f64(min_life),
            }),
        );
        let took = started.elapsed();
        end(pid);
        assert_eq!(result.unwrap(), pid.to_string());
        took
    }

    #[test]
    fn the_minimum_life_counts_from_the_receipts_own_time_but_not_before_the_process_was_seen() {
        // Recorded at 0.1 s, noticed at 0.6 s: healthy at 0.7 s, not 1.2 s.
        let took = watch_receipt(0.1, 0.6, 0.6);
        assert!(took >= Duration::from_millis(700), "took {took:?}");
        assert!(took < Duration::from_secs(1), "took {took:?}");
        // A receipt time before the process was first seen counts from
        // then: the whole minimum life is watched.
        let took = watch_receipt(-10.0, 0.0, 0.4);
        assert!(took >= Duration::from_millis(400), "took {took:?}");
        assert!(took < Duration::from_millis(1500), "took {took:?}");
    }

    #[test]
    fn a_claude_that_exits_before_its_receipt_is_unhealthy() {
        // It dies at 0.2 s; the receipt would come at 0.6 s.
        let (result, _) = watch_pid(claude_for(0.2), 3.0, 0.1, Some(0.6));
        let err = result.unwrap_err();
        assert!(err.message.contains("did not stay healthy"), "{err}");
    }

    #[test]
    fn a_claude_that_exits_within_the_minimum_life_after_its_receipt_is_unhealthy() {
        let (result, took) = watch_pid(claude_for(0.4), 3.0, 1.0, Some(0.0));
        let err = result.unwrap_err();
        assert!(err.message.contains("did not stay healthy"), "{err}");
        assert!(took < Duration::from_secs(2), "noticed at once: {took:?}");
    }

    #[test]
    fn no_receipt_within_the_window_is_unhealthy_even_when_alive() {
        let (result, took) = watch_pid(claude_for(10.0), 0.5, 0.1, None);
        let err = result.unwrap_err();
        assert!(err.message.contains("did not report SessionStart"), "{err}");
        assert!(took >= Duration::from_millis(500), "took {took:?}");
    }

    #[test]
    fn a_receipt_without_the_minimum_life_inside_the_window_is_unhealthy() {
        let (result, _) = watch_pid(claude_for(10.0), 0.6, 1.0, Some(0.3));
        let err = result.unwrap_err();
        assert!(
            err.message.contains("did not live healthcheck_min_seconds"),
            "{err}"
        );
    }

    #[test]
    fn without_a_receipt_the_whole_window_is_watched() {
        let pid = claude_for(10.0);
        let started = Instant::now();
        let result = watch_until(SESSION, Duration::from_millis(600), || Ok(pid), None);
        end(pid);
        assert_eq!(result.unwrap(), pid.to_string());
        assert!(started.elapsed() >= Duration::from_millis(600));
    }
}
