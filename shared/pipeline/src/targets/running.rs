//! What a process target runs: the Claude Code process and the session
//! it names on its command line, and what to put back after a switch.

use std::path::{Path, PathBuf};

use crate::{binding, process};
use ktr_base::ids::SessionId;

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
    pub session: SessionId,
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
    pub fn ran(&self, session: &SessionId) -> Ran {
        match &self.process {
            Some(p) if p.session == *session => Ran {
                session: session.clone(),
                argv: p.argv.clone(),
                cwd: p.cwd.clone(),
            },
            _ => Ran {
                session: session.clone(),
                argv: Vec::new(),
                cwd: None,
            },
        }
    }

    /// One line for doctor and status: `pid N (session S: argv…)`.
    pub fn describe(&self) -> String {
        match (&self.process, self.root) {
            (Some(p), _) => format!(
                "pid {} with session {} ({})",
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

/// The first process (breadth first from `root`) that serves a session:
/// the one its last resume recorded in `bindings` ([`crate::binding`]:
/// `/resume <id>` changes the session, not the command line), else the one
/// its command line names.
pub(super) fn session_process(root: u32, bindings: Option<&Path>) -> Option<SessionProcess> {
    process::with_descendants(root).into_iter().find_map(|pid| {
        let argv = process::cmdline(pid)?;
        let bound = bindings.and_then(|b| binding::of_pid(b, pid));
        let session = bound.map(|b| b.session_id).or_else(|| session_arg(&argv))?;
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
pub(super) fn resume_form(argv: &[String], session: &SessionId) -> Option<Vec<String>> {
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
        let id = SessionId::parse("aaaaaaaa-1111-4222-8333-444444444444").unwrap();
        let s = id.as_str();
        let same = argv(&["/bin/claude", "--model", "opus", "--resume", s]);
        assert_eq!(resume_form(&same, &id), Some(same.clone()));
        assert_eq!(
            resume_form(&argv(&["claude", "--session-id", s, "--verbose"]), &id),
            Some(argv(&["claude", "--resume", s, "--verbose"]))
        );
        assert_eq!(
            resume_form(&argv(&["claude", &format!("--session-id={s}")]), &id),
            Some(argv(&["claude", &format!("--resume={s}")]))
        );
        assert_eq!(
            resume_form(&argv(&["claude"]), &id),
            None,
            "a plain start: resume_command"
        );
        assert_eq!(
            resume_form(&argv(&["claude", "--resume", "other"]), &id),
            None
        );
    }
}
