//! A pending rebuild replaces the auto-compaction; a draft typed after the switch; `/compact` by hand.

use super::*;
use crate::support::claude::PANE;
use crate::support::claude_bin;
use crate::support::fake_api::{conversation, last_user_text};
use ktr_base::ids::OperationId;
use ktr_pipeline::operation::Status;
use ktr_pipeline::pane::Input;
use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// (b), then `ktr dirty` on the rebuilt session.
fn a_pending_rebuild_replaces_the_auto_compaction(bin: &Path) {
    let s = Session::start(
        bin,
        "advise_at_percent = 10\ncontext_window_tokens = 100000",
    );
    s.say("TOOL-TURN run it", "REPLY-TOOL");
    s.say("SAY-TWO 你好", "REPLY-TWO");
    s.api.set_usage(Some(999_000));
    s.say("SAY-THREE full", "REPLY-THREE");
    s.api.set_usage(None);
    // Requested after the reply: only the guard can start it now.
    let op = s.request();
    // Two lines, sent as a person pastes them (bracketed), then Enter.
    s.tmux.run(&["set-buffer", "-b", "t", "--", BLOCKED]);
    s.tmux
        .run(&["paste-buffer", "-p", "-d", "-b", "t", "-t", PANE]);
    thread::sleep(Duration::from_millis(300));
    s.tmux.run(&["send-keys", "-t", PANE, "Enter"]);
    let done = s.wait_status("the switch", |st| {
        st == Status::Activated || st.is_terminal()
    });
    assert_eq!(done.status, Status::Activated, "{done:?}");
    assert!(
        done.history
            .iter()
            .any(|t| t.note.contains("PreCompact hook")),
        "not started by the guard: {:?}",
        done.history
    );
    assert_eq!(
        s.boundaries(),
        0,
        "Claude Code compacted although ktr blocked it"
    );
    let candidate = done.candidate.as_ref().unwrap().session_id.clone();
    // Switched in place: the pane's Claude Code serves the candidate now
    // (ktr-ack's record of its last resume).
    let bindings = ktr_pipeline::binding::dir(s.store.dir());
    assert_eq!(
        ktr_pipeline::binding::of_pid(&bindings, s.tmux.pane_pid())
            .map(|b| b.session_id)
            .as_deref(),
        Some(candidate.as_str())
    );
    // Item 4: the blocked prompt is back in the new session's input line,
    // whole (both lines), not sent, with ktr's notice on the pane border.
    s.tmux
        .wait_screen("the blocked prompt back in the input line", TURN, |sc| {
            matches!(Input::of_screen(sc), Input::Draft(d)
                if d.contains("SAY-BLOCKED the prompt that triggers the compaction")
                    && d.contains("its second line"))
        });
    let notice = || {
        s.tmux
            .run(&["show-options", "-p", "-v", "-t", PANE, "pane-border-format"])
    };
    assert!(
        crate::support::wait_for(Duration::from_secs(10), || notice()
            .contains("your last prompt is back in the input line, not sent")),
        "no notice on the pane border: {:?}",
        notice()
    );
    thread::sleep(Duration::from_secs(1));
    assert_eq!(
        s.asked("SAY-BLOCKED"),
        0,
        "the blocked prompt was sent by itself"
    );
    let rebuilt = s.env.transcript(candidate.as_str());
    let text = fs::read_to_string(&rebuilt).unwrap();
    assert!(
        !text.contains("SAY-BLOCKED"),
        "the rebuilt session carries the blocked prompt too (it would be sent twice)"
    );
    let final_op = s
        .store
        .load(&OperationId::parse(done.id.as_str()).unwrap())
        .unwrap();
    assert!(
        final_op
            .history
            .last()
            .unwrap()
            .note
            .contains("is back in the input line"),
        "{:?}",
        final_op.history.last()
    );
    s.tmux.wait_idle(TURN);
    let before = dirty(&s, &rebuilt);
    assert_eq!(before["window"]["used_source"], "estimate", "{before:#}");
    assert_no_second_rebuild(&before, "before the first reply", 0);
    // The person presses Enter: it is answered, once.
    s.tmux.run(&["send-keys", "-t", PANE, "Enter"]);
    let blocked = s
        .api
        .wait_turn("SAY-BLOCKED", TURN)
        .expect("the blocked prompt reached the model after Enter");
    s.tmux
        .wait_screen("the blocked prompt's reply", TURN, |sc| {
            sc.contains("REPLY-BLOCKED")
        });
    s.tmux.wait_idle(TURN);
    let sent = conversation(&blocked);
    assert_eq!(sent.matches("SAY-BLOCKED").count(), 1, "{sent}");
    assert!(sent.contains("its second line"), "{sent}");
    assert!(!sent.contains("No response requested"), "{sent}");
    assert_eq!(s.asked("SAY-BLOCKED"), 1, "answered more than once");
    let shown = std::process::Command::new("tmux")
        .args([
            "-L",
            &s.tmux.server.socket,
            "show-options",
            "-p",
            "-v",
            "-t",
            PANE,
            "@ktr-notice",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&shown.stdout).trim().is_empty(),
        "the notice stayed up after the prompt was sent"
    );
    s.tmux.type_line("SAY-PROBE after the switch");
    let request = s
        .api
        .wait_turn("SAY-PROBE", TURN)
        .expect("the probe reached the model");
    s.tmux
        .wait_screen("the probe's reply", TURN, |sc| sc.contains("REPLY-PROBE"));
    s.tmux.wait_idle(TURN);
    // Claude Code writes its per-start attachments (and the second
    // prompt_snapshot) on its own schedule around the first request.
    let deadline = Instant::now() + TURN;
    while fs::read_to_string(&rebuilt)
        .unwrap_or_default()
        .matches("\"type\":\"prompt_snapshot\"")
        .count()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "Claude Code wrote no per-start attachments into the rebuilt session"
        );
        thread::sleep(Duration::from_millis(200));
    }
    // The probe's reply measured the rebuilt window (the fake API counts
    // its messages, per-start attachments included).
    let after = dirty(&s, &rebuilt);
    assert_eq!(after["window"]["used_source"], "usage", "{after:#}");
    // Two turns since the switch: the blocked prompt's and the probe's.
    assert_no_second_rebuild(&after, "after the first two replies", 2);
    assert!(
        after["per_start_bytes"].as_u64().unwrap() > 30_000,
        "{after:#}"
    );
    // And, with ktr-ack's receipt, it measured the fixed overhead.
    let w = &after["window"];
    let overhead = w["overhead_source"].as_str().unwrap();
    assert!(
        overhead.starts_with(&format!("measured after the rebuild {}", done.id)),
        "{overhead}"
    );
    eprintln!(
        "claude_window: rebuilt window used {} ({}), overhead {} ({overhead}), after a rebuild {}, frees {} %; context_tokens {:?}, estimated {:?}",
        w["used_tokens"],
        w["used_source"],
        w["overhead_tokens"],
        w["after_rebuild_tokens"],
        w["frees_percent"],
        s.store
            .load(&OperationId::parse(done.id.as_str()).unwrap())
            .unwrap()
            .context_tokens(),
        done.estimated_tokens,
    );
    let sent = conversation(&request);
    for carried in [
        "TOOL-TURN",
        "REPLY-TOOL",
        "SAY-TWO 你好",
        "REPLY-TWO",
        "SAY-THREE",
        "REPLY-THREE",
        "SAY-BLOCKED",
    ] {
        assert!(sent.contains(carried), "{carried} was not carried:\n{sent}");
    }
    assert!(
        !sent.contains("TOOL-OUTPUT-LINE"),
        "tool output reached the rebuilt window:\n{sent}"
    );
    let _ = op;
}

