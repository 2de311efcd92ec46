//! What is in flight: one per session, `active` and its older layout.

use super::*;

#[test]
fn two_operations_in_flight_keep_the_newest_live_one_and_fail_the_other() {
    let (_t, store) = store();
    let older = requested(&store);
    // Only a lost `active` lets a second one be written: plant it.
    let newer_id = OperationId::new_random();
    let mut json: serde_json::Value =
        serde_json::from_slice(&fs::read(store.operation_path(&older.id)).unwrap()).unwrap();
    json["id"] = newer_id.to_string().into();
    json["created_at"] =
        ktr_base::time::Timestamp::at(older.created_at.time() + Duration::from_secs(5))
            .to_string()
            .into();
    fs::write(
        store.operation_path(&newer_id),
        serde_json::to_vec(&json).unwrap(),
    )
    .unwrap();
    fs::remove_file(store.dir().join("active")).unwrap();
    let kept = store.rebuild_active(LOCK_TIMEOUT).unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].id, newer_id);
    assert_eq!(store.active(), Some((newer_id.clone(), Status::Pending)));
    let failed = store.load(&older.id).unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert!(
        failed.error.as_deref().unwrap().contains(&*newer_id),
        "{:?}",
        failed.error
    );
}

#[test]
fn active_says_idle_when_nothing_is_in_flight_and_unknown_when_lost() {
    let (_t, store) = store();
    let op = requested(&store);
    store.cancel(&op.id, "CANCEL").unwrap();
    assert!(idle(&store));
    fs::remove_file(store.dir().join("active")).unwrap();
    assert_eq!(store.active_state(), Active::Unknown("missing".into()));
    fs::write(store.dir().join("active"), "what\n").unwrap();
    assert!(matches!(store.active_state(), Active::Unknown(_)));
    // Rebuilt from the operation files (none in flight): written with no lane,
    // so the next hook takes the fast path instead of the lock.
    assert!(store.rebuild_active(LOCK_TIMEOUT).unwrap().is_empty());
    assert!(idle(&store));
    fs::remove_file(store.dir().join("active")).unwrap();
    assert!(store.rebuild_active(LOCK_TIMEOUT).unwrap().is_empty());
    assert!(idle(&store), "a missing file too");
}

/// `active` is known and names no operation.
fn idle(store: &Store) -> bool {
    matches!(store.active_state(), Active::Known(index) if index.is_idle())
}

#[test]
fn each_session_has_its_own_operation_in_flight_and_active_lists_them() {
    let (_t, store) = store();
    let (a, b) = two_sessions();
    let op_a = store.request("a", "REBUILD", Some(&a)).unwrap();
    let op_b = store.request("b", "REBUILD", Some(&b)).unwrap();
    walk(&store, &op_a.id, &[Status::Scheduled, Status::Running]);
    let listed: Vec<(Lane, OperationId, Status)> = store
        .in_flight()
        .into_iter()
        .map(|e| (e.lane, e.id, e.status))
        .collect();
    assert_eq!(
        listed,
        [
            (Lane::Session(a.clone()), op_a.id.clone(), Status::Running),
            (Lane::Session(b.clone()), op_b.id.clone(), Status::Pending),
        ]
    );
    assert_eq!(
        store.active_for(&b),
        Some((op_b.id.clone(), Status::Pending))
    );
    // A busy session refuses only its own next request.
    assert_refused(store.request("again", "REBUILD", Some(&a)), "is running");
    walk(&store, &op_a.id, &[Status::Failed]);
    assert_eq!(store.active(), Some((op_b.id, Status::Pending)));
}

#[test]
fn after_the_switch_an_operation_is_its_candidates_and_a_rollback_waits_only_for_that_session() {
    let (_t, store) = store();
    let (source, rebuilt) = (
        SessionId::parse("src").unwrap(),
        SessionId::parse("new").unwrap(),
    );
    let op = request_with_candidate(&store, &source, &rebuilt);
    use Status::{Activated, Activating, Running, Scheduled, Verifying};
    let op = walk(&store, &op.id, &[Scheduled, Running, Verifying, Activating]);
    assert_eq!(op.lane(), Lane::Session(source.clone()));
    let op = walk(&store, &op.id, &[Activated]);
    assert_eq!(op.lane(), Lane::Session(rebuilt.clone()));
    // Another session at work is not in the way; the rebuilt session's own request is.
    let other = store
        .request("b", "REBUILD", Some(&SessionId::parse("other").unwrap()))
        .unwrap();
    let own = store.request("c", "REBUILD", Some(&rebuilt)).unwrap();
    assert_refused(store.rollback_request(&op.id, "ROLLBACK"), &own.id);
    store.cancel(&own.id, "CANCEL").unwrap();
    let rolling = store.rollback_request(&op.id, "ROLLBACK").unwrap();
    assert_eq!(rolling.lane(), Lane::Session(rebuilt.clone()));
    assert_eq!(
        store.active_for(&rebuilt),
        Some((op.id.clone(), Status::RollbackPending))
    );
    assert_eq!(store.load(&other.id).unwrap(), other);
}

