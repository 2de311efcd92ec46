//! The last copy of a session that ran stays whatever its operation's
//! status, and the lineage stays whole; a superseded operation is not
//! rolled back out of order.

use ktr_base::time::Timestamp;
use ktr_pipeline::operation::{Status, Transition};

use crate::recall::{A, B, C, D, lineage, recall, sessions_of};

/// `ops[0]` (A → B) was activated, then its rollback failed (a rollback of
/// a superseded operation did exactly that): it ends `failed`, its backup
/// the only copy of A, whose transcript Claude Code deleted.
fn failed_rollback(sb: &crate::support::Sandbox, id: &str) {
    use Status::*;
    sb.walk(
        id,
        &[RollbackPending, RollbackScheduled, RollingBack, Failed],
        |op| {
            op.history.push(Transition {
                at: Timestamp::now(),
                from: Activating,
                to: Activated,
                note: "activated".into(),
            });
        },
    );
}

#[test]
fn prune_keeps_the_only_copy_of_a_session_whose_operation_failed_and_its_link() {
    let (sb, ops) = lineage();
    failed_rollback(&sb, &ops[0]);
    let backup = sb
        .state
        .join("artifacts")
        .join(&ops[0])
        .join(format!("{A}.jsonl"));
    let (out, trace) = sb.ktr_traced(
        "unlink,unlinkat,rmdir,rename,renameat,renameat2",
        "prune",
        &["--older-than", "0", "--yes"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let touched: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains(&ops[0]) || l.contains(&format!("{A}.jsonl")))
        .collect();
    assert!(touched.is_empty(), "{touched:#?}");
    assert!(
        trace.contains(&format!("{}.json", ops[1])),
        "B's operation file was removed: {trace}"
    );
    assert!(
        out.stdout
            .contains(&format!("only copy left of session {A}")),
        "{}",
        out.stdout
    );
    assert!(backup.is_file(), "the only copy of A was deleted");
    assert!(
        !sb.state
            .join("operations")
            .join(format!("{}.json", ops[1]))
            .exists(),
        "B's operation (its transcript is there) went: {}",
        out.stdout
    );
    let v = recall(&sb, &["output-"]);
    assert_eq!(
        sessions_of(&v),
        ["dddddddd", "cccccccc", "bbbbbbbb", "aaaaaaaa"],
        "the lineage is whole, A read from its backup"
    );
    assert_eq!(v["lost"], serde_json::json!([]));
    // With the word, the copy goes; recall says A is lost, and why.
    let out = sb.run(
        "prune",
        None,
        &["--older-than", "0", "--yes", "--confirm", "FORGET"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!backup.exists());
    let v = recall(&sb, &["output-"]);
    assert_eq!(v["lineage"].as_array().unwrap().len(), 4, "{v}");
    assert_eq!(v["lost"][0]["session"], A, "{v}");
    assert!(
        v["lost"][0]["why"]
            .as_str()
            .unwrap()
            .contains(&format!("operation {}", ops[0])),
        "{v}"
    );
    let out = sb.run("recall", None, &["--current", D, "output-"]);
    assert!(
        out.stdout
            .contains(&format!("not searched: session {A}: Claude Code deleted")),
        "{}",
        out.stdout
    );
}

#[test]
fn a_superseded_operation_is_not_rolled_back_before_those_that_came_after_it() {
    let (sb, ops) = lineage();
    let asked = |id: &str| sb.run("rollback-request", None, &[id, "--confirm", "ROLLBACK"]);
    let out = asked(&ops[0]);
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("its session {B} was rebuilt again by {}", ops[1])),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!(
            "ktr rollback-request {} --confirm ROLLBACK, then ktr rollback-request {} --confirm ROLLBACK, then ktr rollback-request {} --confirm ROLLBACK",
            ops[2], ops[1], ops[0]
        )),
        "{}",
        out.stderr
    );
    let out = asked(&ops[1]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains(C), "{}", out.stderr);
    let status = |id: &str| {
        sb.store()
            .load(&ktr_base::ids::OperationId::parse(id).unwrap())
            .unwrap()
            .status
    };
    assert_eq!(status(&ops[0]), Status::Activated);
    // The newest one is the running session's: that one may go back.
    let out = asked(&ops[2]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(status(&ops[2]), Status::RollbackPending);
    // Once it is rolled back, the next one is the running session's.
    sb.walk(
        &ops[2],
        &[Status::RollbackScheduled, Status::RolledBack],
        |_| {},
    );
    let out = asked(&ops[1]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

/// A rollback offer nobody took expires and its restore session goes —
/// but only a file of its own in `project_dir`: an operation file edited
/// to name another project's session never deletes that conversation.
#[test]
fn an_expiring_rollback_offer_never_deletes_a_session_file_outside_the_project() {
    use Status::*;
    let sb = crate::support::Sandbox::new();
    let op = sb.store().request("x", "REBUILD", None).unwrap();
    let elsewhere = sb.root().join("other-project");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let theirs = ktr_base::ids::SessionId::new_random();
    let path = elsewhere.join(format!("{theirs}.jsonl"));
    std::fs::write(&path, "{\"type\":\"user\"}\n").unwrap();
    let walked = [
        Scheduled,
        Running,
        Verifying,
        Activating,
        Activated,
        RollbackPending,
        RollbackScheduled,
        RollingBack,
        RollbackOffered,
    ];
    sb.walk(&op.id, &walked, |op| {
        op.restore = Some(ktr_pipeline::operation::RestoreFile {
            session_id: theirs.clone(),
            path: path.clone(),
            sha256: ktr_base::digest::Sha256::of_file(&path).unwrap(),
            old_records: 1,
            new_records: 0,
            turns: 0,
        });
    });
    sb.write_config("request_ttl_hours = 0.0001");
    std::thread::sleep(std::time::Duration::from_millis(600));
    let out = sb.run("status", None, &[]);
    let op = sb
        .store()
        .load(&ktr_base::ids::OperationId::parse(&op.id).unwrap())
        .unwrap();
    assert_eq!(op.status, Activated, "{}{}", out.stdout, out.stderr);
    assert!(path.exists(), "another project's conversation stays");
    let note = &op.history.last().unwrap().note;
    assert!(note.contains("not deleting it"), "{note}");
}
