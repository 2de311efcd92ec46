//! The statusline and `ktr dirty` from the reported window.

use super::*;
use crate::support::Sandbox;
use std::fs;
use std::path::Path;

#[test]
fn the_statusline_shows_the_segment_and_remembers_the_window_size() {
    let mut s = Session::new("");
    s.turn("78", 780_000);
    assert_eq!(
        s.statusline(&[], None, &[]),
        "Opus 5.5 · work · ktr –",
        "before the first reply"
    );
    // (The example conversation's 6 turns before its compaction are only
    // in Claude Code's summary: a rebuild restores them.)
    let line = s.statusline(&[], Some(780_000), &[]);
    assert!(
        line.starts_with("Opus 5.5 · work · ktr 78% of 1M · 6 turns only in summary · rebuild→")
            && line.ends_with('%'),
        "{line}"
    );
    let segment = s.statusline(&["--segment"], Some(780_000), &[]);
    assert!(
        segment.starts_with("ktr 78% of 1M · 6 turns only in summary · rebuild→"),
        "{segment}"
    );
    let colored = s.statusline(&["--segment", "--color"], Some(780_000), &[]);
    assert!(colored.starts_with("\x1b[33mktr 78%"), "{colored:?}");
    let plain = s.statusline(
        &["--segment", "--color"],
        Some(780_000),
        &[("NO_COLOR", "1")],
    );
    assert_eq!(plain, segment);
    // The reported size is remembered: `ktr dirty` uses it although the
    // model id alone would say 200k.
    let remembered = s.sandbox.state.join(format!("window/{SESSION}.json"));
    let r: serde_json::Value = serde_json::from_slice(&fs::read(&remembered).unwrap()).unwrap();
    assert_eq!(r["context_window_size"], 1_000_000);
    // A pending rebuild shows instead of the estimate.
    s.sandbox.store().request("full", "REBUILD", None).unwrap();
    assert_eq!(
        s.statusline(&["--segment"], Some(780_000), &[]),
        "ktr 78% of 1M · rebuild pending"
    );
}

#[test]
fn dirty_uses_the_reported_size_and_reads_the_window_from_the_api_usage() {
    let mut s = Session::new("");
    s.turn("61", 612_000);
    let out = s
        .sandbox
        .run("dirty", Some(s.transcript.as_path()), &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", out.stdout, out.stderr));
    let w = &v["window"];
    assert_eq!(w["used_tokens"], 612_000, "{w}");
    assert_eq!(w["used_source"], "usage");
    assert_eq!(w["size_tokens"], 1_000_000, "claude-opus-5-5 has 1M: {w}");
    assert_eq!(w["advice"], "none", "61 % is below advise_at_percent: {w}");
    let human = s.sandbox.run("dirty", Some(s.transcript.as_path()), &[]);
    let first = human.stdout.lines().next().unwrap_or_default().to_string();
    assert!(
        first.starts_with("window 612k / 1M (61 %, measured by the API")
            && first.contains("a rebuild would start at ≈"),
        "{first}"
    );
    // The readable plan leads with the same line as its first row.
    let plan = s.sandbox.run("plan", Some(s.transcript.as_path()), &[]);
    let row = plan.stdout.lines().next().unwrap_or_default();
    assert_eq!(
        row.strip_prefix("window").map(str::trim_start),
        Some(first.as_str()),
        "{}",
        plan.stdout
    );
    let overhead = format!(
        "(formula; + overhead {} of a fresh window",
        w["overhead_tokens"]
    );
    assert!(
        plan.stdout.contains(&overhead),
        "{overhead}:\n{}",
        plan.stdout
    );
    check_statusline_size(&s);
}

/// After the statusline reported 1M for a model id that would say 200k,
/// `ktr dirty` uses the reported size.
#[track_caller]
fn check_statusline_size(s: &Session) {
    let path: &Path = &s.transcript;
    // A transcript whose model ktr does not know (200k by the model id).
    let text = fs::read_to_string(path)
        .unwrap()
        .replace("claude-opus-5-5", "claude-x-small");
    fs::write(path, text).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&s.sandbox.run("dirty", Some(path), &["--json"]).stdout).unwrap();
    assert_eq!(v["window"]["size_tokens"], 200_000, "{}", v["window"]);
    s.statusline(&[], Some(612_000), &[]);
    let v: serde_json::Value =
        serde_json::from_str(&s.sandbox.run("dirty", Some(path), &["--json"]).stdout).unwrap();
    assert_eq!(v["window"]["size_tokens"], 1_000_000, "{}", v["window"]);
}

/// A model name or a folder name with terminal escape
/// sequences is printed with them made harmless.
#[test]
fn the_statusline_never_prints_escape_sequences_from_its_input() {
    let sandbox = Sandbox::new();
    let input = serde_json::json!({
        "session_id": "s1",
        "model": {"id": "x", "display_name": "Opus\u{1b}]0;pwned\u{7}\u{1b}[2J"},
        "workspace": {"current_dir": "/w/proj\u{1b}[31m\u{9b}1m"},
        "context_window": {"context_window_size": 200_000, "current_usage": null},
    });
    let (out, code) = sandbox.hook(crate::support::exe("ktr-statusline"), &input.to_string());
    assert_eq!(code, 0);
    assert_eq!(out, "Opus?]0;pwned??[2J · proj?[31m?1m · ktr –\n");
}
