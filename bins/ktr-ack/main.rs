//! `ktr-ack`: the Claude Code SessionStart hook (matcher `resume`, SPEC §12).
//!
//! When Claude Code resumes the candidate session of an activating or
//! activated operation, this records Claude Code's own receipt (with the
//! measured `context_tokens` of the new window) in the operation and in
//! `artifacts/<id>/ack.json`. It always exits 0 and prints
//! `{"suppressOutput":true}`; problems go to stderr.
//!
//! Usage: `ktr-ack [--config PATH]` with the hook JSON on stdin.

use std::path::PathBuf;

use ktr::fsutil::{Existing, write_atomic};
use ktr::operation::{Ack, Operation, Status, Store, locate_state_dir, now_rfc3339};
use ktr::{Error, Result, process};
use serde::Deserialize;

/// Larger hook input than this is ignored.
const STDIN_LIMIT: usize = 1 << 20;

/// The SessionStart hook's stdin (unknown fields ignored).
#[derive(Debug, Deserialize)]
struct SessionStartInput {
    session_id: String,
    #[serde(default)]
    source: Option<String>,
    /// A number of tokens; tolerated as any JSON value.
    #[serde(default)]
    context_tokens: Option<serde_json::Value>,
}

fn main() {
    match run() {
        Ok(Some(id)) => eprintln!("ktr-ack: recorded the resume of operation {id}"),
        Ok(None) => {}
        Err(e) => eprintln!("ktr-ack: {e}"),
    }
    println!("{}", serde_json::json!({"suppressOutput": true}));
    std::process::exit(0);
}

/// Returns the id of the acknowledged operation, if any.
fn run() -> Result<Option<String>> {
    let config_arg = parse_args()?;
    let input = process::read_stdin_capped(STDIN_LIMIT)
        .map_err(|e| Error::io(format!("cannot read the hook input: {e}")))?
        .ok_or_else(|| Error::usage("hook input is larger than 1 MiB; ignored"))?;
    let hook: SessionStartInput = serde_json::from_slice(&input)
        .map_err(|e| Error::usage(format!("cannot parse the SessionStart hook input: {e}")))?;
    if hook.source.as_deref() != Some("resume") {
        return Ok(None);
    }
    let store = Store::at(&locate_state_dir(config_arg.as_deref())?);
    let Some(op) = find_operation(&store, &hook.session_id) else {
        return Ok(None);
    };
    let ack = Ack {
        at: now_rfc3339(),
        session_id: hook.session_id.clone(),
        context_tokens: hook.context_tokens.as_ref().and_then(as_tokens),
    };
    store.with_lock(|tx| {
        let mut op = tx.load(&op.id)?;
        if !awaits_ack(&op, &hook.session_id) {
            return Ok(None);
        }
        let artifacts = store.artifacts_dir(&op.id)?;
        if op.ack.is_some() {
            // The first receipt is the activation's measurement; a later
            // resume of the same session is its own event, kept beside it.
            append_line(&artifacts.join("resumes.jsonl"), &ack)?;
            return Ok(Some(op.id));
        }
        let mut bytes = serde_json::to_vec_pretty(&ack).map_err(|e| Error::io(e.to_string()))?;
        bytes.push(b'\n');
        write_atomic(
            &artifacts.join("ack.json"),
            &bytes,
            0o600,
            Existing::Replace,
        )?;
        op.ack = Some(ack.clone());
        tx.save(&mut op)?;
        Ok(Some(op.id))
    })
}

/// The operation whose candidate is `session_id`: the active one first,
/// else the newest activating/activated one.
fn find_operation(store: &Store, session_id: &str) -> Option<Operation> {
    let active = store.active().and_then(|(id, _)| store.load(&id).ok());
    if let Some(op) = active.filter(|op| awaits_ack(op, session_id)) {
        return Some(op);
    }
    store
        .list()
        .ok()?
        .into_iter()
        .rev()
        .find(|op| awaits_ack(op, session_id))
}

fn awaits_ack(op: &Operation, session_id: &str) -> bool {
    matches!(op.status, Status::Activating | Status::Activated)
        && op
            .candidate
            .as_ref()
            .is_some_and(|c| c.session_id == session_id)
}

/// Append `ack` as one JSON line to `path` (created 0600).
fn append_line(path: &std::path::Path, ack: &Ack) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let line = serde_json::to_string(ack).map_err(|e| Error::io(e.to_string()))? + "\n";
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| Error::io_at("append to", path, &e))
}

/// Token counts arrive as JSON numbers (integer or float).
fn as_tokens(v: &serde_json::Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| f.round() as u64)
    })
}

fn parse_args() -> Result<Option<PathBuf>> {
    use lexopt::prelude::*;
    let mut config = None;
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next().map_err(|e| Error::usage(e.to_string()))? {
        match arg {
            Long("config") => {
                config = Some(PathBuf::from(
                    parser.value().map_err(|e| Error::usage(e.to_string()))?,
                ));
            }
            other => {
                return Err(Error::usage(format!(
                    "unexpected {}; usage: ktr-ack [--config PATH]",
                    other.unexpected()
                )));
            }
        }
    }
    Ok(config)
}
