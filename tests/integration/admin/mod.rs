//! The admin CLI (`ktr request/status/cancel/rollback-request/ops/prune`)
//! as a human runs it: the real binary in a sandbox (temp HOME, state and
//! project dirs), operations driven with the library where a stage would.

mod demo;
mod prune;
mod session;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

use crate::support::ResultOrPanic;
use crate::support::Sandbox;
use ktr_base::digest::Sha256;
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::{Ack, CandidateFile, Operation, Status, Transition};

/// A `ktr` command line, run against a sandbox.
struct Ktr {
    cmd: Command,
}

/// What a finished `ktr` run printed.
struct Run {
    stdout: String,
    stderr: String,
    code: i32,
}

impl Ktr {
    fn new(sandbox: &Sandbox) -> Ktr {
        Ktr {
            cmd: sandbox.command(crate::support::exe("ktr")),
        }
    }

    /// `ktr` with no config at all, only a sandbox HOME and TMPDIR (the demo).
    fn bare(sandbox: &Sandbox) -> Ktr {
        let mut cmd = Command::new(crate::support::exe("ktr"));
        cmd.env_clear()
            .env("HOME", &sandbox.home)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("TMPDIR", sandbox.root());
        Ktr { cmd }
    }

    fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Ktr {
        self.cmd.arg(arg);
        self
    }

    fn args<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(mut self, args: I) -> Ktr {
        self.cmd.args(args);
        self
    }

    fn run(mut self) -> Run {
        let out = self
            .cmd
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        Run {
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
            code: out.status.code().unwrap_or(-1),
        }
    }
}

impl Run {
    #[track_caller]
    fn code(self, code: i32) -> Run {
        assert_eq!(
            self.code, code,
            "exit code\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }

    #[track_caller]
    fn stdout_contains(self, text: &str) -> Run {
        assert!(
            self.stdout.contains(text),
            "stdout lacks {text:?}:\n{}",
            self.stdout
        );
        self
    }

    #[track_caller]
    fn stderr_contains(self, text: &str) -> Run {
        assert!(
            self.stderr.contains(text),
            "stderr lacks {text:?}:\n{}",
            self.stderr
        );
        self
    }

    #[track_caller]
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).or_panic(|e| format!("not JSON ({e}):\n{}", self.stdout))
    }
}

const TO_ACTIVATED: [Status; 5] = [
    Status::Scheduled,
    Status::Running,
    Status::Verifying,
    Status::Activating,
    Status::Activated,
];

