//! `ktr-stop`: the Claude Code Stop hook (SPEC §10).
//!
//! Runs after every finished reply, so it must be fast and must never fail
//! Claude: it always exits 0. With nothing pending it reads one small file
//! (`<state_dir>/active`) and prints `{"suppressOutput":true}`. With a
//! pending operation it binds it to this session, marks it `scheduled` and
//! starts `ktr-prepare` detached (`ktr-rollback` for `rollback_pending`).
//! An operation whose worker died is failed here ([`Store::recover_stale`]),
//! so a killed stage never blocks the next request.
//!
//! Usage: `ktr-stop [--config PATH]` with the hook JSON on stdin. Stage
//! executables are looked up beside this one, or in `$KTR_BIN_DIR`.

use std::path::{Path, PathBuf};

use ktr::config::Config;
use ktr::operation::{Operation, Status, Store, Worker, locate_state_dir, validate_session_id};
use ktr::stages::{self, Stage};
use ktr::{Error, Result, process};
use serde::Deserialize;

/// Larger hook input than this is refused unread.
const STDIN_LIMIT: usize = 1 << 20;

/// The Stop hook's stdin as Claude Code writes it (unknown fields ignored).
#[derive(Debug, Deserialize)]
struct StopHookInput {
    session_id: String,
    transcript_path: PathBuf,
    #[allow(dead_code)]
    #[serde(default)]
    cwd: Option<String>,
    #[allow(dead_code)]
    #[serde(default)]
    hook_event_name: Option<String>,
    #[allow(dead_code)]
    #[serde(default)]
    stop_hook_active: bool,
}

/// What the hook tells Claude Code.
enum Reply {
    /// Nothing to show.
    Quiet,
    /// One line the human sees.
    Message(String),
}

fn main() {
    let reply = run().unwrap_or_else(|e| Reply::Message(format!("ktr: {e}")));
    let json = match reply {
        Reply::Quiet => serde_json::json!({"suppressOutput": true}),
        Reply::Message(m) => serde_json::json!({"systemMessage": m}),
    };
    println!("{json}");
    std::process::exit(0);
}

fn run() -> Result<Reply> {
    let config_arg = parse_args()?;
    // Read stdin before anything else so Claude Code never writes into a
    // closed pipe, even when there is nothing to do.
    let input = process::read_stdin_capped(STDIN_LIMIT)
        .map_err(|e| Error::io(format!("cannot read the Stop hook input: {e}")))?;

    // Fast path: one small file, no config validation, no lock.
    let state_dir = locate_state_dir(config_arg.as_deref())?;
    let Some((id, status)) = Store::at(&state_dir).active() else {
        return Ok(Reply::Quiet);
    };
    if !matches!(status, Status::Pending | Status::RollbackPending) {
        return recover(config_arg.as_deref());
    }
    let stays = |why: String| Reply::Message(format!("ktr: {why}; operation {id} stays {status}"));

    let Some(input) = input else {
        return Ok(stays("Stop hook input is larger than 1 MiB".into()));
    };
    let hook: StopHookInput = match serde_json::from_slice(&input) {
        Ok(h) => h,
        Err(e) => return Ok(stays(format!("cannot parse the Stop hook input ({e})"))),
    };
    if let Err(e) = validate_session_id(&hook.session_id) {
        return Ok(stays(e.message));
    }
    let config = match Config::load(config_arg.as_deref()) {
        Ok(c) => c,
        Err(e) => return Ok(stays(e.message)),
    };
    if config.state_dir != state_dir {
        return Ok(stays(format!(
            "config state_dir {} differs from {}",
            config.state_dir.display(),
            state_dir.display()
        )));
    }
    let store = Store::open(&config.state_dir)?;
    let reply = store.with_lock(|tx| {
        let Some(mut op) = tx.active_operation()? else {
            return Ok(Reply::Quiet);
        };
        let ttl = std::time::Duration::from_secs_f64(config.request_ttl_hours * 3600.0);
        if tx.expire_if_old(&mut op, ttl)? {
            return Ok(Reply::Message(format!(
                "ktr: operation {} expired: {}",
                op.id,
                op.error.as_deref().unwrap_or("")
            )));
        }
        let Some(step) = next_step(&op, &hook, &config)? else {
            return Ok(Reply::Quiet);
        };
        let transcript = (op.status == Status::Pending).then_some(hook.transcript_path.as_path());
        let pid = match stages::spawn(&config, &store, step.stage, &op.id, transcript) {
            Ok(pid) => pid,
            // Nothing was changed yet: the operation keeps its status.
            Err(e) => return Ok(stays(e.message)),
        };
        let name = step.stage.name();
        op.worker = Some(Worker::of(pid, name).unwrap_or(Worker {
            pid,
            start_time: 0,
            stage: name.into(),
        }));
        if op.status == Status::Pending {
            op.session_id = Some(hook.session_id.clone());
            op.transcript_path = Some(hook.transcript_path.clone());
            // The Claude Code process that ran this hook: the target must run it.
            op.claude = process::runner_of(std::process::id());
        }
        let note = format!(
            "Stop hook of session {} started {name} (pid {pid})",
            hook.session_id
        );
        tx.transition(&mut op, step.status, &note)?;
        Ok(Reply::Message(format!(
            "ktr: {} scheduled (operation {}); it runs after this reply",
            step.what, op.id
        )))
    });
    // A lock or write failure leaves the operation as it was.
    reply.or_else(|e| Ok(stays(e.message)))
}

