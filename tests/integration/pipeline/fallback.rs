//! Fallback, rollback, cancel, a second request, a tampered candidate, long transcripts, refusals.

use super::*;
use crate::support::rig::{Kind, Rig, SRC, UNHEALTHY_WINDOW};
use ktr_pipeline::operation::manifest;
use std::fs;

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
