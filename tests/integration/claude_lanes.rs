//! Several sessions at once through the real interactive Claude Code CLI:
//! two Claude Codes, each with its own HOME, project and config (its
//! target a pane of one private tmux server), sharing one state dir. Both
//! ask for a rebuild at the same moment; each switches in place into its
//! own candidate, the pane processes unchanged, and each one's next request
//! carries its own conversation, not the other's. Then one rolls back (in
//! place): the other's operation, pane and conversation stay as they are.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::claude_turns::{config_text_for, install};
use crate::support::claude::{ClaudeEnv, PANE, Tmux};
use crate::support::fake_api::{FakeApi, Rule, message_texts, text};
use ktr_base::ids::OperationId;
use ktr_pipeline::operation::{Operation, Status, Store};

/// The second Claude Code's pane (a window of the same server).
const PANE_B: &str = "cc:1.0";
/// How long a rebuild may take on a busy two-core machine.
const SETTLE: Duration = Duration::from_secs(180);

/// One Claude Code session: its installation, config and session id.
struct One {
    env: ClaudeEnv,
    config: PathBuf,
    session: String,
    pane: &'static str,
    tag: &'static str,
}

impl One {
    fn new(
        bin: &Path,
        api: &FakeApi,
        socket: &str,
        state: Option<&Path>,
        pane: &'static str,
        tag: &'static str,
    ) -> One {
        let mut env = ClaudeEnv::new(bin, api);
        env.extra_env
            .push(("KTR_TMUX_SOCKET".into(), socket.to_string()));
        let root = env.sandbox.root().canonicalize().unwrap();
        let state = state.map_or_else(|| root.join("state"), Path::to_path_buf);
        let config = root.join("config.toml");
        fs::write(&config, config_text_for(&env, &state, pane)).unwrap();
        install(&env, &config);
        env.prepare_interactive(&[]);
        One {
            env,
            config,
            session: uuid::Uuid::new_v4().to_string(),
            pane,
            tag,
        }
    }

    /// `ktr ARGS` with this session's config and environment.
    #[track_caller]
    fn ktr(&self, args: &[&str]) -> String {
        let out = Command::new(crate::support::exe("ktr"))
            .env_clear()
            .envs(self.env.env())
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .output()
            .unwrap();
        crate::support::ktr_stdout(&out, args)
    }

