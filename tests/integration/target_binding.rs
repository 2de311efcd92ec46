//! The target must run the session being rebuilt: two Claude
//! Code sessions in one project, only one of them in the target. A rebuild
//! of the other is refused before anything is killed; the running one is
//! rebuilt; a pane started from a shell works; the fallback puts back
//! exactly what ran. tmux, a real systemd, and a pointer file.

use std::fs;
use std::process::Command;
use std::time::Duration;

use crate::support::rig::{Kind, Rig, SRC, UNHEALTHY_WINDOW, UNIT};
use crate::support::{stand_in, wait_for};
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::{Operation, Status};

/// The second session of the project (not in the target).
const OTHER: &str = "b7e2c4d1-9a3f-4c5e-8d21-6f0a1b2c3d4e";

/// Request a rebuild bound to `session` (as `ktr request --session` or
/// that session's MCP tool would), run that session's Stop hook and wait.
fn rebuild_of(rig: &Rig, session: &str) -> Operation {
    let op = rig
        .store()
        .request(
            "test rebuild",
            "REBUILD",
            Some(&SessionId::parse(session).unwrap()),
        )
        .unwrap();
    let transcript = rig.sandbox.project.join(format!("{session}.jsonl"));
    rig.stop(session, &transcript);
    rig.wait_terminal(&op.id)
}

/// The refusal when the target runs another session: failed before prepare wrote anything, naming
/// both sessions, with the target untouched.
#[track_caller]
fn assert_refused_for_the_other(rig: &Rig, op: &Operation, expected: &str) {
    assert_eq!(op.status, Status::Failed, "{op:#?}");
    let error = op.error.as_deref().unwrap();
    assert!(error.contains(expected), "{error}");
    assert!(
        error.contains(OTHER) && error.ends_with("not switching"),
        "{error}"
    );
    assert!(op.session_conflict);
    assert!(op.candidate.is_none(), "nothing was prepared");
    assert_eq!(
        rig.transcripts(),
        [format!("{SRC}.jsonl"), format!("{OTHER}.jsonl")],
        "no candidate written"
    );
}

#[test]
fn tmux_a_rebuild_of_the_session_the_pane_does_not_run_is_refused() {
    let rig = Rig::tmux();
    rig.second_session(OTHER);
    let bystander = rig.bystander(OTHER);
    let pane = rig.pane_pid();
    let op = rebuild_of(&rig, OTHER);
    assert_eq!(
        op.claude.map(|c| c.pid),
        Some(bystander),
        "the Stop hook's Claude"
    );
    let expected = format!(
        "target tmux pane t:0.0 (server -L {}) runs pid {pane} (session 5d1c9a8e…), not the Claude of session {OTHER} (pid {bystander})",
        rig.tmux.as_ref().unwrap().socket
    );
    assert_refused_for_the_other(&rig, &op, &expected);
    assert_eq!(rig.pane_pid(), pane, "the pane was not touched");
    assert!(ktr_pipeline::process::pid_alive(bystander));
    assert_eq!(rig.resume_history(), [SRC, OTHER]);

    // The CLI refuses such a request up front: it can see what the pane runs.
    let out = rig
        .program(crate::support::exe("ktr"))
        .envs(rig.hook_env())
        .args(["request", "--confirm", "REBUILD", "--session", OTHER])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("runs session {SRC}, not {OTHER}")),
        "{stderr}"
    );

    // The session the pane runs is rebuilt, from its own Stop hook.
    let op = rebuild_of(&rig, SRC);
    assert_eq!(op.status, Status::Activated, "{:?}", op.error);
    let new_id = op.candidate.unwrap().session_id;
    assert_eq!(rig.resumed().as_deref(), Some(new_id.as_str()));
    assert!(
        ktr_pipeline::process::pid_alive(bystander),
        "the other session lives on"
    );
}

