//! `doctor`: check an installation and explain each item (SPEC §14).
//! Shared by `ktr doctor` and the MCP tool `thread_rebuild_doctor`.
//!
//! Claude Code's own files are read where it keeps them: hooks in
//! `~/.claude/settings.json` and the project's `.claude/settings.json` /
//! `.claude/settings.local.json` (all scopes count, as Claude Code merges
//! them); the MCP server in `~/.claude.json` (`mcpServers.ktr`, user scope,
//! or `projects.<workdir>.mcpServers.ktr`). Both must run with **this**
//! config: the `--config` they carry is compared with it.
//!
//! With ktr installed as the Claude Code plugin (`enabledPlugins."ktr@ktr"`
//! in `~/.claude/settings.json`, SPEC §13a), the plugin carries the hooks
//! and the MCP server: they must be executables in the folder the plugin
//! loads from, and this config must be the one they find by default (the
//! plugin passes no `--config`).
//!
//! A config that does not load is one failed check; the checks that do not
//! need it (hooks, MCP server) still run, with the default workdir.
//!
//! Without a config file (zero config), or with one that names no
//! `project_dir`, the config check says what ktr serves and how, and the
//! other checks run for the project of the directory doctor runs in (when
//! Claude Code has one for it).

mod claude;
mod operations;
mod target;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use claude::{hooks, mcp, settings_files, statusline};
use ktr_base::config::{self, Config, ConfigError, OutsideProjects, home_dir, projects_folder};
use ktr_pipeline::process;
use ktr_pipeline::targets::Target;
use operations::operations;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    /// Fine for now, but worth knowing (e.g. no transcript yet).
    Warn,
    Fail,
}

/// One checked item.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    /// Not a failure (`ok` or `warn`).
    pub ok: bool,
    pub level: Level,
    pub detail: String,
    /// What to do about a failure or a warning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// All checks; `ok` when none failed.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub ok: bool,
    /// The config did not load: only the checks that do not need it ran.
    pub config_error: bool,
    pub checks: Vec<Check>,
}

/// Run every check. Never fails: a broken config is itself a failed check,
/// and the checks that can run without it still run.
pub fn check(config_path: Option<&Path>) -> Report {
    let path = Config::locate(config_path);
    let this = absolute(&path);
    let mut checks = Vec::new();
    // The config that serves a session started here (zero config, or a
    // file without project_dir: this directory's project folder).
    let loaded = Config::here(config_path);
    let config_error = match loaded {
        Ok(config) if config.project_dir_set => {
            checks.push(pass("config", format!("{} is valid", path.display())));
            check_config(&config, &this, &mut checks);
            false
        }
        Ok(mut config) => {
            ktr_pipeline::targets::discover::settle(
                &mut config,
                process::runner_of(std::process::id()),
            );
            let detail = serves_every(&path, config.source.as_deref(), Some(&config));
            checks.push(pass("config", detail));
            check_config(&config, &this, &mut checks);
            false
        }
        Err(e) if e.find::<OutsideProjects>().is_some() => {
            // Not in a project of Claude Code's: what is served, and the
            // checks that need no project.
            let source = Config::find(config_path).ok().flatten();
            checks.push(pass("config", serves_every(&path, source.as_deref(), None)));
            checks.push(hooks(&home_dir(), &this));
            checks.push(mcp(&home_dir(), &this));
            false
        }
        Err(e) => {
            checks.push(fail(
                "config",
                e.message.clone(),
                config_fix(&path, e.find::<ConfigError>()),
            ));
            // The default workdir (`~`): its settings are the user's.
            checks.push(hooks(&home_dir(), &this));
            checks.push(mcp(&home_dir(), &this));
            true
        }
    };
    Report {
        ok: checks.iter().all(|c| c.ok),
        config_error,
        checks,
    }
}

