//! A compaction undone, through the real interactive Claude Code CLI
//! with the fake Messages API: three turns, `/compact` typed in
//! the tmux pane, then the next reply's Stop hook offers the three turns
//! back (once); `ktr plan` names the compaction it undoes; a REBUILD
//! carries them, and the model's next request after the switch holds the
//! pre-compaction turns word for word and not Claude Code's summary.
//!
//! Ignored by default: it needs the real CLI (`KTR_CLAUDE_BIN`).

use crate::claude_window::{Session, TURN, dirty, stop_lines};
use crate::support::claude_bin;
use crate::support::fake_api::conversation;
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::Status;

/// The turns before the compaction, as typed (and the replies the fake
/// model gives them).
const BEFORE: [(&str, &str); 3] = [
    ("SAY-ONE the first words before the compaction", "REPLY-ONE"),
    ("SAY-TWO 你好, the second words", "REPLY-TWO"),
    ("SAY-THREE the third words", "REPLY-THREE"),
];

/// What Claude Code 2.1.328 puts before its summary.
const SUMMARY: &str = "This session is being continued from a previous conversation";

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_compact_is_offered_back_and_a_rebuild_restores_the_turns_verbatim() {
    let bin = claude_bin();
    let s = Session::start_with(&bin, "", &[], None);
    for (said, reply) in BEFORE {
        s.say(said, reply);
    }
    s.tmux.type_line("/compact");
    s.wait_boundaries(1, "/compact did not compact");
    s.tmux.wait_idle(TURN);
    s.say("SAY-AFTER the first words after it", "REPLY-AFTER");
    // Claude Code really compacted: the model was sent the summary, not
    // the first words.
    let after = s
        .api
        .wait_turn("SAY-AFTER", TURN)
        .expect("the prompt after /compact reached the model");
    let sent = conversation(&after);
    assert!(sent.contains(SUMMARY), "no summary sent:\n{sent}");
    assert!(!sent.contains(BEFORE[0].0), "not compacted:\n{sent}");
    // The next reply's Stop hook offers the three turns back.
    let offer = "ktr: 3 turns from before Claude Code's last compaction are only in its summary now; a rebuild restores them word for word at ≈ ";
    let transcript = s.transcript();
    let deadline = std::time::Instant::now() + TURN;
    while !stop_lines(&transcript).iter().any(|l| l.starts_with(offer)) {
        assert!(
            std::time::Instant::now() < deadline,
            "no offer; the Stop hooks said {:?}\nscreen:\n{}",
            stop_lines(&transcript),
            s.screen()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // `ktr dirty` says the same; `ktr plan` names the compaction it undoes.
    let d = dirty(&s, &transcript);
    assert_eq!(d["window"]["summarised_turns"], 3, "{d:#}");
    assert_eq!(d["should_rebuild"], true, "{d:#}");
    let out = s.env.sandbox.run("plan", Some(&transcript), &["--json"]);
    let plan: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("ktr plan --json: {e}\n{}{}", out.stdout, out.stderr));
    let undone = &plan["compactions_undone"];
    assert_eq!(undone.as_array().map(Vec::len), Some(1), "{plan:#}");
    assert_eq!(undone[0]["turns_before"], 3, "{plan:#}");
    assert_eq!(undone[0]["turns_restored"], 3, "{plan:#}");
    // Once per boundary: the next reply offers nothing again.
    s.say("SAY-72 one more", "REPLY-72");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let offers = stop_lines(&transcript)
        .iter()
        .filter(|l| l.contains("only in its summary now"))
        .count();
    assert_eq!(offers, 1, "{:?}", stop_lines(&transcript));

    // The person says REBUILD; the next Stop starts it and the pane is
    // switched to the rebuilt session.
    let op = s
        .store
        .request(
            "the offer after /compact",
            "REBUILD",
            Some(&SessionId::parse(&s.id).unwrap()),
        )
        .unwrap();
    s.say("SAY-73 rebuild it", "REPLY-73");
    let done = s.wait_status("the switch", |st| {
        st == Status::Activated || st.is_terminal()
    });
    assert_eq!(done.status, Status::Activated, "{done:?}");
    assert_eq!(done.id, op.id);
    s.tmux.wait_idle(TURN);
    s.tmux.type_line("SAY-PROBE after the rebuild");
    let request = s
        .api
        .wait_turn("SAY-PROBE", TURN)
        .expect("the probe reached the model");
    let sent = conversation(&request);
    for (said, reply) in BEFORE {
        assert!(sent.contains(said), "{said:?} was not restored:\n{sent}");
        assert!(sent.contains(reply), "{reply:?} was not restored:\n{sent}");
    }
    assert!(
        !sent.contains(SUMMARY),
        "Claude Code's summary is still in the window:\n{sent}"
    );
    eprintln!(
        "claude_compaction: offer {:?}; plan carries {} of {} turns, {} summary dropped",
        stop_lines(&transcript)
            .iter()
            .find(|l| l.starts_with(offer)),
        plan["selected_turns"],
        plan["source_turns"],
        plan["compact_summaries_dropped"]
    );
}
