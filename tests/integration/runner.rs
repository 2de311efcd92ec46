//! `examples/runner.sh`, the pointer-mode loop: real ktr binaries, a
//! stand-in `claude` that only records how it was called.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{Sandbox, stand_in, wait_for};
use ktr_pipeline::operation::{Operation, Status};
const SESSION: &str = "5d1c9a8e-3b7f-4e2a-9c61-0f2b7d4e8a13";

fn runner_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/runner.sh")
}

/// The pointer-mode config for the runner: fast timings plus `extra` lines.
fn pointer_config(pointer: &Path, extra: &str) -> String {
    format!(
        "activation = \"pointer\"\nresume_pointer_path = {pointer:?}\n\
         verify_workdir_matches_project = false\nactivation_delay_seconds = 0\n\
         stable_file_seconds = 0.1\nstable_file_timeout_seconds = 5\n{extra}"
    )
}

/// A pointer-mode sandbox holding the example session, the pointer naming
/// it, and where the stand-in claude logs its runs.
fn pointer_sandbox() -> (Sandbox, PathBuf, PathBuf) {
    let sb = Sandbox::new();
    let pointer = sb.root().join("resume_session");
    sb.write_config(&pointer_config(&pointer, "healthcheck_seconds = 0.5\n"));
    fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/session.jsonl"),
        sb.project.join(format!("{SESSION}.jsonl")),
    )
    .unwrap();
    fs::write(&pointer, format!("{SESSION}\n")).unwrap();
    let log = sb.root().join("claude.log");
    (sb, pointer, log)
}

/// The runner command with only the sandbox's environment and the
/// stand-in claude; `extra` arguments after `--config/--pointer/--project`.
fn runner(sb: &Sandbox, pointer: &Path, log: &Path, extra: &[&OsStr]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg(runner_sh())
        .args(["--config".as_ref(), sb.config.as_os_str()])
        .args(["--pointer".as_ref(), pointer.as_os_str()])
        .args(["--project".as_ref(), sb.project.as_os_str()])
        .args(extra)
        .env_clear()
        .env("HOME", &sb.home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("CLAUDE", stand_in("claude-print"))
        .env("KTR", crate::support::exe("ktr"))
        .env("KTR_PREPARE", crate::support::exe("ktr-prepare"))
        .env("FAKE_CLAUDE_LOG", log);
    cmd
}

/// Start the runner reading prompts from a pipe.
fn start(sb: &Sandbox, pointer: &Path, log: &Path) -> Child {
    runner(sb, pointer, log, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The runs the stand-in recorded: (argv, stdin state); only whole lines
/// (a line still being written is not a run yet).
fn runs(log: &Path) -> Vec<Vec<String>> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .map(|l| l.split('\t').map(String::from).collect())
        .collect()
}

#[test]
fn a_request_moves_the_pointer_and_the_next_run_resumes_the_new_session() {
    let (sb, pointer, log) = pointer_sandbox();
    let mut runner = start(&sb, &pointer, &log);
    let mut stdin = runner.stdin.take().unwrap();

    writeln!(stdin, "first prompt, with 'quotes' and $HOME").unwrap();
    assert!(wait_for(Duration::from_secs(10), || runs(&log).len() == 1));
    assert_eq!(
        runs(&log)[0],
        [
            "-p",
            "--resume",
            SESSION,
            "first prompt, with 'quotes' and $HOME",
            "stdin=closed"
        ]
    );

    let op = sb
        .store()
        .request("window too dirty", "REBUILD", None)
        .unwrap();
    writeln!(stdin, "second prompt").unwrap();
    assert!(wait_for(Duration::from_secs(30), || runs(&log).len() == 2));
    let op = sb.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::Activated, "{op:?}");
    let new_id = op.candidate.as_ref().unwrap().session_id.clone();
    assert_ne!(new_id, SESSION);
    assert_eq!(fs::read_to_string(&pointer).unwrap().trim(), new_id);
    assert_eq!(
        runs(&log)[1],
        [
            "-p",
            "--resume",
            new_id.as_str(),
            "second prompt",
            "stdin=closed"
        ],
        "the next run resumes the rebuilt session"
    );
    assert!(sb.project.join(format!("{new_id}.jsonl")).is_file());

    drop(stdin);
    let out = runner.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("reply to: second prompt"), "{stdout}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(&format!("now resuming {new_id}")),
        "{stderr}"
    );
}

