//! `ktr demo`: a whole rebuild in a sandbox, kept or cleaned up.

use super::*;
use crate::support::OptionOrPanic;
use crate::support::Sandbox;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `sandbox  <path>` line the demo prints first.
#[track_caller]
fn demo_sandbox(stdout: &str) -> PathBuf {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sandbox     "))
        .or_panic(|| format!("no sandbox line:\n{stdout}"));
    PathBuf::from(line.trim())
}

#[test]
fn demo_runs_a_whole_rebuild_and_cleans_up() {
    let sb = Sandbox::new();
    let run = Ktr::bare(&sb).arg("demo").run().code(0);
    let run = run
        .stdout_contains("== 2. ktr doctor ==")
        .stdout_contains("all checks passed")
        .stdout_contains("noise")
        .stdout_contains("plan ok")
        .stdout_contains("rebuild scheduled")
        .stdout_contains("verifying → activating")
        .stdout_contains("status            activated")
        .stdout_contains("8 (all carried verbatim)")
        .stdout_contains("unchanged: same sha256")
        .stdout_contains("demo finished: operation activated")
        // The example was compacted once: its turns before the boundary
        // are only in Claude Code's summary, and the ledger says a rebuild
        // restores them.
        .stdout_contains("advice: rebuild (Claude Code compacted this window: 6 turns are only in its summary, a rebuild restores them word for word")
        // What was left out, and why, in plan and status.
        .stdout_contains("carried items     17; left out: 2 records (1 compact_summary_dropped, 1 local_command)");
    assert!(
        run.stdout.lines().any(|l| l.starts_with("left out ")
            && l.ends_with("  2 records (1 compact_summary_dropped, 1 local_command)")),
        "the plan's left-out row:\n{}",
        run.stdout
    );
    let root = demo_sandbox(&run.stdout);
    assert!(root.starts_with(sb.root()), "{}", root.display());
    assert!(!root.exists(), "the sandbox is removed without --keep");
    assert!(
        run.stdout.contains(&format!(
            "sandbox removed: {} (ktr demo --keep keeps it)",
            root.display()
        )),
        "the demo says it removed its sandbox:\n{}",
        run.stdout
    );
    // The HOME it ran under is untouched: hooks and MCP went into the sandbox.
    assert!(!sb.home.join(".claude/settings.json").exists());
    assert!(!sb.home.join(".claude.json").exists());
    assert!(!run.stdout.contains("sandbox kept"));
}

#[test]
fn demo_keep_leaves_a_sandbox_the_cli_can_inspect() {
    let sb = Sandbox::new();
    let run = Ktr::bare(&sb)
        .args(["demo", "--keep"])
        .run()
        .code(0)
        .stdout_contains("sandbox kept");
    let root = demo_sandbox(&run.stdout);
    let config = root.join("config.toml");
    let out = Command::new(crate::support::exe("ktr"))
        .args(["--config"])
        .arg(&config)
        .args(["status", "--json"])
        .env("HOME", &sb.home)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "activated");
    let candidate = PathBuf::from(v["candidate_path"].as_str().unwrap());
    assert!(candidate.starts_with(&root) && candidate.is_file());
    let pointer = fs::read_to_string(root.join("resume_session")).unwrap();
    assert_eq!(pointer.trim(), v["candidate_session_id"].as_str().unwrap());
    // worker.log counts what status counts.
    let log = fs::read_to_string(root.join("state/worker.log")).unwrap();
    let by_reason = v["left_out_by_reason"].as_object().unwrap();
    let total: u64 = by_reason.values().map(|n| n.as_u64().unwrap()).sum();
    let reasons: Vec<String> = by_reason.iter().map(|(r, n)| format!("{n} {r}")).collect();
    let counts = format!(
        "{} carried items; left out: {total} records ({})",
        v["manifest_items"],
        reasons.join(", ")
    );
    assert_eq!(v["left_out_records"], total);
    assert!(log.contains(&counts), "worker.log lacks {counts:?}:\n{log}");
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn demo_without_the_stages_says_so_and_keeps_the_evidence() {
    let sb = Sandbox::new();
    // ktr and ktr-stop alone: the Stop hook cannot start ktr-prepare.
    let lonely = sb.root().join("lonely");
    fs::create_dir(&lonely).unwrap();
    for bin in [crate::support::exe("ktr"), crate::support::exe("ktr-stop")] {
        let name = Path::new(bin).file_name().unwrap();
        fs::copy(bin, lonely.join(name)).unwrap();
    }
    let out = Command::new(lonely.join("ktr"))
        .arg("demo")
        .env_clear()
        .env("HOME", &sb.home)
        .env("PATH", "/usr/bin:/bin")
        .env("TMPDIR", sb.root())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("the Stop hook did not schedule operation")
            && stderr.contains("ktr-prepare"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stdout.contains("sandbox kept"), "{stdout}");
    let root = demo_sandbox(&stdout);
    assert!(root.join("config.toml").is_file());
}

// ---------------------------------------------------------------------------
// --session and --new-session
