//! The compaction guard and a rollback the person asked for. The rebuilt
//! session fills up again before its rollback ran: Claude Code is about to
//! compact it, and a compaction would summarise what the rollback is to
//! bring back (the soak: a rollback asked at 10:27:23, Claude Code
//! compacted at 10:27:29, the rollback done at 10:27:31). The guard starts
//! the rollback instead, or, while it is under way, waits for it.

use std::path::Path;

use crate::support::rig::{Rig, SRC};
use crate::support::sandbox::Sandbox;
use ktr_base::ids::OperationId;
use ktr_pipeline::operation::Operation;
use ktr_pipeline::operation::Status::*;
use serde_json::Value;

/// Claude Code's auto-compaction of `session`, its `PreCompact` hook run by
/// the stand-in claude serving it (if any): what the guard printed.
fn auto_compaction(rig: &Rig, session: &str, transcript: &Path) -> Value {
    let input = serde_json::json!({
        "session_id": session, "transcript_path": transcript,
        "cwd": rig.sandbox.work, "prompt_id": "p1",
        "hook_event_name": "PreCompact", "trigger": "auto", "custom_instructions": null,
    });
    let bin = crate::support::exe("ktr-precompact");
    let (out, code) = if rig.claude_of(session).is_some() {
        rig.hook_from_claude(session, bin, &input.to_string())
    } else {
        Sandbox::run_hook(rig.program(bin), &input.to_string(), &rig.hook_env())
    };
    assert_eq!(code, 0, "ktr-precompact always exits 0");
    if out.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// A rebuild activated and its rollback asked for.
fn rollback_asked(rig: &Rig) -> Operation {
    let op = rig.rebuild();
    assert_eq!(op.status, Activated, "{:?}", op.error);
    let id = OperationId::parse(&op.id).unwrap();
    rig.store().rollback_request(&id, "ROLLBACK").unwrap()
}

#[test]
fn a_compaction_before_the_asked_rollback_starts_the_rollback_instead() {
    let rig = Rig::tmux();
    let op = rollback_asked(&rig);
    let rebuilt = op.candidate.clone().unwrap();
    let out = auto_compaction(&rig, rebuilt.session_id.as_str(), &rebuilt.path);
    assert_eq!(out["decision"], "block", "{out}");
    assert!(
        out["reason"].as_str().unwrap().contains(&format!(
            "rolling this session back as you asked (operation {})",
            op.id
        )),
        "{out}"
    );
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, RolledBack, "{:?}", op.error);
    let scheduled = op
        .history
        .iter()
        .rfind(|t| t.to == RollbackScheduled)
        .unwrap();
    assert!(
        scheduled.note.starts_with(&format!(
            "PreCompact hook of session {} started rollback",
            rebuilt.session_id
        )) && scheduled
            .note
            .ends_with("instead of Claude Code's auto-compaction"),
        "{}",
        scheduled.note
    );
    assert_eq!(
        rig.resume_history(),
        [SRC, rebuilt.session_id.as_str(), SRC]
    );
}

#[test]
fn a_compaction_while_the_rollback_runs_waits_for_it() {
    let mut rig = Rig::tmux();
    let op = rollback_asked(&rig);
    let rebuilt = op.candidate.clone().unwrap();
    rig.pause_at = Some("rollback:start".into());
    rig.stop(rebuilt.session_id.as_str(), &rebuilt.path);
    rig.wait_paused();
    let out = auto_compaction(&rig, rebuilt.session_id.as_str(), &rebuilt.path);
    assert_eq!(out["decision"], "block", "{out}");
    assert!(
        out["reason"]
            .as_str()
            .unwrap()
            .contains("already rolling this session back"),
        "{out}"
    );
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, RolledBack, "{:?}", op.error);
}

#[test]
fn the_old_session_compacting_during_a_rollback_is_not_blocked_for_it() {
    // Only the session the rollback switches away from waits for it.
    let rig = Rig::tmux();
    let op = rollback_asked(&rig);
    let out = auto_compaction(&rig, SRC, &rig.source);
    assert_ne!(out["decision"], "block", "{out}");
    assert_eq!(
        rig.store()
            .load(&OperationId::parse(&op.id).unwrap())
            .unwrap()
            .status,
        RollbackPending
    );
}