#[test]
fn tmux_a_pane_started_from_a_shell_is_switched_and_a_claude_restarted_there_is_not() {
    let mut rig = Rig::tmux();
    let claude = stand_in("fake-claude").display().to_string();
    // A shell runs claude; when it exits the shell starts it again (a
    // restart by hand in the same pane: the pane's pid stays the shell's).
    let script = format!("while :; do {claude} --resume {SRC}; done");
    rig.respawn_pane(&["sh", "-c", &script]);
    let shell = rig.pane_pid();
    // Claude is a child of the shell (not the claude the pane ran before,
    // which may still be going away).
    let shell_pid: u32 = shell.parse().unwrap();
    let mut first = None;
    assert!(wait_for(Duration::from_secs(10), || {
        first = rig.claude_started_by(SRC, shell_pid);
        first.is_some()
    }));
    let first = first.unwrap();

    // Restarted by hand between the Stop hook and the switch: refused.
    let op = rig.rebuild_paused_at("activate:start");
    let killed = Command::new("kill")
        .arg(first.to_string())
        .status()
        .unwrap();
    assert!(killed.success(), "the shell's claude {first} was running");
    assert!(wait_for(Duration::from_secs(10), || rig
        .claude_started_by(SRC, shell_pid)
        .is_some_and(|p| p != first)));
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Status::Failed);
    let error = op.error.unwrap();
    assert!(
        error.contains(&format!(
            "not the Claude of session {SRC} (pid {first}, which has exited)"
        )),
        "{error}"
    );
    assert_eq!(rig.pane_pid(), shell, "the shell pane was not touched");

    // The claude now running in the shell is switched.
    rig.pause_at = None;
    let op = rig.rebuild();
    assert_eq!(op.status, Status::Activated, "{:?}", op.error);
    let new_id = op.candidate.unwrap().session_id;
    assert_eq!(rig.resumed().as_deref(), Some(new_id.as_str()));
    assert_ne!(rig.pane_pid(), shell, "the pane runs claude directly now");
}

#[test]
fn tmux_the_fallback_puts_back_exactly_what_ran() {
    let rig = Rig::with(Kind::Tmux, UNHEALTHY_WINDOW, &[("FAKE_CLAUDE_ONLY", SRC)]);
    let claude = stand_in("fake-claude").display().to_string();
    // Not resume_command: other flags, another directory.
    let elsewhere = rig.sandbox.root().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    let cd = format!(
        "cd {} && exec {claude} --model opus --resume {SRC} --append-system-prompt 'be brief'",
        elsewhere.display()
    );
    rig.respawn_pane(&["sh", "-c", &cd]);
    // The pane runs it once its record names the other directory (the
    // process exists a moment before the stand-in writes its record).
    let there = format!("cwd={}\n", elsewhere.canonicalize().unwrap().display());
    assert!(wait_for(Duration::from_secs(10), || {
        rig.claude_of(SRC)
            .is_some_and(|p| p.to_string() == rig.pane_pid())
            && fs::read_to_string(&rig.record).is_ok_and(|r| r.starts_with(&there))
    }));
    let ran = fs::read_to_string(&rig.record).unwrap();

    let op = rig.rebuild();
    assert_eq!(op.status, Status::RolledBack, "{:?}", op.error);
    let new_id = op.candidate.as_ref().unwrap().session_id.clone();
    // (The first, replaced claude may be killed before it logs its resume.)
    let history = rig.resume_history();
    assert_eq!(
        history[history.len() - 2..],
        [new_id.as_str(), SRC],
        "{history:?}"
    );
    let recorded = op.target_ran.clone().unwrap();
    assert_eq!(recorded.session, SRC);
    assert_eq!(
        recorded.argv,
        [
            "/bin/sh",
            &claude,
            "--model",
            "opus",
            "--resume",
            SRC,
            "--append-system-prompt",
            "be brief"
        ]
    );
    // Same command line, same directory, same marker as before the switch.
    assert_eq!(fs::read_to_string(&rig.record).unwrap(), ran);
}

#[test]
fn pointer_a_rebuild_of_the_session_the_pointer_does_not_name_is_refused() {
    let rig = Rig::with(Kind::Pointer, "", &[]);
    rig.second_session(OTHER);
    let op = rebuild_of(&rig, OTHER);
    let expected = format!(
        "pointer file {} names session {SRC}, not session {OTHER}",
        rig.pointer.display()
    );
    assert_refused_for_the_other(&rig, &op, &expected);
    assert_eq!(
        fs::read_to_string(&rig.pointer).unwrap(),
        format!("{SRC}\n")
    );
}

