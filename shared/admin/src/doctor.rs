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

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::settings;
use ktr_base::config::{self, Config, ConfigError, OutsideProjects, home_dir, projects_folder};
use ktr_base::error::Error;
use ktr_pipeline::operation::{Active, Store};
use ktr_pipeline::process;
use ktr_pipeline::stages;
use ktr_pipeline::targets::{NoServer, Target};

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
        checks.extend(systemd(config));
    } else {
        checks.push(target(config));
    }
    checks.extend(key_keeper(config));
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

fn target(config: &Config) -> Check {
    let target = Target::from_config(config);
    if let Target::Unfound(none) = &target {
        return warn(
            "target",
            none.to_string(),
            "start Claude Code inside tmux: ktr finds the pane each session runs in (or set tmux_target)",
        );
    }
    let running = match target.running() {
        Ok(running) => running,
        Err(e) => return target_unreadable(config, &target, &e),
    };
    let Some(pid) = running
        .root
        .filter(|_| config.activation != config::Activation::Pointer)
    else {
        return pass("target", format!("{target} runs {}", running.describe()));
    };
    if runs_claude(pid, &config.resume_command[0]) {
        return pass("target", format!("{target} runs {}", running.describe()));
    }
    fail(
        "target",
        format!(
            "{target}: pid {pid} runs {}, not Claude Code",
            what_runs(pid)
        ),
        format!(
            "start Claude Code there ({} …), or point the target at the Claude Code to rebuild",
            config.resume_command[0]
        ),
    )
}

/// `ktr-keep` beside the stages, for a tmux target that switches in place.
fn key_keeper(config: &Config) -> Option<Check> {
    const NAME: &str = "key keeper";
    if config.activation != config::Activation::Tmux || !config.tmux_switch_in_place {
        return None;
    }
    let program = match stages::keeper_program() {
        Ok(program) => program,
        Err(e) => return Some(warn(NAME, e.message, "set KTR_BIN_DIR or reinstall ktr")),
    };
    Some(if program.is_file() {
        keeper_clients(config, &program)
    } else {
        warn(
            NAME,
            format!(
                "{} is missing: an in-place switch runs without its popup, and keys typed while Claude Code loads the resumed session are dropped",
                program.display()
            ),
            "reinstall ktr (./install) so that ktr-keep is beside ktr-activate",
        )
    })
}

/// The clients the switch would hold, found as the switch finds them.
fn keeper_clients(config: &Config, program: &Path) -> Check {
    const NAME: &str = "key keeper";
    let holds = format!(
        "{} holds the keys typed while Claude Code loads a resumed session",
        program.display()
    );
    let Target::Tmux(pane) = Target::from_config(config) else {
        return pass(NAME, holds);
    };
    match pane.keeper_clients() {
        Ok(clients) => {
            if let Some(why) = clients.why_none() {
                return pass(NAME, format!("{holds}; no popup would open now: {why}"));
            }
            let names: Vec<&str> = clients
                .shown_on
                .iter()
                .filter(|c| c.skipped.is_none())
                .map(|c| c.name.as_str())
                .collect();
            pass(
                NAME,
                format!("{holds}; a popup would open on {}", names.join(", ")),
            )
        }
        Err(e) => warn(
            NAME,
            format!(
                "{holds}, but the switch cannot find the clients showing {}: {}; no popup would open",
                config.tmux_target, e.message
            ),
            "start Claude Code's tmux session (see the target check), or use tmux 3.2 or later",
        ),
    }
}

fn target_unreadable(config: &Config, target: &Target, err: &Error) -> Check {
    let fix = match config.activation {
        config::Activation::Tmux if err.find::<NoServer>().is_some() => {
            "no tmux server answers there: start Claude Code's tmux session, or set tmux_socket to its server (the NAME of `tmux -L NAME`, or the socket path: `echo $TMUX` inside it, before the first comma)".to_string()
        }
        config::Activation::Tmux => format!(
            "start Claude Code in the tmux pane {} (or fix tmux_target; `tmux list-panes -a` lists them)",
            config.tmux_target
        ),
        config::Activation::Systemd => {
            "check systemd_unit: `systemctl show -p MainPID UNIT` must work for this user".into()
        }
        config::Activation::Pointer => {
            "make resume_pointer_path readable (its directory must exist)".into()
        }
    };
    fail(
        "target",
        format!("{target}: identity unreadable: {}", err.message),
        fix,
    )
}

