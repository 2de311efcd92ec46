//! The Stop hook (`ktr-stop`) and the `SessionStart` hook (`ktr-ack`) as
//! Claude Code runs them: real binaries, stdin JSON, stand-in stages.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use crate::support::OptionOrPanic;
use crate::support::Sandbox;
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::{CandidateFile, Operation, Status};
const QUIET: &str = "{\"suppressOutput\":true}\n";
const SESSION: &str = "11111111-2222-4333-8444-555555555555";

/// The `systemMessage` of a hook's stdout.
#[track_caller]
pub(crate) fn message(stdout: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(stdout).unwrap();
    v["systemMessage"]
        .as_str()
        .or_panic(|| format!("no systemMessage: {stdout}"))
        .to_string()
}

#[test]
fn every_hook_answers_help_with_its_usage_not_a_hook_reply() {
    let prompt = crate::support::exe("ktr-prompt");
    for (bin, name) in [
        (crate::support::exe("ktr-stop"), "ktr-stop"),
        (crate::support::exe("ktr-ack"), "ktr-ack"),
        (prompt, "ktr-prompt"),
    ] {
        let out = std::process::Command::new(bin)
            .arg("--help")
            .env_clear()
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name} --help: {stdout}");
        assert!(
            stdout.contains(name) && stdout.contains("--config"),
            "{name} --help prints its usage: {stdout}"
        );
        assert!(
            serde_json::from_str::<serde_json::Value>(&stdout).is_err(),
            "{name} --help must not answer with hook JSON: {stdout}"
        );
    }
}

#[test]
fn nothing_pending_is_silent_and_needs_no_state_dir() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    assert!(!sandbox.state.exists());
    assert_eq!(
        sandbox.hook(
            crate::support::exe("ktr-stop"),
            &sandbox.stop_input(SESSION, &transcript)
        ),
        (QUIET.into(), 0)
    );
    assert!(!sandbox.state.exists(), "the fast path creates nothing");
    // An operation that is already running is not the hook's business either.
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    sandbox.walk(&op.id, &[Status::Scheduled, Status::Running], |_| {});
    assert_eq!(
        sandbox.hook(
            crate::support::exe("ktr-stop"),
            &sandbox.stop_input(SESSION, &transcript)
        ),
        (QUIET.into(), 0)
    );
    assert!(sandbox.records("ktr-prepare").is_empty());
}

#[test]
fn garbage_input_never_schedules_and_says_why() {
    let sandbox = Sandbox::new();
    // Garbage with nothing to do: silent.
    assert_eq!(
        sandbox.hook(crate::support::exe("ktr-stop"), "\u{0}not json"),
        (QUIET.into(), 0)
    );
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    for garbage in [
        "",
        "not json",
        "[1,2]",
        "{\"session_id\": 5}",
        "{\"session_id\":\"../x\",\"transcript_path\":\"/t\"}",
    ] {
        let (out, code) = sandbox.hook(crate::support::exe("ktr-stop"), garbage);
        assert_eq!(code, 0);
        let m = message(&out);
        assert!(
            m.starts_with("ktr: ") && m.ends_with(&format!("operation {} stays pending", op.id)),
            "{m}"
        );
    }
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(2 << 20));
    let (out, code) = sandbox.hook(crate::support::exe("ktr-stop"), &huge);
    assert_eq!(code, 0);
    assert!(message(&out).contains("larger than 1 MiB"));
    assert_eq!(
        sandbox.store().load(&op.id).unwrap().status,
        Status::Pending
    );
    assert!(sandbox.records("ktr-prepare").is_empty());
}

