//! Operation files: old and unknown fields, damage, paths, caps.

use super::*;

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
    let text = include_str!("../../../../../tests/fixtures/operation-v1.json");
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
fn an_artifact_is_removed_only_where_ktr_put_it_never_through_a_planted_link() {
    let (t, store) = store();
    let op = requested(&store);
    let outside = t.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("x.jsonl"), "a person's file\n").unwrap();
    // `artifacts/<id>` replaced by a link to another folder.
    fs::create_dir_all(store.dir().join("artifacts")).unwrap();
    let dir = store.dir().join("artifacts").join(op.id.as_str());
    std::os::unix::fs::symlink(&outside, &dir).unwrap();
    store.remove_artifact(&op.id, &dir.join("x.jsonl"));
    assert!(outside.join("x.jsonl").exists(), "never through a link");
    // Another operation's folder, or a path elsewhere: untouched too.
    store.remove_artifact(&op.id, &outside.join("x.jsonl"));
    assert!(outside.join("x.jsonl").exists());
    // Its own file in its own folder goes.
    fs::remove_file(&dir).unwrap();
    let own = store.artifacts_dir(&op.id).unwrap().join("x.jsonl");
    fs::write(&own, "backup\n").unwrap();
    store.remove_artifact(&op.id, &own);
    assert!(!own.exists());
}
