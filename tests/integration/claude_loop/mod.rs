//! The whole loop through the real interactive Claude Code CLI: a human
//! talks to Claude Code in a tmux pane, asks for a rebuild, the model calls
//! `mcp__ktr__thread_rebuild_request`, finishes its reply, and then — with
//! nobody touching anything — the Stop hook, `ktr-prepare`, `ktr-verify`
//! and `ktr-activate` switch the pane over to the rebuilt session, which
//! Claude Code acknowledges through `ktr-ack`. The next thing the human
//! types reaches the (fake) model with every earlier turn and none of the
//! tool traffic. Then the same by way of a rollback, and a corrupted
//! candidate that must never be switched to.
//!
//! Everything is real except the model: ktr is installed with the repo's
//! `install` script into a throw-away HOME (hooks merged into
//! settings.json, `ktr-mcp` registered with the real `claude mcp add`), the
//! CLI runs in a private tmux server (`tmux -L ktr-e2e-…`) whose
//! environment carries `KTR_TMUX_SOCKET`, so Claude Code, its hooks and the
//! detached stages they start all reach that server and nothing else.
//!
//! Ignored by default: they need the real CLI (`KTR_CLAUDE_BIN`; `.ci/run`
//! installs it). The tests take turns (one real CLI at a time): they
//! measure timings and share two cores.

mod collisions;
mod more;
mod whole;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::OptionOrPanic;
use crate::support::claude;
use crate::support::claude::{ClaudeEnv, Tmux};
use crate::support::fake_api::{FakeApi, Logged, Rule, text, thinking, tool};
use ktr_base::time::parse_rfc3339;
use ktr_pipeline::operation::{Operation, Status, Store};
use ktr_pipeline::pane::Input;
use serde_json::json;

/// One real CLI at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Hold [`SERIAL`] for a test's whole run (a test that failed while holding
/// it does not block the others).
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long a turn of the CLI may take on a busy two-core machine.
const TURN: Duration = Duration::from_secs(60);
/// How long the pipeline may take from the Stop hook to a terminal status.
const PIPELINE: Duration = Duration::from_secs(90);

/// What the earlier turns leave in the transcript that must never reach
/// the model after a rebuild: the Bash output, the file the Read tool read,
/// the thinking text, and the tool inputs (the rebuild reason).
const RESIDUE: &[&str] = &[
    "TOOL-OUTPUT-LINE",
    "READ-CONTENT-MARKER",
    "THINK-SECRET",
    "REASON-MARKER",
    "seq -f",
];

/// The conversation before the rebuild, in order: what the human types and
/// the marker of the reply the fake model gives.
pub(crate) const TALK: &[(&str, &str)] = &[
    ("USER-L1 你好，请看看这台机器的输出和笔记。", "ASSISTANT-L1"),
    ("USER-L2 那么结论是什么？", "ASSISTANT-L2"),
    (
        "USER-L3 窗口太满了，请重建会话 REBUILD-ASK，我同意。",
        "ASSISTANT-L3",
    ),
];

/// The scripted model: a Bash call with ~18 KB of output, a Read, thinking,
/// the rebuild request, and plain replies to the probes.
fn rules(notes: &Path) -> Vec<Rule> {
    vec![
        Rule::new(
            "USER-L1",
            vec![
                vec![tool(
                    "Bash",
                    json!({
                        "command": "seq -f 'TOOL-OUTPUT-LINE %g: the quick brown fox jumps over the lazy dog' 1 400",
                        "description": "print the machine's lines",
                    }),
                )],
                vec![tool(
                    "Read",
                    json!({"file_path": notes.display().to_string()}),
                )],
                vec![text("ASSISTANT-L1 我看过输出和笔记了：四百行，一切正常。")],
            ],
        ),
        Rule::new(
            "USER-L2",
            vec![vec![
                thinking("THINK-SECRET 先想一想再回答。", "sig-l2"),
                text("ASSISTANT-L2 结论：机器很好，笔记也对。"),
            ]],
        ),
        Rule::new(
            "REBUILD-ASK",
            vec![
                vec![tool(
                    "mcp__ktr__thread_rebuild_request",
                    json!({
                        "reason": "REASON-MARKER the window is full of tool output",
                        "confirmation": "REBUILD",
                    }),
                )],
                vec![text(
                    "ASSISTANT-L3 好的，重建已请求；这条回复结束后就切换。",
                )],
            ],
        ),
        Rule::new(
            "PROBE-AFTER",
            vec![vec![text("ASSISTANT-L4 新窗口里我都记得。")]],
        ),
        Rule::new(
            "PROBE-OLD",
            vec![vec![text("ASSISTANT-P 我还在旧窗口里。")]],
        ),
        Rule::new(
            "PROBE-BACK",
            vec![vec![text("ASSISTANT-L6 回到旧窗口了。")]],
        ),
    ]
}

