//! What humans and stages ask: requests, cancel, rollback, a stage's claim.

use super::*;

#[test]
fn repeated_requests_merge_into_the_pending_operation_of_their_session() {
    let (_t, store) = store();
    let s1 = SessionId::parse("s1").unwrap();
    let a = store
        .request("dirty ledger over budget", "REBUILD", None)
        .unwrap();
    let b = store.request("image viewed", "REBUILD", Some(&s1)).unwrap();
    let c = store
        .request("dirty ledger over budget", "REBUILD", Some(&s1))
        .unwrap();
    assert_eq!(
        (a.id.as_str(), b.id.as_str()),
        (c.id.as_str(), c.id.as_str())
    );
    assert_eq!(c.reasons, ["dirty ledger over budget", "image viewed"]);
    assert_eq!(
        c.session_id.as_deref(),
        Some("s1"),
        "an unbound request binds when a session is given"
    );
    // Another session, and a request no session holds, are their own.
    let s2 = store
        .request("x", "REBUILD", Some(&SessionId::parse("s2").unwrap()))
        .unwrap();
    assert_ne!(s2.id, c.id);
    assert_eq!(store.in_flight().len(), 2);
    // A request that names no session must, with two at work.
    assert_refused(
        store.request("y", "REBUILD", None),
        "2 sessions have an operation in flight",
    );
    assert_eq!(store.list().unwrap().len(), 2);
    assert_refused(store.request("   ", "REBUILD", None), "reason");
}

#[test]
fn a_busy_operation_refuses_new_requests_by_name() {
    let (_t, store) = store();
    let op = requested(&store);
    walk(&store, &op.id, &[Status::Scheduled]);
    let err = store.request("y", "REBUILD", None).unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert!(
        err.message.contains(op.id.as_str()) && err.message.contains("is scheduled"),
        "{err}"
    );
}

#[test]
fn cancel_only_pending_and_it_frees_the_next_request() {
    let (_t, store) = store();
    let op = requested(&store);
    let cancelled = store.cancel(&op.id, "CANCEL").unwrap();
    assert_eq!(cancelled.status, Status::Cancelled);
    assert_eq!(store.active(), None);
    assert_refused(
        store.cancel(&op.id, "CANCEL"),
        "is cancelled; only a pending",
    );
    let next = store.request("again", "REBUILD", None).unwrap();
    assert_ne!(next.id, op.id);
    walk(&store, &next.id, &[Status::Scheduled]);
    assert_refused(store.cancel(&next.id, "CANCEL"), "is scheduled");
}

#[test]
fn rollback_request_only_for_activated() {
    use Status::*;
    let (_t, store) = store();
    let op = requested(&store);
    assert_refused(
        store.rollback_request(&op.id, "ROLLBACK"),
        "is pending; only an activated",
    );
    walk(
        &store,
        &op.id,
        &[Scheduled, Running, Verifying, Activating, Activated],
    );
    let op = store.rollback_request(&op.id, "ROLLBACK").unwrap();
    assert_eq!(op.status, RollbackPending);
    assert_eq!(store.active(), Some((op.id.clone(), RollbackPending)));
    assert_refused(store.request("y", "REBUILD", None), "is rollback_pending");
}

#[test]
fn a_stage_claims_only_the_status_it_expects() {
    use Status::*;
    let (_t, store) = store();
    let op = requested(&store);
    let err = store.claim(&op.id, Stage::Prepare, Running).unwrap_err();
    assert_eq!(
        err.message,
        format!(
            "operation {} is pending, not scheduled; ktr-prepare has nothing to do",
            op.id
        )
    );
    walk(&store, &op.id, &[Scheduled]);
    let op = store.claim(&op.id, Stage::Prepare, Running).unwrap();
    assert_eq!(op.status, Running);
    assert_eq!(op.worker, Some(Worker::current(Stage::Prepare)));
    assert!(op.worker.as_ref().unwrap().alive());
    walk(&store, &op.id, &[Verifying]);
    let op = store.claim(&op.id, Stage::Verify, Verifying).unwrap();
    assert_eq!((op.status, op.history.len()), (Verifying, 3));
}

#[test]
fn a_claim_is_refused_while_another_live_worker_holds_the_operation() {
    use Status::*;
    let (_t, store) = store();
    let op = requested(&store);
    walk(&store, &op.id, &[Scheduled]);
    let mut other = std::process::Command::new("sleep")
        .arg("5")
        .spawn()
        .unwrap();
    set_worker(
        &store,
        &op.id,
        Worker::of(other.id(), Stage::Prepare).unwrap(),
    );
    let err = store.claim(&op.id, Stage::Prepare, Running).unwrap_err();
    assert_eq!(
        err.message,
        format!(
            "operation {} is being worked on by ktr-prepare (pid {}); wait for it",
            op.id,
            other.id()
        )
    );
    other.kill().unwrap();
    other.wait().unwrap();
    let op = store.claim(&op.id, Stage::Prepare, Running).unwrap();
    assert_eq!(op.worker, Some(Worker::current(Stage::Prepare)));
}
