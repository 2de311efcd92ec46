//! After a compaction: the summarised turns offered back, recall offered, context dropped.

use super::*;
use crate::stop_hook::message;

/// After a compaction the next Stop hook offers the
/// turns Claude Code now has only in its summary — once per boundary —
/// and the statusline, `ktr dirty` and `ktr plan` say the same.
#[test]
fn after_a_compaction_the_turns_in_the_summary_are_offered_back_once() {
    let mut s = Session::new("");
    s.turn("ONE", 100_000);
    s.turn("TWO", 120_000);
    let plan = |s: &Session| s.json("plan");
    let dirty = |s: &Session| s.json("dirty");
    // The example conversation was compacted once already (its offer was
    // taken by the first Stop, `Session::new`): nothing new to offer.
    let p = plan(&s);
    let earlier = p["compactions_undone"][0]["turns_before"].as_u64().unwrap();
    assert!(earlier >= 1, "{p}");
    assert_eq!(s.stop("TWO"), QUIET, "offered once per boundary");
    let before = p["source_turns"].as_u64().unwrap();
    assert!(before > earlier, "{p}");
    s.compacted("Summary one.");
    s.turn("AFTER", 30_000);
    let line = message(&s.stop("AFTER"));
    assert!(
        line.starts_with(&format!(
            "ktr: {before} turns from before Claude Code's last compaction are only in its summary now; a rebuild restores them word for word at ≈ "
        )) && line.ends_with(" tokens — say REBUILD to ask for it"),
        "{line}"
    );
    assert_eq!(s.stop("AFTER"), QUIET, "offered once per boundary");
    s.turn("NEXT", 32_000);
    assert_eq!(s.stop("NEXT"), QUIET, "offered once per boundary");
    assert!(
        s.sandbox.store().latest().unwrap().is_none(),
        "the offer never requests anything"
    );
    let segment = s.statusline(&["--segment"], Some(32_000), &[]);
    assert!(
        segment.contains(&format!(" · {before} turns only in summary · rebuild→")),
        "{segment}"
    );
    let v = dirty(&s);
    assert_eq!(v["window"]["summarised_turns"], before, "{v}");
    assert_eq!(v["should_rebuild"], true, "{v}");
    assert!(
        v["reasons"].to_string().contains(&format!(
            "Claude Code compacted this window: {before} turns are only in its summary"
        )),
        "{v}"
    );
    let human = s.sandbox.run("dirty", Some(s.transcript.as_path()), &[]);
    assert!(
        human.stdout.contains(&format!("\ncompacted: {before} turns from before Claude Code's last compaction are only in its summary now; a rebuild restores them word for word at ≈ ")),
        "{}",
        human.stdout
    );
    // `ktr plan` names the compaction it undoes and the turns it restores.
    let p = plan(&s);
    let undone = &p["compactions_undone"];
    assert_eq!(undone.as_array().unwrap().len(), 2, "{p}");
    assert_eq!(undone[1]["turns_before"], before, "{p}");
    assert_eq!(undone[1]["turns_restored"], before, "{p}");
    assert_eq!(p["selected_turns"], before + 2, "{p}");
    // A second compaction is a new boundary: offered again, with the
    // turns since.
    s.compacted("Summary two.");
    s.turn("LATER", 30_000);
    let line = message(&s.stop("LATER"));
    assert!(
        line.starts_with(&format!("ktr: {} turns from before", before + 2)),
        "{line}"
    );
    assert_eq!(s.stop("LATER"), QUIET);
    // `ktr status` of a rebuild asked for this session says it too.
    let status = s.status_of_a_rebuild("LATER");
    assert!(
        status.stdout.contains(&format!(
            "\ncompacted         {} turns from before Claude Code's last compaction are only in its summary; a rebuild carries them word for word",
            before + 2
        )),
        "{}",
        status.stdout
    );
    let v: serde_json::Value =
        serde_json::from_str(&s.sandbox.run("status", None, &["--json"]).stdout).unwrap();
    assert_eq!(v["window"]["summarised_turns"], before + 2, "{v}");
}

/// When the turns would not fit back under the compaction point with
/// room, the offer points to `ktr recall` instead.
#[test]
fn after_a_compaction_that_a_rebuild_cannot_undo_recall_is_offered() {
    // Claude Code compacts a 34k window at 1k: no rebuild fits under it.
    let mut s = Session::new("context_window_tokens = 34000");
    s.turn("ONE", 500);
    s.compacted("Summary.");
    s.turn("AFTER", 300);
    let line = message(&s.stop("AFTER"));
    assert!(
        line.contains("only in its summary now; a rebuild carrying them would start at ≈ ")
            && line.contains("but `ktr recall` still finds them word for word"),
        "{line}"
    );
    assert_eq!(s.stop("AFTER"), QUIET);
    // (No rebuild figure: a rebuild would free nothing here.)
    let segment = s.statusline(&["--segment"], Some(300), &[]);
    assert!(segment.ends_with(" turns only in summary"), "{segment}");
}

/// Context Claude Code dropped without a compaction
/// boundary is said once, with what a rebuild would carry — a reply whose
/// usage fell by more than half since the previous one, a
/// microcompaction record.
#[test]
fn context_dropped_without_compacting_is_said_once() {
    let mut s = Session::new("");
    s.turn("BIG", 612_000);
    assert_eq!(s.stop("BIG"), QUIET);
    s.turn("SMALL", 275_000);
    let line = message(&s.stop("SMALL"));
    assert!(
        line.starts_with("ktr: Claude Code dropped context without compacting (the window fell from 612k to 275k tokens between two replies); a rebuild would carry all ")
            && line.ends_with(" tokens — say REBUILD to ask for it"),
        "{line}"
    );
    assert_eq!(s.stop("SMALL"), QUIET, "said once");
    // The statusline shows it for as long as this window lasts.
    let line = s.statusline(&["--segment"], Some(275_000), &[]);
    assert!(line.contains(" · context cleared"), "{line}");
    // `ktr dirty` says it too (what the hooks' running account saw).
    let v = s.json("dirty");
    assert_eq!(v["cleared"]["kind"], "usage_drop", "{v}");
    assert_eq!(
        (&v["cleared"]["from_tokens"], &v["cleared"]["to_tokens"]),
        (&serde_json::json!(612_000), &serde_json::json!(275_000))
    );
    let human = s.sandbox.run("dirty", Some(s.transcript.as_path()), &[]);
    assert!(
        human
            .stdout
            .contains("\ncleared: Claude Code dropped context without compacting (the window fell from 612k to 275k tokens between two replies); a rebuild would carry all "),
        "{}",
        human.stdout
    );
    // A microcompaction record.
    let mut mc = record("system", "0c0c0c0c-0000-4000-8000-000000000001", &s.parent);
    mc["subtype"] = "microcompact_boundary".into();
    mc["content"] = "Context microcompacted".into();
    s.append(&format!("{mc}\n"));
    s.turn("AFTER", 260_000);
    let line = message(&s.stop("AFTER"));
    assert!(
        line.starts_with(
            "ktr: Claude Code cleared old tool results from this window without compacting (microcompact); a rebuild would carry all "
        ),
        "{line}"
    );
    assert_eq!(s.stop("AFTER"), QUIET, "said once");
    // `ktr status` of a rebuild asked for this session names it.
    let status = s.status_of_a_rebuild("AFTER");
    assert!(
        status.stdout.contains(
            "\ncleared           Claude Code cleared old tool results from this window without compacting (microcompact); a rebuild carries the whole conversation word for word"
        ),
        "{}",
        status.stdout
    );
}
