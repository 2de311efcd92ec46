//! ktr's state dir is ktr's own: a `state_dir` that is a person's folder
//! is refused with one line before anything is written or removed there;
//! a folder holding only ktr's names (an install from before the marker)
//! is adopted; purge, prune and the bindings' prune remove only the names
//! and forms ktr writes, never through a link. Removals are watched with
//! strace, not only by looking at what is left.

use std::fs;
use std::path::Path;

use crate::support::{Sandbox, straced, tree};
use ktr_base::state_dir::MARKER;

const SESSION: &str = "aaaaaaaa-0000-4000-8000-000000000001";

/// What `ktr-ack` gets when Claude Code resumes `SESSION`.
fn resume_input(sb: &Sandbox) -> String {
    serde_json::json!({
        "session_id": SESSION,
        "transcript_path": sb.project.join(format!("{SESSION}.jsonl")),
        "cwd": sb.work,
        "hook_event_name": "SessionStart",
        "source": "resume",
    })
    .to_string()
}

/// The removals and renames strace saw, one per line.
fn removals(trace: &str) -> Vec<String> {
    trace
        .lines()
        .filter(|l| ["unlink", "rmdir", "rename"].iter().any(|c| l.contains(c)))
        .map(str::to_string)
        .collect()
}

const REMOVALS: &str = "unlink,unlinkat,rmdir,rename,renameat,renameat2";

/// `ktr COMMAND FLAGS` under strace: exit code, stderr, removals seen.
fn traced_ktr(sb: &Sandbox, command: &str, flags: &[&str]) -> (Option<i32>, String, Vec<String>) {
    let (out, trace) = sb.ktr_traced(REMOVALS, command, flags);
    (out.code, out.stderr, removals(&trace))
}

/// A hook under strace: removals seen.
fn traced_hook(sb: &Sandbox, bin: &str, input: &str) -> Vec<String> {
    let log = sb
        .root()
        .join(format!("strace-{}.log", uuid::Uuid::new_v4()));
    let cmd = straced(&log, REMOVALS, bin);
    let (_, code) = Sandbox::run_hook(sb.command_via(cmd), input, &[]);
    assert_eq!(code, 0, "a hook never fails Claude Code");
    removals(&fs::read_to_string(&log).unwrap_or_default())
}

/// `ktr-ack` as the SessionStart(resume) hook, under strace: removals seen.
fn traced_ack(sb: &Sandbox) -> Vec<String> {
    traced_hook(sb, crate::support::exe("ktr-ack"), &resume_input(sb))
}

