//! Unit tests of the store and the state machine.

use super::*;
use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::targets::Target;

use ktr_base::ids::{OperationId, SessionId};
use ktr_base::time::parse_rfc3339;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

fn store() -> (tempfile::TempDir, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&tmp.path().join("state")).unwrap();
    (tmp, store)
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A fresh pending operation in `store`.
fn requested(store: &Store) -> Operation {
    store.request("x", "REBUILD", None).unwrap()
}

/// `result` is an error whose message contains `needle`.
fn assert_refused<T: std::fmt::Debug>(result: ktr_base::Result<T>, needle: &str) {
    let err = result.unwrap_err();
    assert!(err.message.contains(needle), "{err}");
}

/// Drive `id` along `path` of statuses.
fn walk(store: &Store, id: &OperationId, path: &[Status]) -> Operation {
    store
        .with_lock(|tx| {
            let mut op = tx.load(id)?;
            for to in path {
                tx.transition(&mut op, *to, "test")?;
            }
            Ok(op)
        })
        .unwrap()
}

fn dead_worker(stage: Stage) -> Worker {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    Worker {
        pid,
        start_time: 1,
        stage,
    }
}

fn set_worker(store: &Store, id: &OperationId, worker: Worker) {
    store
        .with_lock(|tx| {
            let mut op = tx.load(id)?;
            op.worker = Some(worker);
            tx.save(&mut op)
        })
        .unwrap();
}

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
    let (tx_in, rx_in) = std::sync::mpsc::channel();
    let held = {
        let store = Arc::clone(&store);
        thread::spawn(move || {
            store
                .with_lock(|_| {
                    tx_in.send(()).unwrap();
                    thread::sleep(Duration::from_millis(300));
                    Ok(())
                })
                .unwrap();
        })
    };
    rx_in.recv().unwrap();
    let start = Instant::now();
    store.with_lock(|_| Ok(())).unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "second holder waited"
    );
    held.join().unwrap();
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

