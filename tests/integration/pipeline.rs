//! The rebuild pipeline end to end through the real binaries: `ktr-stop`
//! fed a Stop JSON starts `ktr-prepare`, which hands over to `ktr-verify`
//! and `ktr-activate`, against a private tmux server whose pane runs the
//! stand-in claude (or the stand-in systemd unit, or a pointer file).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::support::rig::{Kind, Rig, SRC, UNHEALTHY_WINDOW, UNIT};
use ktr_base::digest::sha256_hex;
use ktr_engine::conserve::{Expected, check};
use ktr_pipeline::operation::{Operation, Status, manifest};
use ktr_pipeline::targets::{SWITCHING_NOTICE, WAITING_NOTICE};

use Status::*;
use ktr_base::ids::SessionId;

fn mode(path: &std::path::Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Check the candidate of an activated operation the way a user would:
/// the file the resumed claude read is the recorded candidate, and it
/// verifies against the frozen backup.
#[track_caller]
fn assert_candidate_verifies(rig: &Rig, op: &Operation) {
    let candidate = op.candidate.as_ref().unwrap();
    let read = rig.read_by_claude().expect("claude read a transcript");
    assert_eq!(
        sha256_hex(&read),
        candidate.sha256,
        "claude read the candidate"
    );
    assert_eq!(fs::read(&candidate.path).unwrap(), read);
    let manifest =
        manifest::read(&rig.store(), &op.id, op.manifest_artifact.as_ref().unwrap()).unwrap();
    let report = check(
        &rig.config(),
        op.backup.as_ref().unwrap(),
        &candidate.path,
        &Expected {
            session_id: &candidate.session_id,
            backup_sha256: op.source_sha256.as_ref().unwrap().as_str(),
            candidate_sha256: candidate.sha256.as_str(),
            manifest: &manifest.items,
            left_out: &manifest.left_out,
        },
        &ktr_engine::meter::Meter::default(),
    )
    .unwrap();
    assert_eq!(report.candidate_lines, manifest.items.len());
    // Real sentences, human and assistant, are in what claude loaded.
    let text = String::from_utf8(read).unwrap();
    for sentence in [
        "小满，早上好！今天我们先把日志分析脚本修好，好吗？",
        "改好了：worker.py 现在读取 WORKER0_TIMEOUT。单元测试 42 个全部通过 ✅",
        "谢谢小满！今晚十点前提醒我提交代码。",
    ] {
        assert!(text.contains(sentence), "{sentence} missing");
    }
    assert!(!text.contains("tool_use") && !text.contains("\"thinking\""));
}

/// The uuid of the last user/assistant record (where a new message hangs).
pub(crate) fn last_speech_uuid(transcript: &str) -> String {
    transcript
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "user" || v["type"] == "assistant")
        .find_map(|v| v["uuid"].as_str().map(String::from))
        .unwrap()
}

#[test]
fn happy_path_activates_and_the_pane_resumes_the_candidate() {
    let rig = Rig::tmux();
    let source_sha = rig.source_sha();
    let pane_before = rig.pane_pid();
    let op = rig.request();
    let out = rig.stop_source();
    assert!(out.contains("rebuild scheduled"), "{out}");
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Activated, "{:?}", op.error);
    assert_eq!(
        Rig::path_of(&op),
        [
            Pending, Scheduled, Running, Verifying, Activating, Activated
        ]
    );
    let candidate = op.candidate.clone().unwrap();
    assert_eq!(
        rig.resumed().as_deref(),
        Some(candidate.session_id.as_str())
    );
    assert_candidate_verifies(&rig, &op);
    // Prepare recorded what it saw; activate what it left.
    assert_eq!(op.source_sha256.as_ref().unwrap(), &source_sha);
    assert_eq!(op.target_before.as_deref(), Some(pane_before.as_str()));
    assert_eq!(op.target_after.as_deref(), Some(rig.pane_pid().as_str()));
    assert_ne!(op.target_after, op.target_before);
    assert_eq!(op.attempts, 1);
    assert!(op.estimated_tokens.unwrap() > 0);
    assert!(op.prepared_at.is_some() && op.verification.as_ref().unwrap().ok);
    assert!(op.stats.as_ref().unwrap().selected_turns > 3);
    assert!(op.worker.is_none() && op.error.is_none());
    // Evidence: the frozen backup and the startup snapshot, private.
    let backup = op.backup.clone().unwrap();
    assert_eq!(fs::read(&backup).unwrap(), fs::read(&rig.source).unwrap());
    assert_eq!(mode(&backup), 0o600);
    assert_eq!(mode(backup.parent().unwrap()), 0o700);
    let snapshot = fs::read_to_string(backup.with_file_name("startup_snapshot.txt")).unwrap();
    assert!(snapshot.contains("住在杭州的林先生"), "{snapshot}");
    assert_eq!(mode(&candidate.path), 0o600);
    // The source is untouched and only the candidate was added.
    assert_eq!(rig.source_sha(), source_sha);
    let mut expected = vec![
        format!("{SRC}.jsonl"),
        format!("{}.jsonl", candidate.session_id),
    ];
    expected.sort();
    assert_eq!(rig.transcripts(), expected);
    assert_eq!(
        rig.store().active(),
        None,
        "nothing blocks the next request"
    );
    // Each stage logged its steps. Activate writes its last line after the
    // operation file says `activated` (the log follows what happened), so
    // the test waits for it instead of reading the log at once.
    let worker_log = rig.sandbox.state.join("worker.log");
    let read_log = || fs::read_to_string(&worker_log).unwrap_or_default();
    crate::support::wait_for(std::time::Duration::from_secs(20), || {
        read_log().contains("activated: tmux pane t:0.0")
    });
    let log = read_log();
    for stage in ["ktr-prepare", "ktr-verify", "ktr-activate"] {
        assert!(
            log.contains(&format!("{stage}[")),
            "{stage} missing in {log}"
        );
    }
    assert!(log.contains("activated: tmux pane t:0.0"), "{log}");
}