/// The stage a Stop hook starts for an operation, and the status it sets.
struct Step {
    stage: Stage,
    status: Status,
    what: &'static str,
}

/// Which stage this session's Stop starts, or None when the operation is
/// not this session's business.
fn next_step(op: &Operation, hook: &StopHookInput, config: &Config) -> Result<Option<Step>> {
    match op.status {
        Status::Pending => {
            let bound_elsewhere = op
                .session_id
                .as_ref()
                .is_some_and(|s| *s != hook.session_id);
            if bound_elsewhere {
                return Ok(None);
            }
            if !inside_project(&hook.transcript_path, &config.project_dir) {
                if op.session_id.is_none() {
                    // Another project's session: it does not bind this operation.
                    return Ok(None);
                }
                return Err(Error::refused(format!(
                    "transcript {} is not a .jsonl directly inside project_dir {}",
                    hook.transcript_path.display(),
                    config.project_dir.display()
                )));
            }
            Ok(Some(Step {
                stage: Stage::Prepare,
                status: Status::Scheduled,
                what: "rebuild",
            }))
        }
        Status::RollbackPending => {
            // Only the session the rollback switches away from may trigger it.
            let running = op.candidate.as_ref().map(|c| c.session_id.as_str());
            if running != Some(hook.session_id.as_str()) {
                return Ok(None);
            }
            Ok(Some(Step {
                stage: Stage::Rollback,
                status: Status::RollbackScheduled,
                what: "rollback",
            }))
        }
        _ => Ok(None),
    }
}

/// An operation is being worked on: if its worker died, fail it now and
/// tell the human (SPEC §9: a dead worker never blocks the next request).
fn recover(config_arg: Option<&Path>) -> Result<Reply> {
    let config = Config::load(config_arg)?;
    let failed = Store::for_config(&config)?.recover_stale()?;
    Ok(match failed.first() {
        Some(op) => Reply::Message(format!(
            "ktr: operation {} failed: {}{}",
            op.id,
            op.error.as_deref().unwrap_or("worker died"),
            if op.needs_attention {
                "; check what the target runs (`ktr status`)"
            } else {
                ""
            }
        )),
        None => Reply::Quiet,
    })
}

/// A `*.jsonl` directly inside `project_dir` (symlinks resolved).
fn inside_project(transcript: &Path, project_dir: &Path) -> bool {
    let (Ok(file), Ok(dir)) = (transcript.canonicalize(), project_dir.canonicalize()) else {
        return false;
    };
    file.parent() == Some(dir.as_path()) && file.extension().is_some_and(|e| e == "jsonl")
}

fn parse_args() -> Result<Option<PathBuf>> {
    use lexopt::prelude::*;
    let mut config = None;
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser
        .next()
        .map_err(|e| Error::usage(format!("ktr-stop: {e}")))?
    {
        match arg {
            Long("config") => {
                let value = parser
                    .value()
                    .map_err(|e| Error::usage(format!("ktr-stop: {e}")))?;
                config = Some(PathBuf::from(value));
            }
            other => {
                return Err(Error::usage(format!(
                    "ktr-stop: unexpected {}; usage: ktr-stop [--config PATH]",
                    other.unexpected()
                )));
            }
        }
    }
    Ok(config)
}
