//! The receipt (`ktr-ack`): required, recorded, missing, a Claude Code that exits before or soon after it.

use crate::support::rig::{Rig, SRC, UNHEALTHY_WINDOW};
use Status::*;
use ktr_pipeline::operation::{Operation, Status};
use std::fs;

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
