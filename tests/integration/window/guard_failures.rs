//! The guard after a failure: a session not switched, the same failure twice, a killed stage, a rebuild under way.

use super::*;
use crate::support::Sandbox;
use ktr_pipeline::operation::Status;

/// The guard blocks only when a rebuild can really
/// replace the compaction — the target runs this session, the rebuild it
/// started last time did not fail — else it lets Claude Code compact and
/// says why, and nothing is started (it used to block every prompt).
#[test]
fn the_guard_never_strands_a_session_the_target_does_not_run() {
    // The target is a tmux pane on no server (the sandbox's own config).
    let mut s = Session::with_config(Sandbox::new(), "");
    s.turn("FULL", 999_000);
    let op = s.sandbox.store().request("full", "REBUILD", None).unwrap();
    for _ in 0..2 {
        let out = s.precompact("auto");
        assert!(out.get("decision").is_none(), "{out}");
        assert_eq!(out["systemMessage"], NOT_SWITCHED, "{out}");
    }
    assert_eq!(
        s.sandbox.store().load(&op.id).unwrap().status,
        Status::Pending
    );
    assert!(s.sandbox.records("ktr-prepare").is_empty());

    // The target runs another session (the pointer names it).
    let mut s = Session::targeting_another();
    s.turn("FULL", 999_000);
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    assert!(
        s.sandbox.store().latest().unwrap().is_none(),
        "nothing requested"
    );
}

#[test]
fn the_guard_never_blocks_twice_for_the_same_failure() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    assert_eq!(s.precompact("auto")["decision"], "block");
    let op = s.sandbox.store().latest().unwrap().unwrap();
    // Its prepare failed (e.g. the target went away before the switch).
    s.sandbox
        .walk(&op.id, &[Status::Running, Status::Failed], |op| {
            op.error = Some("target went away".into());
        });
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    let line = out["systemMessage"].as_str().unwrap();
    assert!(
        line.contains(&format!(
            "the rebuild it started instead of the last compaction ({})",
            op.id
        )) && line.contains("target went away"),
        "{line}"
    );
    assert_eq!(s.sandbox.store().list().unwrap().len(), 1, "no new request");
}

/// A rebuild the guard started whose stage was killed (recovery failed it:
/// the worker died) failed by a moment's accident, not for this session:
/// the next compaction is blocked and rebuilt again, also after a second
/// such failure in a row (the 1,000-turn soak saw two); after a third, the
/// guard lets Claude Code compact (never a loop).
#[test]
fn the_guard_tries_again_after_a_killed_stage_up_to_three_in_a_row() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    let killed = |s: &Session| {
        let op = s.sandbox.store().latest().unwrap().unwrap();
        s.sandbox
            .walk(&op.id, &[Status::Running, Status::Failed], |op| {
                op.worker_died_in = Some(Status::Running);
            });
        op
    };
    assert_eq!(s.precompact("auto")["decision"], "block");
    for again in ["once more", "twice more"] {
        killed(&s);
        let out = s.precompact("auto");
        assert_eq!(out["decision"], "block", "tried {again}: {out}");
    }
    let third = killed(&s);
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    let line = out["systemMessage"].as_str().unwrap();
    assert!(line.contains(&third.id.to_string()), "{line}");
    assert_eq!(
        s.sandbox.store().list().unwrap().len(),
        3,
        "no fourth request"
    );
}

/// A rebuild the guard started whose ktr-activate was killed a moment ago
/// (the operation still says `activating`, its worker is gone, the grace
/// not over) does nothing any more: the next compaction is not let through
/// as "an operation is running" — the dead operation is failed at once and
/// the rebuild started again.
#[test]
fn the_guard_fails_a_just_killed_switch_at_once_and_rebuilds_again() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    assert_eq!(s.precompact("auto")["decision"], "block");
    let op = s.sandbox.store().latest().unwrap().unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    s.sandbox.walk(
        &op.id,
        &[Status::Running, Status::Verifying, Status::Activating],
        |op| {
            op.worker = Some(ktr_pipeline::operation::Worker {
                pid,
                start_time: 1,
                stage: ktr_pipeline::operation::Stage::Activate,
            });
        },
    );
    let out = s.precompact("auto");
    assert_eq!(out["decision"], "block", "rebuilt again: {out}");
    let old = s.sandbox.store().load(&op.id).unwrap();
    assert_eq!(
        (old.status, old.worker_died_in),
        (Status::Failed, Some(Status::Activating))
    );
    assert_eq!(s.sandbox.store().list().unwrap().len(), 2, "a new rebuild");
}

/// While this session's own rebuild is under way (its stage alive, e.g.
/// deferred by a draft and prepared again), the next auto-compaction is
/// blocked too: the switch replaces it. Claude Code compacted lossily in
/// that window before (the soak).
#[test]
fn the_guard_blocks_while_this_sessions_rebuild_is_under_way() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    assert_eq!(s.precompact("auto")["decision"], "block");
    let op = s.sandbox.store().latest().unwrap().unwrap();
    s.sandbox.walk(&op.id, &[Status::Running], |op| {
        op.worker = Some(ktr_pipeline::operation::Worker::current(
            ktr_pipeline::operation::Stage::Prepare,
        ));
    });
    let out = s.precompact("auto");
    assert_eq!(out["decision"], "block", "{out}");
    let why = out["reason"].as_str().unwrap_or_default();
    assert!(why.contains(&op.id.to_string()), "{why}");
    assert_eq!(
        s.sandbox.store().list().unwrap().len(),
        1,
        "no second request"
    );
}