/// The command lines of `pid` and its descendants, `a → b` (a shell and the
/// Claude Code it started), at most three, each cut to 80 characters.
fn what_runs(pid: u32) -> String {
    let lines: Vec<String> = process::with_descendants(pid)
        .into_iter()
        .filter_map(process::cmdline)
        .filter(|argv| !argv.is_empty())
        .take(3)
        .map(|argv| {
            let line = argv.join(" ");
            match line.char_indices().nth(80) {
                Some((i, _)) => format!("`{}…`", &line[..i]),
                None => format!("`{line}`"),
            }
        })
        .collect();
    if lines.is_empty() {
        "an unreadable command line".into()
    } else {
        lines.join(" → ")
    }
}

/// Whether `pid` or a descendant runs Claude Code: a word of its command
/// line names `claude` or the program of `resume_command`.
fn runs_claude(pid: u32, resume_program: &str) -> bool {
    let base = |p: &str| {
        Path::new(p)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let wanted = base(resume_program);
    process::with_descendants(pid)
        .into_iter()
        .filter_map(process::cmdline)
        .flatten()
        .take(256)
        .any(|word| {
            let name = base(&word);
            name == "claude" || (!wanted.is_empty() && name == wanted)
        })
}

/// systemd mode: the unit exists and runs Claude, the pointer names the
/// session `MainPID` runs, ktr may restart the unit and can start its
/// stages with `systemd-run`. A unit that cannot be read or is not
/// installed is the one finding: nothing is said "ok" about it.
fn systemd(config: &Config) -> Vec<Check> {
    let Target::Systemd(unit) = Target::from_config(config) else {
        return Vec::new();
    };
    let ctl = if unit.user {
        "systemctl --user"
    } else {
        "systemctl"
    };
    let mut checks = Vec::new();
    let state = unit.state();
    checks.push(match &state {
        Err(e) => fail(
            "systemd unit",
            format!("{}: {}", unit.unit, e.message),
            format!("`{ctl} show {}` must work for this user", unit.unit),
        ),
        Ok(s) if s.load != "loaded" => fail(
            "systemd unit",
            format!("{} is not installed (LoadState={})", unit.unit, s.load),
            format!(
                "install the unit whose start script runs `claude --resume \"$(cat {})\"`, or fix systemd_unit",
                config.resume_pointer_path.display()
            ),
        ),
        Ok(s) if s.active != "active" || s.main_pid == 0 => fail(
            "systemd unit",
            format!(
                "{} is not running Claude Code ({}, MainPID {})",
                unit.unit,
                s.explained(),
                s.main_pid
            ),
            format!(
                "see `journalctl{} -u {1} -n 50`; then {ctl} reset-failed {1}; {ctl} start {1}",
                if unit.user { " --user" } else { "" },
                unit.unit
            ),
        ),
        Ok(s) => pass("systemd unit", format!("{} ({s})", unit.unit)),
    });
    let Some(main_pid) = state
        .ok()
        .filter(|s| s.load == "loaded")
        .map(|s| s.main_pid)
    else {
        return checks;
    };
    checks.push(target(config));
    checks.push(systemd_pointer(config, Some(main_pid)));
    checks.push(systemd_rights(unit.user));
    checks.push(systemd_run(unit.user));
    checks
}

/// The pointer names the session the unit's `MainPID` runs: otherwise the
/// next ordinary restart resumes another session.
fn systemd_pointer(config: &Config, main_pid: Option<u32>) -> Check {
    let path = &config.resume_pointer_path;
    let running = main_pid.filter(|p| *p > 0).and_then(|pid| {
        ktr_pipeline::process::with_descendants(pid)
            .into_iter()
            .find_map(|p| ktr_pipeline::targets::session_arg(&ktr_pipeline::process::cmdline(p)?))
    });
    let pointer = match std::fs::read_to_string(path) {
        Ok(text) => text.trim().to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return first_start(config, running.as_deref());
        }
        Err(e) => {
            return fail(
                "pointer",
                format!("{} cannot be read: {e}", path.display()),
                "write the session id the unit should resume into resume_pointer_path",
            );
        }
    };
    match running {
        Some(session) if session != pointer => fail(
            "pointer",
            format!(
                "{} names {pointer:?} but the unit runs session {session}: the next restart would resume another session",
                path.display()
            ),
            format!(
                "write {session} into {} (or restart the unit on purpose)",
                path.display()
            ),
        ),
        Some(session) => pass(
            "pointer",
            format!(
                "{} names {session}, the session the unit runs",
                path.display()
            ),
        ),
        None => pass(
            "pointer",
            format!(
                "{} names {pointer:?} (no session id on the unit's command line to compare)",
                path.display()
            ),
        ),
    }
}