#[test]
fn without_a_request_the_runner_never_rebuilds() {
    let (sb, pointer, log) = pointer_sandbox();
    let mut runner = start(&sb, &pointer, &log);
    let mut stdin = runner.stdin.take().unwrap();
    writeln!(stdin, "a\n\nb").unwrap();
    drop(stdin);
    let out = runner.wait_with_output().unwrap();
    assert!(out.status.success());
    let resumed: Vec<String> = runs(&log).iter().map(|r| r[2].clone()).collect();
    assert_eq!(resumed, [SESSION, SESSION], "blank lines are not prompts");
    assert!(sb.store().list().unwrap().is_empty());
    let files = fs::read_dir(&sb.project).unwrap().count();
    assert_eq!(files, 1, "no candidate was written");
}

#[test]
fn a_failed_rebuild_keeps_the_old_session() {
    let (sb, pointer, log) = pointer_sandbox();
    // Poison the window: the plan blocks, prepare fails, the pointer stays.
    let transcript = sb.project.join(format!("{SESSION}.jsonl"));
    sb.write_config(&pointer_config(&pointer, "poison_pattern = \"[a-z]\"\n"));
    let op = sb.store().request("x", "REBUILD", None).unwrap();
    let mut runner = start(&sb, &pointer, &log);
    let mut stdin = runner.stdin.take().unwrap();
    writeln!(stdin, "hello").unwrap();
    drop(stdin);
    let out = runner.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(runs(&log)[0][2], SESSION);
    assert_eq!(fs::read_to_string(&pointer).unwrap().trim(), SESSION);
    assert_eq!(sb.store().load(&op.id).unwrap().status, Status::Failed);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("rebuild did not complete"), "{stderr}");
    assert!(transcript.is_file());
}

#[test]
fn a_fifo_feeds_prompts_across_writers() {
    let (sb, pointer, log) = pointer_sandbox();
    let fifo = sb.root().join("prompts");
    let mut runner = runner(&sb, &pointer, &log, &["--fifo".as_ref(), fifo.as_os_str()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || fifo.exists()));
    // Two writers, one after the other: the runner reopens the FIFO.
    for prompt in ["one", "two"] {
        let mut w = fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        writeln!(w, "{prompt}").unwrap();
        drop(w);
        let n = if prompt == "one" { 1 } else { 2 };
        assert!(wait_for(Duration::from_secs(10), || runs(&log).len() == n));
    }
    let prompts: Vec<String> = runs(&log).iter().map(|r| r[3].clone()).collect();
    assert_eq!(prompts, ["one", "two"]);
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let meta = fs::metadata(&fifo).unwrap();
    assert!(meta.file_type().is_fifo());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // Only the runner we started.
    runner.kill().unwrap();
    runner.wait().unwrap();
}

/// A runner that rebuilt the example session: it answered `first` on it,
/// then `second` on the rebuilt session. Returns the runner, its input,
/// the operation and the rebuilt session's id.
fn rebuilt(
    sb: &Sandbox,
    pointer: &Path,
    log: &Path,
) -> (Child, std::process::ChildStdin, Operation, String) {
    let mut runner = start(sb, pointer, log);
    let mut stdin = runner.stdin.take().unwrap();
    writeln!(stdin, "first").unwrap();
    assert!(wait_for(Duration::from_secs(10), || runs(log).len() == 1));
    let op = sb
        .store()
        .request("window too dirty", "REBUILD", None)
        .unwrap();
    writeln!(stdin, "second").unwrap();
    assert!(wait_for(Duration::from_secs(30), || runs(log).len() == 2));
    let op = sb.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::Activated, "{op:?}");
    let new_id = op.candidate.as_ref().unwrap().session_id.to_string();
    (runner, stdin, op, new_id)
}