/// Install `ktr-ack` as Claude Code's `SessionStart` hook in the sandbox.
fn install_ack_hook(rig: &Rig) {
    let settings = rig.sandbox.home.join(".claude/settings.json");
    let hook = serde_json::json!({"hooks": {"SessionStart": [{"matcher": "resume", "hooks": [
        {"type": "command", "command": format!("{} --config {}", crate::support::exe("ktr-ack"), rig.sandbox.config.display())}
    ]}]}});
    fs::write(settings, hook.to_string()).unwrap();
}

/// A tmux rig whose claude runs `ktr-ack` after a resume (with `env`, the
/// stand-in's extra `FAKE_CLAUDE_*` settings) and this `config`.
fn acking_rig(env: &[(&str, &str)], config: &str) -> Rig {
    let mut rig = Rig::tmux();
    install_ack_hook(&rig);
    let ack = crate::support::exe("ktr-ack").to_string();
    let ack_config = rig.sandbox.config.display().to_string();
    rig.env.extend([
        ("FAKE_CLAUDE_ACK".to_string(), ack),
        ("FAKE_CLAUDE_ACK_CONFIG".into(), ack_config),
    ]);
    rig.env.extend(
        env.iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string())),
    );
    rig.write_config(config);
    rig
}

#[test]
fn with_ktr_ack_installed_the_resume_receipt_is_required_and_recorded() {
    let rig = acking_rig(&[("FAKE_CLAUDE_CONTEXT_TOKENS", "41234")], "");
    let op = rig.rebuild();
    assert_eq!(op.status, Activated, "{:?}", op.error);
    let new_id = op.candidate.as_ref().unwrap().session_id.clone();
    let ack = op.ack.clone().expect("Claude Code's receipt");
    assert_eq!(ack.session_id, new_id);
    assert_eq!(op.context_tokens(), Some(41234));
    assert!(op.estimated_tokens.is_some(), "measured next to estimated");
    let note = &op.history.last().unwrap().note;
    assert!(note.contains("41234 context tokens"), "{note}");

    // A later resume of the same session (a restart by hand) is its own
    // event: the activation's first receipt stays.
    let later = serde_json::json!({
        "session_id": new_id, "source": "resume", "hook_event_name": "SessionStart",
        "context_tokens": 55555,
    });
    let (_, code) = rig
        .sandbox
        .hook(crate::support::exe("ktr-ack"), &later.to_string());
    assert_eq!(code, 0);
    let op = rig.store().load(&op.id).unwrap();
    assert_eq!(
        op.context_tokens(),
        Some(41234),
        "the first receipt per activation"
    );
    let resumes = rig
        .store()
        .artifacts_dir(&op.id)
        .unwrap()
        .join("resumes.jsonl");
    let resumes = fs::read_to_string(resumes).unwrap();
    assert_eq!(resumes.lines().count(), 1);
    assert!(resumes.contains("55555"), "{resumes}");
}

#[test]
fn with_ktr_ack_installed_a_missing_receipt_falls_back() {
    let rig = Rig::tmux();
    // The hook is installed but this claude never runs it.
    install_ack_hook(&rig);
    let op = rig.rebuild();
    assert_eq!(op.status, RolledBack, "{:?}", op.error);
    let error = op.error.unwrap();
    assert!(error.contains("did not report SessionStart"), "{error}");
    assert_eq!(rig.resumed().as_deref(), Some(SRC));
}

/// A new Claude Code that exits before its
/// `SessionStart` receipt is never activated (the receipt comes later, from
/// a leftover child), and the old session runs again.
#[test]
fn a_claude_that_exits_before_its_receipt_is_never_activated() {
    let rig = acking_rig(
        &[
            ("FAKE_CLAUDE_ONLY", SRC),
            ("FAKE_CLAUDE_LIVE", "0.2"),
            ("FAKE_CLAUDE_ACK_DELAY", "0.6"),
        ],
        UNHEALTHY_WINDOW,
    );
    assert_falls_back_unhealthy(&rig);
}