    /// The new window running this session's Claude Code, with its own
    /// environment, on `tmux`'s server.
    fn open_window(&self, tmux: &Tmux) {
        let work = self.env.sandbox.work.display().to_string();
        let bin = self.env.bin.display().to_string();
        let mut args: Vec<String> = ["new-window", "-d", "-t", "cc:1", "-c", &work]
            .map(String::from)
            .to_vec();
        for (k, v) in self.env.env() {
            args.extend(["-e".into(), format!("{k}={v}")]);
        }
        args.extend([
            "--".into(),
            bin,
            "--session-id".into(),
            self.session.clone(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tmux.run(&args);
    }

    fn pane_pid(&self, tmux: &Tmux) -> String {
        tmux.run(&["display-message", "-p", "-t", self.pane, "#{pane_pid}"])
    }
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN) and tmux"]
fn two_claude_codes_requested_at_the_same_moment_switch_in_place_and_roll_back_on_their_own() {
    let bin = crate::support::claude_bin();
    let rule = |tag: &str, n: &str| {
        Rule::new(
            &format!("{tag}-{n}"),
            vec![vec![text(&format!("{tag}-R-{n} done."))]],
        )
    };
    let api = FakeApi::start(
        ["AAA", "BBB"]
            .iter()
            .flat_map(|t| ["ONE", "TWO", "THREE", "FOUR"].map(|n| rule(t, n)))
            .collect(),
    );
    let socket = Tmux::unique_socket();
    let a = One::new(&bin, &api, &socket, None, PANE, "AAA");
    let state = a.env.sandbox.root().canonicalize().unwrap().join("state");
    let b = One::new(&bin, &api, &socket, Some(&state), PANE_B, "BBB");
    let tmux = Tmux::start_on(&a.env, &socket, &["--session-id", &a.session]);
    b.open_window(&tmux);
    let both = [&a, &b];
    for one in both {
        tmux.wait_idle_of(one.pane, SETTLE);
        tmux.type_line_to(one.pane, &format!("{}-ONE hello", one.tag));
    }
    for one in both {
        tmux.wait_screen_of(one.pane, "the first reply", SETTLE, |s| {
            s.contains(&format!("{}-R-ONE", one.tag))
        });
        tmux.wait_idle_of(one.pane, SETTLE);
    }
    let panes = [a.pane_pid(&tmux), b.pane_pid(&tmux)];

    // Both ask at the same moment, then both replies end together.
    let start = std::sync::Barrier::new(2);
    let ids: Vec<OperationId> = std::thread::scope(|s| {
        let asks: Vec<_> = both
            .iter()
            .map(|one| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let out = one.ktr(&[
                        "request",
                        "--confirm",
                        "REBUILD",
                        "--reason",
                        "same moment",
                        "--session",
                        &one.session,
                        "--json",
                    ]);
                    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
                    OperationId::parse(json["id"].as_str().unwrap()).unwrap()
                })
            })
            .collect();
        asks.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for one in both {
        tmux.type_line_to(one.pane, &format!("{}-TWO go", one.tag));
    }
    let store = Store::open(&state).unwrap();
    let started = Instant::now();
    let ops: Vec<Operation> = ids
        .iter()
        .map(|id| {
            let mut op = store.load(id).unwrap();
            while !op.status.is_terminal() && started.elapsed() < SETTLE {
                std::thread::sleep(Duration::from_millis(250));
                op = store.load(id).unwrap();
            }
            op
        })
        .collect();
    eprintln!("both switched after {:?}", started.elapsed());
    for ((one, op), pane) in both.iter().zip(&ops).zip(&panes) {
        assert_eq!(op.status, Status::Activated, "{}: {:?}", one.tag, op.error);
        assert_eq!(op.session_id.as_deref(), Some(one.session.as_str()));
        let candidate = op.candidate.as_ref().unwrap();
        assert!(candidate.path.starts_with(&one.env.sandbox.project));
        assert_eq!(
            op.ack.as_ref().map(|a| a.session_id.as_str()),
            Some(candidate.session_id.as_str()),
            "{}: Claude Code loaded its own candidate",
            one.tag
        );
        assert_eq!(&one.pane_pid(&tmux), pane, "{}: switched in place", one.tag);
        assert_eq!(op.target_after.as_deref(), Some(pane.as_str()));
    }
    assert_ne!(ops[0].candidate, ops[1].candidate);

    // Each one's next request carries its own conversation.
    for one in both {
        tmux.wait_idle_of(one.pane, SETTLE);
        tmux.type_line_to(one.pane, &format!("{}-THREE again", one.tag));
    }
    for (one, other) in [(&a, &b), (&b, &a)] {
        let turn = api
            .wait_turn(&format!("{}-THREE", one.tag), SETTLE)
            .expect("the next prompt reached the model");
        let said: String = turn.messages().iter().flat_map(message_texts).collect();
        assert!(said.contains(&format!("{}-ONE hello", one.tag)), "{said}");
        assert!(said.contains(&format!("{}-R-TWO", one.tag)), "{said}");
        assert!(!said.contains(other.tag), "{}: {said}", one.tag);
    }

    // A rolls back; B's operation and session stay as they are.
    for one in both {
        tmux.wait_idle_of(one.pane, SETTLE);
    }
    a.ktr(&[
        "rollback-request",
        ops[0].id.as_str(),
        "--confirm",
        "ROLLBACK",
    ]);
    tmux.type_line_to(a.pane, "AAA-FOUR once more");
    let started = Instant::now();
    let mut rolled = store.load(&ops[0].id).unwrap();
    while !rolled.status.is_terminal() && started.elapsed() < SETTLE {
        std::thread::sleep(Duration::from_millis(250));
        rolled = store.load(&ops[0].id).unwrap();
    }
    assert_eq!(rolled.status, Status::RolledBack, "{:?}", rolled.error);
    assert_eq!(a.pane_pid(&tmux), panes[0], "A rolled back in place");
    let b_now = store.load(&ops[1].id).unwrap();
    assert_eq!(
        (b_now.status, &b_now.history, &b_now.candidate),
        (Status::Activated, &ops[1].history, &ops[1].candidate),
        "B's operation untouched"
    );
    assert_eq!(b.pane_pid(&tmux), panes[1]);
    tmux.wait_idle_of(b.pane, SETTLE);
    tmux.type_line_to(b.pane, "BBB-FOUR still here");
    let turn = api
        .wait_turn("BBB-FOUR", SETTLE)
        .expect("B's next prompt reached the model");
    let said: String = turn.messages().iter().flat_map(message_texts).collect();
    assert!(
        said.contains("BBB-R-THREE") && !said.contains("AAA"),
        "{said}"
    );
}