/// What Claude Code appends to a session for one exchange (its prompt and
/// the reply), chained onto the transcript's last record.
fn exchange(transcript: &Path, session: &str, n: usize) {
    let text = fs::read_to_string(transcript).unwrap();
    let last = text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["uuid"].as_str().map(String::from))
        .unwrap();
    let (q, a) = (format!("{session}-q{n}"), format!("{session}-a{n}"));
    let records = [
        serde_json::json!({"type": "user", "uuid": q, "parentUuid": last, "sessionId": session,
            "timestamp": "2026-12-04T10:00:00.000Z",
            "message": {"role": "user", "content": format!("SAID-SINCE prompt {n}")}}),
        serde_json::json!({"type": "assistant", "uuid": a, "parentUuid": q, "sessionId": session,
            "timestamp": "2026-12-04T10:00:01.000Z",
            "message": {"id": format!("msg_{n}"), "role": "assistant", "model": "fake",
                "content": [{"type": "text", "text": format!("SAID-SINCE answer {n}")}]}}),
        serde_json::json!({"type": "system", "subtype": "turn_duration", "uuid": format!("{a}-d"),
            "parentUuid": a, "sessionId": session, "durationMs": 5}),
    ];
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(transcript)
        .unwrap();
    for r in records {
        writeln!(file, "{r}").unwrap();
    }
}

/// The rebuilt session finishes a reply: its Stop hook schedules the
/// requested rollback, which ends before the runner's next prompt.
fn stop_rolls_back(sb: &Sandbox, op: &Operation, new_id: &str) -> Operation {
    let transcript = sb.project.join(format!("{new_id}.jsonl"));
    // The real stages, not the sandbox's stand-ins.
    let stages = Path::new(crate::support::exe("ktr-rollback"))
        .parent()
        .unwrap();
    let (out, code) = sb.hook_env(
        crate::support::exe("ktr-stop"),
        &sb.stop_input(new_id, &transcript),
        &[("KTR_BIN_DIR".into(), stages.display().to_string())],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        wait_for(Duration::from_secs(30), || sb
            .store()
            .load(&op.id)
            .unwrap()
            .status
            .is_terminal()),
        "{:?}\n{}",
        sb.store().load(&op.id).unwrap(),
        fs::read_to_string(sb.store().dir().join("worker.log")).unwrap_or_default()
    );
    sb.store().load(&op.id).unwrap()
}

