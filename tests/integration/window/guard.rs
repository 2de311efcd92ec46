//! The compaction guard: a manual compact, a pending rebuild, the standing approval, a rebuild that cannot help.

use super::*;
use crate::stop_hook::message;
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::Status;

#[test]
fn a_manual_compact_is_never_blocked() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    let op = s
        .sandbox
        .store()
        .request("full", "REBUILD", Some(&SessionId::parse(SESSION).unwrap()))
        .unwrap();
    assert_eq!(
        s.precompact("manual"),
        serde_json::Value::Null,
        "nothing printed on /compact (Claude Code shows even suppressOutput there)"
    );
    let op = s.sandbox.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::Pending, "a manual /compact started it");
    assert!(s.sandbox.records("ktr-prepare").is_empty());
}

#[test]
fn a_pending_rebuild_blocks_the_auto_compaction_and_starts_at_once() {
    let mut s = Session::new("");
    s.turn("FULL", 999_000);
    let op = s.sandbox.store().request("full", "REBUILD", None).unwrap();
    let out = s.precompact("auto");
    assert_eq!(out["decision"], "block", "{out}");
    let reason = out["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("operation {}", op.id)) && reason.contains("press ↑ then Enter"),
        "{reason}"
    );
    let op = s.sandbox.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::Scheduled);
    assert_eq!(op.session_id.as_deref(), Some(SESSION));
    let note = &op.history.last().unwrap().note;
    assert!(
        note.starts_with(&format!(
            "PreCompact hook of session {SESSION} started prepare"
        )) && note.ends_with("instead of Claude Code's auto-compaction"),
        "{note}"
    );
    let started = s.sandbox.wait_records("ktr-prepare", 1);
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(
        started[0].1.iter().any(|a| a == &op.id.to_string()),
        "{started:?}"
    );
}

#[test]
fn the_standing_approval_requests_and_blocks_and_advise_lets_it_compact() {
    // "rebuild": nothing pending, the guard requests and starts it.
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    let out = s.precompact("auto");
    assert_eq!(out["decision"], "block", "{out}");
    let op = s.sandbox.store().latest().unwrap().unwrap();
    assert_eq!(op.status, Status::Scheduled);
    assert!(op.reasons[0].contains("on_auto_compaction"), "{op:?}");

    // "advise" (the default): Claude Code compacts; the next Stop says so.
    let mut s = Session::new("");
    s.turn("FULL", 999_000);
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    assert!(s.sandbox.store().latest().unwrap().is_none());
    s.compacted("Summary.");
    s.turn("AFTER", 30_000);
    let line = message(&s.stop("AFTER"));
    assert!(
        line.starts_with("ktr: Claude Code compacted this window (lossy) before this reply; a lossless rebuild would have brought it to ≈ ")
            && line.contains("on_auto_compaction = \"rebuild\""),
        "{line}"
    );
    // Then, on its own line, the offer of the turns now in the summary.
    assert!(
        line.lines().nth(1).is_some_and(|l| l.starts_with("ktr: ")
            && l.contains(" turns from before Claude Code's last compaction are only in its summary now; a rebuild restores them word for word")),
        "{line}"
    );
    assert_eq!(s.stop("AFTER"), QUIET, "the notice is shown once");
}

#[test]
fn the_guard_never_blocks_when_a_rebuild_cannot_help() {
    // The rebuilt window would not fit: the plan is refused.
    let mut s = Session::new("context_window_tokens = 20000");
    s.turn("FULL", 19_000);
    let op = s.sandbox.store().request("full", "REBUILD", None).unwrap();
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    let line = out["systemMessage"].as_str().unwrap();
    assert!(
        line.starts_with("ktr: a rebuild cannot replace this compaction: ")
            && line.contains("carry_max_tokens")
            && line.ends_with("Claude Code compacted this window (lossy) instead"),
        "{line}"
    );
    assert_eq!(
        s.sandbox.store().load(&op.id).unwrap().status,
        Status::Pending
    );
    // Another operation is running.
    let mut s = Session::new("");
    s.turn("FULL", 999_000);
    let op = s.sandbox.store().request("full", "REBUILD", None).unwrap();
    s.sandbox
        .walk(&op.id, &[Status::Scheduled, Status::Running], |_| {});
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    assert!(
        out["systemMessage"]
            .as_str()
            .unwrap()
            .contains("a rebuild cannot start now"),
        "{out}"
    );
    assert!(s.sandbox.records("ktr-prepare").is_empty());
}
