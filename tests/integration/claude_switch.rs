//! `/resume <id>` typed into the running interactive Claude Code: what the
//! real CLI does with it (issue 24), measured, and the in-place switch ktr
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

    /// Type `keys` literally and Enter, then sample the screen for `for_`:
    /// prints each distinct screen's tail with its time.
    fn type_and_watch(&self, what: &str, keys: &str, for_: Duration) {
        let before = self.hooks().len();
        let pid = self.tmux.pane_pid();
        let started = Instant::now();
        self.tmux.type_line(keys);
        let mut last = String::new();
        while started.elapsed() < for_ {
            let screen = self.tmux.screen_of(PANE);
            if screen != last {
                let tail: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
                let tail = tail[tail.len().saturating_sub(14)..].join("\n");
                eprintln!(
                    "--- {what} +{:.2} s:\n{tail}",
                    started.elapsed().as_secs_f64()
                );
                last = screen;
            }
            thread::sleep(Duration::from_millis(100));
        }
        let hooks = self.hooks();
        for h in &hooks[before..] {
            eprintln!(
                "hook {what}: {} session {} source {} reason {} prompt {}",
                h["hook_event_name"], h["session_id"], h["source"], h["reason"], h["prompt"]
            );
        }
        eprintln!("{what}: pane pid {} -> {}", pid, self.tmux.pane_pid());
    }
}

/// Not a check: prints what 2.1.328 does with `/resume <id>` in several
/// situations (the figures in docs/SPEC.md §12 come from here). Run with
/// `cargo test --test integration claude_switch::measure -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement; needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn measure_resume_in_place() {
    let bin = claude_bin();
    let p = Probe::start(&bin);
    p.tmux.type_line("MARK-A1 first");
    p.tmux
        .wait_screen("the reply", TURN, |s| s.contains("REPLY-OK"));
    p.tmux.wait_idle(TURN);
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

    p.type_and_watch("same dir", &format!("/resume {b}"), Duration::from_secs(4));
    p.tmux.type_line("MARK-B2 after");
    let sent = p.api.wait_turn("MARK-B2", TURN).expect("B2 sent");
    eprintln!("B2 carries: {}", conversation(&sent).replace('\n', " | "));
    p.tmux.wait_idle(TURN);

    p.type_and_watch("other dir", &format!("/resume {c}"), Duration::from_secs(4));
    p.tmux.run(&["send-keys", "-t", PANE, "Escape"]);
    thread::sleep(Duration::from_millis(500));
    let unknown = uuid::Uuid::new_v4().to_string();
    p.type_and_watch(
        "unknown id",
        &format!("/resume {unknown}"),
        Duration::from_secs(3),
    );
    p.tmux.run(&["send-keys", "-t", PANE, "Escape"]);
    thread::sleep(Duration::from_millis(500));

    // A busy CLI: the reply is held back 4 s while /resume is typed.
    p.api.set_turn_delay(Duration::from_secs(4));
    p.tmux.type_line("MARK-A2 slow");
    thread::sleep(Duration::from_millis(800));
    p.type_and_watch("busy", &format!("/resume {b}"), Duration::from_secs(7));
    p.api.set_turn_delay(Duration::ZERO);
    p.tmux.wait_idle(TURN);
    // Keys right after the line: `/resume <id>xyz`.
    p.type_and_watch("suffix", &format!("/resume {b}xyz"), Duration::from_secs(3));
}