/// A throw-away installation with ktr installed by `install`, the real CLI
/// running interactively in a private tmux server, on session `source_id`.
/// Fields drop in order: the tmux server (and the CLI) first, the temp dir
/// last.
pub(crate) struct Loop {
    pub(crate) tmux: Tmux,
    pub(crate) api: FakeApi,
    pub(crate) env: ClaudeEnv,
    pub(crate) store: Store,
    pub(crate) source_id: String,
}

impl Loop {
    /// Install ktr, configure it for the pane, start the CLI on a new
    /// session. `extra_env` goes to the tmux server, hence to Claude Code,
    /// its hooks and the stages.
    #[track_caller]
    pub(crate) fn start(bin: &Path, extra_env: &[(&str, &str)]) -> Loop {
        Loop::start_as(bin, extra_env, Tmux::start_on)
    }

    /// [`Loop::start`], the CLI started in the pane by `start`.
    #[track_caller]
    fn start_as(
        bin: &Path,
        extra_env: &[(&str, &str)],
        start: fn(&ClaudeEnv, &str, &[&str]) -> Tmux,
    ) -> Loop {
        let api = FakeApi::start(Vec::new());
        let mut env = ClaudeEnv::new(bin, &api);
        let notes = env.sandbox.work.join("notes.txt");
        fs::write(
            &notes,
            "READ-CONTENT-MARKER 机器笔记：一切正常。\n".repeat(20),
        )
        .unwrap();
        api.add_rules(rules(&notes));

        let socket = Tmux::unique_socket();
        env.extra_env
            .push(("KTR_TMUX_SOCKET".into(), socket.clone()));
        for (k, v) in extra_env {
            env.extra_env.push((k.to_string(), v.to_string()));
        }

        let root = env.sandbox.root().to_path_buf();
        let (state, config_path) = (env.sandbox.state.clone(), env.sandbox.config.clone());
        fs::write(&config_path, config_text(&env, &state)).unwrap();
        // `KTR_BENCH_BIN_DIR`: install another build (bench/latency.py
        // --release measures the release binaries).
        let bin_dir = std::env::var_os("KTR_BENCH_BIN_DIR").map_or_else(
            || {
                Path::new(crate::support::exe("ktr"))
                    .parent()
                    .unwrap()
                    .to_path_buf()
            },
            std::path::PathBuf::from,
        );
        env.install_ktr(
            Path::new(env!("CARGO_MANIFEST_DIR")),
            &bin_dir,
            &config_path,
        );
        env.prepare_interactive(&["Bash", "Read", "mcp__ktr"]);
        let settings = fs::read_to_string(env.sandbox.home.join(".claude/settings.json")).unwrap();
        assert!(
            settings.contains(&format!("{}/prefix/bin/ktr-stop --config", root.display()))
                && settings.contains("ktr-ack"),
            "install did not merge the hooks: {settings}"
        );

        let source_id = uuid::Uuid::new_v4().to_string();
        let tmux = start(&env, &socket, &["--session-id", &source_id]);
        tmux.wait_idle(TURN);
        Loop {
            tmux,
            api,
            env,
            store: Store::open(&state).unwrap(),
            source_id,
        }
    }