#[test]
fn request_creates_merges_and_refuses_by_name() {
    let sb = Sandbox::new();
    Ktr::new(&sb)
        .args(["request", "--confirm", "rebuild"])
        .run()
        .code(1)
        .stderr_contains("confirmation must be exactly REBUILD");
    Ktr::new(&sb)
        .args(["request", "--reason", "x"])
        .run()
        .code(2)
        .stderr_contains("needs --confirm REBUILD");
    let ops = Ktr::new(&sb).args(["ops", "--json"]).run().code(0).json();
    assert_eq!(ops, serde_json::json!([]), "a wrong word creates nothing");

    let first = Ktr::new(&sb)
        .args([
            "request",
            "--confirm",
            "REBUILD",
            "--reason",
            "ledger over budget",
        ])
        .arg("--json")
        .run()
        .code(0)
        .json();
    assert_eq!(first["status"], "pending");
    let id = first["id"].as_str().unwrap().to_string();
    let merged = Ktr::new(&sb)
        .args([
            "request",
            "--confirm",
            "REBUILD",
            "--reason",
            "image viewed",
        ])
        .args(["--session", "sess-1", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(merged["id"], id.as_str(), "merged into the pending one");
    assert_eq!(
        merged["reasons"],
        serde_json::json!(["ledger over budget", "image viewed"])
    );
    assert_eq!(merged["session_id"], "sess-1");
    // The readable report names the next step.
    Ktr::new(&sb)
        .args(["request", "--confirm", "REBUILD"])
        .run()
        .code(0)
        .stdout_contains(&id)
        .stdout_contains("requested with ktr request")
        .stdout_contains(&format!("ktr cancel {id} --confirm CANCEL"));

    sb.walk(&id, &[Status::Scheduled, Status::Running], |_| {});
    Ktr::new(&sb)
        .args(["request", "--confirm", "REBUILD", "--reason", "again"])
        .run()
        .code(1)
        .stderr_contains(&format!("operation {id} is running"));
    Ktr::new(&sb)
        .args(["request", "--confirm", "REBUILD", "--session", "../etc"])
        .run()
        .code(2)
        .stderr_contains("invalid session id");
}

#[test]
fn status_shows_the_latest_operation_with_estimate_and_measurement() {
    let sb = Sandbox::new();
    Ktr::new(&sb)
        .arg("status")
        .run()
        .code(0)
        .stdout_contains("no operations yet");
    // Always an object: no operation, and no transcript to show a window of.
    let idle = Ktr::new(&sb)
        .args(["status", "--json"])
        .run()
        .code(0)
        .json();
    assert!(
        idle.is_object() && idle["id"].is_null() && idle["window"].is_null(),
        "{idle:#}"
    );
    let store = sb.store();
    let old = store.request("first", "REBUILD", None).unwrap();
    store.cancel(&old.id, "CANCEL").unwrap();
    let op = store
        .request(
            "window 4 MB",
            "REBUILD",
            Some(&SessionId::parse("src-session").unwrap()),
        )
        .unwrap();
    sb.walk(&op.id, &TO_ACTIVATED, |op| {
        op.attempts = 2;
        op.estimated_tokens = Some(11_800);
        op.candidate = Some(CandidateFile {
            session_id: ktr_base::ids::SessionId::parse("new-session").unwrap(),
            path: "/p/new-session.jsonl".into(),
            sha256: Sha256::parse(&"ab".repeat(32)).unwrap(),
        });
        op.manifest_artifact = Some(ktr_pipeline::operation::ManifestRef {
            items: 7,
            ..Default::default()
        });
        op.verification = Some(
            serde_json::from_value(
                serde_json::json!({"ok": true, "at": "2026-11-29T08:00:00.000Z"}),
            )
            .unwrap(),
        );
        op.ack = Some(Ack {
            at: stamp("2026-11-29T08:00:00.000Z"),
            session_id: ktr_base::ids::SessionId::parse("new-session").unwrap(),
            context_tokens: Some(49_100),
        });
        op.target_before = Some("src-session".into());
        op.target_after = Some("new-session".into());
    });

    let v = Ktr::new(&sb)
        .args(["status", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(v["id"], op.id.as_str(), "default is the latest operation");
    assert_eq!(v["status"], "activated");
    assert_eq!(v["terminal"], true);
    assert_eq!(v["reasons"], serde_json::json!(["window 4 MB"]));
    assert_eq!(v["session_id"], "src-session");
    assert_eq!(v["attempts"], 2);
    assert_eq!(v["candidate_session_id"], "new-session");
    assert_eq!(v["manifest_items"], 7);
    assert_eq!(v["verified"], true);
    assert_eq!(v["estimated_tokens"], 11_800);
    assert_eq!(v["context_tokens"], 49_100);
    assert_eq!(v["error"], serde_json::Value::Null);
    assert_eq!(v["session_conflict"], false);
    assert_eq!(v["needs_attention"], false);
    assert!(v.get("manifest").is_none(), "the manifest is summarised");
    let history: Vec<_> = v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["to"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        history,
        [
            "scheduled",
            "running",
            "verifying",
            "activating",
            "activated"
        ]
    );

    // An older operation by id, in the readable form.
    Ktr::new(&sb)
        .args(["status", &old.id])
        .run()
        .code(0)
        .stdout_contains("cancelled")
        .stdout_contains("pending → cancelled");
    Ktr::new(&sb)
        .arg("status")
        .run()
        .code(0)
        .stdout_contains("11800 estimated")
        .stdout_contains("49100 counted by Claude Code at resume")
        .stdout_contains("ktr rollback-request");
    Ktr::new(&sb)
        .args(["status", "0123-abcd"])
        .run()
        .code(2)
        .stderr_contains("no operation 0123-abcd");
    Ktr::new(&sb)
        .args(["status", "../x"])
        .run()
        .code(2)
        .stderr_contains("invalid operation id");
}

#[test]
fn status_of_a_failure_shows_error_conflict_and_attention() {
    let sb = Sandbox::new();
    let op = sb.store().request("x", "REBUILD", None).unwrap();
    sb.walk(
        &op.id,
        &[Status::Scheduled, Status::Running, Status::Failed],
        |op| {
            op.error = Some("target changed: pane pid 41 → 97".into());
            op.session_conflict = true;
            op.needs_attention = true;
        },
    );
    let v = Ktr::new(&sb)
        .args(["status", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(
        (&v["status"], &v["session_conflict"], &v["needs_attention"]),
        (
            &serde_json::json!("failed"),
            &serde_json::json!(true),
            &serde_json::json!(true)
        )
    );
    Ktr::new(&sb)
        .arg("status")
        .run()
        .stdout_contains("target changed: pane pid 41 → 97")
        .stdout_contains("never retry blindly")
        .stdout_contains("NEEDS ATTENTION");
}

#[test]
fn a_dead_worker_is_failed_by_any_command_and_never_blocks() {
    let sb = Sandbox::new();
    let op = sb.store().request("x", "REBUILD", None).unwrap();
    // A worker that has exited, recorded long ago.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    sb.walk(&op.id, &[Status::Scheduled, Status::Running], |_| {});
    let path = sb.state.join(format!("operations/{}.json", op.id));
    let mut stored: Operation = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    stored.worker = Some(ktr_pipeline::operation::Worker {
        pid,
        start_time: 1,
        stage: ktr_pipeline::operation::Stage::Prepare,
    });
    stored.updated_at = stamp("2020-01-01T00:00:00.000Z");
    fs::write(&path, serde_json::to_vec(&stored).unwrap()).unwrap();

    Ktr::new(&sb)
        .arg("ops")
        .run()
        .code(0)
        .stderr_contains(&format!(
            "operation {} failed: worker died during running",
            op.id
        ))
        .stdout_contains("error: worker died during running");
    Ktr::new(&sb)
        .args(["request", "--confirm", "REBUILD"])
        .run()
        .code(0)
        .stdout_contains("pending");
}

#[test]
fn cancel_only_a_pending_operation() {
    let sb = Sandbox::new();
    let op = sb.store().request("x", "REBUILD", None).unwrap();
    Ktr::new(&sb)
        .args(["cancel", &op.id, "--confirm", "cancel"])
        .run()
        .code(1)
        .stderr_contains("confirmation must be exactly CANCEL");
    Ktr::new(&sb)
        .args(["cancel", "--confirm", "CANCEL"])
        .run()
        .code(2)
        .stderr_contains("needs an operation id");
    let v = Ktr::new(&sb)
        .args(["cancel", &op.id, "--confirm", "CANCEL", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(v["status"], "cancelled");
    Ktr::new(&sb)
        .args(["cancel", &op.id, "--confirm", "CANCEL"])
        .run()
        .code(1)
        .stderr_contains("is cancelled; only a pending operation can be cancelled");

    let busy = sb.store().request("y", "REBUILD", None).unwrap();
    sb.walk(&busy.id, &[Status::Scheduled], |_| {});
    Ktr::new(&sb)
        .args(["cancel", &busy.id, "--confirm", "CANCEL"])
        .run()
        .code(1)
        .stderr_contains("is scheduled");
    assert_eq!(sb.store().load(&busy.id).unwrap().status, Status::Scheduled);
}

#[test]
fn rollback_request_only_for_an_activated_operation() {
    let sb = Sandbox::new();
    let op = sb.store().request("x", "REBUILD", None).unwrap();
    Ktr::new(&sb)
        .args(["rollback-request", &op.id, "--confirm", "ROLLBACK"])
        .run()
        .code(1)
        .stderr_contains("is pending; only an activated operation can be rolled back");
    sb.walk(&op.id, &TO_ACTIVATED, |_| {});
    Ktr::new(&sb)
        .args(["rollback-request", &op.id, "--confirm", "rollback"])
        .run()
        .code(1)
        .stderr_contains("confirmation must be exactly ROLLBACK");
    Ktr::new(&sb)
        .args(["rollback-request", &op.id, "--confirm", "ROLLBACK"])
        .run()
        .code(0)
        .stdout_contains("rollback_pending")
        .stdout_contains("rollback waits for the current reply");
    assert_eq!(sb.store().active(), Some((op.id, Status::RollbackPending)));
}

#[test]
fn ops_lists_every_operation_newest_first() {
    let sb = Sandbox::new();
    let store = sb.store();
    let mut ids = Vec::new();
    for reason in ["first", "second", "third"] {
        let op = store.request(reason, "REBUILD", None).unwrap();
        if reason != "third" {
            store.cancel(&op.id, "CANCEL").unwrap();
        }
        ids.push(op.id);
        // created_at has millisecond resolution.
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let rows = Ktr::new(&sb).args(["ops", "--json"]).run().code(0).json();
    let listed: Vec<_> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    ids.reverse();
    assert_eq!(listed, ids);
    assert_eq!(rows[0]["status"], "pending");
    assert_eq!(rows[2]["reasons"], serde_json::json!(["first"]));

    let table = Ktr::new(&sb).arg("ops").run().code(0).stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("OPERATION"), "{table}");
    assert_eq!(lines.len(), 4, "{table}");
    for (line, id) in lines[1..].iter().zip(&ids) {
        assert!(line.starts_with(id.as_str()), "{table}");
    }
    assert!(lines[1].contains("pending") && lines[1].contains("third"));
    assert!(lines[3].contains("cancelled") && lines[3].contains("first"));
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    let sb = Sandbox::new();
    for args in [
        &["ops", "--yes"][..],
        &["status", "a", "b"],
        &["prune"],
        &["prune", "--older-than", "soon"],
        &["prune", "--older-than", "-1"],
        &["rollback-request", "--confirm", "ROLLBACK"],
        &["demo", "--json"],
        &["demo"], // Sandbox::command adds --config: the demo refuses it.
    ] {
        let run = Ktr::new(&sb).args(args).run().code(2);
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}");
    }
}

// ---------------------------------------------------------------------------
// prune

/// An operation file written directly, so its age can be set.
fn put(sb: &Sandbox, op: &Operation) {
    let path = sb.state.join(format!("operations/{}.json", op.id));
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, serde_json::to_vec_pretty(op).unwrap()).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
}

/// A finished operation with a history (`through` lists the statuses it
/// reached), an artifacts dir holding a backup, updated at `updated_at`.
fn finished(sb: &Sandbox, through: &[Status], updated_at: &str) -> Operation {
    let mut op = Operation::new(
        "old",
        Some(ktr_base::ids::SessionId::parse("source-session").unwrap()),
    );
    let mut from = Status::Pending;
    for to in through {
        op.history.push(Transition {
            at: stamp(updated_at),
            from,
            to: *to,
            note: "test".into(),
        });
        from = *to;
    }
    op.status = from;
    op.created_at = stamp(updated_at);
    op.updated_at = stamp(updated_at);
    let art = sb.state.join("artifacts").join(&op.id);
    fs::create_dir_all(&art).unwrap();
    fs::write(art.join("source-session.jsonl"), "backup\n").unwrap();
    put(sb, &op);
    op
}

/// Give `op` a candidate file in the project dir, as ktr-prepare writes it.
fn with_candidate(sb: &Sandbox, op: &mut Operation, n: u8) -> PathBuf {
    let sid = format!("cccccccc-0000-4000-8000-00000000000{n}");
    let path = sb.project.join(format!("{sid}.jsonl"));
    fs::write(&path, format!("{{\"type\":\"user\",\"n\":{n}}}\n")).unwrap();
    op.candidate = Some(CandidateFile {
        session_id: ktr_base::ids::SessionId::parse(&sid).unwrap(),
        sha256: Sha256::of_file(&path).unwrap(),
        path: path.clone(),
    });
    put(sb, op);
    path
}

/// A key keeper's file left by `stage` of operation `id` (SPEC §12:
/// `keep/<op>-<stage>/<n>/keys`): its path.
#[track_caller]
fn left_keys(sb: &Sandbox, id: &str, stage: &str) -> PathBuf {
    let dir = sb
        .state
        .join("keep")
        .join(format!("{id}-{stage}"))
        .join("1");
    fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys");
    fs::write(&keys, "what a person typed").unwrap();
    keys
}

/// A timestamp written like ktr writes one.
#[track_caller]
fn stamp(at: &str) -> ktr_base::time::Timestamp {
    ktr_base::time::Timestamp::parse(at).unwrap()
}

const OLD: &str = "2020-01-01T00:00:00.000Z";
