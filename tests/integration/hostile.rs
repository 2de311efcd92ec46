//! Hostile input and a tampered state dir: every case is a clear
//! one-line error or a no-op, never a hang, a panic, or a read or write
//! outside its place. Real binaries, each in its own sandbox.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::Sandbox;
use crate::support::mkfifo;
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::{CandidateFile, Stage, Status, Worker};
const SESSION: &str = "11111111-2222-4333-8444-555555555555";

/// Run `bin args…` in the sandbox with `stdin`, killed after 10 s; it must
/// finish well before that.
#[track_caller]
fn run(sandbox: &Sandbox, bin: &str, args: &[&str], stdin: &str) -> Output {
    let start = Instant::now();
    let mut child = sandbox
        .command(bin)
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    let deadline = start + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{bin} {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The one-line stderr of a failed command, after checking its exit code.
#[track_caller]
fn fails(out: &Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

/// The `systemMessage` of a hook reply (hooks always exit 0).
#[track_caller]
fn hook_message(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["systemMessage"].as_str().unwrap_or("").to_string()
}

#[test]
fn huge_numbers_in_the_config_are_refused_naming_the_key() {
    let sandbox = Sandbox::new();
    for key in [
        "healthcheck_seconds",
        "systemd_restart_timeout_seconds",
        "activation_delay_seconds",
    ] {
        sandbox.write_config(&format!("{key} = 1e300"));
        let err = fails(
            &run(&sandbox, crate::support::exe("ktr"), &["status"], ""),
            2,
        );
        assert!(err.contains(&format!("{key} must be")), "{err}");
        let out = run(&sandbox, crate::support::exe("ktr-stop"), &[], "{}");
        assert_eq!(out.status.code(), Some(0), "the Stop hook always exits 0");
    }
    sandbox.write_config("state_dir = \"\"");
    let mut text = fs::read_to_string(&sandbox.config).unwrap();
    text = text.replacen("state_dir = ", "# state_dir = ", 1);
    fs::write(&sandbox.config, text).unwrap();
    let err = fails(
        &run(&sandbox, crate::support::exe("ktr"), &["status"], ""),
        2,
    );
    assert!(err.contains("state_dir must not be empty"), "{err}");
}

#[test]
fn fifos_and_devices_in_the_state_dir_or_as_config_never_hang() {
    let sandbox = Sandbox::new();
    fs::create_dir_all(sandbox.state.join("operations")).unwrap();
    mkfifo(&sandbox.state.join("active"));
    let id = "0000aaaa-0000-4000-8000-000000000001";
    mkfifo(&sandbox.state.join(format!("operations/{id}.json")));
    let stop = run(
        &sandbox,
        crate::support::exe("ktr-stop"),
        &[],
        &sandbox.stop_input(SESSION, &sandbox.project.join("x.jsonl")),
    );
    assert_eq!(stop.status.code(), Some(0));
    let ack = run(
        &sandbox,
        crate::support::exe("ktr-ack"),
        &[],
        &format!(r#"{{"session_id":"{SESSION}","source":"resume"}}"#),
    );
    assert_eq!(ack.status.code(), Some(0));
    let ops = run(&sandbox, crate::support::exe("ktr"), &["ops"], "");
    assert!(String::from_utf8_lossy(&ops.stderr).contains("a FIFO, not a regular file"));
    let doctor = run(&sandbox, crate::support::exe("ktr"), &["doctor"], "");
    assert_eq!(
        doctor.status.code(),
        Some(1),
        "doctor fails on a damaged operation file"
    );
    fs::remove_file(sandbox.state.join("active")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", sandbox.state.join("active")).unwrap();
    assert_eq!(
        run(&sandbox, crate::support::exe("ktr-stop"), &[], "{}")
            .status
            .code(),
        Some(0)
    );
    let fifo = sandbox.root().join("fifo.toml");
    mkfifo(&fifo);
    let out = run(
        &sandbox,
        crate::support::exe("ktr"),
        &["ops", "--config", fifo.to_str().unwrap()],
        "",
    );
    assert!(fails(&out, 2).contains("a FIFO"));
}

#[test]
fn planted_symlinks_and_edited_paths_never_reach_outside_the_state_dir() {
    let sandbox = Sandbox::new();
    let store = sandbox.store();
    let victim = sandbox.root().join("victim.log");
    fs::write(&victim, "untouched\n").unwrap();
    std::os::unix::fs::symlink(&victim, sandbox.state.join("ktr.log")).unwrap();
    // The request is recorded (the operation file is the record) and the
    // log it cannot write through the link is said, not followed.
    let out = run(
        &sandbox,
        crate::support::exe("ktr"),
        &["request", "--confirm", "REBUILD"],
        "",
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ktr.log"));
    assert_eq!(fs::read_to_string(&victim).unwrap(), "untouched\n");
    fs::remove_file(sandbox.state.join("ktr.log")).unwrap();
    let op = store.latest().unwrap().unwrap();
    // A planted `worker.log` link: the Stop hook does not start a stage
    // through it, says why, and the request stays pending.
    std::os::unix::fs::symlink(&victim, sandbox.state.join("worker.log")).unwrap();
    let transcript = sandbox.transcript(SESSION);
    let said = run(
        &sandbox,
        crate::support::exe("ktr-stop"),
        &[],
        &sandbox.stop_input(SESSION, &transcript),
    );
    let said = String::from_utf8_lossy(&said.stdout);
    assert!(said.contains("worker.log"), "{said}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "untouched\n");
    assert_eq!(store.load(&op.id).unwrap().status, Status::Pending);
    fs::remove_file(sandbox.state.join("worker.log")).unwrap();
    // A planted `artifacts` link is refused, not written through.
    let outside = sandbox.root().join("outside");
    fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, sandbox.state.join("artifacts")).unwrap();
    assert!(
        store
            .artifacts_dir(&op.id)
            .unwrap_err()
            .message
            .contains("symlink")
    );
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    // An operation edited to a dead worker and a candidate outside project_dir:
    // `ktr status` fails the operation but deletes nothing outside.
    let planted = sandbox.root().join("cand-0000.jsonl");
    fs::write(&planted, "keep me\n").unwrap();
    sandbox.walk(&op.id, &[Status::Scheduled, Status::Running], |op| {
        op.candidate = Some(CandidateFile {
            session_id: SessionId::parse("cand-0000").unwrap(),
            path: planted.clone(),
            sha256: ktr_base::digest::Sha256::default(),
        });
        op.worker = Some(Worker {
            pid: 999_999_999,
            start_time: 1,
            stage: Stage::Prepare,
        });
    });
    let mut cmd = sandbox.command(crate::support::exe("ktr"));
    let status = cmd
        .env("KTR_WORKER_GRACE_SECONDS", "0")
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(fs::read_to_string(&planted).unwrap(), "keep me\n");
    let failed = store.load(&op.id).unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert!(
        failed
            .history
            .last()
            .unwrap()
            .note
            .contains("not deleting it")
    );
}

#[test]
fn a_damaged_operation_file_is_shown_and_set_aside_never_deleted() {
    let sandbox = Sandbox::new();
    let store = sandbox.store();
    let id = "0000aaaa-0000-4000-8000-000000000002";
    let path = sandbox.state.join(format!("operations/{id}.json"));
    fs::write(&path, format!(r#"{{"id":"{id}","status":"exploded"}}"#)).unwrap();
    let ops = run(&sandbox, crate::support::exe("ktr"), &["ops"], "");
    let err = String::from_utf8_lossy(&ops.stderr);
    assert!(
        err.contains("DAMAGED") && err.contains(id) && err.contains("ktr repair"),
        "{err}"
    );
    let status = run(&sandbox, crate::support::exe("ktr"), &["status"], "");
    assert!(String::from_utf8_lossy(&status.stderr).contains("DAMAGED"));
    let doctor =
        String::from_utf8(run(&sandbox, crate::support::exe("ktr"), &["doctor"], "").stdout)
            .unwrap();
    assert!(doctor.contains("damaged operation file"), "{doctor}");
    let refused = run(
        &sandbox,
        crate::support::exe("ktr"),
        &["request", "--confirm", "REBUILD"],
        "",
    );
    assert_eq!(refused.status.code(), Some(1));
    let last = String::from_utf8_lossy(&refused.stderr)
        .lines()
        .last()
        .unwrap()
        .to_string();
    assert!(
        last.contains("is damaged") && last.contains("ktr repair"),
        "{last}"
    );
    let listed =
        String::from_utf8(run(&sandbox, crate::support::exe("ktr"), &["repair"], "").stdout)
            .unwrap();
    assert!(listed.contains("would move") && path.exists(), "{listed}");
    let wrong = run(
        &sandbox,
        crate::support::exe("ktr"),
        &["repair", "--confirm", "yes"],
        "",
    );
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&wrong.stderr).ends_with("confirmation must be exactly REPAIR\n")
    );
    let moved = run(
        &sandbox,
        crate::support::exe("ktr"),
        &["repair", "--confirm", "REPAIR"],
        "",
    );
    assert_eq!(moved.status.code(), Some(0));
    assert!(!path.exists());
    let aside: Vec<_> = fs::read_dir(sandbox.state.join("damaged"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(aside.len(), 1);
    assert!(
        fs::read_to_string(aside[0].path())
            .unwrap()
            .contains("exploded")
    );
    assert!(store.request("again", "REBUILD", None).is_ok());
}

#[test]
fn deleting_active_never_lets_a_second_operation_start() {
    let sandbox = Sandbox::new();
    let store = sandbox.store();
    let op = store.request("first", "REBUILD", None).unwrap();
    sandbox.walk(&op.id, &[Status::Scheduled, Status::Running], |_| {});
    fs::remove_file(sandbox.state.join("active")).unwrap();
    let err = store.request("second", "REBUILD", None).unwrap_err();
    assert!(
        err.message.contains(&*op.id) && err.message.contains("is running"),
        "{err}"
    );
    assert_eq!(store.list().unwrap().len(), 1);
    assert_eq!(
        store.active(),
        Some((op.id.clone(), Status::Running)),
        "active rebuilt"
    );
}

#[test]
fn relative_paths_in_the_config_are_taken_from_its_folder() {
    let sandbox = Sandbox::new();
    let text = fs::read_to_string(&sandbox.config).unwrap();
    let text = text.replace(
        &format!("state_dir = {:?}", sandbox.state),
        "state_dir = \"state\"",
    );
    fs::write(&sandbox.config, text).unwrap();
    let elsewhere = sandbox.root().join("cwd");
    fs::create_dir(&elsewhere).unwrap();
    let mut cmd = sandbox.command(crate::support::exe("ktr"));
    let out = cmd
        .current_dir(&elsewhere)
        .args(["request", "--confirm", "REBUILD"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(sandbox.state.join("active").exists());
    assert!(!elsewhere.join("state").exists());
}

#[test]
fn an_existing_shared_state_dir_is_refused_and_never_chmod_ed() {
    let sandbox = Sandbox::new();
    let shared = sandbox.root().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let text = fs::read_to_string(&sandbox.config).unwrap();
    fs::write(
        &sandbox.config,
        text.replace(&format!("{:?}", sandbox.state), &format!("{shared:?}")),
    )
    .unwrap();
    let err = fails(
        &run(
            &sandbox,
            crate::support::exe("ktr"),
            &["request", "--confirm", "REBUILD"],
            "",
        ),
        1,
    );
    assert!(err.contains("writable by others"), "{err}");
    assert_eq!(
        fs::metadata(&shared).unwrap().permissions().mode() & 0o7777,
        0o1777
    );
    let doctor =
        String::from_utf8(run(&sandbox, crate::support::exe("ktr"), &["doctor"], "").stdout)
            .unwrap();
    assert!(doctor.contains("writable by others"), "{doctor}");
}

#[test]
fn a_stop_naming_a_directory_or_fifo_leaves_the_request_pending() {
    let sandbox = Sandbox::new();
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    let dir = sandbox.project.join(format!("{SESSION}.jsonl"));
    fs::create_dir(&dir).unwrap();
    let fifo = sandbox
        .project
        .join("22222222-2222-4333-8444-555555555555.jsonl");
    mkfifo(&fifo);
    for path in [&dir, &fifo] {
        let out = run(
            &sandbox,
            crate::support::exe("ktr-stop"),
            &[],
            &sandbox.stop_input(SESSION, path),
        );
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(
            sandbox.store().load(&op.id).unwrap().status,
            Status::Pending
        );
    }
    assert!(sandbox.records("ktr-prepare").is_empty());
}

#[test]
fn under_lock_contention_the_stop_hook_answers_within_a_second_or_so() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    let uncontended = start_cost(&sandbox, "ktr-stop");
    let lock = fs::OpenOptions::new()
        .write(true)
        .open(sandbox.state.join("coordinator.lock"))
        .unwrap();
    lock.lock().unwrap();
    let start = Instant::now();
    let out = run(
        &sandbox,
        crate::support::exe("ktr-stop"),
        &[],
        &sandbox.stop_input(SESSION, &transcript),
    );
    let took = start.elapsed();
    let message = hook_message(&out);
    assert!(
        message.contains("busy") && message.contains("next Stop"),
        "{message}"
    );
    gave_up_in_time(took, uncontended);
    drop(lock);
    assert_eq!(
        sandbox.store().load(&op.id).unwrap().status,
        Status::Pending
    );
}

#[test]
fn a_request_without_a_project_dir_is_refused() {
    let sandbox = Sandbox::new();
    fs::remove_dir_all(&sandbox.project).unwrap();
    let err = fails(
        &run(
            &sandbox,
            crate::support::exe("ktr"),
            &["request", "--confirm", "REBUILD"],
            "",
        ),
        2,
    );
    assert!(
        err.contains("project_dir") && err.contains("not a directory"),
        "{err}"
    );
    assert!(sandbox.store().list().unwrap().is_empty());
}

#[test]
fn a_symlinked_settings_file_is_written_through_and_stays_a_link() {
    use ktr_admin::settings::{Change, Edit};
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("dotfiles");
    fs::create_dir(&repo).unwrap();
    let real = repo.join("settings.json");
    fs::write(&real, "{\n  \"theme\": \"dark\"\n}\n").unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o640)).unwrap();
    let link = tmp.path().join("settings.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let prefix = tmp.path().join("bin");
    let applied = Edit::merge(&link, &prefix, None).unwrap().apply().unwrap();
    assert!(
        matches!(applied.change, Change::Updated { .. }),
        "{applied:?}"
    );
    assert_eq!(applied.through_link.as_deref(), Some(real.as_path()));
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let merged = fs::read_to_string(&real).unwrap();
    assert!(
        merged.contains("ktr-stop") && merged.contains("\"theme\""),
        "{merged}"
    );
    assert_eq!(
        fs::metadata(&real).unwrap().permissions().mode() & 0o777,
        0o640
    );
    let removed = Edit::unmerge(&link).unwrap().apply().unwrap();
    assert!(
        matches!(removed.change, Change::Restored { .. }) && removed.through_link.is_some(),
        "{removed:?}"
    );
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        fs::read_to_string(&real).unwrap(),
        "{\n  \"theme\": \"dark\"\n}\n"
    );
    // A FIFO as settings.json is refused at once, nothing changed.
    let fifo = tmp.path().join("fifo.json");
    mkfifo(&fifo);
    assert!(
        Edit::merge(&fifo, &prefix, None)
            .unwrap_err()
            .message
            .contains("a FIFO")
    );
}

#[test]
fn the_mcp_server_answers_every_malformed_message_with_its_id_and_keeps_running() {
    let sandbox = Sandbox::new();
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"pad\":\"{}\"}}",
        "x".repeat(5 << 20)
    );
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let input = [
        "not json",
        r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":"garbage"}"#,
        &big,
        r#"[{"jsonrpc":"2.0","id":11,"method":"ping"}]"#,
        init,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
    ]
    .join("\n")
        + "\n";
    let out = run(&sandbox, crate::support::exe("ktr-mcp"), &[], &input);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replies: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_id = |id: serde_json::Value| {
        replies
            .iter()
            .filter(|r| r["id"] == id)
            .map(|r| r["error"]["code"].as_i64().unwrap_or(0))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        by_id(serde_json::Value::Null),
        [-32700, -32600],
        "{replies:?}"
    );
    assert_eq!(by_id(7.into()), [-32602]);
    assert_eq!(by_id(11.into()), [-32600]);
    assert_eq!(by_id(1.into()), [0], "initialize still works");
    assert_eq!(by_id(2.into()), [0], "and so does what follows");
}

/// A hook given a config that is not there acts on no
/// state dir at all — never the default one in `HOME`, which on an
/// operator's machine is the live installation.
#[test]
fn a_config_that_does_not_exist_never_falls_back_to_the_default_state_dir() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    fs::remove_file(&sandbox.config).unwrap();
    let stop = sandbox.stop_input(SESSION, &transcript);
    let statusline = serde_json::json!({
        "session_id": SESSION, "transcript_path": transcript,
        "model": {"id": "claude-opus-5-5"},
        "context_window": {"context_window_size": 200_000, "current_usage": {"input_tokens": 5}},
    })
    .to_string();
    let precompact = serde_json::json!({
        "session_id": SESSION, "transcript_path": transcript, "trigger": "auto",
        "hook_event_name": "PreCompact",
    })
    .to_string();
    let prompt = serde_json::json!({
        "session_id": SESSION, "transcript_path": transcript, "prompt": "hi",
        "hook_event_name": "UserPromptSubmit",
    })
    .to_string();
    let ack = serde_json::json!({"session_id": SESSION, "source": "resume"}).to_string();
    for (bin, input) in [
        (crate::support::exe("ktr-stop"), &stop),
        (crate::support::exe("ktr-statusline"), &statusline),
        (crate::support::exe("ktr-precompact"), &precompact),
        (crate::support::exe("ktr-prompt"), &prompt),
        (crate::support::exe("ktr-ack"), &ack),
    ] {
        let (_, code) = sandbox.hook(bin, input);
        assert_eq!(code, 0, "{bin}");
        let default = sandbox.home.join(".local/state/ktr");
        assert!(!default.exists(), "{bin} created {default:?}");
    }
}

/// `bin` run as a hook of `sandbox` under `strace` (opens only) with at
/// most 8 s to finish; returns its exit code and every path it opened.
fn traced_hook(sandbox: &Sandbox, bin: &str, stdin: &str) -> (i32, String) {
    let log = sandbox
        .home
        .join(format!("strace-{}.log", uuid::Uuid::new_v4()));
    let cmd = crate::support::straced(&log, "open,openat,openat2", bin);
    let (_, code) = Sandbox::run_hook(sandbox.command_via(cmd), stdin, &[]);
    (code, fs::read_to_string(&log).unwrap_or_default())
}

/// The statusline and the compaction guard take Claude
/// Code's `transcript_path` only by the one path rule — a FIFO no longer
/// hangs them, and a device, a file outside the project or a symlink out
/// of it is never opened.
#[test]
fn the_statusline_and_the_guard_open_no_transcript_outside_the_rule() {
    let sandbox = Sandbox::new();
    let fifo = sandbox.project.join("f.jsonl");
    mkfifo(&fifo);
    let outside = sandbox.home.join("secret.jsonl");
    fs::write(&outside, "{\"type\":\"user\"}\n").unwrap();
    let link = sandbox.project.join("link.jsonl");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    for path in [&fifo, Path::new("/dev/zero"), &outside, &link] {
        let statusline = serde_json::json!({
            "session_id": "s1", "transcript_path": path, "model": {"id": "x"},
            "context_window": {"context_window_size": 200_000, "current_usage": {"input_tokens": 5}},
        });
        let precompact = serde_json::json!({
            "session_id": "s1", "transcript_path": path, "trigger": "auto",
            "hook_event_name": "PreCompact",
        });
        for (bin, input) in [
            (crate::support::exe("ktr-statusline"), statusline),
            (crate::support::exe("ktr-precompact"), precompact),
        ] {
            let (code, opened) = traced_hook(&sandbox, bin, &input.to_string());
            assert_eq!(code, 0, "{bin} on {path:?} (124: it hung)");
            // The whole path, quoted as strace prints it: a bare file name
            // (`zero`) can be part of any folder's name (a checkout's).
            let quoted = format!("{:?}", path.display().to_string());
            assert!(
                !opened.contains(&quoted) && !opened.contains("secret.jsonl"),
                "{bin} opened {path:?}:\n{opened}"
            );
        }
    }
}

/// A FIFO planted at any of the window caches in the
/// state dir hangs neither a hook, `ktr dirty`, `ktr plan` nor prepare's
/// plan: the caches are read non-blocking, as regular files only.
#[test]
fn fifos_planted_at_the_window_caches_hang_nothing() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.add_transcript(SESSION, &fs::read(crate::support::example()).unwrap());
    let window = sandbox.state.join("window");
    fs::create_dir_all(&window).unwrap();
    for name in [
        "json",
        "overhead.json",
        "running.json",
        "receipt.json",
        "notice",
        "advised",
        "offered",
        "cleared",
    ] {
        mkfifo(&window.join(format!("{SESSION}.{name}")));
    }
    mkfifo(&window.join("overhead.json"));
    let statusline = serde_json::json!({
        "session_id": SESSION, "transcript_path": transcript, "model": {"id": "x"},
        "context_window": {"context_window_size": 200_000, "current_usage": {"input_tokens": 5}},
    });
    let (code, _) = traced_hook(
        &sandbox,
        crate::support::exe("ktr-statusline"),
        &statusline.to_string(),
    );
    assert_eq!(code, 0, "the statusline hung on a FIFO cache");
    let (code, _) = traced_hook(
        &sandbox,
        crate::support::exe("ktr-stop"),
        &sandbox.stop_input(SESSION, &transcript),
    );
    assert_eq!(code, 0, "the Stop hook hung on a FIFO cache");
    for args in [["dirty"], ["plan"]] {
        let out = std::process::Command::new("timeout")
            .arg("20")
            .arg(crate::support::exe("ktr"))
            .args(args)
            .arg("--config")
            .arg(&sandbox.config)
            .env("HOME", &sandbox.home)
            .output()
            .unwrap();
        assert_ne!(
            out.status.code(),
            Some(124),
            "ktr {args:?} hung on a FIFO cache"
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "ktr {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// What a person reads from `ktr` never carries a
/// terminal escape sequence from data (a reason the model or a person
/// typed), neither on stdout nor in a hook's message.
#[test]
fn human_output_carries_no_escape_sequences_from_data() {
    let sandbox = Sandbox::new();
    let evil = "window full\u{1b}]0;pwned\u{7}\u{1b}[2J";
    sandbox.store().request(evil, "REBUILD", None).unwrap();
    for args in [&["status"][..], &["ops"]] {
        let out = run(&sandbox, crate::support::exe("ktr"), args, "");
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{args:?}: {text:?}"
        );
    }
    let line = ktr_pipeline::hook::Reply::Message(format!("ktr: {evil}")).to_json();
    let shown: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        shown["systemMessage"], "ktr: window full?]0;pwned??[2J",
        "Claude Code shows this decoded"
    );
}

/// The hooks' one lock rule: a prompt waits at most a
/// second for a held lock (it waited 10 s), then loses nothing and says
/// so — through, marked as unmarked, outside a switch; refused (Claude
/// Code gives the text back) while one may be under way.
#[test]
fn under_lock_contention_a_prompt_answers_within_a_second_or_so_and_says_what_happened() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    let op = sandbox.store().request("big", "REBUILD", None).unwrap();
    let prompt = serde_json::json!({
        "session_id": SESSION, "transcript_path": transcript, "prompt": "hello",
        "hook_event_name": "UserPromptSubmit",
    })
    .to_string();
    let uncontended = start_cost(&sandbox, "ktr-prompt");
    for (statuses, expect) in [
        (&[Status::Scheduled][..], "went through unmarked"),
        (
            &[Status::Running, Status::Verifying, Status::Activating],
            "switching this session over right now",
        ),
    ] {
        sandbox.walk(&op.id, statuses, |_| {});
        let lock = fs::OpenOptions::new()
            .write(true)
            .open(sandbox.state.join("coordinator.lock"))
            .unwrap();
        lock.lock().unwrap();
        let start = Instant::now();
        let out = run(&sandbox, crate::support::exe("ktr-prompt"), &[], &prompt);
        let took = start.elapsed();
        drop(lock);
        assert_eq!(out.status.code(), Some(0));
        let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let said = reply["systemMessage"]
            .as_str()
            .or(reply["reason"].as_str())
            .unwrap_or_default();
        assert!(said.contains(expect), "{reply}");
        gave_up_in_time(took, uncontended);
    }
}

/// What starting the hook `exe` costs on this machine now: a run on empty
/// input, which takes no lock.
fn start_cost(sandbox: &Sandbox, exe: &str) -> Duration {
    let start = Instant::now();
    run(sandbox, crate::support::exe(exe), &[], "");
    start.elapsed()
}

/// A hook that met the lock held throughout gave up after its wait
/// (`HOOK_LOCK_WAIT`, 1 s), not much later than a start on a loaded
/// machine costs.
fn gave_up_in_time(took: Duration, start_cost: Duration) {
    let bound =
        ktr_pipeline::operation::HOOK_LOCK_WAIT + (start_cost * 3).max(Duration::from_secs(3));
    assert!(
        took < bound,
        "took {took:?}; a start without the lock took {start_cost:?}"
    );
}

/// An operation file that names `/etc/shadow` as its
/// backup is damaged at load — `ktr-verify` (which hashes the backup) and
/// `ktr status` refuse it in one line and never open the file it names.
#[test]
fn an_op_file_naming_a_foreign_backup_is_refused_before_anything_is_opened() {
    let sandbox = Sandbox::new();
    let op = sandbox.store().request("x", "REBUILD", None).unwrap();
    let path = sandbox.state.join(format!("operations/{}.json", op.id));
    let mut json: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    json["status"] = "verifying".into();
    json["backup"] = "/etc/shadow".into();
    fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
    let log = sandbox.root().join("verify.strace");
    let out = std::process::Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=open,openat,openat2", "-o"])
        .arg(&log)
        .arg(crate::support::exe("ktr-verify"))
        .arg("--config")
        .arg(&sandbox.config)
        .args(["--operation", &op.id])
        .env("HOME", &sandbox.home)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("is damaged: backup \"/etc/shadow\""), "{err}");
    let opened = fs::read_to_string(&log).unwrap();
    assert!(!opened.contains("/etc/shadow"), "{opened}");
}
