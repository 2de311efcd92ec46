//! A rebuild, and a rollback, find the quiet moment: an attempt that defers for a turn
//! which ended while it was at work starts again at once, as if that
//! turn's Stop had scheduled it; a turn explains a changed source, so no
//! retry bound counts it. (The soak: the compaction guard starts an
//! attempt at the beginning of a turn Claude Code answers anyway, and a
//! person who answers quickly never left the next Stop's attempt a gap.)

use std::fs;
use std::path::Path;

use crate::pipeline::{append_lines, last_speech_uuid};
use crate::support::rig::{Kind, Rig, SRC};
use ktr_base::ids::OperationId;
use ktr_base::time::Timestamp;
use ktr_pipeline::operation::Status::*;

/// A user prompt and its reply, appended to the source now.
fn a_turn(rig: &Rig, prompt: &str, reply: &str) {
    a_turn_in(&rig.source, SRC, prompt, reply);
}

/// A user prompt and its reply, appended now to `transcript` of `session`.
pub(crate) fn a_turn_in(transcript: &Path, session: &str, prompt: &str, reply: &str) {
    let parent = last_speech_uuid(&fs::read_to_string(transcript).unwrap());
    let at = Timestamp::now();
    let (asked, answered) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    append_lines(
        transcript,
        &[
            serde_json::json!({"type": "user", "uuid": asked.to_string(), "parentUuid": parent,
                "sessionId": session, "timestamp": at.to_string(),
                "message": {"role": "user", "content": prompt}})
            .to_string(),
            serde_json::json!({"type": "assistant", "uuid": answered.to_string(), "parentUuid": asked.to_string(),
                "sessionId": session, "timestamp": at.to_string(),
                "message": {"role": "assistant", "content": [{"type": "text", "text": reply}]}})
            .to_string(),
        ],
    );
}

#[test]
fn a_turn_that_ended_while_an_attempt_was_at_work_starts_the_next_attempt_at_once() {
    // No retry for a changed source: a turn is no such change.
    let mut rig = Rig::with(Kind::Tmux, "source_change_retries = 0", &[]);
    let op = rig.rebuild_paused_at("activate:start");
    let id = OperationId::parse(&op.id).unwrap();
    // The person spoke while the attempt was at work; the reply came, and
    // that turn's Stop found the attempt at work.
    a_turn(
        &rig,
        "还有一件事：周五的会改到下午三点。",
        "好的，周五下午三点，记下了。",
    );
    let out = rig.stop_source();
    assert!(!out.contains("scheduled"), "{out}");
    let marked = rig.store().load(&id).unwrap();
    assert!(marked.stopped_since.is_some(), "{marked:#?}");
    rig.unpause();
    // The attempt defers for that turn; the next starts at once (and
    // pauses where the first did).
    rig.wait_paused();
    let again = rig.store().load(&id).unwrap();
    assert_eq!((again.status, again.attempts), (Verifying, 2), "{again:#?}");
    assert!(again.stopped_since.is_none());
    assert!(
        again.history.iter().any(
            |t| t.to == Scheduled && t.note.contains("come while the last attempt was at work")
        ),
        "{:#?}",
        again.history
    );
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Activated, "{:?}", op.error);
    assert_eq!((op.attempts, op.source_changes), (2, 0));
    let read = String::from_utf8(rig.read_by_claude().unwrap()).unwrap();
    assert!(
        read.contains("好的，周五下午三点，记下了。"),
        "the turn is carried"
    );
}

#[test]
fn a_turn_still_running_at_the_deferral_waits_for_its_own_stop() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild_paused_at("activate:start");
    a_turn(&rig, "周五的会改了吗？", "改到下午三点。");
    rig.stop_source();
    // The next prompt came after that Stop: its turn runs.
    std::thread::sleep(std::time::Duration::from_millis(20));
    a_turn(&rig, "那周六呢？", "周六休息。");
    rig.unpause();
    let op = rig.wait_until(&op.id, |o| o.status == Pending);
    assert_eq!(
        op.attempts, 1,
        "no attempt started at once: {:#?}",
        op.history
    );
    assert!(op.deferred.is_some());
    // Its Stop prepares again, as before.
    rig.pause_at = None;
    let out = rig.stop_source();
    assert!(out.contains("rebuild scheduled"), "{out}");
    let op = rig.wait_terminal(&op.id);
    assert_eq!((op.status, op.attempts), (Activated, 2), "{:?}", op.error);
}

/// A Stop never notes itself on an attempt whose stage was killed: the
/// save would restart the grace after which recovery fails it, and a
/// person talking faster than the grace would keep it up for ever.
#[test]
fn a_stop_leaves_an_attempt_whose_stage_died_to_recovery() {
    let mut rig = Rig::tmux();
    rig.env
        .push(("KTR_WORKER_GRACE_SECONDS".into(), "3600".into()));
    let op = rig.rebuild_paused_at("prepare:running");
    let id = OperationId::parse(&op.id).unwrap();
    // Its watchdog went too: only a hook, after the grace, may fail it.
    let pid = rig.wait_paused();
    crate::kill::kill_watchdog_of(pid);
    crate::kill::kill_paused(&rig, pid, "prepare:running");
    let before = rig.store().load(&id).unwrap();
    a_turn(&rig, "你还在吗？", "在的。");
    rig.stop_source();
    let after = rig.store().load(&id).unwrap();
    assert_eq!(after.status, Running);
    assert!(after.stopped_since.is_none(), "{after:#?}");
    assert_eq!(after.updated_at, before.updated_at, "the grace runs on");
}

/// A rollback alike: the rebuilt session's turn ended while the rollback
/// was at work; it defers for that turn and starts again at once, and the
/// turn comes along. (The compaction guard starts a rollback at the
/// beginning of a turn Claude Code answers anyway: `guard_rollback::`.)
#[test]
fn a_rollback_that_deferred_for_a_turn_which_ended_starts_again_at_once() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild();
    assert_eq!(op.status, Activated, "{:?}", op.error);
    let rebuilt = op.candidate.clone().unwrap();
    let id = OperationId::parse(&op.id).unwrap();
    rig.store().rollback_request(&id, "ROLLBACK").unwrap();
    rig.pause_at = Some("rollback:start".into());
    let out = rig.stop(rebuilt.session_id.as_str(), &rebuilt.path);
    assert!(out.contains("rollback scheduled"), "{out}");
    rig.wait_paused();
    a_turn_in(
        &rebuilt.path,
        rebuilt.session_id.as_str(),
        "把旧的工具输出找回来。",
        "好，回到原来的会话。",
    );
    let out = rig.stop(rebuilt.session_id.as_str(), &rebuilt.path);
    assert!(!out.contains("scheduled"), "{out}");
    assert!(rig.store().load(&id).unwrap().stopped_since.is_some());
    rig.unpause();
    rig.wait_paused();
    let again = rig.store().load(&id).unwrap();
    assert_eq!(again.status, RollingBack, "{:#?}", again.history);
    let went = |to, says: &str| {
        again
            .history
            .iter()
            .any(|t| t.to == to && t.note.contains(says))
    };
    assert!(
        went(RollbackPending, "not rolled back: ")
            && went(RollbackScheduled, "come while the last attempt was at work"),
        "{:#?}",
        again.history
    );
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, RolledBack, "{:?}", op.error);
    assert_eq!(
        op.restore.as_ref().map(|r| r.turns),
        Some(1),
        "{:#?}",
        op.history
    );
}