#[test]
#[ignore = "needs a real systemd (root, cgroup2)"]
fn systemd_a_rebuild_of_the_session_the_unit_does_not_run_is_refused() {
    let rig = Rig::with(Kind::Systemd, "", &[]);
    let sysd = rig.sysd.as_ref().unwrap();
    rig.second_session(OTHER);
    rig.bystander(OTHER);
    let main_pid = sysd.main_pid(UNIT);
    let op = rebuild_of(&rig, OTHER);
    let expected = format!(
        "target systemd unit {UNIT} runs pid {main_pid} (session 5d1c9a8e…), not the Claude of session {OTHER}"
    );
    assert_refused_for_the_other(&rig, &op, &expected);
    assert_eq!(sysd.main_pid(UNIT), main_pid, "the unit was not restarted");
    assert_eq!(
        fs::read_to_string(&rig.pointer).unwrap(),
        format!("{SRC}\n")
    );
}

#[test]
#[ignore = "needs a real systemd (root, cgroup2)"]
fn systemd_an_unhealthy_session_crash_looping_into_the_start_limit_is_still_undone() {
    // Restart=always: the new session exits at once and crash-loops into
    // systemd's start limit; the fallback resets it and resumes the old one.
    let mut rig = Rig::with(Kind::Systemd, "", &[("FAKE_CLAUDE_ONLY", SRC)]);
    let op = rig.rebuild_paused_at("activate:switched");
    let sysd = rig.sysd.as_ref().unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || sysd
            .property(UNIT, "ActiveState")
            == "failed"
            && sysd.property(UNIT, "NRestarts") != "0"),
        "the new session never crash-looped into the start limit: {}\n{}",
        sysd.systemctl(&["cat", UNIT]),
        sysd.run(&["journalctl", "--no-pager", "-o", "cat", "-u", UNIT])
            .1
    );
    assert_eq!(sysd.main_pid(UNIT), 0, "Claude is down");
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    let sysd = rig.sysd.as_ref().unwrap();
    assert_eq!(op.status, Status::RolledBack, "{:?}", op.error);
    // The reason says why it went down, not only "process 0 is not running".
    let error = op.error.clone().unwrap_or_default();
    for why in [
        format!("unit {UNIT}: failed/failed, result exit-code"),
        "last run exited with status".to_string(),
        "start limit hit".to_string(),
        format!("see `journalctl -u {UNIT} -n 50`"),
    ] {
        assert!(error.contains(&why), "{why:?} missing from: {error}");
    }
    let new_id = op.candidate.as_ref().unwrap().session_id.clone();
    assert!(
        rig.resume_history().contains(&new_id.to_string()),
        "the new session was tried"
    );
    assert_eq!(
        rig.resumed().as_deref(),
        Some(SRC),
        "the old session runs again"
    );
    assert_eq!(
        fs::read_to_string(&rig.pointer).unwrap(),
        format!("{SRC}\n")
    );
    assert_eq!(sysd.property(UNIT, "ActiveState"), "active");
    let main_pid = sysd.main_pid(UNIT);
    assert_eq!(op.target_after, Some(main_pid.to_string()));
    let (_, journal, _) = sysd.run(&["journalctl", "--no-pager", "-o", "cat", "-u", UNIT]);
    assert!(
        journal.contains("Start request repeated too quickly"),
        "the start limit was hit:\n{journal}"
    );
}