#[test]
fn a_broken_config_never_schedules_and_names_the_problem() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    let input = sandbox.stop_input(SESSION, &transcript);

    sandbox.write_config("healthcheck_secs = 5");
    let (out, code) = sandbox.hook(crate::support::exe("ktr-stop"), &input);
    assert_eq!(code, 0);
    let m = message(&out);
    assert!(
        m.contains("healthcheck_secs") && m.contains("stays pending"),
        "{m}"
    );

    fs::write(&sandbox.config, "state_dir = [").unwrap();
    let (out, code) = sandbox.hook(crate::support::exe("ktr-stop"), &input);
    assert_eq!(code, 0);
    assert!(message(&out).contains("is not valid TOML"), "{out}");

    // A config that is not there is an error, never the default state dir
    // (on an operator's machine that is the live installation).
    fs::remove_file(&sandbox.config).unwrap();
    let (out, code) = sandbox.hook(crate::support::exe("ktr-stop"), &input);
    assert_eq!(code, 0);
    assert!(message(&out).contains("does not exist"), "{out}");
    assert_eq!(
        sandbox.store().load(&op.id).unwrap().status,
        Status::Pending
    );
    assert!(sandbox.records("ktr-prepare").is_empty());
}

#[test]
fn pending_is_scheduled_and_prepare_started_detached() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    let (out, code) = sandbox.hook(
        crate::support::exe("ktr-stop"),
        &sandbox.stop_input(SESSION, &transcript),
    );
    assert_eq!(code, 0);
    assert!(
        message(&out).contains(&format!("rebuild scheduled (operation {})", op.id)),
        "{out}"
    );

    let runs = sandbox.wait_records("ktr-prepare", 1);
    assert_eq!(runs.len(), 1);
    let (pid, argv) = &runs[0];
    let config = sandbox.config.to_string_lossy().into_owned();
    let transcript_arg = transcript.to_string_lossy().into_owned();
    assert_eq!(
        argv,
        &[
            "--config",
            &config,
            "--operation",
            &op.id,
            "--transcript",
            &transcript_arg
        ]
    );

    let op = sandbox.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::Scheduled);
    assert_eq!(
        op.session_id.as_deref(),
        Some(SESSION),
        "the first Stop binds the operation"
    );
    assert_eq!(op.transcript_path.as_deref(), Some(transcript.as_path()));
    let worker = op.worker.unwrap();
    assert_eq!((worker.pid, worker.stage.name()), (*pid, "prepare"));
    assert_eq!(
        sandbox.store().active(),
        Some((op.id.clone(), Status::Scheduled))
    );
    let log = sandbox.state.join("worker.log");
    assert_eq!(
        fs::metadata(log).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // The next Stop finds nothing to do.
    assert_eq!(
        sandbox.hook(
            crate::support::exe("ktr-stop"),
            &sandbox.stop_input(SESSION, &transcript)
        ),
        (QUIET.into(), 0)
    );
    assert_eq!(sandbox.records("ktr-prepare").len(), 1);
}

/// Claude Code writes the transcript asynchronously: the Stop hook of a
/// session's first reply can run before the file exists (or while it holds
/// only part of the turn). Under CPU load this raced in CI and the rebuild
/// was silently never scheduled. The path the hook names is enough;
/// ktr-prepare waits for the file to be there and stable.
#[test]
fn a_transcript_not_written_yet_is_scheduled() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.project.join(format!("{SESSION}.jsonl"));
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    let (out, code) = sandbox.hook(
        crate::support::exe("ktr-stop"),
        &sandbox.stop_input(SESSION, &transcript),
    );
    assert_eq!(code, 0);
    assert!(
        message(&out).contains(&format!("rebuild scheduled (operation {})", op.id)),
        "{out}"
    );
    let runs = sandbox.wait_records("ktr-prepare", 1);
    assert_eq!(runs.len(), 1);
    let op = sandbox.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::Scheduled);
    assert_eq!(op.session_id.as_deref(), Some(SESSION));
    assert_eq!(op.transcript_path.as_deref(), Some(transcript.as_path()));

    // Not written yet is no loophole: a missing file elsewhere, or not a
    // .jsonl, still does not bind an unbound operation.
    let sandbox = Sandbox::new();
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    for path in [
        sandbox.root().join(format!("elsewhere/{SESSION}.jsonl")),
        sandbox.project.join("sub").join(format!("{SESSION}.jsonl")),
        sandbox.project.join(format!("{SESSION}.txt")),
    ] {
        assert_eq!(
            sandbox.hook(
                crate::support::exe("ktr-stop"),
                &sandbox.stop_input(SESSION, &path)
            ),
            (QUIET.into(), 0),
            "{}",
            path.display()
        );
    }
    let op = sandbox.store().load(&op.id).unwrap();
    assert_eq!((op.status, op.session_id), (Status::Pending, None));
}

