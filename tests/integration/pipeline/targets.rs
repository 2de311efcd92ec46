//! The systemd and pointer targets; stages in the wrong status; the pane border, the gate, progress.

use super::*;
use crate::support::rig::{Kind, Rig, SRC, UNIT};
use ktr_base::ids::SessionId;
use ktr_pipeline::targets::{SWITCHING_NOTICE, WAITING_NOTICE};
use std::fs;
use std::process::Command;

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