/// A new Claude Code that sent its receipt but exits
/// within `healthcheck_min_seconds` after it is never activated.
#[test]
fn a_claude_that_exits_within_the_minimum_life_after_its_receipt_is_never_activated() {
    let rig = acking_rig(
        &[("FAKE_CLAUDE_ONLY", SRC), ("FAKE_CLAUDE_LIVE", "0.3")],
        &format!("{UNHEALTHY_WINDOW}\nhealthcheck_min_seconds = 0.9"),
    );
    let op = assert_falls_back_unhealthy(&rig);
    let new_id = op.candidate.unwrap().session_id;
    assert_eq!(
        op.ack.map(|a| a.session_id),
        Some(new_id),
        "its receipt came"
    );
}

/// The rebuild falls back: the new session was unhealthy because its
/// process did not stay, and the old session runs again.
#[track_caller]
fn assert_falls_back_unhealthy(rig: &Rig) -> Operation {
    let op = rig.rebuild();
    assert_eq!(op.status, RolledBack, "{:?}", op.error);
    let error = op.error.clone().unwrap();
    assert!(error.contains("did not stay healthy"), "{error}");
    assert!(!Rig::path_of(&op).contains(&Activated));
    assert_eq!(rig.resumed().as_deref(), Some(SRC));
    op
}

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

/// Append whole lines to a transcript, as Claude Code does.
pub(crate) fn append_lines(path: &std::path::Path, lines: &[String]) {
    let mut file = fs::OpenOptions::new().append(true).open(path).unwrap();
    for line in lines {
        std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).unwrap();
    }
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

#[test]
fn an_unhealthy_new_session_falls_back_to_the_old_one() {
    let rig = Rig::with(Kind::Tmux, UNHEALTHY_WINDOW, &[("FAKE_CLAUDE_ONLY", SRC)]);
    let op = rig.rebuild();
    assert_eq!(op.status, RolledBack, "{:?}", op.error);
    assert_eq!(op.rollback_ok, Some(true));
    let new_id = op.candidate.as_ref().unwrap().session_id.clone();
    assert!(
        op.error
            .unwrap()
            .contains(&format!("new session {new_id} unhealthy"))
    );
    assert_eq!(rig.resume_history(), [SRC, new_id.as_str(), SRC]);
    assert_eq!(
        rig.resumed().as_deref(),
        Some(SRC),
        "the old session runs again"
    );
    assert_eq!(op.target_after.as_deref(), Some(rig.pane_pid().as_str()));
    assert!(!op.needs_attention);
}

#[test]
fn a_failing_fallback_needs_attention() {
    let mut rig = Rig::tmux();
    // From now on every resumed claude exits at once: the new session and
    // the old one alike.
    rig.env.push(("FAKE_CLAUDE_MODE".into(), "exit".into()));
    rig.write_config(UNHEALTHY_WINDOW);
    let op = rig.rebuild();
    assert_eq!(op.status, Failed);
    assert_eq!((op.rollback_ok, op.needs_attention), (Some(false), true));
    assert!(
        op.error
            .unwrap()
            .contains("resuming the old session failed too")
    );
    assert!(op.target_after.is_some());
}

#[test]
fn rollback_after_activation_resumes_the_old_session() {
    let rig = Rig::tmux();
    let op = rig.rebuild();
    assert_eq!(op.status, Activated, "{:?}", op.error);
    let candidate = op.candidate.clone().unwrap();
    let op = rig.store().rollback_request(&op.id, "ROLLBACK").unwrap();
    assert_eq!(op.status, RollbackPending);
    // The old session's Stop is not the one to trigger it.
    rig.stop_source();
    assert_eq!(rig.store().load(&op.id).unwrap().status, RollbackPending);
    // The new session finishes a reply: its Stop starts ktr-rollback.
    let out = rig.stop(&candidate.session_id, &candidate.path);
    assert!(out.contains("rollback scheduled"), "{out}");
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, RolledBack, "{:?}", op.error);
    assert_eq!(
        Rig::path_of(&op)[5..],
        [
            Activated,
            RollbackPending,
            RollbackScheduled,
            RollingBack,
            RolledBack
        ]
    );
    assert_eq!(
        rig.resume_history(),
        [SRC, candidate.session_id.as_str(), SRC]
    );
    assert!(candidate.path.exists(), "an activated candidate is kept");
    // "target after" is what runs after the rollback, not before it.
    assert_eq!(op.target_after.as_deref(), Some(rig.pane_pid().as_str()));
    let status = ktr_status(&rig, &op.id);
    assert!(
        status.contains(&format!("target after      {}", rig.pane_pid())),
        "{status}"
    );
}