/// What ktr serves without a `project_dir`, and how: every session of
/// Claude Code's projects folder, its pane found from its process; with
/// the session of this directory's project (`here`) when there is one.
fn serves_every(path: &Path, source: Option<&Path>, here: Option<&Config>) -> String {
    let file = match source {
        None => format!("no config file at {}", path.display()),
        Some(file) => format!("{} is valid and names no project_dir", file.display()),
    };
    let mut line = format!(
        "{file}: ktr serves every Claude Code session whose transcript lies in {} (its folder is the session's project_dir; every other key {}), and switches each in the tmux pane its Claude Code runs in, found from that process (a session outside tmux is not switched; tmux_target overrides)",
        projects_folder().display(),
        if source.is_some() {
            "as this file says, per project in its [projects.\"<folder>\"] tables"
        } else {
            "its default; a config file there would override them"
        }
    );
    if let Some(config) = here {
        let target = match Target::from_config(config) {
            Target::Unfound(none) => none.to_string(),
            found => format!("target {found}"),
        };
        line.push_str(&format!(
            "; a session started here: project {}, state dir {}, {target}",
            config.project_dir.display(),
            config.state_dir.display(),
        ));
    }
    line
}

/// A concrete way out of a config error, chosen by what was wrong.
fn config_fix(path: &Path, what: Option<&ConfigError>) -> String {
    let path = path.display();
    match what {
        Some(ConfigError::Missing { .. }) => format!(
            "run ./install (it writes a commented template to {path}), or create {path} with project_dir = \"~/.claude/projects/<encoded cwd>\""
        ),
        Some(ConfigError::Required {
            key: "project_dir", ..
        }) => format!(
            "add project_dir = \"~/.claude/projects/<encoded cwd>\" to {path} (`ls -lt ~/.claude/projects/` lists them, newest first)"
        ),
        Some(ConfigError::UnknownKey { .. }) => {
            format!(
                "edit {path}: remove or rename that key (README, Configuration, lists every key)"
            )
        }
        Some(ConfigError::NotToml { .. } | ConfigError::NotUtf8 { .. }) => {
            format!("edit {path}: fix the TOML syntax where the message says")
        }
        _ => format!(
            "edit {path}: set the key the message names as its rule says (README, Configuration)"
        ),
    }
}

fn check_with(name: &'static str, level: Level, detail: String, fix: Option<String>) -> Check {
    Check {
        name,
        ok: level != Level::Fail,
        level,
        detail,
        fix,
    }
}

fn pass(name: &'static str, detail: String) -> Check {
    check_with(name, Level::Ok, detail, None)
}

fn warn(name: &'static str, detail: String, fix: impl Into<String>) -> Check {
    check_with(name, Level::Warn, detail, Some(fix.into()))
}

fn fail(name: &'static str, detail: String, fix: impl Into<String>) -> Check {
    check_with(name, Level::Fail, detail, Some(fix.into()))
}