/// Item 4 through the collision protection: the person starts typing in
/// the new session right before ktr would paste the blocked prompt back
/// (activation paused there): ktr pastes nothing over their draft, keeps
/// the prompt and says on the pane border where its text is.
fn a_draft_typed_after_the_switch_is_not_pasted_over(bin: &Path) {
    let s = Session::start_env(
        bin,
        "advise_at_percent = 10\ncontext_window_tokens = 100000",
        &[],
        None,
        |env| {
            vec![
                ("KTR_TEST_PAUSE_AT".into(), "activate:prompt-back".into()),
                (
                    "KTR_TEST_PAUSE_FILE".into(),
                    env.sandbox.root().join("pause").display().to_string(),
                ),
            ]
        },
    );
    let pause = s.env.sandbox.root().join("pause");
    s.say("SAY-ONE hello", "REPLY-ONE");
    s.api.set_usage(Some(999_000));
    s.say("SAY-THREE full", "REPLY-THREE");
    s.api.set_usage(None);
    let op = s.request();
    s.tmux.type_line("SAY-BLOCKED kept while you type");
    assert!(
        crate::support::wait_for(TURN, || fs::read_to_string(&pause)
            .is_ok_and(|t| t.ends_with('\n'))),
        "activation never reached the paste:\n{}",
        s.screen()
    );
    assert_eq!(
        s.store
            .load(&OperationId::parse(op.id.as_str()).unwrap())
            .unwrap()
            .status,
        Status::Activated
    );
    s.tmux.wait_idle(TURN);
    s.tmux.run(&["send-keys", "-t", PANE, "-l", "my own draft"]);
    s.tmux.wait_screen("the person's draft", TURN, |sc| {
        Input::of_screen(sc) == Input::Draft("my own draft".into())
    });
    fs::remove_file(&pause).unwrap();
    let noted = || {
        s.store
            .load(&OperationId::parse(op.id.as_str()).unwrap())
            .unwrap()
            .history
            .last()
            .unwrap()
            .note
            .clone()
    };
    assert!(
        crate::support::wait_for(TURN, || noted().contains("was not put back")),
        "{}",
        noted()
    );
    let note = noted();
    assert!(note.contains("characters typed meanwhile"), "{note}");
    let kept = s
        .store
        .dir()
        .join("prompts")
        .join(format!("{}.blocked", s.id));
    assert!(note.contains(&kept.display().to_string()), "{note}");
    let text = fs::read_to_string(&kept).unwrap();
    assert!(text.contains("SAY-BLOCKED kept while you type"), "{text}");
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        Input::of_screen(&s.screen()),
        Input::Draft("my own draft".into()),
        "the draft was changed"
    );
    let border = s
        .tmux
        .run(&["show-options", "-p", "-v", "-t", PANE, "pane-border-format"]);
    assert!(
        border.contains("your last prompt was not put back"),
        "{border}"
    );
    assert!(
        !s.api
            .turns()
            .iter()
            .any(|t| last_user_text(t.messages()).contains("SAY-BLOCKED")),
        "the blocked prompt was sent"
    );
}

