//! `/resume <id>` typed into the running interactive Claude Code: what the
//! real CLI does with it, measured, and the in-place switch ktr
//! builds on it.
//!
//! Ignored by default: they need the real CLI (`KTR_CLAUDE_BIN`).

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::claude::{ClaudeEnv, PANE, Tmux};
use crate::support::claude_bin;
use crate::support::fake_api::{FakeApi, Rule, conversation, text};
use serde_json::{Value, json};

/// How long a turn of the CLI may take on a busy two-core machine.
const TURN: Duration = Duration::from_secs(60);

/// A CLI in tmux whose hooks log every `SessionStart`, `SessionEnd` and
/// `UserPromptSubmit` input to `hooks.log` (one JSON object a line).
struct Probe {
    tmux: Tmux,
    api: FakeApi,
    env: ClaudeEnv,
    log: std::path::PathBuf,
}

impl Probe {
    fn start(bin: &Path) -> Probe {
        let api = FakeApi::start(vec![Rule::new("MARK-", vec![vec![text("REPLY-OK")]])]);
        let env = ClaudeEnv::new(bin, &api);
        env.prepare_interactive(&[]);
        let log = env.sandbox.root().join("hooks.log");
        let logging = json!([{"hooks": [{"type": "command",
            "command": format!("cat >> {0}; echo >> {0}", log.display())}]}]);
        let path = env.sandbox.home.join(".claude/settings.json");
        let mut settings: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        for event in ["SessionStart", "SessionEnd", "UserPromptSubmit"] {
            settings["hooks"][event] = logging.clone();
        }
        fs::write(&path, settings.to_string()).unwrap();
        let tmux = Tmux::start(&env, &[]);
        tmux.wait_idle(TURN);
        Probe {
            tmux,
            api,
            env,
            log,
        }
    }

    fn hooks(&self) -> Vec<Value> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Type `keys` literally and Enter, then sample the screen for `for_`
    /// (each distinct screen's tail printed with its time). Returns the
    /// hooks that fired meanwhile and every screen seen.
    fn type_and_watch(&self, what: &str, keys: &str, for_: Duration) -> (Vec<Value>, String) {
        let before = self.hooks().len();
        let pid = self.tmux.pane_pid();
        let started = Instant::now();
        self.tmux.type_line(keys);
        let (mut last, mut screens) = (String::new(), String::new());
        while started.elapsed() < for_ {
            let screen = self.tmux.screen_of(PANE);
            if screen != last {
                let tail: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
                let tail = tail[tail.len().saturating_sub(14)..].join("\n");
                eprintln!(
                    "--- {what} +{:.2} s:\n{tail}",
                    started.elapsed().as_secs_f64()
                );
                screens.push_str(&screen);
                last = screen;
            }
            thread::sleep(Duration::from_millis(100));
        }
        let hooks = self.hooks().split_off(before);
        for h in &hooks {
            eprintln!(
                "hook {what}: {} session {} source {} reason {} prompt {}",
                h["hook_event_name"], h["session_id"], h["source"], h["reason"], h["prompt"]
            );
        }
        assert_eq!(self.tmux.pane_pid(), pid, "{what}: the process changed");
        (hooks, screens)
    }
}

/// The events of `hooks` as `(event, session, source or reason)`.
fn events(hooks: &[Value]) -> Vec<(String, String, String)> {
    hooks
        .iter()
        .map(|h| {
            let detail = h["source"].as_str().or(h["reason"].as_str()).unwrap_or("");
            (
                h["hook_event_name"].as_str().unwrap_or("").to_string(),
                h["session_id"].as_str().unwrap_or("").to_string(),
                detail.to_string(),
            )
        })
        .collect()
}

fn event(name: &str, session: &str, detail: &str) -> (String, String, String) {
    (name.into(), session.into(), detail.into())
}

