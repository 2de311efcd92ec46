//! The prompt the compaction guard blocked, put back after the switch
//! (SPEC §10), through the real interactive CLI: a collapsed paste
//! (≥ 4 lines, `[Pasted text #1 +N lines]` in the input line) comes back
//! so that the model receives its text once, in at most one
//! `<pasted_content>` wrapper, as on its first send. Also prints what
//! Claude Code 2.1.328 hands `UserPromptSubmit` and writes to the
//! transcript for a collapsed paste and for a pasted image (SPEC §10 says
//! what was measured). Ignored by default: they need the real CLI.

use std::fs;
use std::time::{Duration, Instant};

use crate::claude_window::{Session, TURN, the_guard_blocks};
use crate::support::claude::PANE;
use crate::support::claude_bin;
use crate::support::fake_api::last_user_text;
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::Status;
use ktr_pipeline::pane::Input;
use ktr_pipeline::prompt_back;

/// Five lines, pasted as one bracketed paste.
const PASTED: [&str; 5] = [
    "PASTE-L1 alpha",
    "PASTE-L2 beta",
    "PASTE-L3 gamma",
    "PASTE-L4 delta",
    "PASTE-L5 epsilon",
];

/// Paste `text` into the CLI's input line as a terminal does (bracketed).
fn paste(s: &Session, text: &str) {
    s.tmux.run(&["set-buffer", "-b", "t", "--", text]);
    s.tmux
        .run(&["paste-buffer", "-p", "-d", "-b", "t", "-t", PANE]);
}

/// What ktr-prompt kept of the session's prompt holding `needle` (`.last`,
/// or `.blocked` once the guard blocked it), as soon as it is there,
/// within `wait`.
fn kept_prompt(s: &Session, needle: &str, wait: Duration) -> Option<String> {
    let session = SessionId::parse(&s.id).unwrap();
    let dir = prompt_back::dir(&s.env.sandbox.state);
    let deadline = Instant::now() + wait;
    loop {
        for ext in ["blocked", "last"] {
            if let Ok(text) = fs::read_to_string(dir.join(format!("{session}.{ext}")))
                && text.contains(needle)
            {
                return Some(text);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The transcript's user record holding `needle` (Claude Code writes it
/// up to a second after the turn).
fn stored(s: &Session, needle: &str) -> String {
    let record = || {
        fs::read_to_string(s.transcript())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(r#""type":"user""#) && l.contains(needle))
            .collect::<Vec<_>>()
            .join("\n")
    };
    crate::support::wait_for(Duration::from_secs(10), || !record().is_empty());
    record()
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_collapsed_paste_blocked_at_the_hard_limit_reaches_the_model_once() {
    let s = the_guard_blocks(&claude_bin(), 177_000);
    s.tmux
        .run(&["send-keys", "-t", PANE, "-l", "SAY-BLOCKED typed first "]);
    paste(&s, &PASTED.join("\n"));
    s.tmux.wait_screen("the collapsed paste", TURN, |sc| {
        sc.contains("[Pasted text #1 +4 lines]")
    });
    s.tmux.run(&["send-keys", "-t", PANE, "Enter"]);
    let kept = kept_prompt(&s, "SAY-BLOCKED", TURN).expect("ktr-prompt kept nothing");
    eprintln!("paste_back: UserPromptSubmit's prompt as ktr kept it: {kept}");
    s.tmux.wait_screen("Claude Code's refusal", TURN, |sc| {
        sc.contains("Context limit reached")
    });
    eprintln!(
        "paste_back: the transcript's record: {}",
        stored(&s, "SAY-BLOCKED")
    );
    let done = s.wait_status("the switch", |st| {
        st == Status::Activated || st.is_terminal()
    });
    assert_eq!(done.status, Status::Activated, "{done:?}");
    // Back as one paste of five lines: Claude Code collapses it again.
    s.tmux
        .wait_screen("the prompt back in the input line", TURN, |sc| {
            matches!(Input::of_screen(sc), Input::Draft(d)
            if d.contains("SAY-BLOCKED typed first") || d.contains("[Pasted text #"))
        });
    eprintln!(
        "paste_back: the input line after the switch:\n{}",
        s.screen()
    );
    assert_eq!(s.asked("SAY-BLOCKED"), 0, "the blocked prompt was sent");
    s.tmux.run(&["send-keys", "-t", PANE, "Enter"]);
    let sent = s
        .api
        .wait_turn("SAY-BLOCKED", TURN)
        .expect("the prompt put back never reached the model");
    let text = last_user_text(sent.messages());
    eprintln!("paste_back: the model received: {text:?}");
    assert!(
        text.matches("<pasted_content").count() <= 1,
        "wrapped more than once: {text:?}"
    );
    assert!(!text.contains(r"<\/pasted_content"), "{text:?}");
    for line in PASTED.iter().chain(&["SAY-BLOCKED typed first"]) {
        assert_eq!(text.matches(line).count(), 1, "{line} in {text:?}");
    }
    let order: Vec<usize> = PASTED.iter().map(|l| text.find(l).unwrap()).collect();
    assert!(order.is_sorted(), "the lines out of order: {text:?}");
    assert_eq!(s.asked("SAY-BLOCKED"), 1, "sent more than once");
}

/// Measured, not a rule of ktr's: what a pasted image path becomes in the
/// hook's prompt and in the transcript.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn what_claude_code_stores_for_a_pasted_image() {
    let s = Session::start_with(
        &claude_bin(),
        "on_auto_compaction = \"rebuild\"",
        &["--model", "claude-sonnet-4-6"],
        None,
    );
    // A 1×1 PNG.
    let png = s.env.sandbox.work.join("dot.png");
    fs::write(
        &png,
        [
            0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0x49, 0x48, 0x44, 0x52,
            0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89, 0, 0, 0, 0x0d, 0x49,
            0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0, 0x05, 0, 0x01,
            0xff, 0x89, 0x99, 0x3d, 0x1d, 0, 0, 0, 0, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60,
            0x82,
        ],
    )
    .unwrap();
    s.tmux
        .run(&["send-keys", "-t", PANE, "-l", "SAY-ONE look at "]);
    paste(&s, &png.to_string_lossy());
    std::thread::sleep(Duration::from_secs(1));
    eprintln!("paste_back: the input line with the image:\n{}", s.screen());
    s.tmux.run(&["send-keys", "-t", PANE, "Enter"]);
    s.tmux
        .wait_screen("the reply", TURN, |sc| sc.contains("REPLY-ONE"));
    eprintln!(
        "paste_back: UserPromptSubmit's prompt as ktr kept it: {:?}",
        kept_prompt(&s, "SAY-ONE", Duration::from_secs(5))
    );
    eprintln!(
        "paste_back: the transcript's record: {}",
        stored(&s, "SAY-ONE")
    );
}
