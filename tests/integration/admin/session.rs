//! `--session`, `--new-session`, `purge`, plan labels, the window in `status`, prompts past the retention.

use super::*;
use crate::support::{Sandbox, tree};
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::Status;
use std::fs;
use std::path::Path;
use std::process::Command;

#[test]
fn session_names_the_transcript_to_read_and_new_session_must_be_a_uuid() {
    let sb = Sandbox::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/session.jsonl");
    let older = sb
        .project
        .join("0a000000-0000-4000-8000-000000000001.jsonl");
    let newer = sb
        .project
        .join("0b000000-0000-4000-8000-000000000002.jsonl");
    fs::copy(&example, &older).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::copy(&example, &newer).unwrap();
    let source = |args: &[&str]| -> String {
        let run = Ktr::new(&sb).arg("plan").args(args).arg("--json").run();
        let v: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|_| panic!("{}{}", run.stdout, run.stderr));
        v["source_path"].as_str().unwrap().to_string()
    };
    assert!(source(&[]).ends_with("0b000000-0000-4000-8000-000000000002.jsonl"));
    for command in ["plan", "dirty"] {
        let run = Ktr::new(&sb)
            .args([command, "--session", "0a000000-0000-4000-8000-000000000001"])
            .run()
            .code(0);
        assert!(
            run.stdout.contains(&older.display().to_string()),
            "{}",
            run.stdout
        );
    }
    Ktr::new(&sb)
        .args(["plan", "--session", "../etc/passwd"])
        .run()
        .code(2)
        .stderr_contains("invalid session id");
    Ktr::new(&sb)
        .args(["plan", "--session", "0a000000-0000-4000-8000-000000000001"])
        .arg("--transcript")
        .arg(&older)
        .run()
        .code(2)
        .stderr_contains("give one");
    for bad in [
        "nope",
        "0d15ea5e-0000-4000-8000-00000000beeg",
        "0d15ea5e00004000800000000000beef00",
    ] {
        Ktr::new(&sb)
            .args(["plan", "--new-session", bad])
            .run()
            .code(2)
            .stderr_contains("(a UUID)");
    }
    // The old name is an alias of --new-session, with the same check.
    Ktr::new(&sb)
        .args(["plan", "--session-id", "nope"])
        .run()
        .code(2)
        .stderr_contains("--new-session takes a session id");
    let fixed = "0d15ea5e-0000-4000-8000-00000000beef";
    let one = Ktr::new(&sb)
        .args(["plan", "--show-candidate", "--new-session", fixed])
        .run()
        .code(0);
    let two = Ktr::new(&sb)
        .args(["plan", "--show-candidate", "--session-id", fixed])
        .run()
        .code(0);
    assert!(one.stdout.contains(fixed));
    assert_eq!(one.stdout, two.stdout);
}

