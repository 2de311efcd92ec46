//! The `SessionStart` hook, `ktr-ack` (matcher `resume`, SPEC §12).
//!
//! When Claude Code resumes the candidate session of an activating or
//! activated operation — or the session an offer of the hand target names
//! ([`super::hand::take`]: `offered` → `activated`, `rollback_offered` →
//! `rolled_back`) — this records Claude Code's own receipt (with the
//! measured `context_tokens` of the new window) in the operation and in
//! `artifacts/<id>/ack.json`. Every resume — also `/resume <id>` typed into
//! a running Claude Code, which keeps its process — is recorded as that
//! process's current session ([`crate::binding`]). It always exits 0 and prints
//! `{"suppressOutput":true}`; problems go to stderr.

use crate::window_cache;
use std::path::Path;

use crate::gate::resend_notice;
use crate::hook::{Invocation, Reply, SessionStartInput};
use crate::operation::{Ack, Operation, Status, Store, locate_state_dir};
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, write_atomic};
use ktr_base::ids::SessionId;
use ktr_base::time::Timestamp;
use ktr_engine::window::overhead;

/// `ktr-ack --help`.
pub const HELP: &str = "ktr-ack: the Claude Code SessionStart (resume) hook of ktr.
Usage: ktr-ack [--config PATH]   (the hook JSON on stdin; always exits 0)
Records Claude Code's receipt that it resumed a rebuilt session, with its context_tokens.";

/// The `SessionStart` hook: record the receipt, report on stderr, stay quiet.
pub fn ack(call: Invocation) -> Reply {
    match run(call.config.as_deref(), call.input) {
        Ok(Some((op, first))) => {
            eprintln!("ktr-ack: recorded the resume of operation {}", op.id);
            let message = resend_notice(&op);
            let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
            // Once per rebuilt session: its first receipt.
            match first
                .then(|| home.and_then(|h| crate::recall::notice::context_for(&op, &h)))
                .flatten()
            {
                Some(context) => Reply::Context { context, message },
                None => message.map_or(Reply::Quiet, Reply::Message),
            }
        }
        Ok(None) => Reply::Quiet,
        Err(e) => {
            eprintln!("ktr-ack: {e}");
            Reply::Quiet
        }
    }
}

/// Returns the acknowledged operation, if any, and whether this was its
/// first receipt.
fn run(config_arg: Option<&Path>, input: Option<Vec<u8>>) -> Result<Option<(Operation, bool)>> {
    let input = input.ok_or_else(|| Error::usage("hook input is larger than 1 MiB; ignored"))?;
    let hook: SessionStartInput = serde_json::from_slice(&input)
        .map_err(|e| Error::usage(format!("cannot parse the SessionStart hook input: {e}")))?;
    if hook.source.as_deref() != Some("resume") {
        return Ok(None);
    }
    let state_dir = locate_state_dir(config_arg)?;
    let session_id = SessionId::parse(&hook.session_id)?;
    let recorded = record(&Store::at(&state_dir), &hook, &session_id);
    // After the operation's receipt: whoever waits for the binding then
    // finds the receipt too.
    bind(&state_dir, &session_id);
    recorded
}

