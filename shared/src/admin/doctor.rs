//! `doctor`: check an installation and explain each item (SPEC §14).
//! Shared by `ktr doctor` and the MCP tool `thread_rebuild_doctor`.
//!
//! Claude Code's own files are read where it keeps them: hooks in
//! `~/.claude/settings.json` and the project's `.claude/settings.json` /
//! `.claude/settings.local.json` (all scopes count, as Claude Code merges
//! them); the MCP server in `~/.claude.json` (`mcpServers.ktr`, user scope,
//! or `projects.<workdir>.mcpServers.ktr`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::admin::settings;
use crate::config::{self, Config, home_dir};
use crate::pipeline::operation::Store;
use crate::pipeline::target::Target;

/// One checked item.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    /// What to do when it fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// All checks; `ok` when every one passed.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub ok: bool,
    pub checks: Vec<Check>,
}

/// Run every check. Never fails: a broken config is itself a failed check.
pub fn check(config_path: Option<&Path>) -> Report {
    let mut checks = Vec::new();
    let path = Config::locate(config_path);
    match Config::load(config_path) {
        Ok(config) => {
            checks.push(pass("config", format!("{} is valid", path.display())));
            check_config(&config, &mut checks);
        }
        Err(e) => checks.push(fail(
            "config",
            e.message,
            "fix the config file as the message says",
        )),
    }
    Report {
        ok: checks.iter().all(|c| c.ok),
        checks,
    }
}

fn pass(name: &'static str, detail: String) -> Check {
    Check {
        name,
        ok: true,
        detail,
        fix: None,
    }
}

fn fail(name: &'static str, detail: String, fix: &str) -> Check {
    Check {
        name,
        ok: false,
        detail,
        fix: Some(fix.to_string()),
    }
}

fn check_config(config: &Config, checks: &mut Vec<Check>) {
    checks.push(project_dir(&config.project_dir));
    checks.push(workdir(config));
    checks.push(resume_binary(&config.resume_command[0]));
    checks.push(target(config));
    if config.activation == config::Activation::Systemd {
        checks.extend(systemd(config));
    }
    checks.push(hooks(config));
    checks.push(statusline(config));
    checks.push(mcp(config));
    checks.push(state_dir(config));
    checks.push(operations(config));
}

fn project_dir(dir: &Path) -> Check {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return fail(
            "project dir",
            format!("{} does not exist or cannot be read", dir.display()),
            "set project_dir to ~/.claude/projects/<encoded cwd> of the session to rebuild",
        );
    };
    let count = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
        .count();
    if count == 0 {
        return fail(
            "project dir",
            format!("{} holds no *.jsonl transcript", dir.display()),
            "check that project_dir is the folder Claude Code writes this session into",
        );
    }
    pass(
        "project dir",
        format!("{} ({count} transcripts)", dir.display()),
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
pub fn resolve_program(program: &str) -> Option<PathBuf> {
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
    if let Err(e) = crate::fsutil::safe_dir(dir) {
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
            &format!("chmod 700 {}", dir.display()),
        )
    }
}

fn target(config: &Config) -> Check {
    let target = Target::from_config(config);
    match target.running() {
        Ok(running) => pass("target", format!("{target} runs {}", running.describe())),
        Err(e) => fail(
            "target",
            format!("{target}: identity unreadable: {}", e.message),
            match config.activation {
                config::Activation::Tmux => {
                    "start Claude Code in the tmux pane named by tmux_target (or fix tmux_target)"
                }
                config::Activation::Systemd => {
                    "check systemd_unit: `systemctl show -p MainPID UNIT` must work for this user"
                }
                config::Activation::Pointer => {
                    "make resume_pointer_path readable (its directory must exist)"
                }
            },
        ),
    }
}

/// systemd mode: the unit exists and runs Claude, the pointer names the
/// session `MainPID` runs, ktr may restart the unit and can start its
/// stages with `systemd-run`.
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
            &format!("`{ctl} show {}` must work for this user", unit.unit),
        ),
        Ok(s) if s.load != "loaded" => fail(
            "systemd unit",
            format!("{} is not installed (LoadState={})", unit.unit, s.load),
            &format!(
                "install the unit whose start script runs `claude --resume \"$(cat {})\"`, or fix systemd_unit",
                config.resume_pointer_path.display()
            ),
        ),
        Ok(s) if s.active != "active" || s.main_pid == 0 => fail(
            "systemd unit",
            format!("{} is not running Claude Code ({s})", unit.unit),
            &format!("{ctl} reset-failed {0}; {ctl} start {0}", unit.unit),
        ),
        Ok(s) => pass("systemd unit", format!("{} ({s})", unit.unit)),
    });
    checks.push(systemd_pointer(config, state.ok().map(|s| s.main_pid)));
    checks.push(systemd_rights(unit.user));
    checks.push(systemd_run(unit.user));
    checks
}

