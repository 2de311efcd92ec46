//! The manifest artifact and the bounded stats an operation keeps.

use super::*;

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
        ktr_base::digest::sha256_file(&path).unwrap()
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
    let v1: serde_json::Value = serde_json::from_str(include_str!(
        "../../../../../tests/fixtures/operation-v1.json"
    ))
    .unwrap();
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
