//! Which Claude Code session this server serves. Claude Code (measured on
//! 2.1.328) starts MCP servers with `CLAUDE_CODE_SESSION_ID` set to the
//! session id, also after `--resume`; `--session ID` overrides it. The
//! environment does not change when `/resume <id>` switches the running
//! Claude Code to another session (ktr's in-place switch does exactly
//! that): [`Session::now`] follows `ktr-ack`'s record of it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ktr_base::config::Config;
use ktr_base::ids::SessionId;
use ktr_base::{Error, Result};
use ktr_engine::plan;
use ktr_pipeline::targets::Target;
use ktr_pipeline::{binding, process};

/// The environment variable Claude Code gives its MCP servers.
pub const SESSION_ENV: &str = "CLAUDE_CODE_SESSION_ID";

/// How long a request waits for the served session's transcript to appear.
const FIRST_WRITE: Duration = Duration::from_secs(3);

/// The served session, if known.
#[derive(Debug, Clone)]
pub struct Session {
    id: Option<SessionId>,
    origin: &'static str,
}

/// A transcript chosen for `dirty`/`plan`, and why that one.
pub struct Chosen {
    pub path: PathBuf,
    pub why: String,
}

impl Session {
    /// `--session ID` (already validated), else `$CLAUDE_CODE_SESSION_ID`
    /// when it is a valid id, else unknown.
    pub fn detect(arg: Option<SessionId>) -> Session {
        if let Some(id) = arg {
            return Session {
                id: Some(id),
                origin: "--session",
            };
        }
        match std::env::var(SESSION_ENV).map(|id| SessionId::parse(&id)) {
            Ok(Ok(id)) => Session {
                id: Some(id),
                origin: SESSION_ENV,
            },
            _ => Session {
                id: None,
                origin: "unknown",
            },
        }
    }

    /// The session served now: Claude Code keeps its MCP servers (and
    /// their `CLAUDE_CODE_SESSION_ID`) across `/resume <id>`, so when the
    /// Claude Code process running this server resumed a session since,
    /// `ktr-ack`'s record of that ([`ktr_pipeline::binding`]) wins; an
    /// explicit `--session` always does.
    pub fn now(&self, config: &Config) -> Session {
        if self.origin == "--session" {
            return self.clone();
        }
        let bindings = binding::dir(&config.state_dir);
        let bound = process::runner_of(std::process::id())
            .and_then(|claude| binding::of(&bindings, claude))
            .and_then(|b| SessionId::parse(&b.session_id).ok());
        match bound {
            Some(id) => Session {
                id: Some(id),
                origin: "the last resume of this Claude Code (ktr-ack)",
            },
            None => self.clone(),
        }
    }

    /// The served session's id, if known.
    pub fn id(&self) -> Option<&SessionId> {
        self.id.as_ref()
    }

    /// One line for the log.
    pub fn describe(&self) -> String {
        match &self.id {
            Some(id) => format!("session {id} (from {})", self.origin),
            None => "an unknown session (no --session, no $CLAUDE_CODE_SESSION_ID)".into(),
        }
    }

    /// The transcript to read: the given one, else this session's when it
    /// lives in `project_dir`, else the newest transcript there.
    pub fn choose(&self, config: &Config, given: Option<&Path>) -> Result<Chosen> {
        if let Some(given) = given {
            return Ok(Chosen {
                path: plan::resolve_transcript(config, Some(given))?,
                why: "the transcript_path given".into(),
            });
        }
        if let Some((id, path)) = self.in_project(config) {
            return Ok(Chosen {
                path: plan::resolve_transcript(config, Some(&path))?,
                why: format!("the session being served ({id})"),
            });
        }
        let why = match &self.id {
            Some(id) => format!(
                "the newest transcript in project_dir (the session being served, {id}, has no transcript there)"
            ),
            None => {
                "the newest transcript in project_dir (the session being served is unknown)".into()
            }
        };
        Ok(Chosen {
            path: plan::resolve_transcript(config, None)?,
            why,
        })
    }

    /// The session a request binds to: this one when its transcript is in
    /// `project_dir`; none when unknown (the first Stop hook in
    /// `project_dir` binds it). A known session elsewhere is refused: ktr
    /// would otherwise rebuild a session other than the one asking.
    pub fn binding(&self, config: &Config) -> Result<Option<SessionId>> {
        match (&self.id, self.in_project_soon(config)) {
            (None, _) => Ok(None),
            (Some(_), Some((id, _))) => Ok(Some(id)),
            (Some(id), None) => Err(Error::refused(format!(
                "this Claude Code session ({id}) has no transcript in project_dir {}; ktr rebuilds only sessions there: ask from that session, or fix project_dir",
                config.project_dir.display()
            ))),
        }
    }

    /// The target a rebuild of `session` would switch, described for the
    /// model, after checking that it runs the Claude Code process serving
    /// this server (its parent) on `session`: otherwise a model in another
    /// session of the same project would rebuild itself into the target's
    /// place. Refused with the reason naming both; nothing is recorded.
    pub fn target_for(config: &Config, session: Option<&SessionId>) -> Result<String> {
        let target = Target::from_config(config);
        let claude = process::runner_of(std::process::id());
        let running = match session {
            Some(session) => target.check_runs(claude, session)?,
            None => match target.running() {
                Ok(running) => running,
                Err(e) => return Ok(format!("{target} (unreadable now: {})", e.message)),
            },
        };
        Ok(format!("{target}, which runs {}", running.describe()))
    }

    /// [`Session::in_project`], waiting up to [`FIRST_WRITE`] for the
    /// transcript: Claude Code writes a new session's first records only
    /// ~0.1 s after the prompt (more under load), and its model may call a
    /// tool in the very first turn.
    fn in_project_soon(&self, config: &Config) -> Option<(SessionId, PathBuf)> {
        let deadline = Instant::now() + FIRST_WRITE;
        loop {
            let found = self.in_project(config);
            if found.is_some() || self.id.is_none() || Instant::now() >= deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn in_project(&self, config: &Config) -> Option<(SessionId, PathBuf)> {
        let id = self.id.as_ref()?;
        let path = config.project_dir.join(format!("{id}.jsonl"));
        path.is_file().then(|| (id.clone(), path))
    }
}