/// `ktr status OP` as a human reads it.
fn ktr_status(rig: &Rig, id: &str) -> String {
    rig.ktr(&["status", id])
}

#[test]
fn rollback_refuses_when_the_target_changed_since_activation() {
    let rig = Rig::tmux();
    let op = rig.rebuild();
    assert_eq!(op.status, Activated, "{:?}", op.error);
    let candidate = op.candidate.clone().unwrap();
    rig.store().rollback_request(&op.id, "ROLLBACK").unwrap();
    let server = rig.tmux.as_ref().unwrap();
    server.tmux(&["respawn-pane", "-k", "-t", "t:0.0", "sleep", "3600"]);
    let pane = rig.pane_pid();
    // The killed stand-in claude must be gone before the Stop hook is fed,
    // or `stop` hands the hook to a process that never runs it.
    assert!(
        crate::support::wait_for(crate::support::rig::SETTLE, || rig
            .claude_of(&candidate.session_id)
            .is_none()),
        "the candidate's claude outlived respawn-pane -k"
    );
    rig.stop(&candidate.session_id, &candidate.path);
    let op = rig.wait_terminal(&op.id);
    assert_eq!((op.status, op.session_conflict), (Failed, true));
    assert_eq!(rig.pane_pid(), pane, "untouched");
}

#[test]
fn a_cancelled_request_is_never_prepared() {
    let rig = Rig::tmux();
    let op = rig.request();
    rig.store().cancel(&op.id, "CANCEL").unwrap();
    let out = rig.stop_source();
    // Nothing scheduled (what it says is the idle line: the example was
    // compacted once, so the offer of its turns).
    assert!(
        out.contains("suppressOutput") || out.contains("only in its summary now"),
        "{out}"
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let op = rig.store().load(&op.id).unwrap();
    assert_eq!(Rig::path_of(&op), [Pending, Cancelled]);
    assert_eq!(rig.transcripts(), [format!("{SRC}.jsonl")]);
    assert_eq!(rig.resume_history(), [SRC]);
    // And it blocks nothing.
    let next = rig.request();
    rig.stop_source();
    assert_eq!(rig.wait_terminal(&next.id).status, Activated);
}

#[test]
fn a_request_while_another_runs_names_it() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild_paused_at("prepare:running");
    let err = rig.store().request("again", "REBUILD", None).unwrap_err();
    assert!(
        err.message.contains(op.id.as_str()) && err.message.contains("is running"),
        "{err}"
    );
    assert_eq!(err.exit_code(), 1);
    rig.unpause();
    assert_eq!(rig.wait_terminal(&op.id).status, Activated);
}

#[test]
fn a_tampered_candidate_fails_verification_and_is_discarded() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild_paused_at("verify:start");
    let candidate = rig.store().load(&op.id).unwrap().candidate.unwrap();
    let text = fs::read_to_string(&candidate.path).unwrap();
    fs::write(&candidate.path, text.replacen("小满", "小美", 1)).unwrap();
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Failed);
    assert!(op.error.unwrap().starts_with("verification failed"));
    assert!(!op.verification.unwrap().ok);
    assert!(!candidate.path.exists(), "candidate discarded");
    assert_eq!(rig.resume_history(), [SRC]);
}

/// The source replaced by `turns` chat turns (Chinese, one user and one
/// assistant line each, a parentUuid chain), `malformed` lines that are
/// not JSON and records of `malformed` unknown types with long names.
fn long_transcript(path: &std::path::Path, turns: usize, malformed: usize) {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut parent = serde_json::Value::Null;
    for i in 0..turns {
        for (kind, text) in [
            ("user", format!("第{i}天：今天也聊聊日志分析脚本吧，小满？")),
            (
                "assistant",
                format!("好的，第{i}次：worker.py 读取 WORKER0_TIMEOUT，测试全部通过。"),
            ),
        ] {
            let uuid = format!(
                "00000000-0000-4000-8000-{:012}",
                i * 2 + usize::from(kind == "assistant")
            );
            let record = serde_json::json!({
                "parentUuid": parent, "sessionId": SRC, "isSidechain": false, "type": kind,
                "uuid": uuid, "timestamp": format!("2026-11-20T{:02}:{:02}:00.000Z", (i / 60) % 24, i % 60),
                "cwd": "/home/lin/companion", "version": "2.1.328",
                "message": {"role": kind, "content": [{"type": "text", "text": text}]},
            });
            writeln!(out, "{record}").unwrap();
            parent = serde_json::Value::String(uuid);
        }
        if i < malformed {
            writeln!(out, "{{not json {i}").unwrap();
            let kind = format!("mystery-{i}-{}", "x".repeat(2000));
            writeln!(
                out,
                "{}",
                serde_json::json!({"type": kind, "sessionId": SRC})
            )
            .unwrap();
        }
    }
    fs::write(path, out).unwrap();
}

