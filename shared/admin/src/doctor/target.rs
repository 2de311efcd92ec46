//! The target: what it runs, the key keeper, systemd's rights and pointer.

use std::path::Path;

use super::{Check, fail, pass, warn};
use ktr_base::config::{self, Config};
use ktr_base::error::Error;
use ktr_pipeline::process;
use ktr_pipeline::stages;
use ktr_pipeline::targets::{NoServer, Target};

pub(super) fn target(config: &Config) -> Check {
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
pub(super) fn key_keeper(config: &Config) -> Option<Check> {
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

/// `ktr-watch` beside the stages: without it, an operation whose stage was
/// killed stays in flight until the next hook or command.
pub(super) fn stage_watchdog() -> Check {
    const NAME: &str = "stage watchdog";
    match stages::watchdog::program() {
        Ok(program) if program.is_file() => pass(
            NAME,
            format!(
                "{} fails an operation the moment its stage dies",
                program.display()
            ),
        ),
        Ok(program) => warn(
            NAME,
            format!(
                "{} is missing: an operation whose stage dies stays in flight until the next hook or command",
                program.display()
            ),
            "reinstall ktr (./install) so that ktr-watch is beside ktr-prepare",
        ),
        Err(e) => warn(NAME, e.message, "set KTR_BIN_DIR or reinstall ktr"),
    }
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
pub(super) fn systemd(config: &Config) -> Vec<Check> {
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
