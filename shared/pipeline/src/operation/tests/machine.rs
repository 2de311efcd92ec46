//! The state machine: its edges, a life logged, private files, ids and words.

use super::*;

#[test]
fn the_state_machine_has_exactly_the_documented_edges() {
    use Status::*;
    let allowed = [
        (Pending, Scheduled),
        (Pending, Cancelled),
        (Pending, Expired),
        (Scheduled, Running),
        (Scheduled, Pending),
        (Running, Verifying),
        (Verifying, Activating),
        (Verifying, Pending),
        (Verifying, Offered),
        (Offered, Activated),
        (Offered, Pending),
        (Offered, Expired),
        (Activating, Activated),
        (Activating, Pending),
        (Activating, RolledBack),
        (Activated, RollbackPending),
        (RollbackPending, RollbackScheduled),
        (RollbackScheduled, RollingBack),
        (RollbackScheduled, RollbackPending),
        (RollbackScheduled, RolledBack),
        (RollingBack, RolledBack),
        (RollingBack, RollbackPending),
        (RollingBack, RollbackOffered),
        (RollbackOffered, RolledBack),
        (RollbackOffered, RollbackPending),
        (RollbackOffered, Activated),
    ];
    for from in Status::ALL {
        for to in Status::ALL {
            let expected = allowed.contains(&(from, to)) || (to == Failed && !from.is_terminal());
            assert_eq!(from.can_become(to), expected, "{from} -> {to}");
        }
    }
    let terminal: Vec<_> = Status::ALL
        .into_iter()
        .filter(|s| s.is_terminal())
        .collect();
    assert_eq!(
        terminal,
        [Activated, Cancelled, Failed, RolledBack, Expired]
    );
    for s in Status::ALL {
        assert_eq!(Status::parse(s.as_str()), Some(s));
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
    }
}

#[test]
fn a_forbidden_transition_is_refused_and_changes_nothing() {
    let (_t, store) = store();
    let op = store.request("big", "REBUILD", None).unwrap();
    let err = store
        .with_lock(|tx| {
            let mut op = tx.load(&op.id)?;
            tx.transition(&mut op, Status::Activated, "skip ahead")
        })
        .unwrap_err();
    assert_eq!(
        err.message,
        format!("operation {} cannot go from pending to activated", op.id)
    );
    assert_eq!(store.load(&op.id).unwrap().status, Status::Pending);
    assert_eq!(store.active(), Some((op.id.clone(), Status::Pending)));
}

#[test]
fn a_full_life_is_logged_and_active_follows_it() {
    let (_t, store) = store();
    let op = store
        .request("big", "REBUILD", Some(&SessionId::parse("sess-1").unwrap()))
        .unwrap();
    use Status::*;
    let op = walk(&store, &op.id, &[Scheduled, Running, Verifying, Activating]);
    assert_eq!(store.active(), Some((op.id.clone(), Activating)));
    let op = walk(&store, &op.id, &[Activated]);
    assert_eq!(store.active(), None, "a terminal operation is not active");
    assert_eq!(op.history.len(), 5);
    assert_eq!((op.history[0].from, op.history[4].to), (Pending, Activated));
    let log = fs::read_to_string(store.dir().join("ktr.log")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6, "request + five transitions");
    assert_eq!(lines[5]["op"], op.id.as_str());
    assert_eq!(
        (lines[5]["from"].as_str(), lines[5]["to"].as_str()),
        (Some("activating"), Some("activated"))
    );
    assert!(parse_rfc3339(lines[5]["ts"].as_str().unwrap()).is_some());
    assert_eq!(store.latest().unwrap().unwrap(), op);
}

#[test]
fn files_and_dirs_are_private() {
    let (_t, store) = store();
    let op = store.request("big", "REBUILD", None).unwrap();
    let art = store.artifacts_dir(&op.id).unwrap();
    assert_eq!(mode(store.dir()), 0o700);
    assert_eq!(mode(&store.dir().join("operations")), 0o700);
    assert_eq!(mode(&art), 0o700);
    assert_eq!(mode(&store.dir().join("artifacts")), 0o700);
    for f in ["active", "ktr.log", "coordinator.lock"] {
        assert_eq!(mode(&store.dir().join(f)), 0o600, "{f}");
    }
    assert_eq!(mode(&store.operation_path(&op.id)), 0o600);
    // Atomic writes leave no temp files behind.
    let names: Vec<_> = fs::read_dir(store.dir().join("operations"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, [std::ffi::OsString::from(format!("{}.json", op.id))]);
}

#[test]
fn bad_ids_never_reach_a_path() {
    let (_t, store) = store();
    for bad in [
        "",
        "../../etc/passwd",
        "ABC",
        "a/b",
        "0123 ",
        &"a".repeat(65),
        "a\0b",
    ] {
        // The store takes only an `OperationId`: a bad id is refused
        // where it is parsed, before any path exists.
        let err = OperationId::parse(bad).unwrap_err();
        assert!(
            err.message.starts_with("invalid operation id"),
            "{bad:?}: {err}"
        );
    }
    assert!(OperationId::parse(&uuid::Uuid::new_v4().to_string()).is_ok());
    let missing = store
        .load(&OperationId::parse("0123-abcd").unwrap())
        .unwrap_err();
    assert!(
        missing.message.contains("no operation 0123-abcd"),
        "{missing}"
    );
    // A garbage `active` file reads as nothing active.
    fs::write(store.dir().join("active"), "../x pending\n").unwrap();
    assert_eq!(store.active(), None);
}

#[test]
fn confirmation_words_are_exact() {
    let (_t, store) = store();
    for bad in ["rebuild", "REBUILD ", "Rebuild", ""] {
        let err = store.request("x", bad, None).unwrap_err();
        assert_eq!(err.message, "confirmation must be exactly REBUILD");
    }
    assert!(store.list().unwrap().is_empty(), "nothing was created");
    let op = requested(&store);
    assert_eq!(
        store.cancel(&op.id, "cancel").unwrap_err().message,
        "confirmation must be exactly CANCEL"
    );
    assert_eq!(
        store.rollback_request(&op.id, "YES").unwrap_err().message,
        "confirmation must be exactly ROLLBACK"
    );
    assert_eq!(store.load(&op.id).unwrap().status, Status::Pending);
}
