//! A tmux pane running Claude Code (SPEC §12): its identity is
//! `#{pane_pid}`, a switch respawns it.

use std::path::{Path, PathBuf};

use super::CONTROL_TIMEOUT;
use crate::process;
use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;

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
    /// Where `ktr-ack` records which session each Claude process serves
    /// ([`crate::binding`]); None: the command line alone tells.
    pub bindings: Option<PathBuf>,
}

impl Tmux {
    /// Type `/resume <session_id>` and Enter into the pane, in one tmux
    /// command (no key of an attached client lands between the line and
    /// its Enter).
    pub(super) fn type_resume(&self, session_id: &SessionId) -> Result<()> {
        let line = resume_line(session_id);
        let argv = self.argv(&[
            "send-keys",
            "-t",
            &self.target,
            "-l",
            &line,
            ";",
            "send-keys",
            "-t",
            &self.target,
            "Enter",
        ]);
        process::run_checked(&argv, CONTROL_TIMEOUT).map(drop)
    }

    /// Paste the text of `file` into the pane as one bracketed paste
    /// (`load-buffer` then `paste-buffer -p -d`, in one tmux command): a
    /// newline in it is not an Enter, and nothing is sent. Through a file,
    /// not an argument: tmux splits an argument that ends in `;`.
    pub(super) fn paste_file(&self, file: &Path) -> Result<()> {
        const BUFFER: &str = "ktr-prompt-back";
        let argv = self.argv(&[
            "load-buffer",
            "-b",
            BUFFER,
            &file.to_string_lossy(),
            ";",
            "paste-buffer",
            "-p",
            "-d",
            "-b",
            BUFFER,
            "-t",
            &self.target,
        ]);
        process::run_checked(&argv, CONTROL_TIMEOUT).map(drop)
    }

    /// Delete `count` characters before the cursor of the pane's input line.
    pub(super) fn backspace(&self, count: usize) -> Result<()> {
        let count = count.to_string();
        let argv = self.argv(&["send-keys", "-t", &self.target, "-N", &count, "BSpace"]);
        process::run_checked(&argv, CONTROL_TIMEOUT).map(drop)
    }

    /// Send `bytes` into the pane as they are (`send-keys -H`, one hex
    /// byte per argument; measured byte-exact on tmux 3.3a for ASCII,
    /// UTF-8, `0d` and `7f`).
    pub(crate) fn send_bytes(&self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut argv = self.argv(&["send-keys", "-t", &self.target, "-H"]);
        argv.extend(bytes.iter().map(|b| format!("{b:02x}")));
        process::run_checked_apart(&argv, CONTROL_TIMEOUT).map(drop)
    }

    /// The command line of `tmux ARGS` for this pane's server. Always
    /// `-u`: without a UTF-8 locale tmux 3.3a prints every control
    /// character of a format (a tab) and every character past ASCII (ktr's
    /// notice) as `_`; `-u` makes it print them as they are, whatever
    /// locale the stage, a hook or a service runs in.
    pub(super) fn argv(&self, args: &[&str]) -> Vec<String> {
        let mut argv = vec![self.program.clone(), "-u".to_string()];
        if let Some(socket) = &self.socket {
            let flag = if socket.contains('/') { "-S" } else { "-L" };
            argv.extend([flag.to_string(), socket.clone()]);
        }
        argv.extend(args.iter().map(std::string::ToString::to_string));
        argv
    }

    /// `#{pane_pid}` of the target pane; an error when the pane is gone or dead.
    pub(super) fn pane_pid(&self) -> Result<u32> {
        let argv = self.argv(&[
            "display-message",
            "-p",
            "-t",
            &self.target,
            "#{pane_pid} #{pane_dead}",
        ]);
        let out = process::run_checked(&argv, CONTROL_TIMEOUT).map_err(NoServer::sort)?;
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
    pub(super) fn respawn(&self, session_id: &SessionId, config: &Config) -> Result<()> {
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
    pub(super) fn respawn_argv(
        &self,
        resume: Vec<String>,
        workdir: &Path,
        config: &Config,
    ) -> Result<()> {
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

/// What ktr types to switch a Claude Code in place: `/resume <id>`.
pub fn resume_line(session_id: &SessionId) -> String {
    format!("/resume {session_id}")
}

/// Under a tmux error: no tmux server answers at the socket (none runs
/// there, or the socket is not one). The way out differs from a missing
/// pane's, so doctor asks for it.
#[derive(Debug)]
pub struct NoServer {
    cause: Error,
}

impl NoServer {
    /// `err`, with a `NoServer` under it when tmux said so on stderr (its
    /// words are the only sign tmux gives).
    fn sort(err: Error) -> Error {
        let said = err
            .find::<process::Failed>()
            .map_or("", |f| f.stderr.as_str());
        if !(said.contains("no server running") || said.contains("error connecting")) {
            return err;
        }
        let mut sorted = Error::io(err.message.clone());
        sorted.kind = err.kind;
        sorted.because(NoServer { cause: err })
    }
}

impl std::fmt::Display for NoServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no tmux server answers at the socket")
    }
}

impl std::error::Error for NoServer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}