/// No pointer yet: the unit's first start (its start script resumes
/// nothing and starts Claude Code afresh). Normal, but a rebuild's
/// restart needs it: say which session to write, and how.
fn first_start(config: &Config, running: Option<&str>) -> Check {
    let path = config.resume_pointer_path.display();
    let session = running
        .map(|s| (s.to_string(), "the session on the unit's command line"))
        .or_else(|| {
            default_session(config).map(|s| {
                (
                    s,
                    "the session the Claude Code running this serves, else the newest transcript in project_dir, presumably the one the unit runs",
                )
            })
        });
    match session {
        Some((id, which)) => warn(
            "pointer",
            format!("{path} does not exist yet (the unit's first start); {which} is {id}"),
            format!(
                "echo {id} > {path}   (ktr rewrites it at every switch from then on; HANDOFF §7)"
            ),
        ),
        None => warn(
            "pointer",
            format!("{path} does not exist yet (the unit's first start) and no transcript to name"),
            format!(
                "after Claude Code's first reply, write its session id into {path} (HANDOFF §7)"
            ),
        ),
    }
}

/// The session doctor speaks of when none is named
/// ([`ktr_pipeline::binding::default_transcript`]).
fn default_session(config: &Config) -> Option<String> {
    let path = ktr_pipeline::binding::default_transcript(config).ok()?;
    Some(path.file_stem()?.to_string_lossy().into_owned())
}

/// A system unit can be restarted by root only (without a polkit rule).
fn systemd_rights(user: bool) -> Check {
    let uid = ktr_base::fsutil::current_uid();
    if user || uid == 0 {
        let which = if user { "the user's manager" } else { "root" };
        return pass("systemd rights", format!("{which} may restart the unit"));
    }
    fail(
        "systemd rights",
        format!(
            "running as uid {uid}: restarting a system unit and `systemd-run --scope` need root (\"Access denied\")"
        ),
        "run Claude Code as a user unit and set systemd_manager = \"user\" (or run ktr as root)",
    )
}

/// ktr's stages run in their own scope (`systemd-run --scope`), so that
/// restarting the unit cannot kill them: prove that works, harmlessly.
fn systemd_run(user: bool) -> Check {
    let mut argv = vec!["systemd-run".to_string()];
    if user {
        argv.push("--user".into());
    }
    argv.extend(["--scope", "--quiet", "--collect", "--", "true"].map(String::from));
    match ktr_pipeline::process::run_checked(&argv, std::time::Duration::from_secs(10)) {
        Ok(_) => pass("systemd-run", "`systemd-run --scope` works".into()),
        Err(e) => fail(
            "systemd-run",
            e.message,
            if user {
                "the user's manager must run (loginctl enable-linger USER)"
            } else {
                "run as root, or use a user unit with systemd_manager = \"user\""
            },
        ),
    }
}

/// The settings files whose hooks Claude Code runs in `workdir`, each once
/// (with `claude_workdir = "~"` the project's settings are the user's).
fn settings_files(workdir: &Path) -> Vec<PathBuf> {
    let project = workdir.join(".claude");
    let mut files: Vec<PathBuf> = Vec::new();
    for path in [
        settings::default_path(),
        project.join("settings.json"),
        project.join("settings.local.json"),
    ] {
        if !files.iter().any(|f| absolute(f) == absolute(&path)) {
            files.push(path);
        }
    }
    files
}

/// The config a hook or server command line names with `--config`, if any.
fn config_arg<'a>(mut args: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    args.find(|a| *a == "--config")?;
    args.next()
}