/// Purge removes ktr's own copies of the
/// conversation — the state dir's files and the candidates never
/// activated — and never a source transcript, the transcript of a session
/// that ran, or anything else in the state dir; without the word it only
/// lists; it refuses while an operation is in flight.
#[test]
fn purge_removes_only_ktrs_copies_and_only_with_the_word() {
    use Status::*;
    let sb = Sandbox::new();
    // ktr made the state dir (with its marker); the operator's file came later.
    sb.store();
    let source = sb.project.join("source-session.jsonl");
    fs::write(&source, "{\"type\":\"user\"}\n").unwrap();
    let mut failed = finished(&sb, &[Scheduled, Running, Failed], OLD);
    let never_ran = with_candidate(&sb, &mut failed, 1);
    let mut activated = finished(
        &sb,
        &[Scheduled, Running, Verifying, Activating, Activated],
        OLD,
    );
    let ran = with_candidate(&sb, &mut activated, 2);
    let theirs = sb.state.join("notes-of-the-operator.txt");
    fs::write(&theirs, "mine").unwrap();
    // What a person typed, kept by ktr: a prompt held for a paste-back and
    // keys the keeper could not replay; and the bindings and lineage links.
    fs::create_dir_all(sb.state.join("prompts")).unwrap();
    fs::write(sb.state.join("prompts/s.last"), "{\"prompt\":\"hi\"}").unwrap();
    left_keys(&sb, &failed.id, "activate");
    fs::create_dir_all(sb.state.join("claude")).unwrap();
    fs::write(sb.state.join("claude/4242.json"), "{}").unwrap();
    fs::write(sb.state.join("lineage.jsonl"), "{}\n").unwrap();

    Ktr::new(&sb)
        .args(["purge"])
        .run()
        .code(0)
        .stdout_contains("would remove candidate")
        .stdout_contains("nothing removed: `ktr purge --confirm PURGE` removes them");
    // (The first look made the lock file; a second changes nothing.)
    let before = tree(sb.root());
    Ktr::new(&sb).args(["purge", "--json"]).run().code(0);
    assert_eq!(tree(sb.root()), before, "a dry run removes nothing");
    Ktr::new(&sb)
        .args(["purge", "--confirm", "purge"])
        .run()
        .code(1)
        .stderr_contains("confirmation must be exactly PURGE");
    assert_eq!(tree(sb.root()), before);

    Ktr::new(&sb)
        .args(["purge", "--confirm", "PURGE"])
        .run()
        .code(0)
        .stdout_contains("ktr's copies of the conversation are gone")
        .stdout_contains("not empty: it holds files ktr did not make");
    assert!(!never_ran.exists(), "the never-activated candidate is gone");
    for kept in [&source, &ran, &theirs] {
        assert!(kept.exists(), "{} was kept", kept.display());
    }
    for gone in [
        "operations",
        "artifacts",
        "active",
        "ktr.log",
        "coordinator.lock",
        "prompts",
        "keep",
        "claude",
        "lineage.jsonl",
    ] {
        assert!(!sb.state.join(gone).exists(), "{gone} left behind");
    }

    // In flight: refused, nothing removed.
    let sb = Sandbox::new();
    let op = sb.store().request("x", "REBUILD", None).unwrap();
    let before = tree(sb.root());
    Ktr::new(&sb)
        .args(["purge", "--confirm", "PURGE"])
        .run()
        .code(1)
        .stderr_contains(&format!("operation {} is pending", op.id));
    assert_eq!(tree(sb.root()), before);
}

/// Every label of `ktr plan` stands in its own column —
/// none runs into its value (`…expansion0`).
#[test]
fn plan_labels_never_run_into_their_values() {
    let sb = Sandbox::new();
    sb.add_transcript(
        "0a000000-0000-4000-8000-000000000001",
        &fs::read(crate::support::example()).unwrap(),
    );
    let run = Ktr::new(&sb).arg("plan").run();
    for label in [
        "commands carried with their expansion",
        "turns with a broken timestamp",
        "poison hits (last 10 turns)",
    ] {
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} in\n{}", run.stdout));
        assert!(
            line[label.len()..].starts_with("  "),
            "{line:?} runs into its value"
        );
    }
}

