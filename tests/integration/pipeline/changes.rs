//! What changed after prepare: the pane, another transcript, the source, records no rebuild carries.

use super::*;
use crate::support::rig::{Rig, SRC};
use std::fs;

#[test]
fn a_pane_replaced_after_prepare_is_a_conflict_and_stays_untouched() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild_paused_at("activate:start");
    // A third party restarts the pane between prepare and activate.
    let server = rig.tmux.as_ref().unwrap();
    server.tmux(&["respawn-pane", "-k", "-t", "t:0.0", "sleep", "3600"]);
    let pane = rig.pane_pid();
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Failed);
    assert!(op.session_conflict);
    let error = op.error.unwrap();
    assert!(error.contains("changed since prepare"), "{error}");
    assert_eq!(rig.pane_pid(), pane, "the pane was not touched");
    assert_eq!(rig.resume_history(), [SRC], "claude was never respawned");
    assert_eq!(
        rig.transcripts(),
        [format!("{SRC}.jsonl")],
        "candidate discarded"
    );
    // status says the candidate is gone and what the pane runs now.
    let status = ktr_status(&rig, &op.id);
    assert!(status.contains("(discarded: it never ran)"), "{status}");
    assert!(
        status.contains(&format!(
            "target now        tmux pane t:0.0 (server -L {}) runs pid {pane} (sleep 3600)",
            rig.tmux.as_ref().unwrap().socket
        )),
        "{status}"
    );
}

#[test]
fn a_competing_transcript_after_prepare_refuses_the_switch() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild_paused_at("activate:start");
    let other = rig
        .sandbox
        .project
        .join("0e0e0e0e-1111-4222-8333-444455556666.jsonl");
    fs::write(&other, "{\"type\":\"user\"}\n").unwrap();
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Failed);
    assert!(op.session_conflict);
    let error = op.error.unwrap();
    assert!(error.contains(&other.display().to_string()), "{error}");
    assert_eq!(rig.resume_history(), [SRC]);
}

/// Several sessions of one project: another Claude Code's session, begun
/// before the rebuild was scheduled, writing while it is prepared is no
/// conflict (the soak: a second session outside tmux failed the guard's
/// rebuild, and Claude Code compacted).
#[test]
fn another_sessions_transcript_written_after_prepare_is_no_conflict() {
    let other = "0e0e0e0e-1111-4222-8333-444455556666";
    let mut rig = Rig::tmux();
    let path = rig.sandbox.project.join(format!("{other}.jsonl"));
    let began = format!(
        "{{\"type\":\"user\",\"sessionId\":\"{other}\",\"timestamp\":\"2026-11-01T08:00:00.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\n"
    );
    fs::write(&path, &began).unwrap();
    let op = rig.rebuild_paused_at("activate:start");
    append_lines(&path, &[began.trim_end().replace("hi", "still here")]);
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Activated, "{:?}", op.error);
    assert!(!op.session_conflict);
}

#[test]
fn a_source_changed_after_prepare_is_prepared_again_at_the_next_stop() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild_paused_at("activate:start");
    let first = rig.store().load(&op.id).unwrap().candidate.unwrap();
    // The human typed again after prepare froze the source.
    let mut text = fs::read_to_string(&rig.source).unwrap();
    let parent = last_speech_uuid(&text);
    text.push_str(&format!(
        "{{\"type\":\"user\",\"uuid\":\"f0f0f0f0-0000-4000-8000-000000000001\",\"parentUuid\":\"{parent}\",\"sessionId\":\"{SRC}\",\"timestamp\":\"2026-11-21T09:00:00.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"晚安，小满，明天见。\"}}}}\n"
    ));
    fs::write(&rig.source, text).unwrap();
    rig.unpause();
    let op = rig.wait_until(&op.id, |op| op.status == Pending);
    let note = &op.history.last().unwrap().note;
    assert!(
        note.contains("(attempt 1: a record of type user appended)"),
        "the history names what changed: {note}"
    );
    // The Stop hook reads `active`, written right after the operation file.
    let pending = Some((op.id.clone(), Pending));
    assert!(crate::support::wait_for(
        crate::support::rig::SETTLE,
        || rig.store().active() == pending
    ));
    assert_eq!((op.attempts, op.candidate.is_none()), (1, true));
    assert!(!first.path.exists(), "the stale candidate was discarded");
    assert_eq!(rig.resume_history(), [SRC], "nothing was switched");
    // The next Stop prepares from the fresh transcript and activates.
    rig.pause_at = None;
    let out = rig.stop_source();
    assert!(out.contains("rebuild scheduled"), "{out}");
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Activated, "{:?}", op.error);
    assert_eq!(op.attempts, 2);
    let read = String::from_utf8(rig.read_by_claude().unwrap()).unwrap();
    assert!(
        read.contains("晚安，小满，明天见。"),
        "the new message is carried"
    );
}