#[test]
fn a_session_bound_operation_ignores_other_sessions() {
    let sandbox = Sandbox::new();
    let mine = "aaaaaaaa-0000-4000-8000-000000000001";
    let other = sandbox.transcript(SESSION);
    let op = sandbox
        .store()
        .request("big", "REBUILD", Some(&SessionId::parse(mine).unwrap()))
        .unwrap();
    assert_eq!(
        sandbox.hook(
            crate::support::exe("ktr-stop"),
            &sandbox.stop_input(SESSION, &other)
        ),
        (QUIET.into(), 0)
    );
    assert_eq!(
        sandbox.store().load(&op.id).unwrap().status,
        Status::Pending
    );
    assert!(sandbox.records("ktr-prepare").is_empty());

    let (out, _) = sandbox.hook(
        crate::support::exe("ktr-stop"),
        &sandbox.stop_input(mine, &sandbox.transcript(mine)),
    );
    assert!(message(&out).contains("scheduled"), "{out}");
    assert_eq!(
        sandbox.store().load(&op.id).unwrap().status,
        Status::Scheduled
    );
}

#[test]
fn an_unbound_operation_ignores_sessions_of_other_projects() {
    let sandbox = Sandbox::new();
    let elsewhere = sandbox.root().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    let foreign = elsewhere.join(format!("{SESSION}.jsonl"));
    fs::write(&foreign, "{}\n").unwrap();
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    assert_eq!(
        sandbox.hook(
            crate::support::exe("ktr-stop"),
            &sandbox.stop_input(SESSION, &foreign)
        ),
        (QUIET.into(), 0)
    );
    // A symlink inside the project that points outside does not count either.
    let link = sandbox.project.join("link.jsonl");
    std::os::unix::fs::symlink(&foreign, &link).unwrap();
    assert_eq!(
        sandbox.hook(
            crate::support::exe("ktr-stop"),
            &sandbox.stop_input(SESSION, &link)
        ),
        (QUIET.into(), 0)
    );
    let op = sandbox.store().load(&op.id).unwrap();
    assert_eq!((op.status, op.session_id), (Status::Pending, None));
}

#[test]
fn a_failed_spawn_leaves_the_operation_pending_and_tells_the_human() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    fs::remove_file(sandbox.bin.join("ktr-prepare")).unwrap();
    let (out, code) = sandbox.hook(
        crate::support::exe("ktr-stop"),
        &sandbox.stop_input(SESSION, &transcript),
    );
    assert_eq!(code, 0);
    let m = message(&out);
    assert!(
        m.contains("cannot start") && m.contains("ktr-prepare") && m.contains("stays pending"),
        "{m}"
    );
    let after = sandbox.store().load(&op.id).unwrap();
    assert_eq!(
        (after.status, after.session_id, after.worker),
        (Status::Pending, None, None)
    );
}