/// Whatever the transcript, the operation file stays
/// small (the manifest is an artifact beside the backup, lists that grow
/// with the transcript are cut), `ktr status` reads only that small file,
/// and ktr-verify refuses a manifest artifact edited after prepare.
#[test]
fn a_long_transcript_keeps_the_operation_file_small_and_verify_checks_the_manifest_artifact() {
    let mut rig = Rig::with(Kind::Tmux, "on_malformed_line = \"skip\"", &[]);
    long_transcript(&rig.source, 3000, 100);
    let op = rig.rebuild_paused_at("verify:start");
    let store = rig.store();
    let size = fs::metadata(store.operation_path(&op.id)).unwrap().len();
    let op = store.load(&op.id).unwrap();
    let recorded = op.manifest_artifact.clone().unwrap();
    assert!(size <= 64 << 10, "the operation file has {size} bytes");
    assert!(recorded.items >= 6000, "{recorded:?}");
    assert!(recorded.bytes > 40 * size, "{recorded:?} vs {size}");
    let stats = op.stats.as_ref().unwrap();
    assert_eq!(
        (stats.malformed_lines, stats.malformed_line_numbers.len()),
        (100, 20)
    );
    assert_eq!(stats.unknown_record_types.len(), 21, "first 20 and (other)");
    let artifact = op.backup.as_ref().unwrap().with_file_name(manifest::FILE);
    assert_eq!(mode(&artifact), 0o600);
    let full = manifest::read(&store, &op.id, &recorded).unwrap();
    // The engine keeps the first MALFORMED_KEPT numbers; the artifact lists them all.
    assert_eq!(full.malformed_line_numbers, stats.malformed_line_numbers);
    assert_eq!(full.items.len(), recorded.items);

    // `ktr status` shows the counts without the artifact: it reads only the
    // operation file.
    let aside = artifact.with_extension("aside");
    fs::rename(&artifact, &aside).unwrap();
    let status: serde_json::Value =
        serde_json::from_str(&rig.ktr(&["status", "--json", &op.id])).unwrap();
    assert_eq!(status["manifest_items"], recorded.items);
    assert_eq!(status["left_out_records"], recorded.left_out);
    fs::rename(&aside, &artifact).unwrap();

    // An artifact edited after prepare (still valid lines) is refused.
    let text = fs::read_to_string(&artifact).unwrap();
    let edited = text.replacen(r#""elided_chars":0"#, r#""elided_chars":1"#, 1);
    assert_ne!(edited, text);
    fs::write(&artifact, edited).unwrap();
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Failed);
    let error = op.error.unwrap();
    assert!(
        error.starts_with("verification failed: manifest artifact")
            && error.contains("changed after prepare"),
        "{error}"
    );
    assert!(!op.candidate.unwrap().path.exists(), "candidate discarded");
    assert_eq!(rig.resume_history(), [SRC]);
}

#[test]
fn a_workdir_that_does_not_match_the_project_is_refused_before_writing() {
    let rig = Rig::tmux();
    let other = rig.sandbox.root().join("root");
    fs::create_dir_all(&other).unwrap();
    let text = fs::read_to_string(&rig.sandbox.config).unwrap();
    let text = text.replace(
        &format!("claude_workdir = {:?}", rig.sandbox.work),
        &format!("claude_workdir = {other:?}"),
    );
    fs::write(&rig.sandbox.config, text).unwrap();
    let op = rig.rebuild();
    assert_eq!(op.status, Failed);
    assert!(
        op.error.unwrap().contains("encodes to"),
        "the -/-root incident"
    );
    assert_eq!(rig.transcripts(), [format!("{SRC}.jsonl")]);
    assert!(op.backup.is_none() && op.candidate.is_none());
}

#[test]
fn a_poisoned_session_is_blocked_with_the_reason() {
    let rig = Rig::tmux();
    rig.write_config("poison_pattern = \"提醒\"");
    let op = rig.rebuild();
    assert_eq!(op.status, Failed);
    assert!(op.error.unwrap().contains("poisoned"));
    assert!(op.stats.unwrap().poison_hits >= 2);
    assert_eq!(rig.transcripts(), [format!("{SRC}.jsonl")]);
    assert_eq!(rig.resume_history(), [SRC]);
}

