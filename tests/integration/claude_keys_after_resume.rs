//! When Claude Code 2.1.328 takes keys again after `/resume <id>` (SPEC
//! §12): the key keeper's popup may close only once it does. Measured with
//! the real CLI in tmux, without ktr: `/resume` and Enter typed as ktr
//! types them, then one key every few milliseconds, each followed by a
//! look at the screen. The keys that reached the input line are a suffix of
//! those sent; the first of them is when Claude Code took keys again,
//! compared with when the resumed conversation was first drawn. Ignored by
//! default (the real CLI); prints what it measured and fails when a key
//! sent after the resumed conversation was drawn was dropped (measured:
//! Claude Code takes keys again 0.15–0.28 s after the Enter, before it
//! draws the resumed conversation at 0.17–0.37 s).

use std::time::{Duration, Instant};

use crate::support::claude::{ClaudeEnv, PANE, Tmux};
use crate::support::fake_api::{FakeApi, Rule, text};
use ktr_pipeline::pane::Input;

/// How long the keys are sent after the Enter.
const SENDING: Duration = Duration::from_secs(3);

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN) and tmux"]
fn claude_code_takes_keys_again_before_it_draws_the_resumed_session() {
    let bin = crate::support::claude_bin();
    let rounds: usize = std::env::var("KTR_RESUME_KEYS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut late = Vec::new();
    for round in 0..rounds {
        // A fresh CLI each round: one exchange, then another session on
        // screen (`/clear`), so that the resumed one shows anew.
        let api = FakeApi::start(vec![Rule::new("M-ONE", vec![vec![text("M-R-ONE done.")]])]);
        let env = ClaudeEnv::new(&bin, &api);
        env.prepare_interactive(&[]);
        let first = uuid::Uuid::new_v4().to_string();
        let tmux = Tmux::start(&env, &["--session-id", &first]);
        tmux.wait_idle(Duration::from_secs(90));
        tmux.type_line("M-ONE hello");
        tmux.wait_screen("the reply", Duration::from_secs(90), |s| {
            s.contains("M-R-ONE")
        });
        tmux.wait_idle(Duration::from_secs(90));
        tmux.type_line("/clear");
        tmux.wait_screen("the cleared screen", Duration::from_secs(90), |s| {
            !s.contains("M-R-ONE") && Input::of_screen(s) == Input::Idle
        });
        std::thread::sleep(Duration::from_millis(500));
        let line = format!("/resume {first}");
        tmux.run(&[
            "send-keys",
            "-t",
            PANE,
            "-l",
            &line,
            ";",
            "send-keys",
            "-t",
            PANE,
            "Enter",
        ]);
        let enter = Instant::now();
        let letters: Vec<char> = ('a'..='z').collect();
        let mut sent = String::new();
        // (ms after the Enter, what the screen showed right after the key).
        let mut looks: Vec<(u128, usize, bool, Input)> = Vec::new();
        while enter.elapsed() < SENDING {
            let c = letters[sent.len() % letters.len()];
            let at = enter.elapsed().as_millis();
            tmux.run(&["send-keys", "-t", PANE, "-l", &c.to_string()]);
            sent.push(c);
            let screen = tmux.screen_of(PANE);
            looks.push((
                at,
                sent.len(),
                screen.contains("M-R-ONE"),
                Input::of_screen(&screen),
            ));
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(500));
        let Input::Draft(kept) = Input::of_screen(&tmux.screen_of(PANE)) else {
            panic!("round {round}: no key reached the input line");
        };
        let kept = kept.replace('\n', "");
        assert!(
            sent.ends_with(&kept),
            "round {round}: {kept:?} is not a suffix of {sent:?}"
        );
        let first_kept = sent.len() - kept.len();
        let key_at = |n: usize| looks.iter().find(|l| l.1 == n + 1).map_or(0, |l| l.0);
        // The resumed conversation drawn, then its input box empty, or
        // holding only keys sent after it was drawn.
        let drawn = looks.iter().find(|l| l.2).map(|l| (l.0, l.1));
        let empty_box = looks
            .iter()
            .find(|l| l.2 && matches!(&l.3, Input::Idle))
            .map(|l| (l.0, l.1));
        eprintln!(
            "resume_keys: round {round}: {} keys sent over {} ms; the first kept was sent at +{} ms (#{first_kept}); the resumed conversation was first seen at {:?} (ms, keys sent), its empty input box at {:?}",
            sent.len(),
            SENDING.as_millis(),
            key_at(first_kept),
            drawn,
            empty_box
        );
        match drawn {
            Some((_, n)) if first_kept > n => late.push(format!(
                "round {round}: keys sent after the resumed conversation was drawn (key #{n}) were dropped up to #{first_kept}"
            )),
            None => late.push(format!("round {round}: the resumed conversation never showed")),
            Some(_) => {}
        }
    }
    assert!(late.is_empty(), "{}", late.join("\n"));
}
