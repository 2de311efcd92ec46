//! Claude Code's compaction setting: the override, the auto-compact window, auto-compaction off.

use super::*;
use crate::support::claude_bin;
use crate::support::fake_api::last_user_text;
use ktr_pipeline::operation::Status;
use std::fs;
use std::path::Path;

/// With `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=pct` Claude Code
/// compacts at `point` (a reply reporting `point − 50` is followed by a
/// prompt that is sent; one reporting `point` by a compaction), and ktr's
/// advice names that point.
fn the_override_moves_the_point(bin: &Path, args: &[&str], pct: &str, point: u64) {
    let setting = ("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", pct);
    the_point_is(bin, args, setting, point, true);
}

/// `CLAUDE_CODE_AUTO_COMPACT_WINDOW` above the window (300,000 on a 200k
/// window) moves nothing: Claude Code compacts at its default, 167,000,
/// and ktr's advice names no setting.
fn an_auto_compact_window_above_the_window_moves_nothing(bin: &Path) {
    let setting = ("CLAUDE_CODE_AUTO_COMPACT_WINDOW", "300000");
    the_point_is(
        bin,
        &["--model", "claude-sonnet-4-6"],
        setting,
        167_000,
        false,
    );
}

/// With the environment `setting` Claude Code compacts at `point`, and
/// ktr's advice shows that point (naming the setting when it `moved` it).
fn the_point_is(bin: &Path, args: &[&str], setting: (&str, &str), point: u64, moved: bool) {
    let (name, value) = setting;
    let s = Session::start_env(bin, "", args, None, |_| vec![(name.into(), value.into())]);
    // The first reply of a fresh session measures the overhead.
    s.say("SAY-ONE hello", "REPLY-ONE");
    s.api.set_usage(Some(point - 50));
    s.say("SAY-TWO below", "REPLY-TWO");
    let shown = if moved {
        format!("of {}, {name}={value})", short(point))
    } else {
        format!("of {})", short(point))
    };
    s.tmux
        .wait_screen("the advice naming the point", TURN, |sc| {
            sc.contains(&shown)
        });
    s.api.set_usage(None);
    s.say("SAY-THREE next", "REPLY-THREE");
    assert_eq!(s.boundaries(), 0, "compacted below {point}");
    s.api.set_usage(Some(point));
    s.say("SAY-FULL at the point", "REPLY-FULL");
    s.api.set_usage(None);
    s.say("SAY-AFTER next", "REPLY-AFTER");
    s.wait_boundaries(1, &format!("no compaction at {point}"));
}

/// `CLAUDE_CODE_AUTO_COMPACT_WINDOW=150000` on a 200k window: Claude Code
/// compacts at min(200,000, 150,000) − 33,000 = 117,000. ktr's advice
/// names that point before it; at it, with the standing approval, the
/// guard blocks the compaction and ktr rebuilds instead.
fn the_auto_compact_window_moves_the_point(bin: &Path) {
    let s = Session::start_env(
        bin,
        "on_auto_compaction = \"rebuild\"",
        &["--model", "claude-sonnet-4-6"],
        None,
        |_| vec![("CLAUDE_CODE_AUTO_COMPACT_WINDOW".into(), "150000".into())],
    );
    s.say("SAY-ONE hello", "REPLY-ONE");
    s.api.set_usage(Some(117_000 - 50));
    s.say("SAY-TWO below", "REPLY-TWO");
    s.tmux
        .wait_screen("the advice naming the moved point", TURN, |sc| {
            sc.contains("of 117k, CLAUDE_CODE_AUTO_COMPACT_WINDOW=150000)")
        });
    // With the standing approval it says what will happen: nothing to ask
    // for (whole in the transcript, once Claude Code wrote it there).
    let advice = || {
        stop_lines(&s.transcript())
            .into_iter()
            .find(|l| l.contains("until Claude Code compacts"))
    };
    assert!(
        crate::support::wait_for(TURN, || advice().is_some()),
        "no advice among {:#?}",
        stop_lines(&s.transcript())
    );
    let advice = advice().unwrap_or_default();
    assert!(
        advice.contains("; ktr will rebuild instead (≈ ") && !advice.contains("REBUILD"),
        "{advice}"
    );
    s.api.set_usage(None);
    s.say("SAY-THREE next", "REPLY-THREE");
    assert_eq!(s.boundaries(), 0, "compacted below 117,000");
    assert!(
        s.store.latest().unwrap().is_none(),
        "a guard below the point"
    );
    s.api.set_usage(Some(117_000));
    s.say("SAY-FULL at the point", "REPLY-FULL");
    s.api.set_usage(None);
    s.tmux.type_line("SAY-AFTER next");
    let done = s.wait_status("the guard's rebuild at the moved point", |st| {
        st == Status::Activated || st.is_terminal()
    });
    assert_eq!(done.status, Status::Activated, "{done:?}");
    assert!(
        done.history[0].note.contains("PreCompact hook"),
        "not started by the guard: {:?}",
        done.history
    );
    assert_eq!(s.boundaries(), 0, "Claude Code compacted although blocked");
}