#[test]
fn operation_files_tolerate_missing_and_unknown_fields() {
    let (_t, store) = store();
    let id = &OperationId::parse("0000-1111").unwrap();
    fs::write(
        store.operation_path(id),
        format!(r#"{{"id":"{id}","status":"rollback_scheduled","from_the_future":1}}"#),
    )
    .unwrap();
    let op = store.load(id).unwrap();
    assert_eq!(
        (op.status, op.attempts, op.manifest_artifact),
        (Status::RollbackScheduled, 0, None)
    );
    fs::write(store.operation_path(id), "{").unwrap();
    assert_refused(store.load(id), "is damaged");
    assert_eq!(
        store.list().unwrap().len(),
        0,
        "damaged files are skipped in listings"
    );
}

#[test]
fn an_operation_file_written_by_the_untyped_release_still_loads() {
    // Written by `ktr demo` of the release before the operation file was
    // typed (manifest, stats and verification were free-form JSON then).
    // Its inline `manifest` and `left_out` lists (now in the manifest
    // artifact) are ignored.
    let text = include_str!("../../../../tests/fixtures/operation-v1.json");
    assert!(text.contains(r#""manifest": ["#) && text.contains(r#""left_out": ["#));
    let op: Operation = serde_json::from_str(text).unwrap();
    assert_eq!(op.schema, 1, "a file without the field is schema 1");
    assert_eq!(op.status, Status::Activated);
    assert_eq!(op.manifest_artifact, None);
    let verification = op.verification.as_ref().unwrap();
    assert!(verification.ok);
    assert_eq!(verification.counts.as_ref().unwrap().candidate_lines, 17);
    let stats = op.stats.as_ref().unwrap();
    assert_eq!(stats.selected_turns, 8);
    assert_eq!(stats.history_mode, ktr_base::config::HistoryMode::Chain);
    // And it round-trips through the typed record unchanged.
    let again: Operation = serde_json::from_str(&serde_json::to_string(&op).unwrap()).unwrap();
    assert_eq!(again, op);
}

/// A manifest entry whose fields say which one it is.
fn manifest_entry(position: usize) -> ktr_engine::ManifestEntry {
    serde_json::from_value(serde_json::json!({
        "position": position, "role": "user", "kind": "speech", "source_uuid": null,
        "source_line": position + 1, "source_timestamp": null, "source_sha256": "a",
        "carried_sha256": "b", "uuid": format!("u{position}")
    }))
    .unwrap()
}

/// Write an artifact of `items` entries, two records left out and three
/// malformed lines for operation `id`.
fn write_manifest(store: &Store, id: &OperationId, items: usize) -> ManifestRef {
    use ktr_engine::plan::LeftOut;
    use ktr_engine::turns::LeftOutReason;
    let mut writer = ManifestWriter::create(store, id).unwrap();
    for i in 0..items {
        writer.push_item(&manifest_entry(i)).unwrap();
    }
    for line in [7, 9] {
        let left_out = LeftOut {
            line,
            uuid: None,
            reason: LeftOutReason::LocalCommand,
        };
        writer.push_left_out(&left_out).unwrap();
    }
    for line in [2, 3, 4] {
        writer.push_malformed_line(line).unwrap();
    }
    writer.finish().unwrap()
}

#[test]
fn the_manifest_artifact_streams_back_what_was_written() {
    let (_t, store) = store();
    let id = requested(&store).id;
    let recorded = write_manifest(&store, &id, 5000);
    let path = manifest::path(&store, &id).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(recorded.bytes, fs::metadata(&path).unwrap().len());
    assert_eq!(
        recorded.sha256,
        ktr_base::fsutil::sha256_file(&path).unwrap()
    );
    assert_eq!(
        (recorded.items, recorded.left_out, recorded.malformed_lines),
        (5000, 2, 3)
    );
    assert_eq!(recorded.left_out_by_reason["local_command"], 2);
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 5005, "one JSON object per line");
    assert!(
        text.starts_with(r#"{"item":{"position":0,"#),
        "{}",
        &text[..80]
    );
    let back = manifest::read(&store, &id, &recorded).unwrap();
    assert_eq!(
        back.items,
        (0..5000).map(manifest_entry).collect::<Vec<_>>()
    );
    assert_eq!(back.malformed_line_numbers, [2, 3, 4]);
    assert_eq!(
        back.left_out.iter().map(|l| l.line).collect::<Vec<_>>(),
        [7, 9]
    );
    // A second attempt replaces it; no temp file is left behind.
    let again = write_manifest(&store, &id, 1);
    assert_eq!(again.items, 1);
    let names: Vec<_> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [std::ffi::OsString::from(manifest::FILE)]);
}

#[test]
fn a_changed_missing_or_planted_manifest_artifact_is_one_line_of_error() {
    let (_t, store) = store();
    let id = requested(&store).id;
    let recorded = write_manifest(&store, &id, 40);
    let path = manifest::path(&store, &id).unwrap();
    let original = fs::read_to_string(&path).unwrap();
    let read = || manifest::read(&store, &id, &recorded);
    let edits = [
        // Same length, still valid JSON: only the digest tells.
        original.replacen(r#""uuid":"u3""#, r#""uuid":"u4""#, 1),
        // One line more, one line less, a line that is not a manifest line.
        format!("{original}{{\"malformed_line\":1}}\n"),
        original.lines().skip(1).map(|l| format!("{l}\n")).collect(),
        original.replacen(r#"{"item""#, r#"{"nothing""#, 1),
    ];
    for edited in edits {
        fs::write(&path, &edited).unwrap();
        let err = read().unwrap_err();
        assert!(err.message.contains("changed after prepare"), "{err}");
        assert!(!err.message.contains('\n'), "{err}");
    }
    fs::remove_file(&path).unwrap();
    assert_refused(read(), "is missing");
    // A symlink planted at the artifact path is neither read nor written through.
    let elsewhere = store.dir().join("elsewhere.jsonl");
    fs::write(&elsewhere, &original).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    assert_refused(read(), "symlink");
    assert_refused(
        ManifestWriter::create(&store, &id).map(|_| ()),
        "not a regular file",
    );
    assert_eq!(fs::read_to_string(&elsewhere).unwrap(), original);
    // The discarded attempt's artifact goes (the link itself, not its target).
    manifest::remove(&store, &id);
    assert!(path.symlink_metadata().is_err() && elsewhere.exists());
}

#[test]
fn the_stats_an_operation_keeps_are_bounded() {
    use ktr_engine::plan::PlanReport;
    let v1: serde_json::Value =
        serde_json::from_str(include_str!("../../../../tests/fixtures/operation-v1.json")).unwrap();
    let mut report: PlanReport = serde_json::from_value(v1["stats"].clone()).unwrap();
    report.malformed_lines = 1000;
    report.malformed_line_numbers = (1..=1000).collect();
    report.versions_seen = (0..100)
        .map(|i| format!("{i}{}", "v".repeat(1000)))
        .collect();
    report.unknown_record_types = (0..100)
        .map(|i| (format!("{i:03}{}", "t".repeat(5000)), 2))
        .collect();
    let kept = manifest::bounded_stats(&report, Path::new("/p/source.jsonl"));
    assert_eq!(kept.malformed_lines, 1000, "the count stays");
    assert_eq!(kept.malformed_line_numbers, (1..=20).collect::<Vec<_>>());
    assert_eq!(kept.versions_seen.len(), 20);
    assert!(kept.versions_seen.iter().all(|v| v.chars().count() == 80));
    assert_eq!(kept.unknown_record_types.len(), 21);
    assert_eq!(kept.unknown_record_types["(other)"], 160);
    assert_eq!(kept.source_path, "/p/source.jsonl");
    assert!(serde_json::to_vec(&kept).unwrap().len() < 16 << 10);
}

/// Operation `id` of `store` with `edit` applied to its JSON, written as a
/// hostile editor would.
fn edited(store: &Store, edit: impl FnOnce(&mut serde_json::Value)) -> OperationId {
    let op = requested(store);
    let path = store.operation_path(&op.id);
    let mut json: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    edit(&mut json);
    fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
    op.id
}

/// Loading `id` fails naming `needle`, and listings count it as damaged.
#[track_caller]
fn assert_damaged(store: &Store, id: &OperationId, needle: &str) {
    assert_refused(store.load(id), needle);
    let scanned = store.scan().unwrap();
    assert!(scanned.operations.is_empty(), "loaded anyway");
    assert!(
        scanned.damaged.iter().any(|d| d.why.contains(needle)),
        "{:?}",
        scanned.damaged
    );
}

#[test]
fn a_written_operation_names_its_schema() {
    let (_t, store) = store();
    let op = requested(&store);
    let json: serde_json::Value =
        serde_json::from_slice(&fs::read(store.operation_path(&op.id)).unwrap()).unwrap();
    assert_eq!(json["schema"], SCHEMA);
}

#[test]
fn an_operation_file_from_a_newer_ktr_is_refused_with_what_to_do() {
    let (_t, store) = store();
    let id = edited(&store, |j| j["schema"] = (SCHEMA + 1).into());
    assert_damaged(&store, &id, "written by a newer ktr");
    assert_refused(store.load(&id), "upgrade ktr");
}

#[test]
fn an_unreadable_time_is_damage_that_names_its_field() {
    let (_t, store) = store();
    for (field, value) in [
        ("created_at", "yesterday"),
        ("updated_at", "2026-13-01T00:00:00Z"),
        ("prepared_at", "1970"),
    ] {
        let id = edited(&store, |j| j[field] = value.into());
        assert_damaged(&store, &id, field);
        fs::remove_file(store.operation_path(&id)).unwrap();
    }
    let id = edited(&store, |j| {
        j["history"] = serde_json::json!([{"at": "not a time", "from": "pending", "to": "cancelled", "note": ""}]);
    });
    assert_damaged(&store, &id, "history[0].at");
}

#[test]
fn a_time_far_in_the_future_is_damage_not_an_operation_that_never_expires() {
    let (_t, store) = store();
    let id = edited(&store, |j| {
        j["created_at"] = "2999-01-01T00:00:00.000Z".into();
    });
    assert_damaged(
        &store,
        &id,
        "created_at 2999-01-01T00:00:00.000Z lies in the future",
    );
}

/// A digest as the operation file keeps one.
const DIGEST: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

#[test]
fn a_digest_that_is_not_64_lower_case_hex_characters_is_damage_that_names_its_field() {
    let (_t, store) = store();
    for (field, value, needle) in [
        (
            "source_sha256",
            serde_json::json!("abc"),
            "source_sha256: invalid sha256 \"abc\"",
        ),
        (
            "candidate",
            serde_json::json!({"session_id": "abc", "path": "/p/abc.jsonl", "sha256": DIGEST.to_uppercase()}),
            "candidate.sha256: invalid sha256",
        ),
        (
            "manifest_artifact",
            serde_json::json!({"sha256": "", "bytes": 0}),
            "manifest_artifact.sha256: invalid sha256",
        ),
    ] {
        let id = edited(&store, |j| j[field] = value.clone());
        assert_damaged(&store, &id, needle);
        fs::remove_file(store.operation_path(&id)).unwrap();
    }
}

#[test]
fn paths_an_operation_file_names_must_be_where_ktr_puts_them() {
    let (_t, store) = store();
    let elsewhere = store.dir().join("artifacts").join("other").join("s.jsonl");
    for (field, value, needle) in [
        ("backup", serde_json::json!("/etc/shadow"), "backup"),
        ("backup", serde_json::json!(elsewhere), "backup"),
        (
            "candidate",
            serde_json::json!({"session_id": "abc", "path": "/p/../../etc/abc.jsonl", "sha256": DIGEST}),
            "candidate path",
        ),
        (
            "candidate",
            serde_json::json!({"session_id": "abc", "path": "/p/other.jsonl", "sha256": DIGEST}),
            "candidate path",
        ),
        (
            "transcript_path",
            serde_json::json!("relative/s.jsonl"),
            "transcript_path",
        ),
    ] {
        let id = edited(&store, |j| j[field] = value.clone());
        assert_damaged(&store, &id, needle);
        fs::remove_file(store.operation_path(&id)).unwrap();
    }
    // Where ktr puts them, they load.
    let id = edited(&store, |_| {});
    let backup = store.dir().join("artifacts").join(&id).join("s.jsonl");
    let path = store.operation_path(&id);
    let mut json: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    json["backup"] = serde_json::json!(backup);
    json["candidate"] =
        serde_json::json!({"session_id": "abc", "path": "/p/abc.jsonl", "sha256": DIGEST});
    fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
    assert_eq!(store.load(&id).unwrap().backup, Some(backup));
}

#[test]
fn an_operation_file_over_a_mebibyte_is_damaged_and_costs_nothing_to_refuse() {
    let (_t, store) = store();
    let id = edited(&store, |j| j["reasons"] = vec!["x".repeat(1 << 20)].into());
    assert_damaged(&store, &id, "is damaged");
}

#[test]
fn lists_that_grow_with_an_operations_life_are_capped_when_saved() {
    let (_t, store) = store();
    let op = requested(&store);
    store
        .with_lock(|tx| {
            let mut op = tx.load(&op.id)?;
            for n in 0..500 {
                op.history.push(Transition {
                    at: ktr_base::time::Timestamp::now(),
                    from: Status::Pending,
                    to: Status::Pending,
                    note: format!("step {n} {}", "n".repeat(5000)),
                });
                op.reasons.push(format!("reason {n}"));
            }
            tx.save(&mut op)
        })
        .unwrap();
    let saved = store.load(&op.id).unwrap();
    assert_eq!(saved.history.len(), record::HISTORY_KEPT);
    assert!(
        saved.history[0].note.starts_with("step 0 "),
        "the first steps stay"
    );
    assert!(saved.history.last().unwrap().note.starts_with("step 499 "));
    assert!(saved.history.iter().all(|t| t.note.chars().count() <= 1001));
    assert_eq!(saved.reasons.len(), record::LIST_KEPT);
    assert_eq!(saved.reasons.last().unwrap(), "reason 499");
    assert!(fs::metadata(store.operation_path(&op.id)).unwrap().len() < 256 << 10);
}

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
