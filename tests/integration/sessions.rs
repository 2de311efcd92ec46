//! Several sessions at once (SPEC §9, "Several sessions"): two Claude Code
//! sessions in two project folders, each with its own tmux server, pane
//! and config, sharing one state dir. Each requests, prepares, switches and
//! rolls back on its own: one session's operation never waits for, blocks,
//! expires or touches the other's.

use std::fs::{self, File};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::mcp::Client;
use crate::support::rig::Rig;
use ktr_base::ids::{OperationId, SessionId};
use ktr_pipeline::operation::{Operation, Status};

use Status::*;

/// The second session's id (the first runs [`crate::support::rig::SRC`]).
const OTHER: &str = "7e2b0c4d-9a1f-4b3e-8d52-1c6a0f9e3b27";

/// A bound far above a hook's or a request's own work even on a loaded
/// two-core machine, and far below the 10 s a command waits for a lock
/// (`LOCK_TIMEOUT`): one that waited for the other session's lock would
/// have taken that long, or failed busy.
const OWN_WORK: Duration = Duration::from_secs(5);

/// Two installations sharing one state dir.
fn two() -> (Rig, Rig) {
    let a = Rig::tmux();
    let b = Rig::beside(&a, OTHER);
    assert_eq!(a.sandbox.state, b.sandbox.state);
    assert_ne!(a.sandbox.project, b.sandbox.project);
    (a, b)
}