#[test]
#[ignore = "needs a real systemd (root, cgroup2)"]
fn systemd_a_refused_restart_puts_the_pointer_back() {
    let mut rig = Rig::with(Kind::Systemd, "", &[]);
    let main_pid = rig.sysd.as_ref().unwrap().main_pid(UNIT);
    let op = rig.rebuild_paused_at("activate:start");
    let sysd = rig.sysd.as_ref().unwrap();
    // Between the checks and the switch the unit stops accepting restarts.
    let dropin = sysd.dir.join(format!("etc-system/{UNIT}.d"));
    fs::create_dir_all(&dropin).unwrap();
    fs::write(
        dropin.join("refuse.conf"),
        "[Unit]\nRefuseManualStart=yes\n",
    )
    .unwrap();
    sysd.systemctl(&["daemon-reload"]);
    rig.unpause();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Status::Failed);
    let error = op.error.unwrap();
    assert!(
        error.contains("switch failed, old session untouched"),
        "{error}"
    );
    assert!(error.contains("pointer put back"), "{error}");
    assert_eq!(
        fs::read_to_string(&rig.pointer).unwrap(),
        format!("{SRC}\n"),
        "the next ordinary restart resumes the old session, not a candidate that never ran"
    );
    assert_eq!(sysd.main_pid(UNIT), main_pid, "Claude kept running");
    assert_eq!(sysd.property(UNIT, "ActiveState"), "active");
}

#[test]
#[ignore = "needs a real systemd (root, cgroup2)"]
fn systemd_a_failing_systemd_run_is_reported_and_the_request_stays_pending() {
    let rig = Rig::with(Kind::Systemd, "", &[]);
    let sysd = rig.sysd.as_ref().unwrap();
    let op = rig.request();
    // Someone holds the scope name prepare would run in.
    let scope = format!("ktr-{}-prepare", op.id);
    let mut holder = sysd
        .command(&[
            "systemd-run",
            "--scope",
            "--quiet",
            "--unit",
            &scope,
            "--",
            "sleep",
            "600",
        ])
        .spawn()
        .unwrap();
    let unit = format!("{scope}.scope");
    assert!(wait_for(Duration::from_secs(10), || sysd
        .property(&unit, "ActiveState")
        == "active"));
    let out = rig.stop_source();
    assert!(
        out.contains("systemd-run could not start ktr-prepare in its own scope")
            && out.contains("was already loaded")
            && out.contains(&format!("operation {} stays pending", op.id)),
        "{out}"
    );
    assert_eq!(rig.store().load(&op.id).unwrap().status, Status::Pending);
    let log = fs::read_to_string(rig.sandbox.state.join("worker.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.ends_with(&format!("for operation {}", op.id))
                && l.contains(" starting systemd-run --scope")),
        "worker.log says when and what was started:\n{log}"
    );
    // Once the name is free the next Stop goes all the way.
    sysd.systemctl(&["stop", &unit]);
    let _ = holder.wait();
    rig.stop_source();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Status::Activated, "{:?}", op.error);
}