/// Record the receipt in the operation whose candidate was resumed.
fn record(
    store: &Store,
    hook: &SessionStartInput,
    session_id: &SessionId,
) -> Result<Option<(Operation, bool)>> {
    let Some(op) = find_operation(store, session_id) else {
        return Ok(None);
    };
    let ack = Ack {
        at: Timestamp::now(),
        session_id: session_id.clone(),
        context_tokens: hook.context_tokens.as_ref().and_then(as_tokens),
    };
    store.with_op(&op.id, |tx| {
        let mut op = tx.load(&op.id)?;
        if !awaits_ack(&op, session_id) {
            return Ok(None);
        }
        let offered = op.status.offered();
        let runner = crate::process::runner_of(std::process::id());
        if offered && !super::hand::accepts(&op, session_id, runner) {
            return Ok(None);
        }
        let artifacts = store.artifacts_dir(&op.id)?;
        let first = op.ack.is_none();
        if first {
            let mut bytes =
                serde_json::to_vec_pretty(&ack).map_err(|e| Error::io(e.to_string()))?;
            bytes.push(b'\n');
            write_atomic(
                &artifacts.join("ack.json"),
                &bytes,
                0o600,
                Existing::Replace,
            )?;
            op.ack = Some(ack.clone());
        } else {
            // The first receipt is the activation's measurement; a later
            // resume of the same session is its own event, kept beside it.
            append_line(&artifacts.join("resumes.jsonl"), &ack)?;
        }
        if offered {
            // Saved with the receipt.
            super::hand::take(tx, &mut op, session_id, runner)?;
        } else if first {
            tx.save(&mut op)?;
        }
        if first {
            remember_receipt(store, &op, &ack);
        }
        Ok(Some((op, first)))
    })
}

/// The Claude Code process that ran this hook serves `session_id` from
/// now on ([`crate::binding`]): after `/resume <id>` its command line and
/// its MCP servers' environment still name the session it started with.
/// Reported on stderr when it cannot be recorded (no state dir yet: no
/// ktr operation can be concerned).
fn bind(state_dir: &Path, session_id: &SessionId) {
    let Some(claude) = crate::process::runner_of(std::process::id()) else {
        eprintln!("ktr-ack: the Claude Code process that ran this hook cannot be found");
        return;
    };
    if let Err(e) = crate::binding::record(state_dir, claude, session_id) {
        eprintln!(
            "ktr-ack: cannot record that pid {} serves {session_id}: {e}",
            claude.pid
        );
    }
}

/// Keep the receipt for the window account: with the first reply of the
/// rebuilt session it measures the fixed overhead
/// (`engine::window::overhead`). A cache: failing to write it is reported
/// and costs only that measurement.
fn remember_receipt(store: &Store, op: &Operation, ack: &Ack) {
    let (Some(context_tokens), Some(candidate)) = (ack.context_tokens, op.candidate.as_ref())
    else {
        return;
    };
    // The rebuilt session is the candidate's file, resumed in place.
    let Ok(meta) = std::fs::metadata(&candidate.path) else {
        return;
    };
    let receipt = overhead::Receipt {
        operation: op.id.to_string(),
        context_tokens,
        carried_estimate: op.estimated_tokens,
        offset: meta.len(),
        at: ack.at.to_string(),
    };
    if let Err(e) = window_cache::overhead::remember_receipt(store.dir(), &ack.session_id, &receipt)
    {
        eprintln!("ktr-ack: the window account will not measure the overhead of this rebuild: {e}");
    }
}

/// Append `ack` as one JSON line to `path` (created 0600, never through a link).
fn append_line(path: &Path, ack: &Ack) -> Result<()> {
    let line = serde_json::to_string(ack).map_err(|e| Error::io(e.to_string()))? + "\n";
    super::append_log(path, &line)
}

/// The operation whose candidate is `session_id`: one in flight first,
/// else the newest activating/activated one.
fn find_operation(store: &Store, session_id: &SessionId) -> Option<Operation> {
    let in_flight = store.in_flight().into_iter();
    let active = in_flight.filter_map(|e| store.load(&e.id).ok());
    if let Some(op) = active.into_iter().find(|op| awaits_ack(op, session_id)) {
        return Some(op);
    }
    store
        .list()
        .ok()?
        .into_iter()
        .rev()
        .find(|op| awaits_ack(op, session_id))
}

fn awaits_ack(op: &Operation, session_id: &SessionId) -> bool {
    if op.status.offered() {
        return super::hand::offered_session(op).as_ref() == Some(session_id);
    }
    matches!(op.status, Status::Activating | Status::Activated)
        && op
            .candidate
            .as_ref()
            .is_some_and(|c| c.session_id == *session_id)
}

/// Token counts arrive as JSON numbers (integer or float).
fn as_tokens(v: &serde_json::Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| f.round() as u64)
    })
}
