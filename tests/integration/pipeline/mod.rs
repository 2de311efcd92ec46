//! The rebuild pipeline end to end through the real binaries: `ktr-stop`
//! fed a Stop JSON starts `ktr-prepare`, which hands over to `ktr-verify`
//! and `ktr-activate`, against a private tmux server whose pane runs the
//! stand-in claude (or the stand-in systemd unit, or a pointer file).

mod changes;
mod fallback;
mod receipts;
mod targets;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::support::rig::{Rig, SRC};
use ktr_base::digest::sha256_hex;
use ktr_engine::conserve::{Expected, check};
use ktr_pipeline::operation::{Operation, Status, manifest};

use Status::*;

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

/// `ktr status OP` as a human reads it.
fn ktr_status(rig: &Rig, id: &str) -> String {
    rig.ktr(&["status", id])
}

/// Append whole lines to a transcript, as Claude Code does.
pub(crate) fn append_lines(path: &std::path::Path, lines: &[String]) {
    let mut file = fs::OpenOptions::new().append(true).open(path).unwrap();
    for line in lines {
        std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).unwrap();
    }
}