/// `ktr doctor --json` run like a hook of the rig: name → (ok, detail).
fn doctor(rig: &Rig) -> Vec<(String, bool, String)> {
    let out = rig
        .program(crate::support::exe("ktr"))
        .envs(rig.hook_env())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["ok"].as_bool().unwrap(),
                c["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[track_caller]
fn check(checks: &[(String, bool, String)], name: &str) -> (bool, String) {
    let (_, ok, detail) = checks
        .iter()
        .find(|(n, _, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} check in {checks:?}"));
    (*ok, detail.clone())
}

#[test]
#[ignore = "needs a real systemd (root, cgroup2)"]
fn systemd_doctor_checks_the_unit_the_pointer_and_systemd_run() {
    let rig = Rig::with(Kind::Systemd, "", &[]);
    let sysd = rig.sysd.as_ref().unwrap();
    let main_pid = sysd.main_pid(UNIT);
    let checks = doctor(&rig);
    let (ok, detail) = check(&checks, "target");
    assert!(
        ok && detail.contains(&format!("runs pid {main_pid} with session {SRC}")),
        "{detail}"
    );
    let (ok, detail) = check(&checks, "systemd unit");
    assert!(ok && detail.contains("loaded, active/running"), "{detail}");
    assert!(check(&checks, "pointer").0, "{checks:?}");
    assert!(check(&checks, "systemd-run").0, "{checks:?}");
    assert!(check(&checks, "systemd rights").0, "root may restart");

    // The pointer names another session than the one running.
    fs::write(&rig.pointer, format!("{OTHER}\n")).unwrap();
    let (ok, detail) = check(&doctor(&rig), "pointer");
    assert!(
        !ok && detail.contains(&format!(
            "names \"{OTHER}\" but the unit runs session {SRC}"
        )),
        "{detail}"
    );
    fs::write(&rig.pointer, format!("{SRC}\n")).unwrap();

    // No pointer yet (the unit's first start): a warning that names the
    // session to write and how, not a failure.
    fs::remove_file(&rig.pointer).unwrap();
    let checks = doctor(&rig);
    let (ok, detail) = check(&checks, "pointer");
    assert!(
        ok && detail.contains("does not exist yet (the unit's first start)")
            && detail.contains(SRC),
        "{detail}"
    );
    fs::write(&rig.pointer, format!("{SRC}\n")).unwrap();

    // Stopped: MainPID 0 with exit 0 is not "ok".
    sysd.systemctl(&["stop", UNIT]);
    let (ok, detail) = check(&doctor(&rig), "systemd unit");
    assert!(
        !ok && detail.contains("is not running Claude Code"),
        "{detail}"
    );

    // A unit that does not exist.
    rig.write_config("systemd_unit = \"nosuch.service\"");
    let (ok, detail) = check(&doctor(&rig), "systemd unit");
    assert!(
        !ok && detail.contains("nosuch.service is not installed (LoadState=not-found)"),
        "{detail}"
    );
    // …and nothing is said "ok" about a unit that is not there.
    let said: Vec<String> = doctor(&rig).into_iter().map(|(name, _, _)| name).collect();
    for name in ["target", "pointer", "systemd rights", "systemd-run"] {
        assert!(!said.iter().any(|n| n == name), "{name} checked: {said:?}");
    }
}

/// `ktr request --confirm REBUILD` as a human types it (unbound): the CLI
/// records what the target runs at that moment.
fn request_by_hand(rig: &Rig) -> Operation {
    rig.ktr(&["request", "--confirm", "REBUILD"]);
    rig.store().latest().unwrap().unwrap()
}

#[test]
fn tmux_a_claude_started_by_hand_after_the_request_is_not_the_baseline() {
    let rig = Rig::tmux();
    // At the request the pane runs a shell, no Claude: nothing to bind to.
    rig.respawn_pane(&["sleep", "3600"]);
    let idle = rig.pane_pid();
    let op = request_by_hand(&rig);
    let seen = op.requested_target.clone().unwrap();
    assert_eq!(
        (seen.identity.as_str(), seen.session),
        (idle.as_str(), None)
    );

    // Then Claude is started there by hand, and its Stop comes first.
    let claude = stand_in("fake-claude").display().to_string();
    rig.respawn_pane(&[&claude, "--resume", SRC]);
    assert!(wait_for(Duration::from_secs(10), || rig
        .claude_of(SRC)
        .is_some()));
    let pane = rig.pane_pid();
    rig.stop_source();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Status::Failed, "{op:#?}");
    let error = op.error.unwrap();
    assert!(
        error.contains(&format!(
            "changed since the rebuild was requested (identity \"{idle}\" → \"{pane}\", session unknown → {SRC})"
        )) && error.contains("request again"),
        "{error}"
    );
    assert!(
        op.candidate.is_none(),
        "refused before anything was written"
    );
    assert_eq!(rig.pane_pid(), pane, "the pane was not touched");
}

#[test]
fn tmux_the_same_session_resumed_by_hand_after_the_request_is_switched() {
    let rig = Rig::tmux();
    let before = rig.pane_pid();
    let op = request_by_hand(&rig);
    let seen = op.requested_target.clone().unwrap();
    assert_eq!(
        (seen.identity.as_str(), seen.session.as_deref()),
        (before.as_str(), Some(SRC))
    );
    assert_eq!(op.session_id.as_deref(), Some(SRC), "bound to what runs");

    // Claude quit and resumed on the same session by hand: a new pid.
    let claude = stand_in("fake-claude").display().to_string();
    rig.respawn_pane(&[&claude, "--resume", SRC]);
    assert!(wait_for(Duration::from_secs(10), || rig
        .claude_of(SRC)
        .is_some_and(|p| p.to_string() != before)));
    rig.stop_source();
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Status::Activated, "{:?}", op.error);
    let new_id = op.candidate.unwrap().session_id;
    assert_eq!(rig.resumed().as_deref(), Some(new_id.as_str()));
}