/// (d) then (c).
fn manual_compact_is_never_blocked_and_advise_lets_it_compact(bin: &Path) {
    let s = Session::start(bin, "on_auto_compaction = \"rebuild\"");
    s.say("SAY-ONE hello", "REPLY-ONE");
    s.tmux.type_line("/compact");
    s.wait_boundaries(1, "/compact was blocked");
    assert!(
        s.store.latest().unwrap().is_none(),
        "a manual /compact started a rebuild"
    );
    // (c): the default "advise".
    let text = fs::read_to_string(&s.config)
        .unwrap()
        .replace("on_auto_compaction = \"rebuild\"", "");
    fs::write(&s.config, text).unwrap();
    s.tmux.wait_idle(TURN);
    s.api.set_usage(Some(999_000));
    s.say("SAY-FULL almost full", "REPLY-FULL");
    s.api.set_usage(None);
    s.say("SAY-AFTER next", "REPLY-AFTER");
    s.wait_boundaries(2, "Claude Code did not auto-compact");
    s.tmux.wait_screen("the advise line", TURN, |sc| {
        sc.contains("compacted this window (lossy)")
    });
    assert!(
        s.store.latest().unwrap().is_none(),
        "advise must not rebuild"
    );
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_window_through_the_interactive_cli() {
    let bin = claude_bin();
    let scenarios: [fn(&Path); 4] = [
        advice_once_per_band_and_the_statusline,
        a_pending_rebuild_replaces_the_auto_compaction,
        manual_compact_is_never_blocked_and_advise_lets_it_compact,
        a_draft_typed_after_the_switch_is_not_pasted_over,
    ];
    side_by_side(&bin, &scenarios);
}
