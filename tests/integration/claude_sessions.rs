//! Every Claude Code session, with no config (SPEC §2 "Zero config", §12
//! "Discovery"), with the real CLI against the fake API: the plugin
//! installed into a throw-away HOME and **no config file** (the
//! installer's template removed), `KTR_TMUX_SOCKET` unset, so the pane of
//! each session is found from its Claude Code process. Three sessions —
//! two projects in two panes of one tmux server, a third session (of the
//! first project) in a pane of a second server — are each asked for a
//! rebuild, the first alone, the other two at the same moment: each
//! switches in place into its own candidate, no pane's process changes,
//! and every session's next request carries its own id and history (and
//! nothing of the others'); then one of them is rolled back, and the
//! others stay as they are. Ignored by default: it needs the real CLI
//! (`KTR_CLAUDE_BIN`).

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::claude_plugin::{copy_checkout, install};
use crate::support::claude::{ClaudeEnv, Tmux};
use crate::support::fake_api::{FakeApi, Logged, Rule, conversation, text};
use crate::support::{OptionOrPanic, claude_bin, sid};
use ktr_pipeline::operation::{Operation, Status, Store};

/// How long a turn of the CLI may take on a busy two-core machine.
const TURN: Duration = Duration::from_secs(60);
/// How long the pipeline may take from the Stop hook to a terminal status.
const PIPELINE: Duration = Duration::from_secs(90);
/// The sessions, by the letter their markers carry.
const NAMES: [&str; 3] = ["A", "B", "C"];
/// How many probes each session answers (one after each rebuild, one
/// after the rollback).
const PROBES: usize = NAMES.len() + 1;

/// The scripted model: each session's own turns and probes.
fn rules() -> Vec<Rule> {
    let mut rules = Vec::new();
    for n in NAMES {
        for turn in 1..=3 {
            rules.push(Rule::new(
                &format!("USER-{n}{turn} "),
                vec![vec![text(&format!("ASSISTANT-{n}{turn} 好。"))]],
            ));
        }
        for probe in 1..=PROBES {
            rules.push(Rule::new(
                &format!("PROBE-{n}-{probe} "),
                vec![vec![text(&format!("ANSWER-{n}-{probe} 记得。"))]],
            ));
        }
    }
    rules
}

/// One Claude Code session: its letter, the pane it runs in, and the
/// session it serves now.
struct Session {
    name: &'static str,
    /// Which tmux server of [`Household::servers`].
    server: usize,
    pane: &'static str,
    /// The session it serves now (its candidate, once rebuilt).
    id: String,
    probes: usize,
}

/// The household: the CLI's environment, the two tmux servers, the store.
struct Household {
    api: FakeApi,
    env: ClaudeEnv,
    servers: Vec<Tmux>,
    sessions: Vec<Session>,
    store: Store,
}

impl Household {
    fn tmux(&self, s: &Session) -> &Tmux {
        &self.servers[s.server]
    }

    /// Every pane's process, by session.
    fn pane_pids(&self) -> Vec<String> {
        self.sessions
            .iter()
            .map(|s| {
                self.tmux(s)
                    .run(&["display-message", "-p", "-t", s.pane, "#{pane_pid}"])
            })
            .collect()
    }

    fn diagnosis(&self) -> String {
        let mut out = format!(
            "operation: {:?}\nworker.log:\n{}\n",
            self.store.latest().ok().flatten(),
            fs::read_to_string(self.store.worker_log()).unwrap_or_default()
        );
        for s in &self.sessions {
            out.push_str(&format!(
                "screen of {} ({}):\n{}\n",
                s.name,
                s.pane,
                self.tmux(s).screen_of(s.pane)
            ));
        }
        out
    }

    /// Type `line` into session `i`'s pane and wait for `marker` on its
    /// screen and the prompt idle again.
    fn say(&self, i: usize, line: &str, marker: &str) {
        let s = &self.sessions[i];
        let tmux = self.tmux(s);
        tmux.type_line_to(s.pane, line);
        tmux.wait_screen_of(s.pane, &format!("the reply {marker}"), TURN, |screen| {
            screen.contains(marker)
        });
        tmux.wait_idle_of(s.pane, TURN);
    }