/// `ktr status` (and `--json`) carry the window of the
/// operation's session: used, size, compaction point, after a rebuild,
/// each with its source.
#[test]
fn status_shows_the_window_with_the_source_of_each_figure() {
    let sb = Sandbox::new();
    let session = "0a000000-0000-4000-8000-000000000001";
    let transcript = sb.add_transcript(session, &fs::read(crate::support::example()).unwrap());
    let op = sb
        .store()
        .request("x", "REBUILD", Some(&SessionId::parse(session).unwrap()))
        .unwrap();
    sb.walk(&op.id, &[Status::Scheduled], |op| {
        op.transcript_path = Some(transcript.clone());
    });
    let json = Ktr::new(&sb)
        .args(["status", "--json"])
        .run()
        .code(0)
        .json();
    let w = &json["window"];
    assert_eq!(w["session_id"], session, "{json:#}");
    assert!(w["used_tokens"].as_u64().unwrap() > 0, "{w:#}");
    assert!(
        w["used_source"]
            .as_str()
            .unwrap()
            .starts_with("the API's count"),
        "{w:#}"
    );
    assert_eq!(
        w["compaction_point_tokens"].as_u64().unwrap(),
        w["size_tokens"].as_u64().unwrap() - 33_000
    );
    assert!(
        w["size_source"].as_str().unwrap().contains("model"),
        "{w:#}"
    );
    assert!(
        w["after_rebuild_source"]
            .as_str()
            .unwrap()
            .contains("not planned yet")
    );
    assert_eq!(w["auto_compaction"], true, "{w:#}");
    Ktr::new(&sb)
        .arg("status")
        .run()
        .code(0)
        .stdout_contains("Claude Code compacts at");
    // Auto-compaction off: the point is the hard limit, and status says so.
    let off = |args: &[&str]| {
        let mut ktr = Ktr::new(&sb).args(args);
        ktr.cmd.env("DISABLE_AUTO_COMPACT", "1");
        ktr.run().code(0)
    };
    let json = off(&["status", "--json"]).json();
    assert_eq!(json["window"]["auto_compaction"], false, "{json:#}");
    off(&["status"]).stdout_contains("no auto-compaction, hard limit");
}

#[test]
fn prune_removes_prompts_kept_longer_than_the_retention_and_nothing_else() {
    let sb = Sandbox::new();
    sb.write_config("");
    let prompts = sb.state.join("prompts");
    fs::create_dir_all(&prompts).unwrap();
    let old = prompts.join("5d1c9a8e-3b7f-4e2a-9c61-0f2b7d4e8a13.last");
    let blocked = prompts.join("0f2b7d4e-3b7f-4e2a-9c61-5d1c9a8e8a13.blocked");
    let fresh = prompts.join("9c61aaaa-3b7f-4e2a-9c61-0f2b7d4e8a13.last");
    for f in [&old, &blocked, &fresh] {
        fs::write(f, "{\"text\":\"what a person typed\"}").unwrap();
    }
    let outside = sb.root().join("outside.txt");
    fs::write(&outside, "not ktr's").unwrap();
    std::os::unix::fs::symlink(&outside, prompts.join("link.last")).unwrap();
    // Not a name ktr writes there: a person's file stays, however old.
    let notes = prompts.join("notes.txt");
    fs::write(&notes, "mine").unwrap();
    for f in [&old, &blocked, &prompts.join("link.last"), &notes] {
        let touched = Command::new("touch")
            .args(["-h", "-d", "40 days ago"])
            .arg(f)
            .status()
            .unwrap();
        assert!(touched.success());
    }

    let before = tree(&prompts);
    Ktr::new(&sb)
        .args(["prune", "--older-than", "30"])
        .run()
        .code(0)
        .stdout_contains("would delete kept prompt")
        .stdout_contains(&old.display().to_string())
        .stdout_contains(&blocked.display().to_string())
        .stdout_contains("0 operations and 2 kept prompts")
        .stdout_contains("nothing deleted: run again with --yes");
    assert_eq!(tree(&prompts), before, "a dry run deletes nothing");

    Ktr::new(&sb)
        .args(["prune", "--older-than", "30", "--yes"])
        .run()
        .code(0)
        .stdout_contains("deleted 0 operations and 2 kept prompts");
    assert!(!old.exists() && !blocked.exists());
    assert!(fresh.exists(), "written within the retention");
    assert!(
        prompts.join("link.last").symlink_metadata().is_ok(),
        "a symlink is not ktr's file"
    );
    assert_eq!(fs::read_to_string(&outside).unwrap(), "not ktr's");
    assert!(notes.exists(), "only the forms ktr writes are pruned");
}