/// Why a `--config` (or its absence) is not `this` config, if it is not.
fn other_config(found: Option<&str>, this: &Path) -> Option<String> {
    match found {
        Some(c) if absolute(Path::new(c)) == this => None,
        Some(c) => Some(format!("--config {c}")),
        None if absolute(&Config::locate(None)) == this => None,
        None => Some("no --config (the default config)".into()),
    }
}

/// What to run so hooks and MCP server use `this` config.
fn reinstall_fix(this: &Path) -> String {
    format!("run ./install --config {} again", this.display())
}

/// The folder Claude Code loads the enabled plugin `ktr@ktr` from, when it
/// is enabled: a directory marketplace's plugin loads in place from its
/// source folder (measured on 2.1.328; `${CLAUDE_PLUGIN_ROOT}` names it),
/// else from the copy `installed_plugins.json` names. `Err`: enabled, but
/// the folder cannot be found (the fix says what to do).
fn plugin_root(home: &Path) -> Option<std::result::Result<PathBuf, String>> {
    if !ktr_pipeline::plugin::enabled(home) {
        return None;
    }
    let read = |p: PathBuf| -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(p).ok()?).ok()
    };
    let plugins = home.join(".claude/plugins");
    let in_place = read(plugins.join("known_marketplaces.json"))
        .and_then(|m| Some(PathBuf::from(m.pointer("/ktr/installLocation")?.as_str()?)))
        .and_then(|market| {
            let manifest = read(market.join(".claude-plugin/marketplace.json"))?;
            let entry = manifest["plugins"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == "ktr")?
                .clone();
            Some(market.join(entry["source"].as_str()?))
        });
    let copy = || {
        read(plugins.join("installed_plugins.json")).and_then(|i| {
            Some(PathBuf::from(
                i.pointer("/plugins/ktr@ktr/0/installPath")?.as_str()?,
            ))
        })
    };
    Some(
        in_place
            .filter(|p| p.is_dir())
            .or_else(copy)
            .filter(|p| p.is_dir())
            .ok_or_else(|| {
                format!(
                    "the plugin {} is enabled, but the folder it loads from is gone",
                    ktr_pipeline::plugin::ID
                )
            }),
    )
}

/// The hooks and the MCP server as the plugin runs them: `programs` must be
/// executables in its `bin/`, and `this` the config they find by default.
fn plugin_check(name: &'static str, root: &Path, programs: &[&str], this: &Path) -> Check {
    let fix = "run ./install --plugin again from the checkout".to_string();
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| resolve_program(&root.join("bin").join(p).to_string_lossy()).is_none())
        .collect();
    if !missing.is_empty() {
        return fail(
            name,
            format!(
                "the plugin {} has no executable {} in {}",
                ktr_pipeline::plugin::ID,
                missing.join(", "),
                root.join("bin").display()
            ),
            fix,
        );
    }
    if let Some(other) = other_config(None, this) {
        return fail(
            name,
            format!(
                "the plugin's {name} run with {other}, not this config {}",
                this.display()
            ),
            format!(
                "move the config to {} or export KTR_CONFIG={} where Claude Code starts",
                absolute(&Config::locate(None)).display(),
                this.display()
            ),
        );
    }
    pass(
        name,
        format!(
            "the plugin {} → {} (the default config {})",
            ktr_pipeline::plugin::ID,
            root.join("bin").display(),
            this.display()
        ),
    )
}