/// What 2.1.328 does with `/resume <id>` typed into its input line (the
/// figures in docs/SPEC.md §12 come from here; it prints each screen): the
/// same process switches to a session of the same project (`SessionEnd`
/// resume, `SessionStart` resume, no `UserPromptSubmit`, the next request
/// carries that session's history only); a session of another directory
/// and an unknown id are "not found" and switch nothing; typed during a
/// turn it is queued and runs after the reply; keys right after the line
/// become part of the id. `cargo test --test integration
/// claude_switch::what_resume -- --ignored --nocapture`.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn what_resume_typed_into_the_running_cli_does() {
    let bin = claude_bin();
    let p = Probe::start(&bin);
    p.tmux.type_line("MARK-A1 first");
    p.tmux
        .wait_screen("the reply", TURN, |s| s.contains("REPLY-OK"));
    p.tmux.wait_idle(TURN);
    let a = p.hooks()[0]["session_id"].as_str().unwrap().to_string();
    // Session B of the same directory, session C of another one.
    let b = uuid::Uuid::new_v4().to_string();
    let run = p
        .env
        .run(&["-p", "--session-id", &b, "MARK-B1 other"], TURN);
    assert!(run.status.success(), "{}", run.stderr);
    let elsewhere = p.env.sandbox.root().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    let c = uuid::Uuid::new_v4().to_string();
    let out = p
        .env
        .command(&["-p", "--session-id", &c, "MARK-C1 far"])
        .current_dir(&elsewhere)
        .output()
        .unwrap();
    assert!(out.status.success());

    let (hooks, _) = p.type_and_watch("same dir", &format!("/resume {b}"), Duration::from_secs(4));
    assert_eq!(
        events(&hooks),
        [
            event("SessionEnd", &a, "resume"),
            event("SessionStart", &b, "resume")
        ]
    );
    p.tmux.type_line("MARK-B2 after");
    let sent = p.api.wait_turn("MARK-B2", TURN).expect("B2 sent");
    let carried = conversation(&sent);
    assert!(
        carried.contains("MARK-B1") && !carried.contains("MARK-A1"),
        "{carried}"
    );
    p.tmux.wait_idle(TURN);

    let (hooks, screens) =
        p.type_and_watch("other dir", &format!("/resume {c}"), Duration::from_secs(3));
    assert!(events(&hooks).is_empty(), "{hooks:?}");
    assert!(screens.contains(&format!("Session {c} was not found.")));
    let unknown = uuid::Uuid::new_v4().to_string();
    let (hooks, screens) = p.type_and_watch(
        "unknown id",
        &format!("/resume {unknown}"),
        Duration::from_secs(3),
    );
    assert!(events(&hooks).is_empty(), "{hooks:?}");
    assert!(screens.contains(&format!("Session {unknown} was not found.")));

    // A busy CLI: the reply is held back 4 s while /resume is typed.
    p.api.set_turn_delay(Duration::from_secs(4));
    p.tmux.type_line("MARK-A2 slow");
    thread::sleep(Duration::from_millis(800));
    let (hooks, screens) =
        p.type_and_watch("busy", &format!("/resume {b}"), Duration::from_secs(7));
    p.api.set_turn_delay(Duration::ZERO);
    assert!(screens.contains("Queued"), "not queued");
    let started: Vec<_> = events(&hooks)
        .into_iter()
        .filter(|e| e.0 == "SessionStart")
        .collect();
    assert_eq!(
        started,
        [event("SessionStart", &b, "resume")],
        "run after the reply"
    );
    p.tmux.wait_idle(TURN);
    // Keys typed while the resume loads (one every 40 ms from the Enter):
    // what the input line holds afterwards (printed, for SPEC §12).
    for delay_ms in [0u64, 100, 200, 300] {
        p.tmux.type_line(&format!("/resume {a}"));
        thread::sleep(Duration::from_millis(delay_ms));
        for c in "keys1234".chars() {
            p.tmux.run(&["send-keys", "-t", PANE, "-l", &c.to_string()]);
            thread::sleep(Duration::from_millis(40));
        }
        thread::sleep(Duration::from_secs(2));
        let left = ktr_pipeline::pane::Input::of_screen(&p.tmux.screen_of(PANE));
        eprintln!(
            "keys typed {delay_ms} ms after the /resume Enter: the input line holds {left:?}"
        );
        p.tmux.run(&["send-keys", "-t", PANE, "-N", "20", "BSpace"]);
        thread::sleep(Duration::from_millis(300));
    }
    // Keys right after the line: `/resume <id>xyz`.
    let (hooks, screens) =
        p.type_and_watch("suffix", &format!("/resume {b}xyz"), Duration::from_secs(3));
    assert!(events(&hooks).is_empty(), "{hooks:?}");
    assert!(screens.contains(&format!("Session {b}xyz was not found.")));
}