#[test]
fn a_rollback_takes_the_turns_said_since_the_switch_along() {
    let (sb, pointer, log) = pointer_sandbox();
    let old_path = sb.project.join(format!("{SESSION}.jsonl"));
    let (runner, stdin, op, new_id) = rebuilt(&sb, &pointer, &log);
    let old_bytes = fs::read(&old_path).unwrap();
    // Two exchanges in the rebuilt session since the switch.
    let rebuilt_path = sb.project.join(format!("{new_id}.jsonl"));
    let written = fs::read(&rebuilt_path).unwrap();
    exchange(&rebuilt_path, &new_id, 1);
    exchange(&rebuilt_path, &new_id, 2);
    let rebuilt_bytes = fs::read(&rebuilt_path).unwrap();
    sb.store().rollback_request(&op.id, "ROLLBACK").unwrap();
    let op = stop_rolls_back(&sb, &op, &new_id);
    assert_eq!(op.status, Status::RolledBack, "{op:?}");
    let restore = op.restore.clone().expect("a restore session");
    let restore_id = restore.session_id.to_string();
    assert!(restore_id != SESSION && restore_id != new_id);
    assert_eq!(
        fs::read_to_string(&pointer).unwrap().trim(),
        restore_id,
        "the pointer names the restore session"
    );
    assert_eq!(
        fs::read(&old_path).unwrap(),
        old_bytes,
        "the old transcript is only read"
    );
    assert_eq!(fs::read(&rebuilt_path).unwrap(), rebuilt_bytes);

    // The restore session: the old transcript's bytes, then the six
    // records said since, verbatim, the first chained onto the old
    // conversation's last record.
    let records = |bytes: &[u8]| -> Vec<serde_json::Value> {
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    };
    let restored = fs::read(&restore.path).unwrap();
    assert!(restored.starts_with(&old_bytes));
    let old = records(&old_bytes);
    let said_bytes = &rebuilt_bytes[written.len()..];
    let got = records(&restored[old_bytes.len()..]);
    assert_eq!(got.len(), 6);
    assert_eq!(
        (restore.old_records, restore.new_records, restore.turns),
        (old.len(), 6, 2)
    );
    let old_last = old.iter().rev().find_map(|r| r["uuid"].as_str()).unwrap();
    let mut first = got[0].clone();
    assert_eq!(first["parentUuid"], old_last);
    first["parentUuid"] = records(said_bytes)[0]["parentUuid"].clone();
    let mut expected = serde_json::to_vec(&first).unwrap();
    expected.push(b'\n');
    let rest = said_bytes.splitn(2, |b| *b == b'\n').nth(1).unwrap();
    assert_eq!(&restored[restored.len() - rest.len()..], rest, "verbatim");
    assert_eq!(records(&expected), records(said_bytes)[..1]);

    let line = format!("rolled back to {SESSION}: the 2 turns said since the rebuild came along");
    assert!(op.history.last().unwrap().note.starts_with(&line), "{op:?}");
    let status = sb.run("status", None, &[]);
    assert!(status.stdout.contains(&line), "{}", status.stdout);

    // Recall knows the restore session: its lineage goes through the
    // rebuilt session to the old one.
    let out = sb.run(
        "recall",
        None,
        &["--json", "--current", &restore_id, "SAID-SINCE answer 1"],
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let lineage: Vec<&str> = v["lineage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["session"].as_str().unwrap())
        .collect();
    assert_eq!(lineage, [restore_id.as_str(), new_id.as_str(), SESSION]);
    let found: Vec<&str> = v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["session"].as_str().unwrap())
        .collect();
    assert_eq!(found, [restore_id.as_str(), new_id.as_str()]);

    // The next prompt runs on the restore session.
    third_runs_on(runner, stdin, &log, &restore_id);
}

#[test]
fn a_rollback_with_nothing_said_since_the_switch_resumes_the_old_session() {
    let (sb, pointer, log) = pointer_sandbox();
    let old_path = sb.project.join(format!("{SESSION}.jsonl"));
    let (runner, stdin, op, new_id) = rebuilt(&sb, &pointer, &log);
    let old_bytes = fs::read(&old_path).unwrap();
    sb.store().rollback_request(&op.id, "ROLLBACK").unwrap();
    let op = stop_rolls_back(&sb, &op, &new_id);
    assert_eq!(op.status, Status::RolledBack, "{op:?}");
    assert_eq!(op.restore, None);
    assert_eq!(fs::read_to_string(&pointer).unwrap().trim(), SESSION);
    assert_eq!(fs::read(&old_path).unwrap(), old_bytes);
    let sessions = fs::read_dir(&sb.project).unwrap().count();
    assert_eq!(
        sessions, 2,
        "the old session and the rebuilt one, nothing else"
    );
    third_runs_on(runner, stdin, &log, SESSION);
}

/// The runner's next prompt, `third`, runs on `session`; then it ends.
#[track_caller]
fn third_runs_on(runner: Child, mut stdin: std::process::ChildStdin, log: &Path, session: &str) {
    writeln!(stdin, "third").unwrap();
    assert!(wait_for(Duration::from_secs(30), || runs(log).len() == 3));
    assert_eq!(runs(log)[2][..4], ["-p", "--resume", session, "third"]);
    drop(stdin);
    let out = runner.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
}