/// The pointer names the session the unit's `MainPID` runs: otherwise the
/// next ordinary restart resumes another session.
fn systemd_pointer(config: &Config, main_pid: Option<u32>) -> Check {
    let path = &config.resume_pointer_path;
    let pointer = match std::fs::read_to_string(path) {
        Ok(text) => text.trim().to_string(),
        Err(e) => {
            return fail(
                "pointer",
                format!("{} cannot be read: {e}", path.display()),
                "write the session id the unit should resume into resume_pointer_path",
            );
        }
    };
    let running = main_pid.filter(|p| *p > 0).and_then(|pid| {
        crate::pipeline::process::with_descendants(pid)
            .into_iter()
            .find_map(|p| {
                crate::pipeline::target::session_arg(&crate::pipeline::process::cmdline(p)?)
            })
    });
    match running {
        Some(session) if session != pointer => fail(
            "pointer",
            format!(
                "{} names {pointer:?} but the unit runs session {session}: the next restart would resume another session",
                path.display()
            ),
            &format!(
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

/// A system unit can be restarted by root only (without a polkit rule).
fn systemd_rights(user: bool) -> Check {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let uid = unsafe { libc::geteuid() };
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
    match crate::pipeline::process::run_checked(&argv, std::time::Duration::from_secs(10)) {
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

/// The settings files whose hooks Claude Code runs for this workdir.
fn settings_files(config: &Config) -> Vec<PathBuf> {
    let project = config.claude_workdir.join(".claude");
    vec![
        settings::default_path(),
        project.join("settings.json"),
        project.join("settings.local.json"),
    ]
}

fn hooks(config: &Config) -> Check {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for path in settings_files(config) {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        match settings::find_ours(&text) {
            Ok(f) => found.extend(f),
            Err(e) => problems.push(format!("{}: {}", path.display(), e.message)),
        }
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
            Some(_) => {}
        }
    }
    if problems.is_empty() {
        let paths: Vec<&str> = found.iter().map(|f| f.path.as_str()).collect();
        pass(
            "hooks",
            format!(
                "Stop, SessionStart/resume and PreCompact → {}",
                paths.join(", ")
            ),
        )
    } else {
        fail(
            "hooks",
            problems.join("; "),
            "run ./install again (it merges hooks.json into ~/.claude/settings.json)",
        )
    }
}

/// The statusline is optional: it reports, never fails.
fn statusline(config: &Config) -> Check {
    let lines: Vec<String> = settings_files(config)
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

fn mcp(config: &Config) -> Check {
    let path = home_dir().join(".claude.json");
    let fix = "run ./install again, or: claude mcp add --scope user ktr -- <prefix>/ktr-mcp";
    let doc: serde_json::Value = match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => return fail("mcp", format!("{} is not JSON: {e}", path.display()), fix),
        },
        Err(_) => return fail("mcp", format!("{} does not exist", path.display()), fix),
    };
    let workdir = config.claude_workdir.to_string_lossy();
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
    match resolve_program(command) {
        Some(p) => pass("mcp", format!("ktr → {}", p.display())),
        None => fail(
            "mcp",
            format!("mcpServers.ktr runs {command:?}, which is not an executable"),
            fix,
        ),
    }
}

fn operations(config: &Config) -> Check {
    let store = Store::at(&config.state_dir);
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
    if let Some((id, status)) = store.active() {
        if let Ok(op) = store.load(&id)
            && let Some(worker) = op.worker.as_ref().filter(|w| !w.alive())
            && !status.is_terminal()
        {
            return fail(
                "operations",
                format!(
                    "operation {id} is {status} but its worker (pid {}, {}) is gone",
                    worker.pid, worker.stage
                ),
                "run `ktr status`: it marks the operation failed so the next request is not blocked",
            );
        }
        if let Ok(op) = store.load(&id)
            && let Some(check) = waiting_for_another_session(config, &op)
        {
            return check;
        }
        return pass("operations", format!("operation {id} is {status}"));
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
fn waiting_for_another_session(
    config: &Config,
    op: &crate::pipeline::operation::Operation,
) -> Option<Check> {
    let bound = op
        .session_id
        .as_deref()
        .filter(|_| op.status == crate::pipeline::operation::Status::Pending)?;
    let runs = Target::from_config(config).running().ok()?.session?;
    if runs == bound {
        return None;
    }
    let age = crate::admin::report::age(&op.created_at, std::time::SystemTime::now())
        .map_or_else(|| "?".to_string(), crate::admin::report::human_age);
    Some(fail(
        "operations",
        format!(
            "operation {} has waited {age} for session {bound}, which the target does not run (it runs {runs}); it expires {} h after the request (request_ttl_hours)",
            op.id, config.request_ttl_hours
        ),
        &format!(
            "resume {bound} in the target, or `ktr cancel {} --confirm CANCEL`",
            op.id
        ),
    ))
}