/// A rebuild that would leave no room is not started: with
/// `CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000` Claude Code compacts at 67,000;
/// a conversation that alone fills most of it would be rebuilt into a
/// window over 70 % (`advise_at_percent`) of that point, so the guard lets
/// Claude Code compact, says why, and starts nothing.
fn the_guard_declines_a_rebuild_that_leaves_no_room(bin: &Path) {
    let s = Session::start_env(
        bin,
        "on_auto_compaction = \"rebuild\"",
        &["--model", "claude-sonnet-4-6"],
        None,
        |_| vec![("CLAUDE_CODE_AUTO_COMPACT_WINDOW".into(), "100000".into())],
    );
    s.say("SAY-ONE hello", "REPLY-ONE");
    s.api.set_usage(Some(67_000));
    s.say("SAY-LONG tell me everything", "REPLY-LONG");
    s.api.set_usage(None);
    s.tmux.type_line("SAY-AFTER next");
    s.wait_boundaries(1, "Claude Code did not compact at 67,000");
    let declined = || {
        stop_lines(&s.transcript()).into_iter().any(|l| {
            l.starts_with(
                "ktr: a rebuild cannot replace this compaction: a rebuild would start at ",
            ) && l.contains("would leave no room")
        })
    };
    s.tmux.wait_idle(TURN);
    assert!(
        crate::support::wait_for(TURN, declined),
        "no reason among {:#?}",
        stop_lines(&s.transcript())
    );
    assert!(
        s.store.latest().unwrap().is_none(),
        "the guard started a rebuild that leaves no room"
    );
}

/// With `autoCompactEnabled: false` in settings.json a
/// reply past the usual point is followed by a prompt that is sent, not
/// compacted, until the hard limit (window − 23,000): a reply reporting
/// 977,000 of 1M is followed by "Context limit reached", and ktr's advice
/// names that limit and the setting.
fn auto_compaction_off(bin: &Path) {
    let s = Session::start_env(bin, "", &[], None, |env| {
        let path = env.sandbox.home.join(".claude/settings.json");
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut v: serde_json::Value = fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_else(|| serde_json::json!({}));
        v["autoCompactEnabled"] = false.into();
        fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        Vec::new()
    });
    // The first reply of a fresh session measures the overhead.
    s.say("SAY-ONE hello", "REPLY-ONE");
    s.api.set_usage(Some(976_950));
    s.say("SAY-TWO past the usual point", "REPLY-TWO");
    s.tmux
        .wait_screen("the advice naming the hard limit", TURN, |sc| {
            sc.contains("until the window's hard limit (977k of 977k; auto-compaction is off")
        });
    s.api.set_usage(None);
    s.say("SAY-THREE next", "REPLY-THREE");
    s.api.set_usage(Some(977_000));
    s.say("SAY-FULL at the limit", "REPLY-FULL");
    s.api.set_usage(None);
    s.tmux.type_line("SAY-AFTER next");
    s.tmux.wait_screen("the hard limit", TURN, |sc| {
        sc.contains("Context limit reached")
    });
    assert_eq!(s.boundaries(), 0, "compacted with autoCompactEnabled false");
    assert!(
        !s.api
            .turns()
            .iter()
            .any(|t| last_user_text(t.messages()).contains("SAY-AFTER")),
        "a prompt past the hard limit was sent"
    );
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_compaction_setting_through_the_interactive_cli() {
    let bin = claude_bin();
    let scenarios: [fn(&Path); 6] = [
        the_auto_compact_window_moves_the_point,
        an_auto_compact_window_above_the_window_moves_nothing,
        the_guard_declines_a_rebuild_that_leaves_no_room,
        // 1M: 60 % of 980,000 (window − 20k max output).
        |bin| the_override_moves_the_point(bin, &[], "60", 588_000),
        // 200k: 60 % of 180,000.
        |bin| the_override_moves_the_point(bin, &["--model", "claude-sonnet-4-6"], "60", 108_000),
        auto_compaction_off,
    ];
    side_by_side(&bin, &scenarios);
}
