//! Which config serves a session (SPEC §2, "Zero config"): with no config
//! file where [`Config::locate`] looks by default, every Claude Code
//! session of the user is served with the declared defaults, its project
//! folder being the folder of its transcript, which must lie directly
//! inside Claude Code's projects folder ([`projects_folder`]). A config
//! file overrides keys for every session, and a `[projects."<folder>"]`
//! table overrides them for the sessions of that project folder only. A
//! file that names `project_dir` serves that one project, as it always did.

use std::fmt;
use std::path::{Path, PathBuf};

use toml::Value;

use super::error::ConfigError;
use super::paths::{expand_home, home_dir};
use super::{Config, read_config_file};
use crate::error::{Error, Result};

/// The table of per-project overrides in a config file.
const PROJECTS: &str = "projects";

/// Keys a `[projects."…"]` table may not set: they are the household's
/// (one state dir, one way of serving).
const HOUSEHOLD_ONLY: &[&str] = &["project_dir", "state_dir", PROJECTS];

/// Claude Code's projects folder: `$CLAUDE_CONFIG_DIR/projects`, else
/// `~/.claude/projects`.
pub fn projects_folder() -> PathBuf {
    std::env::var_os("CLAUDE_CONFIG_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| home_dir().join(".claude"), PathBuf::from)
        .join("projects")
}

/// Under a refusal: a session's transcript does not lie in a project
/// folder directly inside Claude Code's projects folder, so no config
/// serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutsideProjects {
    pub transcript: PathBuf,
    pub projects: PathBuf,
    /// Asked for a working directory (not a hook's transcript): the
    /// directory whose project folder is not there.
    pub workdir: Option<PathBuf>,
}

impl fmt::Display for OutsideProjects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(workdir) = &self.workdir {
            return write!(
                f,
                "Claude Code's projects folder {} holds no project folder for {} (no Claude Code session has run there yet); run this in a session's working directory, or set project_dir",
                self.projects.display(),
                workdir.display()
            );
        }
        write!(
            f,
            "transcript {} does not lie in a project folder directly inside Claude Code's projects folder {} (symlinks resolved); ktr serves only those sessions (or set project_dir)",
            self.transcript.display(),
            self.projects.display()
        )
    }
}

impl std::error::Error for OutsideProjects {}

/// The project folder of a session whose transcript is `transcript`: its
/// folder, which must lie directly inside [`projects_folder`] (else an
/// error with [`OutsideProjects`] under it).
pub fn project_of_transcript(transcript: &Path) -> Result<PathBuf> {
    project_of(transcript, &projects_folder())
}

/// The project folder of `transcript` — its folder, which must lie
/// directly inside `projects` (both canonicalised; the folder not a
/// symlink): the one path rule, for a folder.
fn project_of(transcript: &Path, projects: &Path) -> Result<PathBuf> {
    project_in(transcript, projects, None)
}

/// [`project_of`], saying `workdir` when that is what was asked about.
fn project_in(transcript: &Path, projects: &Path, workdir: Option<&Path>) -> Result<PathBuf> {
    let outside = || {
        let why = OutsideProjects {
            transcript: transcript.to_path_buf(),
            projects: projects.to_path_buf(),
            workdir: workdir.map(Path::to_path_buf),
        };
        Error::refused(why.to_string()).because(why)
    };
    let project = transcript
        .parent()
        .filter(|_| transcript.is_absolute())
        .ok_or_else(outside)?;
    let (Ok(real_projects), Some(name)) = (projects.canonicalize(), project.file_name()) else {
        return Err(outside());
    };
    let real_parent = project
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .ok_or_else(outside)?;
    let is_dir = std::fs::symlink_metadata(project).is_ok_and(|m| m.is_dir());
    if real_parent != real_projects || !is_dir {
        return Err(outside());
    }
    Ok(real_parent.join(name))
}