#[test]
#[ignore = "needs a real systemd (root, cgroup2)"]
fn systemd_target_runs_every_stage_in_its_own_scope() {
    let rig = Rig::with(Kind::Systemd, "", &[]);
    let sysd = rig.sysd.as_ref().unwrap();
    let before = sysd.main_pid(UNIT);
    let op = rig.rebuild();
    assert_eq!(op.status, Activated, "{:?}", op.error);
    let new_id = op.candidate.as_ref().unwrap().session_id.clone();
    assert_eq!(
        fs::read_to_string(&rig.pointer).unwrap(),
        format!("{new_id}\n")
    );
    assert_eq!(rig.resumed().as_deref(), Some(new_id.as_str()));
    // MainPID is the identity: the start script execs Claude.
    assert_eq!(op.target_before, Some(before.to_string()));
    let after = sysd.main_pid(UNIT);
    assert_ne!(after, before);
    assert_eq!(op.target_after, Some(after.to_string()));
    assert_candidate_verifies(&rig, &op);
    // Each stage ran in its own transient scope, in the very process the
    // hook or the previous stage started (a scope keeps the pid).
    let (_, journal, _) = sysd.run(&["journalctl", "--no-pager", "-o", "cat"]);
    let log = fs::read_to_string(rig.sandbox.state.join("worker.log")).unwrap();
    for stage in ["prepare", "verify", "activate"] {
        let scope = format!("ktr-{}-{stage}.scope", op.id);
        assert!(
            journal.contains(&scope),
            "no {scope} in the journal:\n{journal}"
        );
        let notes: Vec<&str> = op.history.iter().map(|t| t.note.as_str()).collect();
        let pid = [
            format!("started {stage} (pid "),
            format!("started ktr-{stage} (pid "),
        ]
        .iter()
        .find_map(|needle| {
            let text = notes
                .iter()
                .copied()
                .chain(log.lines())
                .find(|l| l.contains(needle.as_str()))?;
            let rest = &text[text.find(needle.as_str())? + needle.len()..];
            Some(rest[..rest.find(')')?].to_string())
        })
        .unwrap_or_else(|| panic!("who started {stage}?\n{log}"));
        assert!(
            log.contains(&format!("ktr-{stage}[{pid}]")),
            "{stage} did not run as pid {pid}:\n{log}"
        );
    }
}

/// A rollback through systemd when the rebuilt session holds an exchange
/// said since the switch: the unit is restarted on a restore session (the
/// old transcript's bytes, then that exchange chained on), never on the
/// old session itself; the old transcript's bytes are unchanged.
#[test]
#[ignore = "needs a real systemd (root, cgroup2)"]
fn systemd_a_rollback_takes_the_turns_said_since_the_switch_along() {
    let rig = Rig::with(Kind::Systemd, "", &[]);
    let op = rig.rebuild();
    assert_eq!(op.status, Activated, "{:?}", op.error);
    let candidate = op.candidate.clone().unwrap();
    let old_bytes = fs::read(&rig.source).unwrap();
    let last = last_speech_uuid(&fs::read_to_string(&candidate.path).unwrap());
    let sid = candidate.session_id.as_str();
    append_lines(
        &candidate.path,
        &[
            serde_json::json!({"type": "user", "uuid": "since-q", "parentUuid": last,
                "sessionId": sid, "timestamp": "2026-12-04T10:00:00Z",
                "message": {"role": "user", "content": "SINCE-Q asked after the switch"}})
            .to_string(),
            serde_json::json!({"type": "assistant", "uuid": "since-a", "parentUuid": "since-q",
                "sessionId": sid, "timestamp": "2026-12-04T10:00:01Z",
                "message": {"role": "assistant", "content": [{"type": "text", "text": "SINCE-A"}]}})
            .to_string(),
        ],
    );
    rig.store().rollback_request(&op.id, "ROLLBACK").unwrap();
    rig.stop(&candidate.session_id, &candidate.path);
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, RolledBack, "{:?}", op.error);
    let restore = op.restore.clone().expect("a restore session");
    assert_eq!((restore.turns, restore.new_records), (1, 2));
    assert_eq!(
        fs::read_to_string(&rig.pointer).unwrap(),
        format!("{}\n", restore.session_id)
    );
    assert_eq!(rig.resumed().as_deref(), Some(restore.session_id.as_str()));
    assert_eq!(fs::read(&rig.source).unwrap(), old_bytes);
    let restored = fs::read_to_string(&restore.path).unwrap();
    assert!(restored.as_bytes().starts_with(&old_bytes));
    let rebuilt = fs::read_to_string(&candidate.path).unwrap();
    assert_eq!(
        restored.lines().last(),
        rebuilt.lines().last(),
        "the reply comes along verbatim"
    );
    let asked = restored.lines().rev().nth(1).unwrap();
    let asked: serde_json::Value = serde_json::from_str(asked).unwrap();
    let old_last = last_speech_uuid(&String::from_utf8(old_bytes).unwrap());
    assert_eq!(
        asked["parentUuid"],
        old_last.as_str(),
        "chained onto the old conversation"
    );
}