/// `ktr request` for the rig's own session, as its person runs it.
fn request(rig: &Rig, reason: &str) -> OperationId {
    let out = rig.ktr(&[
        "request",
        "--confirm",
        "REBUILD",
        "--reason",
        reason,
        "--session",
        &rig.src,
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    OperationId::parse(json["id"].as_str().unwrap()).unwrap()
}

/// The rig's own session asks for a rebuild (bound to it) and its Stop
/// starts it, paused at `at` (once a stage paused there).
fn rebuild_paused_at(rig: &mut Rig, at: &str) -> Operation {
    rig.pause_at = Some(at.into());
    let id = request(rig, "paused half-way");
    rig.stop_source();
    rig.wait_paused();
    load(rig, &id)
}

fn load(rig: &Rig, id: &OperationId) -> Operation {
    rig.store().load(id).unwrap()
}

/// A switched rig: its operation activated, its own pane running the
/// candidate (the stand-in claude is respawned in its pane; the real one
/// switches in place: `claude_sessions`).
#[track_caller]
fn assert_switched(rig: &Rig, op: &Operation) {
    assert_eq!(op.status, Activated, "{:?}", op.error);
    assert_eq!(op.session_id.as_deref(), Some(rig.src.as_str()));
    let candidate = op.candidate.as_ref().unwrap();
    assert_eq!(
        rig.resumed().as_deref(),
        Some(candidate.session_id.as_str())
    );
    assert!(candidate.path.starts_with(&rig.sandbox.project));
    assert_eq!(op.target_after.as_deref(), Some(rig.pane_pid().as_str()));
}

/// Hold the lock of `session`'s lane, as a stage of it does for a locked
/// step, until the returned file drops.
fn hold_lane(rig: &Rig, session: &str) -> File {
    let dir = rig.sandbox.state.join("locks");
    fs::create_dir_all(&dir).unwrap();
    let file = File::create(dir.join(format!("{session}.lock"))).unwrap();
    file.lock().unwrap();
    file
}

#[test]
fn two_sessions_requested_at_the_same_moment_each_switch_into_their_own_candidate() {
    let (a, b) = two();
    let start = Barrier::new(2);
    let run = |rig: &Rig| {
        start.wait();
        let id = request(rig, "same moment");
        let at = Instant::now();
        let said = rig.stop_source();
        (id, at.elapsed(), said)
    };
    let ((id_a, stop_a, said_a), (id_b, stop_b, said_b)) = std::thread::scope(|s| {
        let ta = s.spawn(|| run(&a));
        let tb = s.spawn(|| run(&b));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    assert!(said_a.contains("rebuild scheduled"), "{said_a}");
    assert!(said_b.contains("rebuild scheduled"), "{said_b}");
    assert_ne!(id_a, id_b);
    let op_a = a.wait_terminal(&id_a);
    let op_b = b.wait_terminal(&id_b);
    assert_switched(&a, &op_a);
    assert_switched(&b, &op_b);
    assert_ne!(op_a.candidate, op_b.candidate);
    eprintln!("Stop hooks at the same moment: {stop_a:?} and {stop_b:?}");
    assert!(stop_a < OWN_WORK && stop_b < OWN_WORK);
    // Each pane's next Stop is its own candidate's: nothing is left in flight.
    let ops = a.store().list().unwrap();
    assert!(ops.iter().all(|o| o.status.is_terminal()), "{ops:#?}");
}

#[test]
fn one_sessions_operation_never_waits_for_or_blocks_anothers() {
    let (mut a, b) = two();
    // A's rebuild stops in the middle of preparing, its lane's lock held
    // as a stage holds it for a locked step.
    let op_a = rebuild_paused_at(&mut a, "prepare:running");
    let held = hold_lane(&a, &a.src);
    let before = load(&a, &op_a.id);
    assert_eq!(before.status, Running);

    let at = Instant::now();
    let id_b = request(&b, "while the other prepares");
    let requested = at.elapsed();
    let at = Instant::now();
    let said = b.stop_source();
    let stopped = at.elapsed();
    assert!(said.contains("rebuild scheduled"), "{said}");
    let at = Instant::now();
    let op_b = b.wait_terminal(&id_b);
    eprintln!(
        "beside a held session: request {requested:?}, Stop hook {stopped:?}, prepare → activated {:?}",
        at.elapsed()
    );
    assert_switched(&b, &op_b);
    assert!(!said.contains("busy"), "{said}");
    assert!(
        requested < OWN_WORK && stopped < OWN_WORK,
        "never waited for A's lock"
    );
    assert_eq!(load(&a, &op_a.id), before, "A's operation untouched");

    drop(held);
    a.unpause();
    a.pause_at = None;
    let op_a = a.wait_terminal(&op_a.id);
    assert_eq!(op_a.status, Activated, "{:?}", op_a.error);
    assert_eq!(
        a.resumed().as_deref(),
        Some(op_a.candidate.as_ref().unwrap().session_id.as_str())
    );
}

#[test]
fn a_rollback_of_one_session_leaves_the_others_operation_and_session_as_they_are() {
    let (a, mut b) = two();
    let op_a = a.rebuild();
    assert_switched(&a, &op_a);
    // B is half-way through its own rebuild when A rolls back.
    let op_b = rebuild_paused_at(&mut b, "prepare:running");
    let b_before = load(&b, &op_b.id);
    let b_runs = b.resumed();

    a.ktr(&[
        "rollback-request",
        op_a.id.as_str(),
        "--confirm",
        "ROLLBACK",
    ]);
    a.stop_current();
    let rolled = a.wait_terminal(&op_a.id);
    assert_eq!(rolled.status, RolledBack, "{:?}", rolled.error);
    assert_eq!(a.resumed().as_deref(), Some(a.src.as_str()));
    assert_eq!(rolled.target_after.as_deref(), Some(a.pane_pid().as_str()));

    assert_eq!(load(&b, &op_b.id), b_before, "B's operation untouched");
    assert_eq!(b.resumed(), b_runs, "B's session untouched");
    b.unpause();
    b.pause_at = None;
    let op_b = b.wait_terminal(&op_b.id);
    assert_eq!(op_b.status, Activated, "{:?}", op_b.error);
    assert_eq!(load(&a, &op_a.id).status, RolledBack);
}

#[test]
fn one_sessions_request_expiring_never_expires_the_others() {
    let (a, b) = two();
    let id_a = request(&a, "asked long ago");
    let id_b = request(&b, "asked now");
    // A's request is two days old (request_ttl_hours defaults to 24).
    a.store()
        .with_lock(|tx| {
            let mut op = tx.load(&id_a)?;
            op.created_at = ktr_base::time::Timestamp::at(
                std::time::SystemTime::now() - Duration::from_secs(48 * 3600),
            );
            tx.save(&mut op)
        })
        .unwrap();
    // B's next command expires A's request by its own age; B's stays.
    b.ktr(&["status"]);
    let expired = load(&a, &id_a);
    assert_eq!(expired.status, Expired);
    assert!(
        expired.error.as_deref().unwrap().contains(&a.src),
        "{:?}",
        expired.error
    );
    let pending = load(&b, &id_b);
    assert_eq!(pending.status, Pending);
    assert!(pending.history.is_empty() && pending.error.is_none());
    // A's Stop has nothing to start; B's starts B's rebuild.
    assert!(!a.stop_source().contains("scheduled"));
    assert_eq!(load(&b, &id_b).status, Pending);
    let said = b.stop_source();
    assert!(said.contains("rebuild scheduled"), "{said}");
    let op_b = b.wait_terminal(&id_b);
    assert_switched(&b, &op_b);
}

#[test]
fn status_ops_and_the_mcp_status_tool_list_every_sessions_operation() {
    let (a, b) = two();
    let id_a = request(&a, "first session");
    let id_b = request(&b, "second session");

    let status: serde_json::Value = serde_json::from_str(&a.ktr(&["status", "--json"])).unwrap();
    let listed: Vec<(&str, &str, &str)> = status["in_flight"]
        .as_array()
        .expect("status --json lists what is in flight")
        .iter()
        .map(|r| {
            (
                r["session_id"].as_str().unwrap(),
                r["operation"].as_str().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    let mut expected = vec![
        (a.src.as_str(), id_a.as_str(), "pending"),
        (b.src.as_str(), id_b.as_str(), "pending"),
    ];
    expected.sort_unstable();
    assert_eq!(listed, expected);
    let human = b.ktr(&["status"]);
    for (session, id, _) in &expected {
        assert!(
            human.contains(&format!("session {session}: operation {id} is pending")),
            "{human}"
        );
    }
    let ops = a.ktr(&["ops"]);
    for (session, id, _) in &expected {
        assert!(
            ops.lines().any(|l| l.contains(id) && l.contains(session)),
            "{ops}"
        );
    }

    let (mut mcp, _) = Client::start(&b.sandbox, Some(&b.src));
    let (err, shown) = mcp.call("thread_rebuild_status", serde_json::json!({}));
    assert!(!err, "{shown}");
    let sessions: Vec<&str> = shown["in_flight"]
        .as_array()
        .expect("the MCP status lists what is in flight")
        .iter()
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(sessions, expected.iter().map(|e| e.0).collect::<Vec<_>>());
    assert_eq!(mcp.close(), 0);
    // Asked without an operation, each session's tool shows its own
    // (A's request is not the household's latest).
    let (mut mcp, _) = Client::start(&a.sandbox, Some(&a.src));
    let (err, shown) = mcp.call("thread_rebuild_status", serde_json::json!({}));
    assert!(!err, "{shown}");
    assert_eq!(shown["operation"]["id"], id_a.as_str());
    assert_eq!(mcp.close(), 0);
}

#[test]
fn an_operation_in_flight_under_the_older_one_active_layout_is_recovered() {
    let (a, b) = two();
    // The previous version's state dir: one operation pending for A's
    // session, and `active` naming it for the whole household.
    let mut op = Operation::new(
        "requested before the upgrade",
        Some(SessionId::parse(&a.src).unwrap()),
    );
    a.store().with_lock(|tx| tx.save(&mut op)).unwrap();
    fs::write(
        a.sandbox.state.join("active"),
        format!("{} pending\n", op.id),
    )
    .unwrap();

    // B's session requests and switches beside it.
    let id_b = request(&b, "after the upgrade");
    b.stop_source();
    let op_b = b.wait_terminal(&id_b);
    assert_eq!(op_b.status, Activated, "{:?}", op_b.error);
    assert_eq!(load(&a, &op.id).status, Pending, "A's request is not lost");

    // A's next Stop carries out the request made before the upgrade.
    let said = a.stop_source();
    assert!(said.contains("rebuild scheduled"), "{said}");
    let op_a = a.wait_terminal(&op.id);
    assert_eq!(op_a.status, Activated, "{:?}", op_a.error);
    assert_eq!(
        a.resumed().as_deref(),
        Some(op_a.candidate.as_ref().unwrap().session_id.as_str())
    );
}

/// An activated operation of `source` → `candidate`, last touched 40 days
/// ago, written as the stages leave it.
fn activated_long_ago(rig: &Rig, source: &str, candidate: &str) -> Operation {
    let mut op = Operation::new("long ago", Some(SessionId::parse(source).unwrap()));
    op.status = Activated;
    op.candidate = Some(ktr_pipeline::operation::CandidateFile {
        session_id: SessionId::parse(candidate).unwrap(),
        path: rig.sandbox.project.join(format!("{candidate}.jsonl")),
        sha256: ktr_base::digest::Sha256::of_bytes(b""),
    });
    let then = ktr_base::time::Timestamp::at(
        std::time::SystemTime::now() - Duration::from_secs(40 * 24 * 3600),
    );
    op.created_at = then.clone();
    op.updated_at = then;
    fs::write(
        rig.sandbox.state.join(format!("operations/{}.json", op.id)),
        serde_json::to_vec_pretty(&op).unwrap(),
    )
    .unwrap();
    op
}

#[test]
fn prune_keeps_each_sessions_rollback_handle() {
    let (a, b) = two();
    a.store();
    // A was rebuilt twice (its first rebuild is superseded), B once, later.
    let a1 = activated_long_ago(&a, &a.src, "a1a1a1a1-0000-4000-8000-000000000001");
    let a2 = activated_long_ago(
        &a,
        "a1a1a1a1-0000-4000-8000-000000000001",
        "a2a2a2a2-0000-4000-8000-000000000002",
    );
    let b1 = activated_long_ago(&b, &b.src, "b1b1b1b1-0000-4000-8000-000000000003");
    let said = a.ktr(&["prune", "--older-than", "30", "--yes"]);
    let exists = |op: &Operation| {
        a.sandbox
            .state
            .join(format!("operations/{}.json", op.id))
            .exists()
    };
    assert!(!exists(&a1), "A's superseded rebuild goes: {said}");
    assert!(exists(&a2), "A's rollback handle stays: {said}");
    assert!(exists(&b1), "B's rollback handle stays: {said}");
    b.ktr(&["rollback-request", b1.id.as_str(), "--confirm", "ROLLBACK"]);
    a.ktr(&["rollback-request", a2.id.as_str(), "--confirm", "ROLLBACK"]);
}