#[test]
fn the_older_one_line_active_is_rebuilt_into_lanes_and_keeps_its_operation() {
    let (_t, store) = store();
    let a = SessionId::parse("sa").unwrap();
    let op = store
        .request("before the upgrade", "REBUILD", Some(&a))
        .unwrap();
    for older in [format!("{} pending\n", op.id), "idle\n".to_string()] {
        fs::write(store.dir().join("active"), &older).unwrap();
        assert_eq!(
            store.active_state(),
            Active::Unknown(index::OLDER_LAYOUT.into()),
            "{older}"
        );
        assert!(store.in_flight().is_empty(), "unknown names nothing");
        let rebuilt = store.rebuild_active(LOCK_TIMEOUT).unwrap();
        assert_eq!(rebuilt.iter().map(|o| &o.id).collect::<Vec<_>>(), [&op.id]);
        assert_eq!(store.active_for(&a), Some((op.id.clone(), Status::Pending)));
    }
    // A lane's own next write rebuilds it too.
    fs::write(store.dir().join("active"), format!("{} pending\n", op.id)).unwrap();
    let merged = store.request("again", "REBUILD", Some(&a)).unwrap();
    assert_eq!(merged.id, op.id);
    assert_eq!(store.active_for(&a), Some((op.id, Status::Pending)));
}

#[test]
fn two_in_flight_in_one_session_are_repaired_without_touching_another_session() {
    let (_t, store) = store();
    let (a, b) = two_sessions();
    let older = store.request("a1", "REBUILD", Some(&a)).unwrap();
    let op_b = store.request("b", "REBUILD", Some(&b)).unwrap();
    // Only a lost `active` lets a second one of A be written: plant it.
    let mut newer = Operation::new("a2", Some(a.clone()));
    newer.created_at =
        ktr_base::time::Timestamp::at(older.created_at.time() + Duration::from_secs(5));
    store.with_lock(|tx| tx.save(&mut newer)).unwrap();
    fs::remove_file(store.dir().join("active")).unwrap();
    let kept = store
        .with_session(&a, LOCK_TIMEOUT, |tx| {
            tx.lane_operation(&Lane::Session(a.clone()))
        })
        .unwrap()
        .unwrap();
    assert_eq!(kept.id, newer.id);
    assert_eq!(store.load(&older.id).unwrap().status, Status::Failed);
    assert_eq!(store.load(&op_b.id).unwrap(), op_b, "B untouched");
    assert_eq!(store.active_for(&b), Some((op_b.id, Status::Pending)));
}

/// A stage's last transition saves the operation, then updates `active`
/// under another lock than the next lane's: a ROLLBACK that moves the
/// operation on in between must keep its entry (the Stop hook reads only
/// `active`, and would never start the rollback).
#[test]
fn a_writer_late_to_active_never_drops_the_entry_of_the_operation_moved_on() {
    let (_t, store) = store();
    let (source, rebuilt) = (
        SessionId::parse("old").unwrap(),
        SessionId::parse("new").unwrap(),
    );
    let op = request_with_candidate(&store, &source, &rebuilt);
    use Status::{Activated, Activating, Running, Scheduled, Verifying};
    walk(&store, &op.id, &[Scheduled, Running, Verifying, Activating]);
    // Activation saved `activated`; its update of `active` is still to come.
    let stale = store
        .with_lock(|tx| {
            let mut op = tx.load(&op.id)?;
            op.status = Activated;
            tx.save(&mut op)?;
            Ok(op)
        })
        .unwrap();
    store.rollback_request(&op.id, "ROLLBACK").unwrap();
    store.with_lock(|tx| tx.set_entry(&stale)).unwrap();
    assert_eq!(
        store.active_for(&rebuilt),
        Some((op.id.clone(), Status::RollbackPending))
    );
    // With nothing after it, a terminal operation is in flight nowhere.
    let rolled = walk(
        &store,
        &op.id,
        &[
            Status::RollbackScheduled,
            Status::RollingBack,
            Status::RolledBack,
        ],
    );
    store.with_lock(|tx| tx.set_entry(&rolled)).unwrap();
    assert_eq!(store.active_for(&rebuilt), None);
    assert_eq!(store.active_for(&source), None);
}

/// A rebuild of `source` requested, its candidate `rebuilt` recorded.
fn request_with_candidate(store: &Store, source: &SessionId, rebuilt: &SessionId) -> Operation {
    let op = store.request("a", "REBUILD", Some(source)).unwrap();
    let candidate = CandidateFile {
        session_id: rebuilt.clone(),
        path: store.dir().join("new.jsonl"),
        sha256: ktr_base::digest::Sha256::of_bytes(b""),
    };
    store
        .with_lock(|tx| {
            let mut op = tx.load(&op.id)?;
            op.candidate = Some(candidate);
            tx.save(&mut op)?;
            Ok(op)
        })
        .unwrap()
}