/// `table` for the session of project folder `project`: the
/// `[projects."…"]` table naming that folder (if any) laid over the
/// global keys. Every per-project table is checked: each must be a
/// table whose name is an absolute (or `~`) path and which sets no
/// household key.
pub(super) fn table_for(mut table: toml::Table, project: Option<&Path>) -> Result<toml::Table> {
    let Some(projects) = table.remove(PROJECTS) else {
        return Ok(table);
    };
    let Value::Table(projects) = projects else {
        return Err(super::keys::Keys::wrong_type(
            PROJECTS, "a table", &projects,
        ));
    };
    let home = home_dir();
    let mut mine = None;
    for (name, overrides) in projects {
        let key = format!("{PROJECTS}.{name:?}");
        let Value::Table(overrides) = overrides else {
            return Err(super::keys::Keys::wrong_type(&key, "a table", &overrides));
        };
        let folder = expand_home(&name, &home);
        if !folder.is_absolute() {
            return Err(super::keys::Keys::rule(
                &key,
                "must name a project folder by its absolute path (or ~/…)",
            ));
        }
        if let Some(own) = HOUSEHOLD_ONLY.iter().find(|k| overrides.contains_key(**k)) {
            return Err(super::keys::Keys::rule(
                &key,
                &format!("must not set {own}: it is the household's, not a project's"),
            ));
        }
        // A typo in any project's table is an error for every session.
        super::keys::Keys {
            table: overrides.clone(),
        }
        .reject_unknown()?;
        if project.is_some_and(|p| same_dir(p, &folder)) {
            mine = Some(overrides);
        }
    }
    table.extend(mine.unwrap_or_default());
    Ok(table)
}

/// Whether `a` and `b` name the same folder (spelled alike, or alike once
/// symlinks are resolved).
fn same_dir(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

impl Config {
    /// The config file that applies: `Some` when there is one where
    /// [`Config::locate`] looks; `None` — zero config — only when none is
    /// at the default place. A `--config` or `$KTR_CONFIG` naming a missing
    /// file is an error ([`ConfigError::Missing`]).
    pub fn find(explicit: Option<&Path>) -> Result<Option<PathBuf>> {
        let path = Self::locate(explicit);
        if read_config_file(&path)?.is_some() {
            return Ok(Some(path));
        }
        let named =
            explicit.is_some() || std::env::var_os("KTR_CONFIG").is_some_and(|v| !v.is_empty());
        if named {
            return Err(ConfigError::Missing { path }.into());
        }
        Ok(None)
    }

    /// The config that serves the session whose transcript is
    /// `transcript`: the config file's (with its project's table), or —
    /// zero config — the declared defaults. Unless the file names a
    /// `project_dir`, the project folder is the transcript's, which must
    /// lie directly inside [`projects_folder`] ([`OutsideProjects`]).
    pub fn for_transcript(explicit: Option<&Path>, transcript: &Path) -> Result<Config> {
        Self::for_project(explicit, project_of_transcript(transcript))
    }

    /// [`Config::for_transcript`] for a process started in a session's
    /// working directory `workdir` (`ktr-mcp`): its project folder is
    /// `workdir` encoded, in [`projects_folder`].
    pub fn for_workdir(explicit: Option<&Path>, workdir: &Path) -> Result<Config> {
        let projects = projects_folder();
        let folder = projects.join(super::encode_project_name(workdir));
        let transcript = folder.join("session.jsonl");
        Self::for_project(explicit, project_in(&transcript, &projects, Some(workdir)))
    }

    /// [`Config::for_workdir`] for the directory this process runs in
    /// (a command run by hand, or by Claude Code in a session's directory);
    /// without one, [`Config::load`].
    pub fn here(explicit: Option<&Path>) -> Result<Config> {
        match std::env::current_dir() {
            Ok(cwd) => Self::for_workdir(explicit, &cwd),
            Err(_) => Self::load(explicit),
        }
    }

    /// The config for the session of project folder `project` (an error
    /// when it lies outside the projects folder).
    fn for_project(explicit: Option<&Path>, project: Result<PathBuf>) -> Result<Config> {
        let Some(path) = Self::find(explicit)? else {
            let config = Self::from_toml_for("", Some(&project?))?;
            config.check_state_dir()?;
            return Ok(config);
        };
        let config = Self::load_file(&path, project.as_ref().ok().map(PathBuf::as_path))
            .and_then(|c| c.ok_or_else(|| ConfigError::Missing { path: path.clone() }.into()));
        match (config, project) {
            // A file naming its one project_dir serves it as before: the
            // caller checks the transcript against it.
            (Ok(config), _) => Ok(config),
            // A file that serves every session (it loads for some project
            // folder): this one is outside them.
            (Err(e), Err(outside))
                if e.find::<ConfigError>().is_some_and(is_project_required)
                    && Self::load_file(&path, Some(&projects_folder())).is_ok() =>
            {
                Err(outside)
            }
            (Err(e), _) => Err(e),
        }
    }
}

/// Whether a config error is "`project_dir` is required".
fn is_project_required(e: &ConfigError) -> bool {
    matches!(e, ConfigError::Required { key, .. } if *key == "project_dir")
}
