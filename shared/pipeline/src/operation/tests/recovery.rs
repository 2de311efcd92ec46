//! Dead workers are failed; live ones and recent deaths are left alone.

use super::*;

#[test]
fn a_dead_worker_fails_the_operation_and_frees_the_next_request() {
    use Status::*;
    let (_t, store) = store();
    let store = store.with_grace(Duration::ZERO);
    let op = requested(&store);
    walk(&store, &op.id, &[Scheduled, Running]);
    set_worker(&store, &op.id, dead_worker(Stage::Prepare));
    let next = store.request("again", "REBUILD", None).unwrap();
    assert_ne!(next.id, op.id);
    let failed = store.load(&op.id).unwrap();
    assert_eq!(failed.status, Failed);
    assert_eq!(failed.error.as_deref(), Some("worker died during running"));
    assert!(!failed.needs_attention);
}

/// A stage that put its operation back to wait for the next Stop (a
/// switch line collided with typing) ended as it should: its record goes
/// with it, so neither its watchdog nor a hook takes it for a dead worker
/// (a deferred rollback was failed 10 s later by the next prompt's hook).
#[test]
fn a_stage_that_defers_to_the_next_stop_leaves_no_worker_to_die() {
    use Status::*;
    let (_t, store) = store();
    let store = store.with_grace(Duration::ZERO);
    let op = requested(&store);
    walk(&store, &op.id, &[Scheduled, Running, Verifying, Activating]);
    set_worker(&store, &op.id, dead_worker(Stage::Activate));
    walk(&store, &op.id, &[Pending]);
    assert!(store.recover_stale().unwrap().is_empty());
    walk(
        &store,
        &op.id,
        &[Scheduled, Running, Verifying, Activating, Activated],
    );
    walk(
        &store,
        &op.id,
        &[RollbackPending, RollbackScheduled, RollingBack],
    );
    set_worker(&store, &op.id, dead_worker(Stage::Rollback));
    walk(&store, &op.id, &[RollbackPending]);
    assert!(store.recover_stale().unwrap().is_empty());
    let op = store.load(&op.id).unwrap();
    assert_eq!((op.status, op.worker), (RollbackPending, None));
}

#[test]
fn a_live_worker_or_a_recent_death_is_left_alone() {
    use Status::*;
    let (_t, store) = store();
    let op = requested(&store);
    walk(&store, &op.id, &[Scheduled, Running]);
    set_worker(&store, &op.id, Worker::current(Stage::Prepare));
    let store = store.with_grace(Duration::ZERO);
    assert!(store.recover_stale().unwrap().is_empty());
    set_worker(&store, &op.id, dead_worker(Stage::Prepare));
    let store = store.with_grace(Duration::from_secs(3600));
    assert!(
        store.recover_stale().unwrap().is_empty(),
        "within the grace period"
    );
    assert_eq!(store.load(&op.id).unwrap().status, Running);
}

#[test]
fn a_reused_pid_counts_as_dead() {
    use Status::*;
    let (_t, store) = store();
    let store = store.with_grace(Duration::ZERO);
    let op = requested(&store);
    walk(&store, &op.id, &[Scheduled, Running, Verifying]);
    let mut me = Worker::current(Stage::Verify);
    me.start_time += 1;
    set_worker(&store, &op.id, me);
    let failed = store.recover_stale().unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        failed[0].error.as_deref(),
        Some("worker died during verifying")
    );
}

#[test]
fn a_death_while_activating_records_the_target_and_needs_attention() {
    use Status::*;
    let (t, store) = store();
    let pointer = t.path().join("pointer");
    fs::write(&pointer, "new-session\n").unwrap();
    let store = store
        .with_grace(Duration::ZERO)
        .with_target(Target::Pointer(crate::targets::Pointer { path: pointer }));
    let op = requested(&store);
    walk(&store, &op.id, &[Scheduled, Running, Verifying, Activating]);
    set_worker(&store, &op.id, dead_worker(Stage::Activate));
    let failed = store.recover_stale().unwrap().pop().unwrap();
    assert_eq!(failed.status, Failed);
    assert_eq!(
        failed.error.as_deref(),
        Some("worker died during activating")
    );
    assert!(failed.needs_attention);
    assert_eq!(failed.target_after.as_deref(), Some("new-session"));
    assert_eq!(store.active(), None);
}

/// A hook's store holds its own session's target: another session's dead
/// activation is failed (it needs attention) without that target being
/// looked at or released; the session's own is recorded as before.
#[test]
fn another_sessions_dead_activation_is_failed_without_touching_this_sessions_target() {
    use Status::*;
    let (t, store) = store();
    let (sa, sb) = two_sessions();
    let pointer = t.path().join("pointer");
    fs::write(&pointer, "new-session\n").unwrap();
    let target = || {
        Target::Pointer(crate::targets::Pointer {
            path: pointer.clone(),
        })
    };
    let store = store.with_grace(Duration::ZERO);
    for (serving, want) in [
        (
            &sa,
            "unknown: failed from another session's hook, which does not look at this session's target",
        ),
        (&sb, "new-session"),
    ] {
        let op = store.request("x", "REBUILD", Some(&sb)).unwrap();
        walk(&store, &op.id, &[Scheduled, Running, Verifying, Activating]);
        set_worker(&store, &op.id, dead_worker(Stage::Activate));
        let hooks = Store::at(store.dir())
            .with_grace(Duration::ZERO)
            .with_target(target())
            .serving(serving.clone());
        let failed = hooks.recover_stale().unwrap().pop().unwrap();
        assert_eq!((failed.status, failed.needs_attention), (Failed, true));
        assert_eq!(failed.target_after.as_deref(), Some(want));
    }
}
