//! A switch or rollback line that collides with typing, an unhealthy in-place switch.

use super::*;
use crate::support::OptionOrPanic;
use crate::support::fake_api::conversation;
use crate::support::fake_api::{Logged, all_strings};
use crate::support::{assert_in_order, claude, claude_bin};
use ktr_pipeline::operation::Status;
use ktr_pipeline::pane::Input;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

/// A stage's test pause (`KTR_TEST_PAUSE_AT`): the stage writes the file
/// and waits until the test removes it.
struct Pause {
    file: PathBuf,
    at: &'static str,
}

impl Pause {
    fn new(at: &'static str) -> Pause {
        let name = format!("ktr-pause-{}-{}", at.replace(':', "-"), std::process::id());
        Pause {
            file: std::env::temp_dir().join(name),
            at,
        }
    }

    /// The variables that make the stage stop there.
    fn env(&self) -> [(&'static str, String); 2] {
        [
            ("KTR_TEST_PAUSE_AT", self.at.to_string()),
            ("KTR_TEST_PAUSE_FILE", self.file.display().to_string()),
        ]
    }

    #[track_caller]
    fn reached(&self, lp: &Loop) {
        assert!(
            crate::support::wait_for(PIPELINE, || self.file.exists()),
            "{} never reached its pause\n{}",
            self.at,
            lp.diagnosis()
        );
    }

    fn release(&self) {
        fs::remove_file(&self.file).unwrap();
    }
}

/// At `pause` (right before a stage types its `/resume` line) the person
/// types `draft`: Claude Code submits their words with ktr's line after
/// them, ktr-prompt refuses that as a collision, Claude Code gives the
/// whole text back and ktr takes its own line out again. The operation
/// waits (`waits_as`), the words are in the input line as typed, nothing
/// reached the model, the pane kept its process and still serves `serves`.
/// Then the person sends it: answered once, whole, and the stage runs again.
#[track_caller]
fn collide(lp: &Loop, pause: &Pause, draft: &str, waits_as: Status, serves: &str) -> Logged {
    let pane = lp.tmux.pane_pid();
    pause.reached(lp);
    lp.tmux.run(&["send-keys", "-t", claude::PANE, "-l", draft]);
    lp.wait_input(&Input::Draft(draft.into()));
    pause.release();
    let op = lp.wait_status("the switch to be called off", |s| {
        s == waits_as || s.is_terminal()
    });
    assert_eq!(op.status, waits_as, "{}", notes(&op));
    assert!(
        notes(&op).contains("collided with keys typed in the same instant")
            && notes(&op).contains(&format!("leaving the person's {} characters", draft.len())),
        "{}",
        notes(&op)
    );
    assert!(
        op.blocked_prompts
            .iter()
            .any(|p| p.text == draft && p.collided_with.is_some()),
        "{:?}",
        op.blocked_prompts
    );
    lp.wait_input(&Input::Draft(draft.into()));
    assert!(
        lp.api.wait_turn(draft, Duration::ZERO).is_none(),
        "the collided prompt reached the model"
    );
    assert_eq!(lp.tmux.pane_pid(), pane);
    lp.assert_pane_serves(serves);
    lp.tmux.run(&["send-keys", "-t", claude::PANE, "Enter"]);
    let sent = lp
        .api
        .wait_turn(draft, TURN)
        .or_panic(|| format!("the draft was never sent\n{}", lp.diagnosis()));
    assert_eq!(
        crate::support::fake_api::last_user_text(sent.messages()),
        draft,
        "sent whole and alone"
    );
    pause.reached(lp);
    pause.release();
    sent
}

/// How many requests carried `draft` as their newest prompt.
fn times_sent(lp: &Loop, draft: &str) -> usize {
    lp.api
        .turns()
        .iter()
        .filter(|r| crate::support::fake_api::last_user_text(r.messages()).contains(draft))
        .count()
}

/// ktr's `/resume <id>` line meets keys a person typed in the same
/// instant: the person's `my draft words` land after
/// ktr saw the empty input line and before its line (the test pause
/// `activate:typing`); [`collide`]: the operation waits (`pending`), the
/// words come back whole; sent, they are answered in the old session and
/// the next Stop switches in place.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_switch_line_that_collides_with_typing_gives_the_text_back_and_waits() {
    let bin = claude_bin();
    let _serial = serial();
    let pause = Pause::new("activate:typing");
    let env = pause.env();
    let lp = Loop::start(&bin, &[(env[0].0, &env[0].1), (env[1].0, &env[1].1)]);
    let pane = lp.tmux.pane_pid();
    lp.talk_until_the_request();
    let draft = "my draft words";
    collide(&lp, &pause, draft, Status::Pending, &lp.source_id);
    let op = lp.wait_activated();
    assert_eq!(lp.tmux.pane_pid(), pane);
    lp.assert_pane_serves(op.candidate.as_ref().unwrap().session_id.as_str());
    assert_eq!(
        times_sent(&lp, draft),
        1,
        "the draft was not sent exactly once"
    );
}