#[test]
fn fifty_simultaneous_stop_hooks_start_exactly_one_worker() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    let input = sandbox.stop_input(SESSION, &transcript);
    let mut children: Vec<_> = (0..50)
        .map(|_| {
            sandbox
                .command(crate::support::exe("ktr-stop"))
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut children {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    assert!(outputs.iter().all(|o| o.status.code() == Some(0)));
    let stdout: Vec<String> = outputs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .collect();
    let scheduled = stdout.iter().filter(|s| s.contains("scheduled")).count();
    // The others are quiet, or (the lock wait is short)
    // say they will retry at the next Stop; none changes anything.
    let quiet = stdout
        .iter()
        .filter(|s| *s == QUIET || s.contains("will retry at the next Stop"))
        .count();
    assert_eq!((scheduled, quiet), (1, 49), "{stdout:?}");
    sandbox.wait_records("ktr-prepare", 1);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(sandbox.records("ktr-prepare").len(), 1);
    let op = sandbox.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::Scheduled);
    assert_eq!(op.history.len(), 1);
}

#[test]
fn systemd_user_mode_starts_the_stage_in_its_own_scope_of_the_user_manager() {
    // The real systemd tests (pipeline, target_binding) run the system
    // manager; a user manager is out of their reach, so the argv is checked
    // against the stand-in here.
    let sandbox = Sandbox::new();
    sandbox.write_config("activation = \"systemd\"\nsystemd_manager = \"user\"");
    std::os::unix::fs::symlink(
        crate::support::stand_in("systemd-run"),
        sandbox.path_dir.join("systemd-run"),
    )
    .unwrap();
    let transcript = sandbox.transcript(SESSION);
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    let (out, _) = sandbox.hook(
        crate::support::exe("ktr-stop"),
        &sandbox.stop_input(SESSION, &transcript),
    );
    assert!(message(&out).contains("scheduled"), "{out}");
    let scope = sandbox.wait_records("systemd-run", 1);
    let stage = sandbox.wait_records("ktr-prepare", 1);
    let prepare = sandbox
        .bin
        .join("ktr-prepare")
        .to_string_lossy()
        .into_owned();
    let unit = format!("ktr-{}-prepare", op.id);
    let expected_prefix = [
        "--user",
        "--scope",
        "--quiet",
        "--collect",
        "--unit",
        &unit,
        "--property",
        "KillMode=process",
        "--",
        &prepare,
    ];
    assert_eq!(scope[0].1[..10], expected_prefix);
    assert_eq!(
        scope[0].1[10..],
        stage[0].1[..],
        "the stage gets the same arguments"
    );
    assert_eq!(scope[0].0, stage[0].0, "the scope runs the stage in place");
    assert_eq!(
        sandbox.store().load(&op.id).unwrap().worker.unwrap().pid,
        stage[0].0
    );
}

fn activated_operation(sandbox: &Sandbox, candidate: &str) -> Operation {
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    use Status::*;
    sandbox.walk(
        &op.id,
        &[Scheduled, Running, Verifying, Activating, Activated],
        |op| {
            op.session_id = Some(ktr_base::ids::SessionId::parse(SESSION).unwrap());
            op.candidate = Some(CandidateFile {
                session_id: ktr_base::ids::SessionId::parse(candidate).unwrap(),
                path: PathBuf::from(format!("/nowhere/{candidate}.jsonl")),
                sha256: ktr_base::digest::Sha256::parse(&"0".repeat(64)).unwrap(),
            });
        },
    )
}

#[test]
fn rollback_pending_starts_rollback_from_the_candidate_session_only() {
    let sandbox = Sandbox::new();
    let candidate = "cccccccc-0000-4000-8000-000000000002";
    let op = activated_operation(&sandbox, candidate);
    sandbox
        .store()
        .rollback_request(&op.id, "ROLLBACK")
        .unwrap();
    let old = sandbox.transcript(SESSION);
    assert_eq!(
        sandbox.hook(
            crate::support::exe("ktr-stop"),
            &sandbox.stop_input(SESSION, &old)
        ),
        (QUIET.into(), 0)
    );
    let (out, _) = sandbox.hook(
        crate::support::exe("ktr-stop"),
        &sandbox.stop_input(candidate, &sandbox.transcript(candidate)),
    );
    assert!(message(&out).contains("rollback scheduled"), "{out}");
    let runs = sandbox.wait_records("ktr-rollback", 1);
    let config = sandbox.config.to_string_lossy().into_owned();
    assert_eq!(
        runs[0].1,
        ["--config", config.as_str(), "--operation", op.id.as_str()]
    );
    let op = sandbox.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::RollbackScheduled);
    assert_eq!(
        op.session_id.as_deref(),
        Some(SESSION),
        "the source session is kept"
    );
    assert!(sandbox.records("ktr-prepare").is_empty());
}