/// Claude Code writes a turn's `stop_hook_summary` and `turn_duration`
/// after the Stop hook, possibly after the freeze, and the attachments that
/// record the hooks' output — ktr's own Stop-hook line among them
/// (`hook_success`, `hook_system_message` "ktr: rebuild scheduled …"):
/// records the rebuild would not carry are no change of the source (issue
/// 24 item 4: 9 of ~75 rebuilds went back to `pending` on them), and the
/// history names them.
#[test]
fn records_appended_after_prepare_that_no_rebuild_carries_are_no_change() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild_paused_at("activate:start");
    append_lines(
        &rig.source,
        &[
            format!(
                r#"{{"type":"system","subtype":"stop_hook_summary","sessionId":"{SRC}","hookCount":1}}"#
            ),
            format!(
                r#"{{"type":"attachment","sessionId":"{SRC}","attachment":{{"type":"hook_success","hookName":"Stop","content":"","stdout":"{{\"systemMessage\":\"ktr: rebuild scheduled\"}}"}}}}"#
            ),
            format!(
                r#"{{"type":"attachment","sessionId":"{SRC}","attachment":{{"type":"hook_system_message","content":"ktr: rebuild scheduled (operation x); it runs after this reply"}}}}"#
            ),
            format!(
                r#"{{"type":"system","subtype":"turn_duration","sessionId":"{SRC}","durationMs":8123}}"#
            ),
        ],
    );
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Activated, "{:?}", op.error);
    assert_eq!(op.attempts, 1);
    let checked = op
        .history
        .iter()
        .find(|t| t.to == Activating)
        .expect("activating");
    assert!(
        checked.note.contains(
            "appended after prepare, carried by no rebuild: system stop_hook_summary, attachment hook_success, attachment hook_system_message, system turn_duration"
        ),
        "the history names what was appended: {}",
        checked.note
    );
}

/// A tool call appended after the freeze is a turn running: the switch
/// waits (back to `pending`), as for speech.
#[test]
fn a_tool_call_appended_after_prepare_means_a_turn_is_running() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild_paused_at("activate:start");
    append_lines(
        &rig.source,
        &[format!(
            r#"{{"type":"assistant","sessionId":"{SRC}","message":{{"role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"Bash","input":{{}}}}]}}}}"#
        )],
    );
    rig.unpause();
    let op = rig.wait_until(&op.id, |op| op.status == Pending);
    let note = &op.history.last().unwrap().note;
    assert!(
        note.contains("a record of type assistant (tool_use) appended: a turn is running"),
        "{note}"
    );
    assert_eq!(rig.resume_history(), [SRC], "nothing was switched");
}

/// The Stop hook starts before Claude Code flushed the turn: prepare waits
/// for the reply the hook named (`last_assistant_message`) before it
/// freezes, so the frozen copy holds the finished turn.
#[test]
fn the_freeze_waits_for_the_reply_of_the_scheduling_stop() {
    let rig = Rig::tmux();
    let op = rig.request();
    let text = fs::read_to_string(&rig.source).unwrap();
    let parent = last_speech_uuid(&text);
    let reply = "晚安，林先生。明天早上记得喝水 FREEZE-MARKER";
    let record = serde_json::json!({
        "type": "assistant", "uuid": "f0f0f0f0-0000-4000-8000-000000000002",
        "parentUuid": parent, "sessionId": SRC, "timestamp": "2026-11-21T09:00:00.000Z",
        "message": {"role": "assistant", "content": [{"type": "text", "text": reply}]},
    });
    let input = serde_json::json!({
        "session_id": SRC, "transcript_path": rig.source, "cwd": rig.sandbox.work,
        "hook_event_name": "Stop", "stop_hook_active": false, "prompt_id": "p1",
        "last_assistant_message": reply,
    });
    // Claude Code flushes the reply after its Stop hook started.
    let path = rig.source.clone();
    let late = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(700));
        fs::write(&path, format!("{text}{record}\n")).unwrap();
    });
    rig.hook_from_claude(SRC, crate::support::exe("ktr-stop"), &input.to_string());
    late.join().unwrap();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Activated, "{:?}", op.error);
    let frozen = fs::read_to_string(op.backup.unwrap()).unwrap();
    assert!(
        frozen.contains("FREEZE-MARKER"),
        "the freeze did not wait for the reply"
    );
    let read = String::from_utf8(rig.read_by_claude().unwrap()).unwrap();
    assert!(read.contains("FREEZE-MARKER"));
}

#[test]
fn source_changes_stop_after_source_change_retries() {
    let mut rig = Rig::tmux();
    rig.write_config("source_change_retries = 0");
    let op = rig.rebuild_paused_at("activate:start");
    // Someone spoke after the freeze (a record nobody speaks in would be no change).
    let spoken = r#"{"type":"user","message":{"role":"user","content":"还有一件事"}}"#;
    fs::write(
        &rig.source,
        fs::read_to_string(&rig.source).unwrap() + spoken + "\n",
    )
    .unwrap();
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Failed);
    assert!(op.error.unwrap().contains("source_change_retries = 0"));
    assert!(!op.candidate.unwrap().path.exists());
}