    /// The sessions `which` asked for a rebuild at the same moment: each
    /// requested, then each one's next prompt typed, one right after the
    /// other; each one's Stop runs prepare → verify → activate in place in
    /// its own pane, neither waiting for the other. Returns the activated
    /// operations in `which`'s order; each session serves its candidate
    /// from then on.
    fn rebuild(&mut self, which: &[usize]) -> Vec<Operation> {
        let asked: Vec<Operation> = which
            .iter()
            .map(|&i| {
                let s = &self.sessions[i];
                self.store
                    .request(
                        &format!("tidy session {}", s.name),
                        "REBUILD",
                        Some(&sid(&s.id)),
                    )
                    .unwrap()
            })
            .collect();
        for &i in which {
            let s = &self.sessions[i];
            let n = s.name;
            self.tmux(s)
                .type_line_to(s.pane, &format!("USER-{n}2 继续。"));
        }
        let mut done = Vec::new();
        for (&i, op) in which.iter().zip(&asked) {
            let n = self.sessions[i].name;
            let mut last = None;
            let ended = crate::support::wait_for(PIPELINE, || {
                last = self.store.load(&op.id).ok();
                last.as_ref().is_some_and(|o| o.status.is_terminal())
            });
            assert!(
                ended,
                "the rebuild of session {n} never ended\n{}",
                self.diagnosis()
            );
            let op = last.or_panic(|| self.diagnosis());
            assert_eq!(op.status, Status::Activated, "{n}: {}", self.diagnosis());
            assert_eq!(op.session_id.as_deref(), Some(self.sessions[i].id.as_str()));
            let candidate = op.candidate.clone().or_panic(|| self.diagnosis());
            self.sessions[i].id = candidate.session_id.to_string();
            done.push(op);
        }
        for &i in which {
            let s = &self.sessions[i];
            let n = s.name;
            self.tmux(s).wait_screen_of(
                s.pane,
                &format!("the reply ASSISTANT-{n}2"),
                TURN,
                |screen| screen.contains(&format!("ASSISTANT-{n}2")),
            );
            self.tmux(s).wait_idle_of(s.pane, TURN);
        }
        done
    }

    /// Session `i`'s rebuild `op` rolled back: asked for, its next reply's
    /// Stop runs the rollback. The session serves what the rollback put
    /// back from then on (the old session, or a restore session carrying
    /// the turns said since the rebuild).
    fn roll_back(&mut self, i: usize, op: &Operation) -> Operation {
        self.store.rollback_request(&op.id, "ROLLBACK").unwrap();
        let n = self.sessions[i].name;
        self.say(
            i,
            &format!("USER-{n}3 回去吧。"),
            &format!("ASSISTANT-{n}3"),
        );
        let mut last = None;
        let done = crate::support::wait_for(PIPELINE, || {
            last = self.store.load(&op.id).ok();
            last.as_ref().is_some_and(|o| o.status.is_terminal())
        });
        let back = last.or_panic(|| self.diagnosis());
        assert!(done, "the rollback never ended\n{}", self.diagnosis());
        assert_eq!(back.status, Status::RolledBack, "{}", self.diagnosis());
        self.sessions[i].id = back.restore.as_ref().map_or_else(
            || back.session_id.as_deref().unwrap_or_default().to_string(),
            |r| r.session_id.to_string(),
        );
        let s = &self.sessions[i];
        self.tmux(s).wait_idle_of(s.pane, TURN);
        back
    }

    /// Session `i`'s next request: sent for the session it serves now,
    /// carrying its own history and nothing of the others'.
    fn probe(&mut self, i: usize) -> Logged {
        self.sessions[i].probes += 1;
        let (n, k) = (self.sessions[i].name, self.sessions[i].probes);
        let needle = format!("PROBE-{n}-{k} ");
        self.say(
            i,
            &format!("{needle}还记得吗？"),
            &format!("ANSWER-{n}-{k}"),
        );
        let request = self
            .api
            .wait_turn(&needle, TURN)
            .or_panic(|| format!("{needle} never reached the model\n{}", self.diagnosis()));
        assert_eq!(
            request.session.as_deref(),
            Some(self.sessions[i].id.as_str()),
            "session {n}'s request names another session"
        );
        let carried = conversation(&request);
        for said in [format!("USER-{n}1"), format!("ASSISTANT-{n}1")] {
            assert!(carried.contains(&said), "{said} was not carried: {carried}");
        }
        for other in NAMES.iter().filter(|o| **o != n) {
            assert!(
                !carried.contains(&format!("USER-{other}")),
                "session {n} carries session {other}'s turns: {carried}"
            );
        }
        request
    }
}