#[test]
fn ack_records_the_measured_context_of_the_resumed_candidate() {
    let sandbox = Sandbox::new();
    let candidate = "cccccccc-0000-4000-8000-000000000003";
    let op = activated_operation(&sandbox, candidate);
    let input = |session: &str, source: &str| {
        serde_json::json!({"session_id": session, "source": source, "context_tokens": 48213, "hook_event_name": "SessionStart"}).to_string()
    };
    // Not a resume, or not the candidate: nothing recorded.
    assert_eq!(
        sandbox.hook(crate::support::exe("ktr-ack"), &input(candidate, "startup")),
        (QUIET.into(), 0)
    );
    assert_eq!(
        sandbox.hook(crate::support::exe("ktr-ack"), &input(SESSION, "resume")),
        (QUIET.into(), 0)
    );
    assert_eq!(
        sandbox.hook(crate::support::exe("ktr-ack"), "garbage"),
        (QUIET.into(), 0)
    );
    assert_eq!(sandbox.store().load(&op.id).unwrap().ack, None);

    assert_eq!(
        sandbox.hook(crate::support::exe("ktr-ack"), &input(candidate, "resume")),
        (QUIET.into(), 0)
    );
    let op = sandbox.store().load(&op.id).unwrap();
    assert_eq!(op.context_tokens(), Some(48213));
    assert_eq!(op.ack.as_ref().unwrap().session_id, candidate);
    let receipt = sandbox
        .state
        .join("artifacts")
        .join(&op.id)
        .join("ack.json");
    let saved: serde_json::Value = serde_json::from_slice(&fs::read(&receipt).unwrap()).unwrap();
    assert_eq!(saved["context_tokens"], 48213);
    assert_eq!(
        fs::metadata(&receipt).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(op.status, Status::Activated, "an ack changes no status");
}

/// `active` is only the fast path's cache. Deleted,
/// garbage, a FIFO or 50 MB, it is rebuilt from the operation files and
/// the pending request is scheduled as if nothing had happened.
#[test]
fn a_lost_or_damaged_active_never_kills_a_pending_request() {
    type Damage = fn(&std::path::Path);
    let cases: [(&str, Damage); 4] = [
        ("deleted", |p| fs::remove_file(p).unwrap()),
        ("garbage", |p| {
            fs::write(p, "\u{0}\u{1} not an id\n").unwrap();
        }),
        ("a FIFO", |p| {
            fs::remove_file(p).unwrap();
            let made = std::process::Command::new("mkfifo")
                .arg(p)
                .status()
                .unwrap();
            assert!(made.success());
        }),
        ("50 MB", |p| fs::write(p, vec![b'x'; 50 << 20]).unwrap()),
    ];
    for (what, damage) in cases {
        let sandbox = Sandbox::new();
        let transcript = sandbox.transcript(SESSION);
        let op = sandbox.store().request("big", "REBUILD", None).unwrap();
        damage(&sandbox.state.join("active"));
        let (out, code) = sandbox.hook(
            crate::support::exe("ktr-stop"),
            &sandbox.stop_input(SESSION, &transcript),
        );
        assert_eq!(code, 0, "{what}");
        assert!(
            message(&out).contains("scheduled"),
            "{what}: the Stop hook said {out}"
        );
        assert_eq!(sandbox.wait_records("ktr-prepare", 1).len(), 1, "{what}");
        assert_eq!(
            sandbox.store().active(),
            Some((op.id.clone(), Status::Scheduled)),
            "{what}: active rebuilt"
        );
    }
}

/// A `ktr.log` that cannot be opened (a planted symlink)
/// no longer makes the Stop hook say the request "stays pending" while it
/// was in fact scheduled: the log is a convenience, the operation file is
/// the record.
#[test]
fn a_log_that_cannot_be_written_never_misreports_the_operation() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    let target = sandbox.root().join("elsewhere.log");
    fs::remove_file(sandbox.state.join("ktr.log")).unwrap();
    std::os::unix::fs::symlink(&target, sandbox.state.join("ktr.log")).unwrap();
    let (out, code) = sandbox.hook(
        crate::support::exe("ktr-stop"),
        &sandbox.stop_input(SESSION, &transcript),
    );
    assert_eq!(code, 0);
    let m = message(&out);
    assert!(
        m.contains(&format!("rebuild scheduled (operation {})", op.id)) && !m.contains("stays"),
        "{m}"
    );
    assert_eq!(
        sandbox.store().load(&op.id).unwrap().status,
        Status::Scheduled
    );
    assert!(!target.exists(), "the log was written through the link");
}