    /// Type `line`, wait for the reply holding `marker` and for the prompt.
    pub(crate) fn say(&self, line: &str, marker: &str) {
        self.tmux.type_line(line);
        self.tmux
            .wait_screen(&format!("the reply {marker}"), TURN, |s| s.contains(marker));
        self.tmux.wait_idle(TURN);
    }

    /// The person asks for a rollback of `op`; the model calls the tool.
    fn ask_rollback(&self, op: &Operation) {
        self.api.add_rules(vec![Rule::new(
            "ROLLBACK-ASK",
            vec![
                vec![tool(
                    "mcp__ktr__thread_rebuild_rollback_request",
                    json!({"operation_id": op.id, "confirmation": "ROLLBACK"}),
                )],
                vec![text("ASSISTANT-L5 好的，回滚已请求。")],
            ],
        )]);
        self.tmux
            .type_line("USER-L5 回到旧窗口 ROLLBACK-ASK，我确认。");
    }

    /// Type a probe and return the request it sent to the model.
    #[track_caller]
    pub(crate) fn probe(&self, line: &str, needle: &str, marker: &str) -> Logged {
        self.tmux.wait_idle(TURN);
        self.tmux.type_line(line);
        let request = self
            .api
            .wait_turn(needle, TURN)
            .or_panic(|| format!("{needle} never reached the model\n{}", self.diagnosis()));
        self.tmux
            .wait_screen(&format!("the reply {marker}"), TURN, |s| s.contains(marker));
        self.tmux.wait_idle(TURN);
        request
    }

    fn source(&self) -> PathBuf {
        self.env.transcript(&self.source_id)
    }

    /// The only operation of this test.
    #[track_caller]
    fn operation(&self) -> Operation {
        self.store
            .latest()
            .unwrap()
            .or_panic(|| format!("no operation was requested\n{}", self.diagnosis()))
    }

    /// Wait until the operation's status satisfies `done`.
    #[track_caller]
    fn wait_status(&self, what: &str, done: impl Fn(Status) -> bool) -> Operation {
        crate::support::wait_status(&self.store, what, PIPELINE, done, || self.diagnosis())
    }

    /// Wait for the rebuild to end; it must end `activated`.
    #[track_caller]
    pub(crate) fn wait_activated(&self) -> Operation {
        let op = self.wait_status("the rebuild to finish", Status::is_terminal);
        assert_eq!(
            op.status,
            Status::Activated,
            "{}\n{}",
            notes(&op),
            self.diagnosis()
        );
        op
    }

    /// Wait for the rollback to end; it must end `rolled_back`.
    #[track_caller]
    fn wait_rolled_back(&self) -> Operation {
        let op = self.wait_status("the rollback to finish", |s| {
            matches!(s, Status::RolledBack | Status::Failed)
        });
        assert_eq!(
            op.status,
            Status::RolledBack,
            "{}\n{}",
            notes(&op),
            self.diagnosis()
        );
        op
    }

    /// Wait until the pane's input line reads `want`.
    #[track_caller]
    fn wait_input(&self, want: &Input) {
        self.tmux
            .wait_screen(&format!("the input line {want:?}"), TURN, |s| {
                Input::of_screen(s) == *want
            });
    }

    /// Everything that explains a failure: the operation, the stages' log,
    /// the screen.
    pub(crate) fn diagnosis(&self) -> String {
        let op = self.store.latest().ok().flatten().map_or_else(
            || "no operation".into(),
            |op| serde_json::to_string_pretty(&op).unwrap_or_default(),
        );
        let log = fs::read_to_string(self.store.worker_log()).unwrap_or_default();
        let screen = Command::new("tmux")
            .args(["-L", &self.tmux.server.socket, "capture-pane", "-p", "-t"])
            .arg(claude::PANE)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        format!("operation: {op}\nworker.log:\n{log}\nscreen:\n{screen}")
    }