/// An in-place switch that is not healthy goes back in place: the
/// candidate's resume is judged unhealthy (the debug-only
/// `KTR_TEST_UNHEALTHY_SWITCH`: the real CLI resumes a valid candidate
/// healthily), and ktr types `/resume <old-id>` into the same Claude Code.
/// The operation ends `rolled_back` with the reason, the pane keeps its
/// process, which serves the old session again, and the next prompt goes
/// to the old session with its whole history.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn an_unhealthy_in_place_switch_goes_back_in_place() {
    let bin = claude_bin();
    let _serial = serial();
    let lp = Loop::start(&bin, &[("KTR_TEST_UNHEALTHY_SWITCH", "1")]);
    let pane = lp.tmux.pane_pid();
    lp.talk_until_the_request();
    let op = lp.wait_status("the switch and the way back", Status::is_terminal);
    assert_eq!(
        op.status,
        Status::RolledBack,
        "{}
{}",
        notes(&op),
        lp.diagnosis()
    );
    assert_eq!(op.rollback_ok, Some(true));
    assert!(
        notes(&op).contains("judged unhealthy by the test hook")
            && notes(&op).contains(&format!(
                "old session resumed: session {} in place",
                lp.source_id
            )),
        "{}",
        notes(&op)
    );
    assert_eq!(
        lp.tmux.pane_pid(),
        pane,
        "the pane was respawned\n{}",
        notes(&op)
    );
    lp.assert_pane_serves(&lp.source_id);
    let back = lp.probe(
        "USER-L6 PROBE-BACK 回来了吗？",
        "PROBE-BACK",
        "ASSISTANT-L6",
    );
    let mut everything = String::new();
    all_strings(&back.body["messages"], &mut everything);
    assert!(
        everything.contains("TOOL-OUTPUT-LINE"),
        "the next prompt did not go to the old session (no tool results)"
    );
    assert_in_order(
        &conversation(&back),
        &["USER-L1", "ASSISTANT-L1", "ASSISTANT-L3", "PROBE-BACK"],
    );
}

/// A rollback's `/resume <old-id>` line meets keys a person typed in the
/// same instant (the same protections as activation),
/// [`collide`] at `rollback:typing`: the rollback waits
/// (`rollback_pending`); sent, the words are answered in the rebuilt
/// session, and the next Stop rolls back in place, to a restore session
/// that carries them.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_rollback_line_that_collides_with_typing_gives_the_text_back_and_waits() {
    let bin = claude_bin();
    let _serial = serial();
    let pause = Pause::new("rollback:typing");
    let env = pause.env();
    let lp = Loop::start(&bin, &[(env[0].0, &env[0].1), (env[1].0, &env[1].1)]);
    let pane = lp.tmux.pane_pid();
    lp.talk_until_the_request();
    let op = lp.wait_activated();
    let new_id = op.candidate.clone().unwrap().session_id.to_string();
    lp.ask_rollback(&op);
    let draft = "my rollback draft";
    let sent = collide(&lp, &pause, draft, Status::RollbackPending, &new_id);
    let mut everything = String::new();
    all_strings(&sent.body["messages"], &mut everything);
    assert!(
        !everything.contains("TOOL-OUTPUT-LINE"),
        "the draft was not answered in the rebuilt session"
    );
    let op = lp.wait_status("the rollback to finish", Status::is_terminal);
    assert_eq!(op.status, Status::RolledBack, "{}", notes(&op));
    assert_eq!(lp.tmux.pane_pid(), pane);
    // The request and the draft were said in the rebuilt session: they
    // came along in the restore session.
    let restore = op.restore.clone().expect("a restore session");
    lp.assert_pane_serves(&restore.session_id);
    assert_eq!(
        times_sent(&lp, draft),
        1,
        "the draft was not sent exactly once"
    );
}
