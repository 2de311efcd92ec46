//! The admin CLI (`ktr request/status/cancel/rollback-request/ops/prune`)
//! as a human runs it: the real binary in a sandbox (temp HOME, state and
//! project dirs), operations driven with the library where a stage would.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{OptionOrPanic, ResultOrPanic};
use crate::support::{Sandbox, tree};
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

const OLD: &str = "2020-01-01T00:00:00.000Z";

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

#[test]
fn prune_deletes_only_old_terminal_operations_and_their_own_leftovers() {
    use Status::*;
    let sb = Sandbox::new();
    // The old pending request must not expire under this test (~7 years).
    sb.write_config("request_ttl_hours = 60000");
    let source = sb.project.join("source-session.jsonl");
    fs::write(&source, "{\"type\":\"user\"}\n").unwrap();
    fs::write(sb.project.join("someone-else.jsonl"), "x\n").unwrap();
    fs::create_dir_all(sb.project.join("source-session/tool-results")).unwrap();
    fs::write(sb.project.join("source-session/tool-results/a.txt"), "t").unwrap();

    // Old and failed before reaching the target: everything goes.
    let mut failed = finished(&sb, &[Scheduled, Running, Failed], OLD);
    let failed_candidate = with_candidate(&sb, &mut failed, 1);
    // Old and cancelled: no candidate ever existed.
    let cancelled = finished(&sb, &[Cancelled], OLD);
    // Old, failed after reaching activating: the candidate may have run.
    let mut died = finished(
        &sb,
        &[Scheduled, Running, Verifying, Activating, Failed],
        OLD,
    );
    died.needs_attention = true;
    let died_candidate = with_candidate(&sb, &mut died, 2);
    // Old and failed, but its candidate was written to since: someone resumed it.
    let mut resumed = finished(&sb, &[Scheduled, Running, Failed], OLD);
    let resumed_candidate = with_candidate(&sb, &mut resumed, 3);
    fs::write(
        &resumed_candidate,
        "{\"type\":\"user\",\"n\":3}\n{\"more\":1}\n",
    )
    .unwrap();
    // Two old activations: the older goes (not its live session), the newest stays whole.
    let mut activated_old = finished(&sb, &TO_ACTIVATED, OLD);
    let activated_old_candidate = with_candidate(&sb, &mut activated_old, 4);
    let mut activated_new = finished(&sb, &TO_ACTIVATED, "2020-02-01T00:00:00.000Z");
    let activated_new_candidate = with_candidate(&sb, &mut activated_new, 5);
    // Recent and failed: too young.
    let recent = finished(&sb, &[Scheduled, Failed], &ktr_base::time::now_rfc3339());
    // Old but still pending: never.
    let pending = sb.store().request("now", "REBUILD", None).unwrap();
    let mut p = sb.store().load(&pending.id).unwrap();
    p.updated_at = stamp(OLD);
    p.created_at = stamp("2020-03-01T00:00:00.000Z");
    put(&sb, &p);
    // Keys a person typed during a switch that the keeper could not replay:
    // they go with their operation, and only with it.
    let failed_keys = left_keys(&sb, &failed.id, "activate");
    let kept_keys = left_keys(&sb, &activated_new.id, "rollback");

    let before = tree(sb.root());
    let dry = Ktr::new(&sb)
        .args(["prune", "--older-than", "30"])
        .run()
        .code(0)
        .stdout_contains("would delete operation")
        .stdout_contains("nothing deleted: run again with --yes")
        .stdout_contains(&failed_candidate.display().to_string());
    assert_eq!(tree(sb.root()), before, "a dry run deletes nothing");
    assert!(
        dry.stdout
            .contains(&format!("kept {} (pending)", pending.id))
    );

    let json = Ktr::new(&sb)
        .args(["prune", "--older-than", "30", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(json["deleted"], false);
    assert_eq!(tree(sb.root()), before, "a JSON dry run deletes nothing");

    Ktr::new(&sb)
        .args(["prune", "--older-than", "30", "--yes"])
        .run()
        .code(0)
        .stdout_contains("deleted 5 operations");
    let after = tree(sb.root());
    let gone: Vec<PathBuf> = before
        .keys()
        .filter(|p| !after.contains_key(*p))
        .cloned()
        .collect();
    let op_file = |op: &Operation| sb.state.join(format!("operations/{}.json", op.id));
    let art = |op: &Operation| sb.state.join("artifacts").join(&op.id);
    let mut expected = vec![failed_candidate.clone()];
    expected.extend(failed_keys.ancestors().take(3).map(Path::to_path_buf));
    for op in [&failed, &cancelled, &died, &resumed, &activated_old] {
        expected.push(op_file(op));
        expected.push(art(op));
        expected.push(art(op).join("source-session.jsonl"));
    }
    expected.sort();
    let mut gone_sorted = gone.clone();
    gone_sorted.sort();
    assert_eq!(gone_sorted, expected);
    for kept in [
        &source,
        &died_candidate,
        &resumed_candidate,
        &activated_old_candidate,
        &activated_new_candidate,
        &op_file(&activated_new),
        &op_file(&recent),
        &op_file(&p),
        &art(&activated_new),
        &kept_keys,
    ] {
        assert!(kept.exists(), "{} was kept", kept.display());
    }
    // Nothing that stayed was changed; the one new file keeps the lineage
    // link of the activated operation that went.
    let links = sb.state.join("lineage.jsonl");
    for (path, digest) in after.iter().filter(|(p, _)| **p != links) {
        assert_eq!(before.get(path), Some(digest), "{}", path.display());
    }
    let kept_links = fs::read_to_string(&links).unwrap();
    assert_eq!(kept_links.lines().count(), 1, "{kept_links}");
    assert!(kept_links.contains(&*activated_old.id), "{kept_links}");
    assert_eq!(sb.store().load(&pending.id).unwrap().status, Pending);
    Ktr::new(&sb)
        .args(["prune", "--older-than", "30", "--yes"])
        .run()
        .code(0)
        .stdout_contains("nothing older than 30 days to prune");
}

/// A rolled-back operation that wrote a restore session (SPEC §10): prune
/// removes the operation but never the restore session nor the rebuilt
/// one, and keeps both links, so recall's lineage of the restore session
/// still goes through the rebuilt session to the old one.
#[test]
fn prune_keeps_a_restore_session_and_its_lineage() {
    use Status::*;
    let sb = Sandbox::new();
    fs::write(sb.project.join("source-session.jsonl"), "old\n").unwrap();
    let switched = [Scheduled, Running, Verifying, Activating, Activated];
    let back = [RollbackPending, RollbackScheduled, RollingBack, RolledBack];
    let mut op = finished(&sb, &[&switched[..], &back[..]].concat(), OLD);
    let candidate = with_candidate(&sb, &mut op, 1);
    let rid = "eeeeeeee-0000-4000-8000-000000000001";
    let restore = sb.project.join(format!("{rid}.jsonl"));
    fs::write(&restore, "old\n{\"type\":\"user\",\"n\":1}\n").unwrap();
    op.restore = Some(ktr_pipeline::operation::RestoreFile {
        session_id: SessionId::parse(rid).unwrap(),
        path: restore.clone(),
        sha256: Sha256::of_file(&restore).unwrap(),
        old_records: 1,
        new_records: 1,
        turns: 1,
    });
    put(&sb, &op);
    Ktr::new(&sb)
        .args(["prune", "--older-than", "30", "--yes"])
        .run()
        .code(0)
        .stdout_contains("deleted 1 operation");
    assert!(!sb.state.join(format!("operations/{}.json", op.id)).exists());
    assert!(restore.exists() && candidate.exists());
    let links = fs::read_to_string(sb.state.join("lineage.jsonl")).unwrap();
    assert_eq!(links.lines().count(), 2, "{links}");
    let json = Ktr::new(&sb)
        .args(["recall", "--json", "--current", rid, "n"])
        .run()
        .code(0)
        .json();
    let lineage: Vec<&str> = json["lineage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["session"].as_str().unwrap())
        .collect();
    let sid = op.candidate.as_ref().unwrap().session_id.to_string();
    assert_eq!(lineage, [rid, sid.as_str(), "source-session"]);
}

#[test]
fn prune_never_deletes_a_candidate_the_pointer_names_or_outside_the_project() {
    use Status::*;
    let sb = Sandbox::new();
    let pointer = sb.root().join("pointer");
    sb.write_config(&format!("resume_pointer_path = {pointer:?}"));
    let mut named = finished(&sb, &[Scheduled, Running, Failed], OLD);
    let named_candidate = with_candidate(&sb, &mut named, 1);
    let sid = named.candidate.as_ref().unwrap().session_id.clone();
    fs::write(&pointer, format!("{sid}\n")).unwrap();

    // A record that claims a candidate outside project_dir.
    let outside = sb.root().join("elsewhere.jsonl");
    fs::write(&outside, "precious\n").unwrap();
    let mut forged = finished(&sb, &[Scheduled, Running, Failed], OLD);
    forged.candidate = Some(CandidateFile {
        session_id: ktr_base::ids::SessionId::parse("elsewhere").unwrap(),
        path: outside.clone(),
        sha256: Sha256::of_file(&outside).unwrap(),
    });
    put(&sb, &forged);
    // And one edited to a session id that tries to climb out: such a file
    // does not even load (ids validate on deserialize), so prune keeps it.
    let mut climbing = finished(&sb, &[Scheduled, Running, Failed], OLD);
    climbing.candidate = forged.candidate.clone();
    let mut raw = serde_json::to_value(&climbing).unwrap();
    raw["candidate"]["session_id"] = "../../elsewhere".into();
    let climbing_file = sb.state.join(format!("operations/{}.json", climbing.id));
    fs::write(&climbing_file, serde_json::to_vec_pretty(&raw).unwrap()).unwrap();

    // Artifacts holding a symlink to something else: only the link goes.
    std::os::unix::fs::symlink(
        &outside,
        sb.state.join("artifacts").join(&forged.id).join("link"),
    )
    .unwrap();
    // An artifacts "dir" that is itself a symlink is left alone.
    let decoy_dir = sb.root().join("decoy");
    fs::create_dir(&decoy_dir).unwrap();
    fs::write(decoy_dir.join("keep.txt"), "k").unwrap();
    let linked = finished(&sb, &[Cancelled], OLD);
    let linked_art = sb.state.join("artifacts").join(&linked.id);
    fs::remove_dir_all(&linked_art).unwrap();
    std::os::unix::fs::symlink(&decoy_dir, &linked_art).unwrap();

    Ktr::new(&sb)
        .args(["prune", "--older-than", "1", "--yes"])
        .run()
        .code(0)
        .stdout_contains("the resume pointer names it")
        .stdout_contains("is not a directory (a symlink?)")
        .stdout_contains("deleted 3 operations");
    assert!(named_candidate.exists());
    assert!(climbing_file.exists());
    assert_eq!(fs::read_to_string(&outside).unwrap(), "precious\n");
    assert!(decoy_dir.join("keep.txt").is_file());
    assert!(!sb.state.join("artifacts").join(&forged.id).exists());
}

// ---------------------------------------------------------------------------
// demo

/// The `sandbox  <path>` line the demo prints first.
#[track_caller]
fn demo_sandbox(stdout: &str) -> PathBuf {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sandbox     "))
        .or_panic(|| format!("no sandbox line:\n{stdout}"));
    PathBuf::from(line.trim())
}

#[test]
fn demo_runs_a_whole_rebuild_and_cleans_up() {
    let sb = Sandbox::new();
    let run = Ktr::bare(&sb).arg("demo").run().code(0);
    let run = run
        .stdout_contains("== 2. ktr doctor ==")
        .stdout_contains("all checks passed")
        .stdout_contains("noise")
        .stdout_contains("plan ok")
        .stdout_contains("rebuild scheduled")
        .stdout_contains("verifying → activating")
        .stdout_contains("status            activated")
        .stdout_contains("8 (all carried verbatim)")
        .stdout_contains("unchanged: same sha256")
        .stdout_contains("demo finished: operation activated")
        // The example was compacted once: its turns before the boundary
        // are only in Claude Code's summary, and the ledger says a rebuild
        // restores them.
        .stdout_contains("advice: rebuild (Claude Code compacted this window: 6 turns are only in its summary, a rebuild restores them word for word")
        // What was left out, and why, in plan and status.
        .stdout_contains("carried items     17; left out: 2 records (1 compact_summary_dropped, 1 local_command)");
    assert!(
        run.stdout.lines().any(|l| l.starts_with("left out ")
            && l.ends_with("  2 records (1 compact_summary_dropped, 1 local_command)")),
        "the plan's left-out row:\n{}",
        run.stdout
    );
    let root = demo_sandbox(&run.stdout);
    assert!(root.starts_with(sb.root()), "{}", root.display());
    assert!(!root.exists(), "the sandbox is removed without --keep");
    assert!(
        run.stdout.contains(&format!(
            "sandbox removed: {} (ktr demo --keep keeps it)",
            root.display()
        )),
        "the demo says it removed its sandbox:\n{}",
        run.stdout
    );
    // The HOME it ran under is untouched: hooks and MCP went into the sandbox.
    assert!(!sb.home.join(".claude/settings.json").exists());
    assert!(!sb.home.join(".claude.json").exists());
    assert!(!run.stdout.contains("sandbox kept"));
}

#[test]
fn demo_keep_leaves_a_sandbox_the_cli_can_inspect() {
    let sb = Sandbox::new();
    let run = Ktr::bare(&sb)
        .args(["demo", "--keep"])
        .run()
        .code(0)
        .stdout_contains("sandbox kept");
    let root = demo_sandbox(&run.stdout);
    let config = root.join("config.toml");
    let out = Command::new(crate::support::exe("ktr"))
        .args(["--config"])
        .arg(&config)
        .args(["status", "--json"])
        .env("HOME", &sb.home)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "activated");
    let candidate = PathBuf::from(v["candidate_path"].as_str().unwrap());
    assert!(candidate.starts_with(&root) && candidate.is_file());
    let pointer = fs::read_to_string(root.join("resume_session")).unwrap();
    assert_eq!(pointer.trim(), v["candidate_session_id"].as_str().unwrap());
    // worker.log counts what status counts.
    let log = fs::read_to_string(root.join("state/worker.log")).unwrap();
    let by_reason = v["left_out_by_reason"].as_object().unwrap();
    let total: u64 = by_reason.values().map(|n| n.as_u64().unwrap()).sum();
    let reasons: Vec<String> = by_reason.iter().map(|(r, n)| format!("{n} {r}")).collect();
    let counts = format!(
        "{} carried items; left out: {total} records ({})",
        v["manifest_items"],
        reasons.join(", ")
    );
    assert_eq!(v["left_out_records"], total);
    assert!(log.contains(&counts), "worker.log lacks {counts:?}:\n{log}");
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn demo_without_the_stages_says_so_and_keeps_the_evidence() {
    let sb = Sandbox::new();
    // ktr and ktr-stop alone: the Stop hook cannot start ktr-prepare.
    let lonely = sb.root().join("lonely");
    fs::create_dir(&lonely).unwrap();
    for bin in [crate::support::exe("ktr"), crate::support::exe("ktr-stop")] {
        let name = Path::new(bin).file_name().unwrap();
        fs::copy(bin, lonely.join(name)).unwrap();
    }
    let out = Command::new(lonely.join("ktr"))
        .arg("demo")
        .env_clear()
        .env("HOME", &sb.home)
        .env("PATH", "/usr/bin:/bin")
        .env("TMPDIR", sb.root())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("the Stop hook did not schedule operation")
            && stderr.contains("ktr-prepare"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stdout.contains("sandbox kept"), "{stdout}");
    let root = demo_sandbox(&stdout);
    assert!(root.join("config.toml").is_file());
}

// ---------------------------------------------------------------------------
// --session and --new-session

#[test]
fn session_names_the_transcript_to_read_and_new_session_must_be_a_uuid() {
    let sb = Sandbox::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/session.jsonl");
    let older = sb
        .project
        .join("0a000000-0000-4000-8000-000000000001.jsonl");
    let newer = sb
        .project
        .join("0b000000-0000-4000-8000-000000000002.jsonl");
    fs::copy(&example, &older).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::copy(&example, &newer).unwrap();
    let source = |args: &[&str]| -> String {
        let run = Ktr::new(&sb).arg("plan").args(args).arg("--json").run();
        let v: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|_| panic!("{}{}", run.stdout, run.stderr));
        v["source_path"].as_str().unwrap().to_string()
    };
    assert!(source(&[]).ends_with("0b000000-0000-4000-8000-000000000002.jsonl"));
    for command in ["plan", "dirty"] {
        let run = Ktr::new(&sb)
            .args([command, "--session", "0a000000-0000-4000-8000-000000000001"])
            .run()
            .code(0);
        assert!(
            run.stdout.contains(&older.display().to_string()),
            "{}",
            run.stdout
        );
    }
    Ktr::new(&sb)
        .args(["plan", "--session", "../etc/passwd"])
        .run()
        .code(2)
        .stderr_contains("invalid session id");
    Ktr::new(&sb)
        .args(["plan", "--session", "0a000000-0000-4000-8000-000000000001"])
        .arg("--transcript")
        .arg(&older)
        .run()
        .code(2)
        .stderr_contains("give one");
    for bad in [
        "nope",
        "0d15ea5e-0000-4000-8000-00000000beeg",
        "0d15ea5e00004000800000000000beef00",
    ] {
        Ktr::new(&sb)
            .args(["plan", "--new-session", bad])
            .run()
            .code(2)
            .stderr_contains("(a UUID)");
    }
    // The old name is an alias of --new-session, with the same check.
    Ktr::new(&sb)
        .args(["plan", "--session-id", "nope"])
        .run()
        .code(2)
        .stderr_contains("--new-session takes a session id");
    let fixed = "0d15ea5e-0000-4000-8000-00000000beef";
    let one = Ktr::new(&sb)
        .args(["plan", "--show-candidate", "--new-session", fixed])
        .run()
        .code(0);
    let two = Ktr::new(&sb)
        .args(["plan", "--show-candidate", "--session-id", fixed])
        .run()
        .code(0);
    assert!(one.stdout.contains(fixed));
    assert_eq!(one.stdout, two.stdout);
}

/// A timestamp written like ktr writes one.
#[track_caller]
fn stamp(at: &str) -> ktr_base::time::Timestamp {
    ktr_base::time::Timestamp::parse(at).unwrap()
}

/// Purge removes ktr's own copies of the
/// conversation — the state dir's files and the candidates never
/// activated — and never a source transcript, the transcript of a session
/// that ran, or anything else in the state dir; without the word it only
/// lists; it refuses while an operation is in flight.
#[test]
fn purge_removes_only_ktrs_copies_and_only_with_the_word() {
    use Status::*;
    let sb = Sandbox::new();
    // ktr made the state dir (with its marker); the operator's file came later.
    sb.store();
    let source = sb.project.join("source-session.jsonl");
    fs::write(&source, "{\"type\":\"user\"}\n").unwrap();
    let mut failed = finished(&sb, &[Scheduled, Running, Failed], OLD);
    let never_ran = with_candidate(&sb, &mut failed, 1);
    let mut activated = finished(
        &sb,
        &[Scheduled, Running, Verifying, Activating, Activated],
        OLD,
    );
    let ran = with_candidate(&sb, &mut activated, 2);
    let theirs = sb.state.join("notes-of-the-operator.txt");
    fs::write(&theirs, "mine").unwrap();
    // What a person typed, kept by ktr: a prompt held for a paste-back and
    // keys the keeper could not replay; and the bindings and lineage links.
    fs::create_dir_all(sb.state.join("prompts")).unwrap();
    fs::write(sb.state.join("prompts/s.last"), "{\"prompt\":\"hi\"}").unwrap();
    left_keys(&sb, &failed.id, "activate");
    fs::create_dir_all(sb.state.join("claude")).unwrap();
    fs::write(sb.state.join("claude/4242.json"), "{}").unwrap();
    fs::write(sb.state.join("lineage.jsonl"), "{}\n").unwrap();

    Ktr::new(&sb)
        .args(["purge"])
        .run()
        .code(0)
        .stdout_contains("would remove candidate")
        .stdout_contains("nothing removed: `ktr purge --confirm PURGE` removes them");
    // (The first look made the lock file; a second changes nothing.)
    let before = tree(sb.root());
    Ktr::new(&sb).args(["purge", "--json"]).run().code(0);
    assert_eq!(tree(sb.root()), before, "a dry run removes nothing");
    Ktr::new(&sb)
        .args(["purge", "--confirm", "purge"])
        .run()
        .code(1)
        .stderr_contains("confirmation must be exactly PURGE");
    assert_eq!(tree(sb.root()), before);

    Ktr::new(&sb)
        .args(["purge", "--confirm", "PURGE"])
        .run()
        .code(0)
        .stdout_contains("ktr's copies of the conversation are gone")
        .stdout_contains("not empty: it holds files ktr did not make");
    assert!(!never_ran.exists(), "the never-activated candidate is gone");
    for kept in [&source, &ran, &theirs] {
        assert!(kept.exists(), "{} was kept", kept.display());
    }
    for gone in [
        "operations",
        "artifacts",
        "active",
        "ktr.log",
        "coordinator.lock",
        "prompts",
        "keep",
        "claude",
        "lineage.jsonl",
    ] {
        assert!(!sb.state.join(gone).exists(), "{gone} left behind");
    }

    // In flight: refused, nothing removed.
    let sb = Sandbox::new();
    let op = sb.store().request("x", "REBUILD", None).unwrap();
    let before = tree(sb.root());
    Ktr::new(&sb)
        .args(["purge", "--confirm", "PURGE"])
        .run()
        .code(1)
        .stderr_contains(&format!("operation {} is pending", op.id));
    assert_eq!(tree(sb.root()), before);
}

/// Every label of `ktr plan` stands in its own column —
/// none runs into its value (`…expansion0`).
#[test]
fn plan_labels_never_run_into_their_values() {
    let sb = Sandbox::new();
    sb.add_transcript(
        "0a000000-0000-4000-8000-000000000001",
        &fs::read(crate::support::example()).unwrap(),
    );
    let run = Ktr::new(&sb).arg("plan").run();
    for label in [
        "commands carried with their expansion",
        "turns with a broken timestamp",
        "poison hits (last 10 turns)",
    ] {
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} in\n{}", run.stdout));
        assert!(
            line[label.len()..].starts_with("  "),
            "{line:?} runs into its value"
        );
    }
}

/// `ktr status` (and `--json`) carry the window of the
/// operation's session: used, size, compaction point, after a rebuild,
/// each with its source.
#[test]
fn status_shows_the_window_with_the_source_of_each_figure() {
    let sb = Sandbox::new();
    let session = "0a000000-0000-4000-8000-000000000001";
    let transcript = sb.add_transcript(session, &fs::read(crate::support::example()).unwrap());
    let op = sb
        .store()
        .request("x", "REBUILD", Some(&SessionId::parse(session).unwrap()))
        .unwrap();
    sb.walk(&op.id, &[Status::Scheduled], |op| {
        op.transcript_path = Some(transcript.clone());
    });
    let json = Ktr::new(&sb)
        .args(["status", "--json"])
        .run()
        .code(0)
        .json();
    let w = &json["window"];
    assert_eq!(w["session_id"], session, "{json:#}");
    assert!(w["used_tokens"].as_u64().unwrap() > 0, "{w:#}");
    assert!(
        w["used_source"]
            .as_str()
            .unwrap()
            .starts_with("the API's count"),
        "{w:#}"
    );
    assert_eq!(
        w["compaction_point_tokens"].as_u64().unwrap(),
        w["size_tokens"].as_u64().unwrap() - 33_000
    );
    assert!(
        w["size_source"].as_str().unwrap().contains("model"),
        "{w:#}"
    );
    assert!(
        w["after_rebuild_source"]
            .as_str()
            .unwrap()
            .contains("not planned yet")
    );
    assert_eq!(w["auto_compaction"], true, "{w:#}");
    Ktr::new(&sb)
        .arg("status")
        .run()
        .code(0)
        .stdout_contains("Claude Code compacts at");
    // Auto-compaction off: the point is the hard limit, and status says so.
    let off = |args: &[&str]| {
        let mut ktr = Ktr::new(&sb).args(args);
        ktr.cmd.env("DISABLE_AUTO_COMPACT", "1");
        ktr.run().code(0)
    };
    let json = off(&["status", "--json"]).json();
    assert_eq!(json["window"]["auto_compaction"], false, "{json:#}");
    off(&["status"]).stdout_contains("no auto-compaction, hard limit");
}

#[test]
fn prune_removes_prompts_kept_longer_than_the_retention_and_nothing_else() {
    let sb = Sandbox::new();
    sb.write_config("");
    let prompts = sb.state.join("prompts");
    fs::create_dir_all(&prompts).unwrap();
    let old = prompts.join("5d1c9a8e-3b7f-4e2a-9c61-0f2b7d4e8a13.last");
    let blocked = prompts.join("0f2b7d4e-3b7f-4e2a-9c61-5d1c9a8e8a13.blocked");
    let fresh = prompts.join("9c61aaaa-3b7f-4e2a-9c61-0f2b7d4e8a13.last");
    for f in [&old, &blocked, &fresh] {
        fs::write(f, "{\"text\":\"what a person typed\"}").unwrap();
    }
    let outside = sb.root().join("outside.txt");
    fs::write(&outside, "not ktr's").unwrap();
    std::os::unix::fs::symlink(&outside, prompts.join("link.last")).unwrap();
    // Not a name ktr writes there: a person's file stays, however old.
    let notes = prompts.join("notes.txt");
    fs::write(&notes, "mine").unwrap();
    for f in [&old, &blocked, &prompts.join("link.last"), &notes] {
        let touched = Command::new("touch")
            .args(["-h", "-d", "40 days ago"])
            .arg(f)
            .status()
            .unwrap();
        assert!(touched.success());
    }

    let before = tree(&prompts);
    Ktr::new(&sb)
        .args(["prune", "--older-than", "30"])
        .run()
        .code(0)
        .stdout_contains("would delete kept prompt")
        .stdout_contains(&old.display().to_string())
        .stdout_contains(&blocked.display().to_string())
        .stdout_contains("0 operations and 2 kept prompts")
        .stdout_contains("nothing deleted: run again with --yes");
    assert_eq!(tree(&prompts), before, "a dry run deletes nothing");

    Ktr::new(&sb)
        .args(["prune", "--older-than", "30", "--yes"])
        .run()
        .code(0)
        .stdout_contains("deleted 0 operations and 2 kept prompts");
    assert!(!old.exists() && !blocked.exists());
    assert!(fresh.exists(), "written within the retention");
    assert!(
        prompts.join("link.last").symlink_metadata().is_ok(),
        "a symlink is not ktr's file"
    );
    assert_eq!(fs::read_to_string(&outside).unwrap(), "not ktr's");
    assert!(notes.exists(), "only the forms ktr writes are pruned");
}
