//! The locks: a read-modify-write is serialised, each session's on its own.

use super::*;

#[test]
fn the_lock_serialises_read_modify_write() {
    let (_t, store) = store();
    let id = requested(&store).id;
    let store = Arc::new(store);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (store, id) = (Arc::clone(&store), id.clone());
            thread::spawn(move || {
                for _ in 0..15 {
                    store
                        .with_lock(|tx| {
                            let mut op = tx.load(&id)?;
                            op.attempts += 1;
                            tx.save(&mut op)
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(store.load(&id).unwrap().attempts, 120, "no update was lost");
}

#[test]
fn the_lock_is_held_for_the_whole_closure() {
    let (_t, store) = store();
    let store = Arc::new(store);
    let held = hold_household(&store, Duration::from_millis(300));
    let start = Instant::now();
    store.with_lock(|_| Ok(())).unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "second holder waited"
    );
    held.join().unwrap();
}

/// Hold the household lock in another thread for `how_long`; returns once
/// it is held.
fn hold_household(store: &Arc<Store>, how_long: Duration) -> thread::JoinHandle<()> {
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let store = Arc::clone(store);
    let holder = thread::spawn(move || {
        store
            .with_lock(|_| {
                entered_tx.send(()).unwrap();
                thread::sleep(how_long);
                Ok(())
            })
            .unwrap();
    });
    entered_rx.recv().unwrap();
    holder
}

/// Hold `session`'s lock in another thread until the returned sender
/// is dropped or sent to.
fn hold_session(
    store: &Arc<Store>,
    session: &SessionId,
) -> (std::sync::mpsc::Sender<()>, thread::JoinHandle<()>) {
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (store, session) = (Arc::clone(store), session.clone());
    let holder = thread::spawn(move || {
        store
            .with_session(&session, LOCK_TIMEOUT, |_| {
                held_tx.send(()).unwrap();
                let _ = release_rx.recv();
                Ok(())
            })
            .unwrap();
    });
    held_rx.recv().unwrap();
    (release_tx, holder)
}

#[test]
fn one_sessions_lock_never_makes_another_session_wait() {
    let (_t, store) = store();
    let store = Arc::new(store);
    let (a, b) = two_sessions();
    let (release, holder) = hold_session(&store, &a);
    let start = Instant::now();
    let op = store.request("b", "REBUILD", Some(&b)).unwrap();
    store
        .with_session(&b, Duration::from_millis(50), |tx| {
            let mut op = tx.load(&op.id)?;
            tx.transition(&mut op, Status::Scheduled, "b's own")
        })
        .unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    // A itself waits, and says so by kind.
    let busy = store
        .with_session(&a, Duration::from_millis(50), |_| Ok(()))
        .unwrap_err();
    assert_eq!(busy.kind, ktr_base::ErrorKind::Busy);
    release.send(()).unwrap();
    holder.join().unwrap();
}

#[test]
fn the_household_lock_is_exclusive_over_every_session() {
    let (_t, store) = store();
    let store = Arc::new(store);
    let holder = hold_household(&store, Duration::from_millis(300));
    let a = SessionId::parse("sa").unwrap();
    let busy = store
        .with_session(&a, Duration::from_millis(50), |_| Ok(()))
        .unwrap_err();
    assert_eq!(busy.kind, ktr_base::ErrorKind::Busy);
    holder.join().unwrap();
    store
        .with_session(&a, Duration::from_millis(50), |_| Ok(()))
        .unwrap();
}

#[test]
fn a_lock_writes_only_the_sessions_it_holds() {
    let (_t, store) = store();
    let (a, b) = two_sessions();
    let op_b = store.request("b", "REBUILD", Some(&b)).unwrap();
    let refused = store.with_session(&a, LOCK_TIMEOUT, |tx| {
        let mut op = tx.load(&op_b.id)?;
        op.attempts = 7;
        tx.save(&mut op)
    });
    assert_refused(refused, "lock of session sb is not held");
    let refused = store.with_session(&a, LOCK_TIMEOUT, |tx| {
        let mut op = tx.load(&op_b.id)?;
        tx.transition(&mut op, Status::Scheduled, "not a's")
    });
    assert_refused(refused, "lock of session sb is not held");
    assert_eq!(store.load(&op_b.id).unwrap(), op_b, "nothing written");
}