fn hooks(workdir: &Path, this: &Path) -> Check {
    let plugin = plugin_root(&home_dir());
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for path in settings_files(workdir) {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        match settings::find_ours(&text) {
            Ok(f) => found.extend(f),
            Err(e) => problems.push(format!("{}: {}", path.display(), e.message)),
        }
    }
    if let Some(root) = plugin {
        if !found.is_empty() {
            return fail(
                "hooks",
                format!(
                    "both the plugin {} and settings.json run ktr's hooks: every hook runs twice",
                    ktr_pipeline::plugin::ID
                ),
                "keep one: ./install --uninstall (settings.json), or ./install --uninstall --plugin",
            );
        }
        return match root {
            Ok(root) => plugin_check(
                "hooks",
                &root,
                &["ktr-stop", "ktr-prompt", "ktr-ack", "ktr-precompact"],
                this,
            ),
            Err(e) => fail("hooks", e, "run ./install --plugin again from the checkout"),
        };
    }
    let want = [
        ("Stop", None, "ktr-stop"),
        ("UserPromptSubmit", None, "ktr-prompt"),
        ("SessionStart", Some("resume"), "ktr-ack"),
        ("PreCompact", None, "ktr-precompact"),
    ];
    for (event, matcher, program) in want {
        let hook = found
            .iter()
            .find(|f| f.event == event && f.program == program && f.matcher.as_deref() == matcher);
        match hook {
            None => problems.push(format!(
                "no {event}{} hook running {program}",
                matcher.map(|m| format!("/{m}")).unwrap_or_default()
            )),
            Some(f) if resolve_program(&f.path).is_none() || !f.path.starts_with('/') => problems
                .push(format!(
                    "the {event} hook runs {}, which is not an executable at an absolute path",
                    f.path
                )),
            Some(f) => {
                if let Some(other) = other_config(f.config.as_deref(), this) {
                    problems.push(format!(
                        "the {event} hook runs {program} with {other}, not this config {}",
                        this.display()
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        let mut paths: Vec<&str> = found.iter().map(|f| f.path.as_str()).collect();
        paths.dedup();
        pass(
            "hooks",
            format!(
                "Stop, UserPromptSubmit, SessionStart/resume and PreCompact → {} (--config {})",
                paths.join(", "),
                this.display()
            ),
        )
    } else {
        fail("hooks", problems.join("; "), reinstall_fix(this))
    }
}

/// The statusline is optional: it reports, never fails.
fn statusline(workdir: &Path) -> Check {
    let lines: Vec<String> = settings_files(workdir)
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|text| settings::statusline_command(&text))
        .collect();
    let detail = match lines
        .iter()
        .find(|c| c.contains(settings::STATUSLINE_PROGRAM))
    {
        Some(c) => format!("shows the window: {c}"),
        None if !lines.is_empty() => format!(
            "your own statusLine is set ({}); optional: embed `{} --segment` in it to see the window (./install prints how)",
            lines[0],
            settings::STATUSLINE_PROGRAM
        ),
        None => "not set (optional; ./install sets it when there is none)".into(),
    };
    pass("statusline", detail)
}

fn mcp(workdir: &Path, this: &Path) -> Check {
    let path = home_dir().join(".claude.json");
    match plugin_root(&home_dir()) {
        Some(Ok(root)) => return plugin_check("mcp", &root, &["ktr-mcp"], this),
        Some(Err(e)) => {
            return fail("mcp", e, "run ./install --plugin again from the checkout");
        }
        None => {}
    }
    let prefix = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("<prefix>"));
    let fix = format!(
        "{}, or: claude mcp remove --scope user ktr; claude mcp add --scope user ktr -- {} --config {}",
        reinstall_fix(this),
        prefix.join("ktr-mcp").display(),
        this.display()
    );
    let doc: serde_json::Value = match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => return fail("mcp", format!("{} is not JSON: {e}", path.display()), fix),
        },
        Err(_) => return fail("mcp", format!("{} does not exist", path.display()), fix),
    };
    let workdir = workdir.to_string_lossy();
    let server = doc.pointer("/mcpServers/ktr").or_else(|| {
        doc.get("projects")?
            .get(workdir.as_ref())?
            .pointer("/mcpServers/ktr")
    });
    let Some(server) = server else {
        return fail(
            "mcp",
            format!("no mcpServers.ktr in {}", path.display()),
            fix,
        );
    };
    let command = server.get("command").and_then(|c| c.as_str()).unwrap_or("");
    let Some(program) = resolve_program(command) else {
        return fail(
            "mcp",
            format!("mcpServers.ktr runs {command:?}, which is not an executable"),
            fix,
        );
    };
    let args = server.get("args").and_then(|a| a.as_array());
    let args = args.into_iter().flatten().filter_map(|a| a.as_str());
    match other_config(config_arg(args), this) {
        None => pass(
            "mcp",
            format!("ktr → {} --config {}", program.display(), this.display()),
        ),
        Some(other) => fail(
            "mcp",
            format!(
                "mcpServers.ktr runs {} with {other}, not this config {}",
                program.display(),
                this.display()
            ),
            fix,
        ),
    }
}

fn operations(config: &Config) -> Check {
    let store = Store::at(&config.state_dir);
    if let Active::Unknown(why) = store.active_state()
        && (config.state_dir.join("operations").exists() || why != "missing")
    {
        // The Stop hook would rebuild it at the next reply; doctor does it
        // now and says so.
        return match store.rebuild_active(ktr_pipeline::operation::LOCK_TIMEOUT) {
            Ok(op) => warn(
                "operations",
                format!(
                    "repaired: the state file `active` was {why}; rebuilt from the operation files: {}",
                    in_flight_line(&op)
                ),
                "nothing more to do; if it happens again, check what else writes into state_dir",
            ),
            Err(e) => fail(
                "operations",
                format!("the state file `active` is {why} and cannot be rebuilt: {e}"),
                "`ktr repair` lists damaged operation files; fix or set them aside, then run `ktr doctor` again",
            ),
        };
    }
    if let Ok(scanned) = store.scan()
        && let Some(first) = scanned.damaged.first()
    {
        return fail(
            "operations",
            format!(
                "{} damaged operation file(s): {}",
                scanned.damaged.len(),
                first.why
            ),
            "`ktr repair` lists them; `ktr repair --confirm REPAIR` moves them to state/damaged/ (nothing is deleted)",
        );
    }
    let in_flight = store.in_flight();
    for entry in &in_flight {
        let (id, status) = (&entry.id, entry.status);
        if let Ok(op) = store.load(id)
            && let Some(worker) = op.worker.as_ref().filter(|w| !w.alive())
        {
            return fail(
                "operations",
                format!(
                    "operation {id} ({}) is {status} but its worker (pid {}, {}) is gone",
                    entry.lane, worker.pid, worker.stage
                ),
                "run `ktr status`: it marks the operation failed so the next request is not blocked",
            );
        }
        if let Ok(op) = store.load(id)
            && let Some(check) = waiting_for_another_session(config, &op)
        {
            return check;
        }
    }
    if !in_flight.is_empty() {
        let ops: Vec<_> = in_flight
            .iter()
            .filter_map(|e| store.load(&e.id).ok())
            .collect();
        return pass("operations", in_flight_line(&ops));
    }
    match store.latest() {
        Ok(Some(op)) if op.needs_attention => fail(
            "operations",
            format!(
                "the latest operation {} is {} and needs attention: {}",
                op.id,
                op.status,
                op.error
                    .as_deref()
                    .unwrap_or("the old session could not be restored")
            ),
            "check what the target runs now and resume the right session by hand (HANDOFF.md, \"failed recovery\")",
        ),
        Ok(Some(op)) => pass(
            "operations",
            format!("none active; latest {} is {}", op.id, op.status),
        ),
        Ok(None) => pass("operations", "none yet".into()),
        Err(e) => fail(
            "operations",
            e.message,
            "check state_dir permissions (0700, owned by you)",
        ),
    }
}

/// A pending request bound to a session the target does not run waits for
/// a Stop that may never come: say so, with its age (it expires after
/// `request_ttl_hours`).
/// The operations in flight, one per session, in a line.
fn in_flight_line(ops: &[ktr_pipeline::operation::Operation]) -> String {
    if ops.is_empty() {
        return "none in flight".into();
    }
    ops.iter()
        .map(|op| format!("operation {} is {} ({})", op.id, op.status, op.lane()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A request pending for a session of this project that the configured
/// target does not run (a session of another project, with its own
/// target, is none of this config's business).
fn waiting_for_another_session(
    config: &Config,
    op: &ktr_pipeline::operation::Operation,
) -> Option<Check> {
    let bound = op
        .session_id
        .as_deref()
        .filter(|_| op.status == ktr_pipeline::operation::Status::Pending)?;
    if !config.project_dir.join(format!("{bound}.jsonl")).is_file() {
        return None;
    }
    let runs = Target::from_config(config).running().ok()?.session?;
    if runs == bound {
        return None;
    }
    let age = crate::report::age(&op.created_at, std::time::SystemTime::now())
        .map_or_else(|| "?".to_string(), crate::report::human_age);
    Some(fail(
        "operations",
        format!(
            "operation {} has waited {age} for session {bound}, which the target does not run (it runs {runs}); it expires {} h after the request (request_ttl_hours)",
            op.id, config.request_ttl_hours
        ),
        format!(
            "resume {bound} in the target, or `ktr cancel {} --confirm CANCEL`",
            op.id
        ),
    ))
}