/// A person's folder holding what ktr would call its own names.
fn lived_in(dir: &Path) {
    for (rel, text) in [
        ("artifacts/thesis.tex", "\\documentclass{article}"),
        ("window/plan.txt", "mine"),
        ("claude/notes.md", "my notes"),
        ("claude/settings.json", "{}"),
        ("prompts/draft.txt", "mine"),
        ("keep/list.txt", "mine"),
        ("active", "mine"),
        ("ktr.log", "mine"),
    ] {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
}

#[test]
fn a_state_dir_that_is_home_root_or_holds_the_project_is_refused_and_nothing_is_removed() {
    let sb = Sandbox::new();
    lived_in(&sb.home);
    // With the standing approval the prompt hook keeps prompts too.
    sb.write_config_with_state("~", "on_auto_compaction = \"rebuild\"");
    let before = tree(&sb.home);
    let (code, stderr, removed) = traced_ktr(&sb, "purge", &["--confirm", "PURGE"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("is your home folder") && stderr.contains("set state_dir"),
        "{stderr}"
    );
    assert!(removed.is_empty(), "purge removed: {removed:#?}");
    // The resume hook runs with no config check and no confirmation.
    let removed = traced_ack(&sb);
    assert!(removed.is_empty(), "ktr-ack removed: {removed:#?}");
    let prompt = serde_json::json!({
        "session_id": SESSION, "prompt": "hello", "prompt_id": "p-1",
        "hook_event_name": "UserPromptSubmit", "cwd": sb.work,
    });
    let removed = traced_hook(&sb, crate::support::exe("ktr-prompt"), &prompt.to_string());
    assert!(removed.is_empty(), "ktr-prompt removed: {removed:#?}");
    assert_eq!(tree(&sb.home), before, "nothing in the home folder changed");
    assert!(!sb.home.join(MARKER).exists());

    for (state, said) in [
        ("/", "is the root folder"),
        (
            &*sb.home.join(".claude").display().to_string(),
            "is the project folder",
        ),
        (&*sb.root().display().to_string(), "home folder"),
    ] {
        sb.write_config_with_state(state, "");
        let out = sb.run("status", None, &[]);
        assert_eq!(out.code, Some(2), "{state}: {}", out.stderr);
        assert!(out.stderr.contains(said), "{state}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    }
}

#[test]
fn a_folder_with_other_files_is_refused_and_one_of_ktrs_names_only_is_adopted() {
    let sb = Sandbox::new();
    let shared = sb.root().join("shared");
    lived_in(&shared);
    fs::write(shared.join("thesis.tex"), "mine").unwrap();
    sb.write_config_with_state(&shared.display().to_string(), "");
    let before = tree(&shared);
    let (code, stderr, removed) = traced_ktr(&sb, "prune", &["--older-than", "0", "--yes"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("which ktr did not make") && stderr.contains("thesis.tex"),
        "{stderr}"
    );
    assert!(removed.is_empty(), "{removed:#?}");
    assert_eq!(tree(&shared), before);

    // An install from before the marker: only ktr's names. It keeps working.
    let old = sb.root().join("old-state");
    fs::create_dir_all(old.join("operations")).unwrap();
    fs::write(old.join("ktr.log"), "").unwrap();
    fs::write(old.join("resume_session"), "").unwrap();
    sb.write_config_with_state(&old.display().to_string(), "");
    let out = sb.run("prune", None, &["--older-than", "0"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(old.join(MARKER).is_file(), "adopted: the marker is written");
    let out = sb.run("status", None, &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // A new one is created with its marker.
    sb.write_config("");
    let out = sb.run("prune", None, &["--older-than", "0"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(sb.state.join(MARKER).is_file());
}

/// A binding of `pid` as ktr-ack writes it, for a process long gone.
fn dead_binding(pid: u32) -> String {
    format!(
        "{{\"claude\":{{\"pid\":{pid},\"start_time\":1}},\"session_id\":\"{SESSION}\",\"at\":\"2026-01-01T00:00:00.000Z\"}}"
    )
}

#[test]
fn the_bindings_prune_removes_only_dead_bindings_ktr_wrote_never_through_a_link() {
    let sb = Sandbox::new();
    sb.store();
    let claude = sb.state.join("claude");
    fs::create_dir_all(&claude).unwrap();
    let dead = claude.join("4294967288.json");
    fs::write(&dead, dead_binding(4_294_967_288)).unwrap();
    let outside = sb.root().join("outside.json");
    fs::write(&outside, dead_binding(4_294_967_286)).unwrap();
    std::os::unix::fs::symlink(&outside, claude.join("4294967286.json")).unwrap();
    for (name, text) in [
        ("notes.md", "my notes".to_string()),
        ("settings.json", "{}".to_string()),
        ("4294967287.json", "{\"not\":\"a binding\"}".to_string()),
        ("named.json", dead_binding(4_294_967_285)),
        ("4294967284.json", dead_binding(4_294_967_283)),
    ] {
        fs::write(claude.join(name), text).unwrap();
    }
    let removed: Vec<String> = traced_ack(&sb)
        .into_iter()
        .filter(|l| l.contains("unlink") && l.contains("/claude/"))
        .collect();
    assert_eq!(removed.len(), 1, "{removed:#?}");
    assert!(removed[0].contains("4294967288.json"), "{removed:#?}");
    assert!(!dead.exists());
    for kept in [
        "notes.md",
        "settings.json",
        "4294967287.json",
        "named.json",
        "4294967284.json",
        "4294967286.json",
    ] {
        assert!(
            fs::symlink_metadata(claude.join(kept)).is_ok(),
            "{kept} was removed"
        );
    }
    assert!(outside.is_file());
}

#[test]
fn purge_removes_a_name_only_in_the_form_ktr_writes_it() {
    let sb = Sandbox::new();
    sb.store();
    // `ktr.log` is a folder here and `active` a link: not what ktr writes.
    fs::create_dir_all(sb.state.join("ktr.log")).unwrap();
    fs::write(sb.state.join("ktr.log/mine.txt"), "mine").unwrap();
    let outside = sb.root().join("outside");
    fs::write(&outside, "mine").unwrap();
    std::os::unix::fs::symlink(&outside, sb.state.join("active")).unwrap();
    let (code, stderr, removed) = traced_ktr(&sb, "purge", &["--confirm", "PURGE"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        removed.iter().all(|l| !["ktr.log", "mine.txt", "active"]
            .iter()
            .any(|n| l.contains(n))),
        "{removed:#?}"
    );
    assert!(sb.state.join("ktr.log/mine.txt").is_file());
    assert!(fs::symlink_metadata(sb.state.join("active")).is_ok());
    assert!(outside.is_file());
    assert!(!sb.state.join("operations").exists());
    assert!(
        !sb.state.join(MARKER).exists(),
        "the marker goes with the rest"
    );
}
