//! The statusline while nobody types; the guard below and at the hard limit; after a compaction.

use super::*;
use crate::support::claude_bin;
use ktr_pipeline::operation::Status;
use ktr_pipeline::pane::Input;
use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// The statusline must not keep `rebuilding` (or any
/// stale figure) until the next turn. ktr's `statusLine` asks Claude Code
/// to run it again every 2 s (`refreshInterval`, honoured since 2.1.97):
/// here, with nobody typing, a statusline cache that is removed is written
/// again by the next run.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_statusline_runs_again_while_nobody_types() {
    let s = Session::start(&claude_bin(), "");
    let settings: serde_json::Value = serde_json::from_slice(
        &fs::read(s.env.sandbox.home.join(".claude/settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(settings["statusLine"]["refreshInterval"], 2, "{settings:#}");
    // The statusline remembers the window size Claude Code reports: the
    // file appears at its first run.
    let remembered = s
        .env
        .sandbox
        .state
        .join("window")
        .join(format!("{}.json", s.id));
    let deadline = Instant::now() + TURN;
    while !remembered.exists() {
        assert!(Instant::now() < deadline, "the statusline never ran");
        thread::sleep(Duration::from_millis(100));
    }
    for round in 0..2 {
        fs::remove_file(&remembered).unwrap();
        let gone = Instant::now();
        while !remembered.exists() {
            assert!(
                gone.elapsed() < Duration::from_secs(10),
                "round {round}: not run again within 10 s while idle:\n{}",
                s.screen()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Where the guard's block leaves the prompt on a 200k window
/// (`claude-sonnet-4-6`: compacts at 167,000, hard limit 177,000), with
/// the standing approval `on_auto_compaction = "rebuild"`: the reply
/// before the prompt reported `usage` input tokens.
pub(crate) fn the_guard_blocks(bin: &Path, usage: u64) -> Session {
    let s = Session::start_with(
        bin,
        "on_auto_compaction = \"rebuild\"",
        &["--model", "claude-sonnet-4-6"],
        None,
    );
    s.say("SAY-ONE hello", "REPLY-ONE");
    s.api.set_usage(Some(usage));
    s.say("SAY-TWO fill", "REPLY-TWO");
    s.api.set_usage(None);
    s
}

/// Between the compaction point and the hard limit (172,000 of 167,000 /
/// 177,000) Claude Code, its compaction blocked, sends the prompt anyway
/// and answers it in the full window; ktr switches after that reply. The
/// model takes 3 s, so prepare may freeze the source while the turn is
/// open: the prompt must then be carried, answered once, never pasted back.
fn the_guard_below_the_hard_limit_lets_the_prompt_through(bin: &Path) {
    let s = the_guard_blocks(bin, 172_000);
    s.api.set_turn_delay(Duration::from_secs(3));
    s.tmux.type_line("SAY-BLOCKED below the hard limit");
    let done = s.wait_status("the switch after the answered prompt", |st| {
        st == Status::Activated || st.is_terminal()
    });
    assert_eq!(done.status, Status::Activated, "{done:?}");
    s.api.set_turn_delay(Duration::ZERO);
    assert!(
        done.history[0].note.contains("PreCompact hook"),
        "not started by the guard: {:?}",
        done.history
    );
    assert_eq!(
        s.asked("SAY-BLOCKED"),
        1,
        "the prompt was not sent exactly once"
    );
    assert_eq!(s.boundaries(), 0, "Claude Code compacted although blocked");
    let rebuilt = s
        .env
        .transcript(&done.candidate.as_ref().unwrap().session_id);
    let text = fs::read_to_string(&rebuilt).unwrap();
    for carried in ["SAY-BLOCKED below the hard limit", "REPLY-BLOCKED"] {
        assert!(text.contains(carried), "{carried} not carried");
    }
    assert!(done.prompt_back.is_none(), "{:?}", done.prompt_back);
    eprintln!(
        "claude_window: the guard below the hard limit: {:?}",
        done.history
            .iter()
            .map(|t| format!("{:?}→{:?}: {}", t.from, t.to, t.note))
            .collect::<Vec<_>>()
    );
    s.tmux.wait_idle(TURN);
    thread::sleep(Duration::from_secs(1));
    let screen = s.screen();
    assert_eq!(Input::of_screen(&screen), Input::Idle, "{screen}");
    assert!(!screen.contains("Context limit reached"), "{screen}");
}

/// At the hard limit (177,000 of 177,000) the blocked prompt is not sent:
/// Claude Code says "Context limit reached", and after the switch the
/// prompt is back in the rebuilt session's input line, not sent.
fn the_guard_at_the_hard_limit_gives_the_prompt_back(bin: &Path) {
    let s = the_guard_blocks(bin, 177_000);
    s.tmux.type_line("SAY-BLOCKED at the hard limit");
    s.tmux.wait_screen("Claude Code's refusal", TURN, |sc| {
        sc.contains("Context limit reached")
    });
    let done = s.wait_status("the switch", |st| {
        st == Status::Activated || st.is_terminal()
    });
    assert_eq!(done.status, Status::Activated, "{done:?}");
    s.tmux
        .wait_screen("the blocked prompt back in the input line", TURN, |sc| {
            matches!(Input::of_screen(sc), Input::Draft(d)
                if d.contains("SAY-BLOCKED at the hard limit"))
        });
    assert_eq!(s.asked("SAY-BLOCKED"), 0, "the blocked prompt was sent");
}

/// What a person sees when the guard blocks depends on
/// where the window stands (docs/SPEC.md §10).
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_guard_below_and_at_the_hard_limit_through_the_interactive_cli() {
    let scenarios: [fn(&Path); 2] = [
        the_guard_below_the_hard_limit_lets_the_prompt_through,
        the_guard_at_the_hard_limit_gives_the_prompt_back,
    ];
    side_by_side(&claude_bin(), &scenarios);
}

/// After a compaction Claude Code 2.1.328 sends the
/// statusline a zeroed `current_usage` until the next reply (measured:
/// every field 0, for as long as the reply takes); ktr's segment then
/// shows what `ktr dirty` shows (`ktr ≈N%`, an estimate), not `ktr 0%`.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_statusline_after_a_compaction_shows_what_dirty_shows() {
    let s = Session::start_with(&claude_bin(), "", &["--model", "claude-sonnet-4-6"], None);
    s.say("SAY-ONE hello", "REPLY-ONE");
    s.api.set_usage(Some(190_000));
    s.say("SAY-TWO fill", "REPLY-TWO");
    s.api.set_usage(None);
    // The reply after the compaction takes a while: the zeroed window.
    s.api.set_turn_delay(Duration::from_secs(10));
    s.tmux.type_line("SAY-THREE after");
    s.wait_boundaries(1, "no compaction at 190k of 200k");
    let footer = |sc: &str| {
        sc.lines()
            .find(|l| l.contains(" · ktr "))
            .map(|l| l.trim().to_string())
            .unwrap_or_default()
    };
    let estimated = |sc: &str| -> Option<f64> {
        let f = footer(sc);
        let at = f.find("ktr ≈")? + "ktr ≈".len();
        f[at..].split('%').next()?.parse().ok()
    };
    s.tmux
        .wait_screen("ktr's estimate after the compaction", TURN, |sc| {
            estimated(sc).is_some()
        });
    let shown = estimated(&s.screen()).unwrap();
    let v = dirty(&s, &s.transcript());
    assert_eq!(v["window"]["used_source"], "estimate", "{v:#}");
    let percent = v["window"]["used_percent"].as_f64().unwrap();
    assert!(
        (shown - percent).abs() <= 1.0 && shown >= 1.0,
        "the statusline shows ≈{shown} %, dirty {percent} %"
    );
    s.api.set_turn_delay(Duration::ZERO);
    s.tmux
        .wait_screen("the reply after the compaction", TURN, |sc| {
            sc.contains("REPLY-THREE")
        });
    s.tmux.wait_screen("a measured figure again", TURN, |sc| {
        let f = footer(sc);
        f.contains("ktr ") && !f.contains("ktr ≈")
    });
}