/// The CLI's environment: the plugin installed, no config file, the
/// second project's folder trusted too.
fn household() -> Household {
    let api = FakeApi::start(rules());
    let env = ClaudeEnv::new(&claude_bin(), &api);
    env.prepare_interactive(&["mcp__plugin_ktr_ktr"]);
    let work_b = env.sandbox.root().join("work-b");
    fs::create_dir_all(&work_b).unwrap();
    let mut state = env.claude_json();
    state["projects"][work_b.display().to_string()]["hasTrustDialogAccepted"] = json!(true);
    env.write_claude_json(&state);

    let checkout = env.sandbox.root().join("checkout");
    copy_checkout(&checkout);
    let said = install(&env, &checkout, &["--plugin"]);
    // No config file: ktr serves every session with its defaults.
    let config = env.sandbox.home.join(".config/ktr/config.toml");
    let _ = fs::remove_file(&config);
    assert!(!config.exists(), "{said}");
    assert!(
        !env.env().iter().any(|(k, _)| k.starts_with("KTR_")),
        "ktr must find the panes itself: {:?}",
        env.env()
    );

    let ids: Vec<String> = NAMES
        .iter()
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    // Server 1: A in the first project (pane cc:0.0), B in the second
    // (cc:1.0); server 2: C in the first project.
    let one = Tmux::start(&env, &["--session-id", &ids[0]]);
    let bin = env.bin.display().to_string();
    let dir_b = work_b.display().to_string();
    one.run(&[
        "new-window",
        "-d",
        "-t",
        "cc:1",
        "-c",
        &dir_b,
        "--",
        &bin,
        "--session-id",
        &ids[1],
    ]);
    let two = Tmux::start(&env, &["--session-id", &ids[2]]);
    let sessions = vec![
        Session {
            name: "A",
            server: 0,
            pane: "cc:0.0",
            id: ids[0].clone(),
            probes: 0,
        },
        Session {
            name: "B",
            server: 0,
            pane: "cc:1.0",
            id: ids[1].clone(),
            probes: 0,
        },
        Session {
            name: "C",
            server: 1,
            pane: "cc:0.0",
            id: ids[2].clone(),
            probes: 0,
        },
    ];
    let store = Store::open(&env.sandbox.home.join(".local/state/ktr")).unwrap();
    Household {
        api,
        env,
        servers: vec![one, two],
        sessions,
        store,
    }
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn three_sessions_in_two_tmux_servers_are_each_rebuilt_in_place_with_no_config() {
    let _one_cli = crate::claude_loop::serial();
    let mut h = household();
    for (i, n) in NAMES.iter().enumerate() {
        let s = &h.sessions[i];
        h.tmux(s).wait_idle_of(s.pane, TURN);
        h.say(i, &format!("USER-{n}1 看看。"), &format!("ASSISTANT-{n}1"));
    }
    let pids = h.pane_pids();
    let ids_before: Vec<String> = h.sessions.iter().map(|s| s.id.clone()).collect();
    let projects: Vec<PathBuf> = (0..NAMES.len())
        .map(|i| {
            let id = &h.sessions[i].id;
            // Claude Code writes the transcript after the reply is drawn.
            let mut found = None;
            crate::support::wait_for(TURN, || {
                found = fs::read_dir(h.env.sandbox.home.join(".claude/projects"))
                    .unwrap()
                    .flatten()
                    .map(|e| e.path().join(format!("{id}.jsonl")))
                    .find(|p| p.exists());
                found.is_some()
            });
            found
                .or_panic(|| format!("no transcript of {id}"))
                .parent()
                .unwrap()
                .to_path_buf()
        })
        .collect();
    assert_ne!(projects[0], projects[1], "A and B are of two projects");
    assert_eq!(projects[0], projects[2], "C is of A's project");

    // A alone, then B and C (two projects, two tmux servers) asked at the
    // same moment.
    for which in [&[0][..], &[1, 2][..]] {
        let before: Vec<String> = which.iter().map(|&i| h.sessions[i].id.clone()).collect();
        let done = h.rebuild(which);
        for ((&i, op), before) in which.iter().zip(&done).zip(&before) {
            // Its own transcript, in its own project folder.
            assert_eq!(
                op.transcript_path,
                Some(projects[i].join(format!("{before}.jsonl"))),
                "{op:?}"
            );
        }
        assert_eq!(h.pane_pids(), pids, "a pane's process changed");
        // The ones rebuilt, then every other one: each its own.
        for &i in which {
            h.probe(i);
        }
        for j in (0..NAMES.len()).filter(|j| !which.contains(j)) {
            h.probe(j);
        }
    }
    // Each serves its own candidate now: three rebuilt sessions.
    let ops = h.store.list().unwrap();
    let activated: Vec<&Operation> = ops
        .iter()
        .filter(|o| o.status == Status::Activated)
        .collect();
    assert_eq!(activated.len(), NAMES.len(), "{ops:?}");
    assert_eq!(h.pane_pids(), pids, "a pane's process changed");

    // B's rebuild rolled back, in its own pane: B is back to its own
    // conversation, and A and C still serve their candidates.
    let of_b = activated
        .iter()
        .find(|o| o.session_id.as_deref() == Some(ids_before[1].as_str()))
        .map(|o| (*o).clone())
        .or_panic(|| format!("no operation of session B: {ops:?}"));
    let serving = [h.sessions[0].id.clone(), h.sessions[2].id.clone()];
    h.roll_back(1, &of_b);
    assert_eq!(h.pane_pids(), pids, "a pane's process changed");
    let candidate_b = of_b.candidate.as_ref().unwrap().session_id.to_string();
    assert_ne!(h.sessions[1].id, candidate_b);
    h.probe(1);
    for (i, id) in [(0, &serving[0]), (2, &serving[1])] {
        assert_eq!(&h.sessions[i].id, id);
        h.probe(i);
    }
}
