//! The thing that runs Claude Code and gets switched over (SPEC §12): a tmux
//! pane, a systemd service, or a pointer file read by a `claude -p` loop.
//!
//! Three operations, each a compare-and-swap building block:
//! [`Target::identity`] (what runs now), [`Target::switch`] (run another
//! session) and [`Target::health`] (is it really running it). No call can
//! hang (every controller call has a timeout) and none panics: every failure
//! is an [`Error`] whose one-line message is the reason to record.
//!
//! `KTR_TMUX_SOCKET=NAME` makes every tmux call use `tmux -L NAME` (a private
//! server); tests use it so they can never reach a real session.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::config::{Activation, Config};
use crate::error::{Error, Result};
use crate::fsutil::{Existing, ensure_private_dir, write_atomic};
use crate::ids::SessionId;
use crate::pipeline::process;

/// How long an identity query or a tmux command may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);
/// How often health is sampled.
const HEALTH_POLL: Duration = Duration::from_millis(100);

/// A tmux pane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tmux {
    /// The tmux program (`tmux`).
    pub program: String,
    /// Server socket name (`tmux -L NAME`); None = the default server.
    pub socket: Option<String>,
    /// Pane target, e.g. `cc:0.0`.
    pub target: String,
}

/// A systemd service whose start script reads the pointer file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Systemd {
    /// The systemctl program (`systemctl`).
    pub systemctl: String,
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
    /// The configured target (`activation`); tmux honours `KTR_TMUX_SOCKET`.
    pub fn from_config(config: &Config) -> Target {
        match config.activation {
            Activation::Tmux => Target::Tmux(Tmux {
                program: "tmux".into(),
                socket: std::env::var("KTR_TMUX_SOCKET")
                    .ok()
                    .filter(|s| !s.is_empty()),
                target: config.tmux_target.clone(),
            }),
            Activation::Systemd => Target::Systemd(Systemd {
                systemctl: "systemctl".into(),
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
            Target::Systemd(s) => {
                write_pointer(&s.pointer, session_id)?;
                process::run_checked(
                    &[s.systemctl.clone(), "restart".into(), s.unit.clone()],
                    s.restart_timeout,
                )
                .map(drop)
            }
            Target::Pointer(p) => write_pointer(&p.path, session_id),
        }
    }

    /// Whether the target really runs `session_id`. tmux and systemd: over
    /// `wait`, a live process whose command line (or a descendant's)
    /// contains the id must appear and then stay the same process. Pointer:
    /// the content equals the id. Returns the identity seen when healthy.
    pub fn health(&self, session_id: &str, wait: Duration) -> Result<String> {
        match self {
            Target::Tmux(t) => watch(session_id, wait, || t.pane_pid()),
            Target::Systemd(s) => watch(session_id, wait, || s.main_pid()),
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
                Some(s) => write!(f, "tmux pane {} (server -L {s})", t.target),
                None => write!(f, "tmux pane {}", t.target),
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
            argv.extend(["-L".to_string(), socket.clone()]);
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
        let resume = config.resume_argv(session_id);
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
    /// `MainPID` of the unit (`0` when it is not running).
    fn main_pid(&self) -> Result<u32> {
        let argv = [
            self.systemctl.clone(),
            "show".into(),
            "-p".into(),
            "MainPID".into(),
            "--value".into(),
            self.unit.clone(),
        ];
        let out = process::run_checked(&argv, CONTROL_TIMEOUT)?;
        out.parse().map_err(|_| {
            Error::io(format!(
                "systemctl gave no MainPID for {} (got {out:?})",
                self.unit
            ))
        })
    }
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

/// Sample `pid_of` for `wait`: a healthy process (alive, running the
/// session) must appear and then stay healthy and the same process.
fn watch(session_id: &str, wait: Duration, pid_of: impl Fn() -> Result<u32>) -> Result<String> {
    let deadline = Instant::now() + wait;
    let mut healthy_pid: Option<u32> = None;
    loop {
        let observed = pid_of().and_then(|pid| runs_session(pid, session_id).map(|()| pid));
        match (observed, healthy_pid) {
            (Ok(pid), None) => healthy_pid = Some(pid),
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
        if let Some(pid) = healthy_pid.filter(|_| Instant::now() >= deadline) {
            return Ok(pid.to_string());
        }
        thread::sleep(
            HEALTH_POLL
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