/// `path` made absolute (symlinks resolved when it exists), for comparing
/// config paths.
fn absolute(path: &Path) -> PathBuf {
    path.canonicalize()
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

fn check_config(config: &Config, this: &Path, checks: &mut Vec<Check>) {
    checks.push(project_dir(config));
    checks.push(workdir(config));
    checks.push(resume_binary(&config.resume_command[0]));
    if config.activation == config::Activation::Systemd {
        checks.extend(target::systemd(config));
    } else {
        checks.push(target::target(config));
    }
    checks.extend(target::key_keeper(config));
    checks.push(target::stage_watchdog());
    checks.push(hooks(&config.claude_workdir, this));
    checks.push(statusline(&config.claude_workdir));
    checks.push(mcp(&config.claude_workdir, this));
    checks.push(state_dir(config));
    checks.push(operations(config));
    checks.push(retention(config));
}

/// Claude Code's `cleanupPeriodDays` against the oldest ancestor of the
/// current session: a warning when Claude Code deletes (or has deleted)
/// its transcript, so the backups are the only copy.
fn retention(config: &Config) -> Check {
    let r = crate::retention::of(
        config,
        &settings_files(&config.claude_workdir),
        std::time::SystemTime::now(),
    );
    let setting = match &r.set_in {
        Some(f) => format!("cleanupPeriodDays {} (in {})", r.days, f.display()),
        None => format!("cleanupPeriodDays {} (Claude Code's default)", r.days),
    };
    match (&r.oldest, r.at_risk()) {
        (None, _) => pass(
            "transcript retention",
            format!("{setting}; the current session was not rebuilt from another"),
        ),
        (Some((s, age)), false) => pass(
            "transcript retention",
            format!("{setting}; the oldest ancestor ({s}) has been unchanged for {age} days"),
        ),
        (Some((s, age)), true) => warn(
            "transcript retention",
            format!(
                "{setting} is at or below the age of the oldest ancestor of the current session ({s}, unchanged for {age} days): Claude Code deletes (or has deleted) its transcript and tool-results; only ktr's backups in state_dir/artifacts keep that history (recall and rollback read them){}",
                if r.lost.is_empty() {
                    String::new()
                } else {
                    format!("; already lost: {}", r.lost.join(", "))
                }
            ),
            "keep the backups (ktr prune keeps the last copy unless --confirm FORGET), or raise cleanupPeriodDays in ~/.claude/settings.json to keep the transcripts themselves longer",
        ),
    }
}

fn project_dir(config: &Config) -> Check {
    let dir = &config.project_dir;
    let before_first = |what: &str| {
        warn(
            "project dir",
            format!(
                "{} {what}: Claude Code creates it with its first transcript",
                dir.display()
            ),
            format!(
                "start Claude Code in {} and say something; if it already runs, check that project_dir is ~/.claude/projects/<its encoded cwd>",
                config.claude_workdir.display()
            ),
        )
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        if dir.exists() {
            return fail(
                "project dir",
                format!("{} cannot be read", dir.display()),
                format!("make {} readable by this user", dir.display()),
            );
        }
        return before_first("does not exist yet");
    };
    // A transcript is a regular *.jsonl file (the entry's own type, not
    // followed): a FIFO, a folder or a symlink named so is not one.
    let (mut count, mut other) = (0, 0);
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().ends_with(".jsonl") {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            count += 1;
        } else {
            other += 1;
        }
    }
    let others = match other {
        0 => String::new(),
        n => format!(
            "; {n} *.jsonl entr{} that are not regular files (FIFO, folder, symlink) ignored",
            if n == 1 { "y" } else { "ies" }
        ),
    };
    if count == 0 {
        return before_first(&format!("holds no *.jsonl transcript yet{others}"));
    }
    pass(
        "project dir",
        format!("{} ({count} transcripts{others})", dir.display()),
    )
}

fn workdir(config: &Config) -> Check {
    let Some(detail) = config.workdir_mismatch() else {
        return pass(
            "workdir ↔ project",
            format!("{} matches project_dir", config.claude_workdir.display()),
        );
    };
    if config.verify_workdir_matches_project {
        fail(
            "workdir ↔ project",
            detail,
            "set claude_workdir to the directory Claude Code runs in (the `-` vs `-root` incident)",
        )
    } else {
        pass(
            "workdir ↔ project",
            detail + " (check disabled by verify_workdir_matches_project)",
        )
    }
}

fn resume_binary(program: &str) -> Check {
    match resolve_program(program) {
        Some(p) => pass("resume binary", format!("{program} → {}", p.display())),
        None => fail(
            "resume binary",
            format!("{program} is not an executable file or on PATH"),
            "put an absolute path to claude in resume_command",
        ),
    }
}

/// Resolve a program name the way `execvp` would.
pub(crate) fn resolve_program(program: &str) -> Option<PathBuf> {
    let is_exec = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return is_exec(&p).then(|| p.canonicalize().unwrap_or(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| is_exec(p))
}

fn state_dir(config: &Config) -> Check {
    let dir = &config.state_dir;
    let relative = config
        .source
        .as_ref()
        .map(|src| {
            format!(
                "; relative paths in {} are taken from its folder",
                src.display()
            )
        })
        .unwrap_or_default();
    let Ok(m) = std::fs::symlink_metadata(dir) else {
        return pass(
            "state dir",
            format!(
                "{} will be created (0700) on first use{relative}",
                dir.display()
            ),
        );
    };
    if let Err(e) = ktr_base::fsutil::safe_dir(dir) {
        return fail(
            "state dir",
            e.message,
            "point state_dir at a directory of your own that only you can write (e.g. the default ~/.local/state/ktr)",
        );
    }
    let mode = m.permissions().mode() & 0o777;
    if mode & 0o077 == 0 {
        pass(
            "state dir",
            format!("{} (mode {mode:o}){relative}", dir.display()),
        )
    } else {
        fail(
            "state dir",
            format!(
                "{} is mode {mode:o}; others can read operation files",
                dir.display()
            ),
            format!("chmod 700 {}", dir.display()),
        )
    }
}