    /// The Claude Code process in the pane serves `session`: ktr-ack's
    /// record of its last resume ([`ktr_pipeline::binding`]), else its
    /// command line.
    #[track_caller]
    fn assert_pane_serves(&self, session: &str) {
        let bindings = ktr_pipeline::binding::dir(self.store.dir());
        let bound = ktr_pipeline::binding::of_pid(&bindings, self.tmux.pane_pid())
            .map(|b| b.session_id)
            // Never resumed: the session it started with.
            .or_else(|| ktr_pipeline::targets::session_arg(&self.tmux.pane_argv()));
        assert_eq!(
            bound.as_deref(),
            Some(session),
            "the pane's Claude Code does not serve {session}\n{}",
            self.diagnosis()
        );
    }

    /// Seconds from the end of the last reply the fake model sent (its
    /// `message_stop`) to `op` reaching `to`.
    fn since_last_reply(&self, op: &Operation, to: Status) -> f64 {
        let (now_instant, now_wall) = (Instant::now(), std::time::SystemTime::now());
        let last = self.api.last_reply_end().expect("a reply");
        let reply_end = now_wall - now_instant.duration_since(last);
        let reached = op.history.iter().rfind(|t| t.to == to).unwrap();
        parse_rfc3339(&reached.at)
            .unwrap()
            .duration_since(reply_end)
            .map_or_else(|e| -e.duration().as_secs_f64(), |d| d.as_secs_f64())
    }

    /// The conversation up to the rebuild request, then wait for the Stop
    /// hook to schedule the operation. Returns when the reply ended.
    #[track_caller]
    fn talk_until_the_request(&self) -> Instant {
        for (line, marker) in TALK {
            self.say(line, marker);
        }
        let ended = Instant::now();
        let op = self.operation();
        assert_eq!(op.session_id.as_deref(), Some(self.source_id.as_str()));
        assert!(
            op.reasons.iter().any(|r| r.contains("REASON-MARKER")),
            "{:?}",
            op.reasons
        );
        ended
    }
}

/// The config for the pane: tmux activation on the private server's pane,
/// the CLI's workdir and project, the real CLI as the resume command with
/// the pane's environment; the timing keys at their defaults but the waits'
/// upper bounds, raised for a loaded machine.
pub(crate) fn config_text(env: &ClaudeEnv, state: &Path) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let path = |p: &Path| q(&p.display().to_string());
    let mut text = format!(
        "project_dir = {}\nstate_dir = {}\nactivation = \"tmux\"\ntmux_target = {}\n\
         claude_workdir = {}\nresume_command = [{}, \"--resume\", \"{{session_id}}\"]\n\
         stable_file_timeout_seconds = 20\nhealthcheck_seconds = 5\n\n[resume_env]\n",
        path(&env.sandbox.project),
        path(state),
        q(claude::PANE),
        path(&env.sandbox.work),
        path(&env.bin),
    );
    for (k, v) in env.env() {
        text.push_str(&format!("{k} = {}\n", q(&v)));
    }
    text
}

/// The content block types of every message of a request.
fn block_types(request: &Logged) -> Vec<String> {
    request
        .messages()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|b| b["type"].as_str().map(String::from))
        .collect()
}

/// The conversation request sent just before `request`.
#[track_caller]
fn turn_before(api: &FakeApi, request: &Logged) -> Logged {
    api.turns()
        .into_iter()
        .rfind(|t| t.at < request.at)
        .expect("a request before")
}

/// Seconds between two history entries of `op`: the first transition to
/// `from` and the last to `to`.
#[track_caller]
fn history_seconds(op: &Operation, from: Status, to: Status) -> f64 {
    let at = |status: Status, first: bool| {
        let mut hits = op.history.iter().filter(|t| t.to == status);
        let hit = if first { hits.next() } else { hits.next_back() };
        parse_rfc3339(&hit.or_panic(|| format!("no {status} in the history")).at).unwrap()
    };
    at(to, false)
        .duration_since(at(from, true))
        .unwrap_or_default()
        .as_secs_f64()
}

/// What the operation's history notes say, for messages.
fn notes(op: &Operation) -> String {
    op.history
        .iter()
        .map(|t| format!("{} → {}: {}", t.from, t.to, t.note))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `kill SIGNAL pid` on a process this test started.
pub(super) fn signal(pid: u32, signal: &str) {
    let done = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(done.success(), "kill {signal} {pid}");
}
