//! `ktr prune`: only old terminal operations and their own leftovers, never what a person or the pointer still needs.

use super::*;
use crate::support::{Sandbox, tree};
use ktr_base::digest::Sha256;
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::{CandidateFile, Operation, Status};
use std::fs;
use std::path::{Path, PathBuf};

#[test]
fn prune_deletes_only_old_terminal_operations_and_their_own_leftovers() {
    use Status::*;
    let sb = Sandbox::new();
    // The old pending request must not expire under this test (~7 years).
    sb.write_config("request_ttl_hours = 60000");
    let source = sb.project.join("source-session.jsonl");
    fs::write(&source, "{\"type\":\"user\"}\n").unwrap();
    fs::write(sb.project.join("someone-else.jsonl"), "x\n").unwrap();
    fs::create_dir_all(sb.project.join("source-session/tool-results")).unwrap();
    fs::write(sb.project.join("source-session/tool-results/a.txt"), "t").unwrap();

    // Old and failed before reaching the target: everything goes.
    let mut failed = finished(&sb, &[Scheduled, Running, Failed], OLD);
    let failed_candidate = with_candidate(&sb, &mut failed, 1);
    // Old and cancelled: no candidate ever existed.
    let cancelled = finished(&sb, &[Cancelled], OLD);
    // Old, failed after reaching activating: the candidate may have run.
    let mut died = finished(
        &sb,
        &[Scheduled, Running, Verifying, Activating, Failed],
        OLD,
    );
    died.needs_attention = true;
    let died_candidate = with_candidate(&sb, &mut died, 2);
    // Old and failed, but its candidate was written to since: someone resumed it.
    let mut resumed = finished(&sb, &[Scheduled, Running, Failed], OLD);
    let resumed_candidate = with_candidate(&sb, &mut resumed, 3);
    fs::write(
        &resumed_candidate,
        "{\"type\":\"user\",\"n\":3}\n{\"more\":1}\n",
    )
    .unwrap();
    // Two old activations: the older goes (not its live session), the newest stays whole.
    let mut activated_old = finished(&sb, &TO_ACTIVATED, OLD);
    let activated_old_candidate = with_candidate(&sb, &mut activated_old, 4);
    let mut activated_new = finished(&sb, &TO_ACTIVATED, "2020-02-01T00:00:00.000Z");
    let activated_new_candidate = with_candidate(&sb, &mut activated_new, 5);
    // Recent and failed: too young.
    let recent = finished(&sb, &[Scheduled, Failed], &ktr_base::time::now_rfc3339());
    // Old but still pending: never.
    let pending = sb.store().request("now", "REBUILD", None).unwrap();
    let mut p = sb.store().load(&pending.id).unwrap();
    p.updated_at = stamp(OLD);
    p.created_at = stamp("2020-03-01T00:00:00.000Z");
    put(&sb, &p);
    // Keys a person typed during a switch that the keeper could not replay:
    // they go with their operation, and only with it.
    let failed_keys = left_keys(&sb, &failed.id, "activate");
    let kept_keys = left_keys(&sb, &activated_new.id, "rollback");

    let before = tree(sb.root());
    let dry = Ktr::new(&sb)
        .args(["prune", "--older-than", "30"])
        .run()
        .code(0)
        .stdout_contains("would delete operation")
        .stdout_contains("nothing deleted: run again with --yes")
        .stdout_contains(&failed_candidate.display().to_string());
    assert_eq!(tree(sb.root()), before, "a dry run deletes nothing");
    assert!(
        dry.stdout
            .contains(&format!("kept {} (pending)", pending.id))
    );

    let json = Ktr::new(&sb)
        .args(["prune", "--older-than", "30", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(json["deleted"], false);
    assert_eq!(tree(sb.root()), before, "a JSON dry run deletes nothing");

    Ktr::new(&sb)
        .args(["prune", "--older-than", "30", "--yes"])
        .run()
        .code(0)
        .stdout_contains("deleted 5 operations");
    let after = tree(sb.root());
    let gone: Vec<PathBuf> = before
        .keys()
        .filter(|p| !after.contains_key(*p))
        .cloned()
        .collect();
    let op_file = |op: &Operation| sb.state.join(format!("operations/{}.json", op.id));
    let art = |op: &Operation| sb.state.join("artifacts").join(&op.id);
    let mut expected = vec![failed_candidate.clone()];
    expected.extend(failed_keys.ancestors().take(3).map(Path::to_path_buf));
    for op in [&failed, &cancelled, &died, &resumed, &activated_old] {
        expected.push(op_file(op));
        expected.push(art(op));
        expected.push(art(op).join("source-session.jsonl"));
    }
    expected.sort();
    let mut gone_sorted = gone.clone();
    gone_sorted.sort();
    assert_eq!(gone_sorted, expected);
    for kept in [
        &source,
        &died_candidate,
        &resumed_candidate,
        &activated_old_candidate,
        &activated_new_candidate,
        &op_file(&activated_new),
        &op_file(&recent),
        &op_file(&p),
        &art(&activated_new),
        &kept_keys,
    ] {
        assert!(kept.exists(), "{} was kept", kept.display());
    }
    // Nothing that stayed was changed; the one new file keeps the lineage
    // link of the activated operation that went.
    let links = sb.state.join("lineage.jsonl");
    for (path, digest) in after.iter().filter(|(p, _)| **p != links) {
        assert_eq!(before.get(path), Some(digest), "{}", path.display());
    }
    let kept_links = fs::read_to_string(&links).unwrap();
    assert_eq!(kept_links.lines().count(), 1, "{kept_links}");
    assert!(kept_links.contains(&*activated_old.id), "{kept_links}");
    assert_eq!(sb.store().load(&pending.id).unwrap().status, Pending);
    Ktr::new(&sb)
        .args(["prune", "--older-than", "30", "--yes"])
        .run()
        .code(0)
        .stdout_contains("nothing older than 30 days to prune");
}

/// A rolled-back operation that wrote a restore session (SPEC §10): prune
/// removes the operation but never the restore session nor the rebuilt
/// one, and keeps both links, so recall's lineage of the restore session
/// still goes through the rebuilt session to the old one.
#[test]
fn prune_keeps_a_restore_session_and_its_lineage() {
    use Status::*;
    let sb = Sandbox::new();
    fs::write(sb.project.join("source-session.jsonl"), "old\n").unwrap();
    let switched = [Scheduled, Running, Verifying, Activating, Activated];
    let back = [RollbackPending, RollbackScheduled, RollingBack, RolledBack];
    let mut op = finished(&sb, &[&switched[..], &back[..]].concat(), OLD);
    let candidate = with_candidate(&sb, &mut op, 1);
    let rid = "eeeeeeee-0000-4000-8000-000000000001";
    let restore = sb.project.join(format!("{rid}.jsonl"));
    fs::write(&restore, "old\n{\"type\":\"user\",\"n\":1}\n").unwrap();
    op.restore = Some(ktr_pipeline::operation::RestoreFile {
        session_id: SessionId::parse(rid).unwrap(),
        path: restore.clone(),
        sha256: Sha256::of_file(&restore).unwrap(),
        old_records: 1,
        new_records: 1,
        turns: 1,
    });
    put(&sb, &op);
    Ktr::new(&sb)
        .args(["prune", "--older-than", "30", "--yes"])
        .run()
        .code(0)
        .stdout_contains("deleted 1 operation");
    assert!(!sb.state.join(format!("operations/{}.json", op.id)).exists());
    assert!(restore.exists() && candidate.exists());
    let links = fs::read_to_string(sb.state.join("lineage.jsonl")).unwrap();
    assert_eq!(links.lines().count(), 2, "{links}");
    let json = Ktr::new(&sb)
        .args(["recall", "--json", "--current", rid, "n"])
        .run()
        .code(0)
        .json();
    let lineage: Vec<&str> = json["lineage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["session"].as_str().unwrap())
        .collect();
    let sid = op.candidate.as_ref().unwrap().session_id.to_string();
    assert_eq!(lineage, [rid, sid.as_str(), "source-session"]);
}

#[test]
fn prune_never_deletes_a_candidate_the_pointer_names_or_outside_the_project() {
    use Status::*;
    let sb = Sandbox::new();
    let pointer = sb.root().join("pointer");
    sb.write_config(&format!("resume_pointer_path = {pointer:?}"));
    let mut named = finished(&sb, &[Scheduled, Running, Failed], OLD);
    let named_candidate = with_candidate(&sb, &mut named, 1);
    let sid = named.candidate.as_ref().unwrap().session_id.clone();
    fs::write(&pointer, format!("{sid}\n")).unwrap();

    // A record that claims a candidate outside project_dir.
    let outside = sb.root().join("elsewhere.jsonl");
    fs::write(&outside, "precious\n").unwrap();
    let mut forged = finished(&sb, &[Scheduled, Running, Failed], OLD);
    forged.candidate = Some(CandidateFile {
        session_id: ktr_base::ids::SessionId::parse("elsewhere").unwrap(),
        path: outside.clone(),
        sha256: Sha256::of_file(&outside).unwrap(),
    });
    put(&sb, &forged);
    // And one edited to a session id that tries to climb out: such a file
    // does not even load (ids validate on deserialize), so prune keeps it.
    let mut climbing = finished(&sb, &[Scheduled, Running, Failed], OLD);
    climbing.candidate = forged.candidate.clone();
    let mut raw = serde_json::to_value(&climbing).unwrap();
    raw["candidate"]["session_id"] = "../../elsewhere".into();
    let climbing_file = sb.state.join(format!("operations/{}.json", climbing.id));
    fs::write(&climbing_file, serde_json::to_vec_pretty(&raw).unwrap()).unwrap();

    // Artifacts holding a symlink to something else: only the link goes.
    std::os::unix::fs::symlink(
        &outside,
        sb.state.join("artifacts").join(&forged.id).join("link"),
    )
    .unwrap();
    // An artifacts "dir" that is itself a symlink is left alone.
    let decoy_dir = sb.root().join("decoy");
    fs::create_dir(&decoy_dir).unwrap();
    fs::write(decoy_dir.join("keep.txt"), "k").unwrap();
    let linked = finished(&sb, &[Cancelled], OLD);
    let linked_art = sb.state.join("artifacts").join(&linked.id);
    fs::remove_dir_all(&linked_art).unwrap();
    std::os::unix::fs::symlink(&decoy_dir, &linked_art).unwrap();

    Ktr::new(&sb)
        .args(["prune", "--older-than", "1", "--yes"])
        .run()
        .code(0)
        .stdout_contains("the resume pointer names it")
        .stdout_contains("is not a directory (a symlink?)")
        .stdout_contains("deleted 3 operations");
    assert!(named_candidate.exists());
    assert!(climbing_file.exists());
    assert_eq!(fs::read_to_string(&outside).unwrap(), "precious\n");
    assert!(decoy_dir.join("keep.txt").is_file());
    assert!(!sb.state.join("artifacts").join(&forged.id).exists());
}

// ---------------------------------------------------------------------------
// demo