#[test]
fn pointer_mode_runs_the_whole_pipeline_by_hand() {
    let rig = Rig::with(Kind::Pointer, "", &[]);
    let run = |args: &[&str]| {
        let out = Command::new(crate::support::exe("ktr-prepare"))
            .env_clear()
            .env("HOME", &rig.sandbox.home)
            .env("PATH", "/usr/bin:/bin")
            .envs(rig.hook_env())
            .arg("--config")
            .arg(&rig.sandbox.config)
            .arg("--transcript")
            .arg(&rig.source)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (code, _, err) = run(&[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("pass --confirm REBUILD"), "{err}");
    let (code, _, err) = run(&["--confirm", "rebuild"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("confirmation must be exactly REBUILD"),
        "{err}"
    );
    assert!(rig.store().list().unwrap().is_empty(), "nothing requested");

    let (code, out, err) = run(&["--confirm", "REBUILD", "--reason", "nightly"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let op = rig.store().latest().unwrap().unwrap();
    assert_eq!(op.status, Activated, "{:?}", op.error);
    assert!(
        out.starts_with(&format!("operation {}: activated", op.id)),
        "{out}"
    );
    for stage in ["ktr-prepare", "ktr-verify", "ktr-activate"] {
        assert!(
            err.contains(&format!("{stage}[")),
            "{stage} step lines: {err}"
        );
    }
    let new_id = op.candidate.as_ref().unwrap().session_id.clone();
    assert_eq!(
        fs::read_to_string(&rig.pointer).unwrap(),
        format!("{new_id}\n")
    );
    assert_eq!(
        (op.target_before.as_deref(), op.target_after.as_deref()),
        (Some(SRC), Some(new_id.as_str()))
    );
    assert_eq!(op.reasons, ["nightly"]);
    assert_eq!(op.session_id.as_deref(), Some(SRC));
}

#[test]
fn stages_refuse_an_operation_in_the_wrong_status() {
    let rig = Rig::tmux();
    let op = rig.request();
    for stage in ["ktr-prepare", "ktr-verify", "ktr-activate", "ktr-rollback"] {
        let out = Command::new(crate::support::rig::stage_binary(stage))
            .env_clear()
            .env("HOME", &rig.sandbox.home)
            .envs(rig.hook_env())
            .args(["--config"])
            .arg(&rig.sandbox.config)
            .args(["--operation", &op.id])
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{stage}: {err}");
        assert!(err.contains("is pending, not"), "{stage}: {err}");
    }
    assert_eq!(
        rig.store().load(&op.id).unwrap().status,
        Pending,
        "untouched"
    );
    let out = crate::support::isolated(&mut Command::new(crate::support::rig::stage_binary(
        "ktr-verify",
    )))
    .args(["--operation", "../x"])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The keyboard is never held (keys typed during a hold were
/// lost); what ktr does is on the pane's top border instead, which stays
/// visible while a person types: "switching" from the gate up to the end
/// of the switch, "waits for you" while it waits, nothing once done.
#[test]
fn tmux_the_pane_border_says_what_ktr_does_and_the_keyboard_is_never_held() {
    let mut rig = Rig::tmux();
    assert_eq!(rig.notice(), None);
    let op = rig.rebuild_paused_at("activate:switched");
    assert_eq!(rig.notice().as_deref(), Some(SWITCHING_NOTICE));
    assert!(!rig.input_off(), "keys are never held");
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Activated, "{:?}", op.error);
    // The stage takes it down right after it recorded the outcome.
    assert!(
        notice_gone(&rig),
        "taken down once it runs: {:?}",
        rig.notice()
    );

    // A switch called off for the person (a prompt refused while the gate
    // was up) leaves the waiting line up; the next switch takes it down.
    rig.pause_at = Some("activate:checked".into());
    let op = rig.request();
    let current = rig.resumed().unwrap();
    rig.stop_current();
    rig.wait_paused();
    let input = serde_json::json!({
        "session_id": current, "hook_event_name": "UserPromptSubmit", "prompt": "还有一件事",
    });
    rig.hook_from_claude(
        &current,
        crate::support::exe("ktr-prompt"),
        &input.to_string(),
    );
    rig.unpause();
    let op = rig.wait_until(&op.id, |o| o.status == Pending);
    assert!(op.deferred.is_some(), "{op:#?}");
    let waiting = crate::support::wait_for(std::time::Duration::from_secs(5), || {
        rig.notice().as_deref() == Some(WAITING_NOTICE)
    });
    assert!(waiting, "{:?}", rig.notice());
    assert!(!rig.input_off());
    rig.pause_at = None;
    rig.stop_current();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Activated, "{:?}", op.error);
    assert!(notice_gone(&rig), "{:?}", rig.notice());
}

/// ktr's notice leaves the pane's border within 5 s.
fn notice_gone(rig: &Rig) -> bool {
    crate::support::wait_for(std::time::Duration::from_secs(5), || rig.notice().is_none())
}

#[test]
fn tmux_a_prompt_refused_while_the_gate_is_up_calls_the_switch_off() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild_paused_at("activate:checked");
    // The gate is up: Claude Code runs ktr-prompt for a prompt typed now.
    let input = serde_json::json!({
        "session_id": SRC,
        "hook_event_name": "UserPromptSubmit",
        "prompt": "还有一件事",
    });
    let (out, code) =
        rig.hook_from_claude(SRC, crate::support::exe("ktr-prompt"), &input.to_string());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("not sent"), "refused: {out}");
    rig.unpause();
    // The stand-in's pane shows no input box: only the recorded refusal
    // can call the switch off.
    let op = rig.wait_until(&op.id, |o| o.status != Activating && o.status != Verifying);
    assert_eq!(op.status, Pending, "{:#?}", op.history);
    let why = op.deferred.unwrap_or_default();
    assert!(why.contains("refused by ktr-prompt"), "{why}");
    assert_eq!(rig.resume_history(), [SRC], "claude was never respawned");
    assert!(!rig.input_off(), "the keyboard was never held");
}

/// A prompt ending with ktr's own switch line is a collision: ktr-prompt
/// refuses it saying so and records the person's part of it and the
/// session of ktr's line; any other prompt is refused as before.
#[test]
fn tmux_ktr_prompt_tells_a_collision_with_the_switch_line_from_a_prompt() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild_paused_at("activate:checked");
    let candidate = rig.store().load(&op.id).unwrap().candidate.unwrap();
    let prompt = |text: &str| {
        let input = serde_json::json!({
            "session_id": SRC, "hook_event_name": "UserPromptSubmit", "prompt": text,
        });
        let cmd = rig.program(crate::support::exe("ktr-prompt"));
        let (out, code) =
            crate::support::Sandbox::run_hook(cmd, &input.to_string(), &rig.hook_env());
        assert_eq!(code, 0, "{out}");
        out
    };
    let line = ktr_pipeline::targets::resume_line(
        &SessionId::parse(candidate.session_id.as_str()).unwrap(),
    );
    let out = prompt(&format!("my draft words{line}"));
    assert!(
        out.contains("ktr typed its switch line while you were typing"),
        "{out}"
    );
    let out = prompt(&format!("{line} and more"));
    assert!(
        out.contains("not sent") && !out.contains("switch line"),
        "{out}"
    );
    let op = rig.store().load(&op.id).unwrap();
    let blocked: Vec<_> = op
        .blocked_prompts
        .iter()
        .map(|p| (p.text.as_str(), p.collided_with.as_deref()))
        .collect();
    assert_eq!(
        blocked,
        [
            ("my draft words", Some(candidate.session_id.as_str())),
            (format!("{line} and more").as_str(), None),
        ]
    );
    rig.unpause();
    let op = rig.wait_until(&op.id, |o| o.status != Activating);
    assert_eq!(op.status, Pending, "{:#?}", op.history);
}

#[test]
fn a_long_step_shows_its_progress_in_status_mcp_and_the_statusline() {
    let mut rig = Rig::tmux();
    let total = fs::metadata(&rig.source).unwrap().len();
    let op = rig.rebuild_paused_at("prepare:planning");

    let json: serde_json::Value =
        serde_json::from_str(&rig.ktr(&["status", &op.id, "--json"])).unwrap();
    let progress = &json["progress"];
    assert_eq!(progress["stage"], "prepare", "{json:#}");
    assert_eq!(progress["step"], "planning");
    assert_eq!(progress["total_bytes"], total);
    assert_eq!(
        progress["done_bytes"], 0,
        "paused before the scan read anything"
    );
    assert_eq!(progress["percent"], 0);
    let status = ktr_status(&rig, &op.id);
    assert!(
        status.contains("progress          prepare: planning 0 of 0 MB (0 %)"),
        "{status}"
    );
    let statusline = serde_json::json!({
        "session_id": SRC, "transcript_path": rig.source, "model": {"id": "x"},
        "context_window": {"context_window_size": 200_000, "current_usage": {"input_tokens": 5}},
    });
    let (shown, code) = rig.sandbox.hook_env(
        crate::support::exe("ktr-statusline"),
        &statusline.to_string(),
        &rig.hook_env(),
    );
    assert_eq!(code, 0);
    assert!(shown.contains("ktr 0% of 200k · rebuilding 0%"), "{shown}");
    let (mut mcp, _) = crate::mcp::Client::start(&rig.sandbox, Some(SRC));
    let (failed, shown) = mcp.call(
        "thread_rebuild_status",
        serde_json::json!({"operation_id": op.id.to_string()}),
    );
    assert!(!failed, "{shown}");
    // (The file is rewritten every second: `updated_at` moves on.)
    for field in ["stage", "step", "done_bytes", "total_bytes", "line"] {
        assert_eq!(
            shown["operation"]["progress"][field], progress[field],
            "{field}: {shown:#}"
        );
    }

    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Activated, "{:?}", op.error);
    let json: serde_json::Value =
        serde_json::from_str(&rig.ktr(&["status", &op.id, "--json"])).unwrap();
    assert!(json.get("progress").is_none(), "{json:#}");
    let file = rig.store().progress_path(&op.id);
    assert!(!file.exists(), "{} left behind", file.display());
}
