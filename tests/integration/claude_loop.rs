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

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::OptionOrPanic;
use crate::support::claude::{ClaudeEnv, Tmux};
use crate::support::fake_api::conversation;
use crate::support::fake_api::{FakeApi, Logged, Rule, all_strings, text, thinking, tool};
use crate::support::{assert_in_order, claude, claude_bin};
use ktr_base::digest::sha256_file;
use ktr_base::time::parse_rfc3339;
use ktr_pipeline::operation::{Operation, Status, Store};
use ktr_pipeline::pane::Input;
use serde_json::{Value, json};

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

/// The whole rebuild through the interactive CLI, then a rollback through
/// it: Stop hook → prepare → verify → activate → `--resume <new>` with
/// Claude Code's own ack; the next request carries every turn and no
/// residue; then `ROLLBACK` → the pane resumes the old conversation, whose
/// next request carries the tool results again and, after them, the turns
/// said in the rebuilt session (a restore session).
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_whole_loop_and_its_rollback_through_the_interactive_cli() {
    let bin = claude_bin();
    let _serial = serial();
    let started = Instant::now();
    let lp = Loop::start(&bin, &[]);
    let pane_before = lp.tmux.pane_pid();
    let ended = lp.talk_until_the_request();

    // After the reply the Stop hook schedules; the stages run detached.
    let op = lp.wait_activated();
    let activated_after = ended.elapsed();
    let scheduled = op
        .history
        .iter()
        .find(|t| t.to == Status::Scheduled)
        .expect("the Stop hook scheduled it");
    assert!(
        scheduled
            .note
            .contains(&format!("Stop hook of session {}", lp.source_id)),
        "{}",
        scheduled.note
    );
    let candidate = op.candidate.clone().expect("a candidate");
    let new_id = candidate.session_id.clone();
    assert_ne!(new_id, lp.source_id);
    // Switched in place: the same Claude Code process now serves the
    // rebuilt session (its receipt says so), nothing was respawned.
    assert_eq!(
        lp.tmux.pane_pid(),
        pane_before,
        "the pane was respawned instead of switched in place\n{}",
        notes(&op)
    );
    lp.assert_pane_serves(&new_id);
    assert!(
        notes(&op).contains(&format!("in place: /resume {new_id}")),
        "{}",
        notes(&op)
    );
    assert_eq!(
        op.target_after.as_deref(),
        Some(lp.tmux.pane_pid().to_string().as_str())
    );
    // Claude Code itself reported loading the rebuilt session.
    let ack = op.ack.clone().expect("ktr-ack recorded the resume");
    assert_eq!(ack.session_id, new_id);
    let context_tokens = ack.context_tokens.expect("context_tokens");
    assert!(context_tokens > 0);
    let activated = op
        .history
        .iter()
        .rfind(|t| t.to == Status::Activated)
        .unwrap();
    assert!(
        activated.note.contains(&format!(
            "Claude Code reports {context_tokens} context tokens"
        )),
        "activated without Claude Code's receipt: {}",
        activated.note
    );
    let receipt = lp.store.artifacts_dir(&op.id).unwrap().join("ack.json");
    assert!(receipt.is_file(), "no {}", receipt.display());

    // The old transcript. ktr never writes it: what it froze is the source
    // as it was after the request turn (the backup has the recorded digest,
    // and ktr-activate checked that the source still had it right before
    // the switch). Killing the old CLI may let Claude Code itself append a
    // last record on exit, so the source must *start with* the frozen
    // bytes; from the switch on nothing writes it any more (checked again
    // after the probe below).
    let backup = op.backup.clone().expect("a frozen backup");
    assert_eq!(
        ktr_base::digest::Sha256::of_file(&backup).ok(),
        op.source_sha256
    );
    let frozen = fs::read(&backup).unwrap();
    assert!(
        String::from_utf8_lossy(&frozen).contains("ASSISTANT-L3"),
        "the freeze did not wait for the request turn to finish"
    );
    let source_now = fs::read(lp.source()).unwrap();
    assert!(
        source_now.starts_with(&frozen),
        "the old transcript no longer starts with what was frozen"
    );
    let appended_on_exit = source_now.len() - frozen.len();
    // What it appends (2.1.328: `last-prompt`, `cost-state`) is file-only:
    // nothing anyone said after the freeze was left behind.
    for line in String::from_utf8_lossy(&source_now[frozen.len()..]).lines() {
        let record: Value = serde_json::from_str(line).unwrap_or_default();
        assert!(
            !matches!(record["type"].as_str(), Some("user" | "assistant")),
            "a conversation record reached the old transcript after the freeze: {line}"
        );
    }
    let source_digest = sha256_file(&lp.source()).unwrap();

    // The next message reaches the model with every turn and no residue.
    let after = lp.probe(
        "USER-L4 PROBE-AFTER 你还记得吗？",
        "PROBE-AFTER",
        "ASSISTANT-L4",
    );
    let sent = conversation(&after);
    let mut order: Vec<&str> = TALK
        .iter()
        .flat_map(|(line, marker)| [line.split(' ').next().unwrap(), *marker])
        .collect();
    order.push("PROBE-AFTER");
    assert_in_order(&sent, &order);
    let mut everything = String::new();
    all_strings(&after.body["messages"], &mut everything);
    for residue in RESIDUE {
        assert!(
            !everything.contains(residue),
            "{residue} reached the model after the rebuild"
        );
    }
    let types = block_types(&after);
    for kind in ["tool_use", "tool_result", "thinking", "redacted_thinking"] {
        assert!(
            !types.iter().any(|t| t == kind),
            "a {kind} block reached the model after the rebuild: {types:?}"
        );
    }
    let before = turn_before(&lp.api, &after);
    assert!(
        conversation(&before).contains("REBUILD-ASK"),
        "the request before the probe is not the rebuild turn"
    );
    let (before_bytes, after_bytes) = (before.messages_bytes(), after.messages_bytes());
    assert!(
        after_bytes < before_bytes,
        "the request after the rebuild ({after_bytes} B) is not smaller than before ({before_bytes} B)"
    );
    assert_eq!(
        sha256_file(&lp.source()).unwrap(),
        source_digest,
        "the old transcript changed while the rebuilt session ran"
    );

    let stop_to_activated = history_seconds(&op, Status::Scheduled, Status::Activated);
    let activating = op
        .history
        .iter()
        .find(|t| t.to == Status::Activating)
        .unwrap();
    let switch_to_ack = parse_rfc3339(&ack.at)
        .unwrap()
        .duration_since(parse_rfc3339(&activating.at).unwrap())
        .unwrap_or_default()
        .as_secs_f64();
    eprintln!(
        "loop: messages {before_bytes} B before the rebuild -> {after_bytes} B after ({:.1} %); \
         request body {} B -> {} B; context_tokens {context_tokens} (estimate {:?}); \
         reply end -> activated {:.1} s (Stop hook -> activated {stop_to_activated:.1} s, \
         switch -> ack {switch_to_ack:.1} s, healthcheck_seconds 5); \
         Claude Code appended {appended_on_exit} B to the old transcript on exit",
        100.0 * after_bytes as f64 / before_bytes as f64,
        before.bytes,
        after.bytes,
        op.estimated_tokens,
        activated_after.as_secs_f64(),
    );

    // Rollback, asked for in the rebuilt session.
    lp.api.add_rules(vec![Rule::new(
        "ROLLBACK-ASK",
        vec![
            vec![tool(
                "mcp__ktr__thread_rebuild_rollback_request",
                json!({"operation_id": op.id, "confirmation": "ROLLBACK"}),
            )],
            vec![text("ASSISTANT-L5 好的，回滚已请求；这条回复结束后切回。")],
        ],
    )]);
    let pane_new = lp.tmux.pane_pid();
    // The switch back follows the reply within milliseconds, so the reply
    // may never be seen on the screen: wait for the operation instead.
    lp.tmux
        .type_line("USER-L5 还是回到旧窗口吧 ROLLBACK-ASK，我确认。");
    let op = lp.wait_rolled_back();
    assert!(
        op.history.iter().any(|t| t.to == Status::RollbackScheduled
            && t.note.contains(&format!("Stop hook of session {new_id}"))),
        "{}",
        notes(&op)
    );
    assert_eq!(
        lp.tmux.pane_pid(),
        pane_new,
        "the pane was respawned instead of switched back in place\n{}",
        notes(&op)
    );
    // Two turns were said in the rebuilt session (the probe, the request):
    // they come along in a restore session of the old conversation.
    let restore = op.restore.clone().expect("a restore session");
    lp.assert_pane_serves(&restore.session_id);
    assert!(
        notes(&op).contains(&format!("session {} in place", restore.session_id)),
        "{}",
        notes(&op)
    );

    // The old conversation again: its history comes back, tool results
    // included, and after it what was said in the rebuilt session.
    let back = lp.probe(
        "USER-L6 PROBE-BACK 回来了吗？",
        "PROBE-BACK",
        "ASSISTANT-L6",
    );
    let sent = conversation(&back);
    assert_in_order(
        &sent,
        &[
            "USER-L1",
            "ASSISTANT-L1",
            "ASSISTANT-L3",
            "PROBE-AFTER",
            "ASSISTANT-L4",
            "USER-L5",
            "ASSISTANT-L5",
            "PROBE-BACK",
        ],
    );
    let mut everything = String::new();
    all_strings(&back.body["messages"], &mut everything);
    assert!(
        everything.contains("TOOL-OUTPUT-LINE") && everything.contains("READ-CONTENT-MARKER"),
        "the old session's tool results are missing after the rollback"
    );
    assert!(block_types(&back).iter().any(|t| t == "tool_result"));
    for said in ["USER-L1", "PROBE-AFTER", "ASSISTANT-L4", "USER-L5"] {
        assert_eq!(sent.matches(said).count(), 1, "{said} not once: {sent}");
    }
    eprintln!(
        "rollback: Stop hook -> rolled_back {:.1} s; messages after rollback {} B; test took {:.1} s",
        history_seconds(&op, Status::RollbackScheduled, Status::RolledBack),
        back.messages_bytes(),
        started.elapsed().as_secs_f64()
    );
}

/// Nothing said since the rebuild is lost by a rollback. After
/// the rebuild two prompts are answered in the rebuilt session; then a
/// rollback is requested and, while it waits for the Stop, a third prompt
/// is sent and answered. The rollback builds a restore session — the old
/// transcript's records, then the three exchanges — and switches to it in
/// place: the next request to the model carries the old conversation
/// (tool results included) and all three exchanges, each exactly once;
/// ktr never writes the old transcript; one line says what happened.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_rollback_takes_the_turns_said_since_the_rebuild_along() {
    let bin = claude_bin();
    let _serial = serial();
    let lp = Loop::start(&bin, &[]);
    lp.talk_until_the_request();
    let op = lp.wait_activated();
    let new_id = op.candidate.clone().expect("a candidate").session_id;
    lp.assert_pane_serves(&new_id);
    // Claude Code may still append its own late records to the session it
    // left (under load, after the receipt): the switch only ever adds.
    let at_activation = fs::read(lp.source()).unwrap();
    lp.api.add_rules(vec![
        Rule::new("SINCE-ONE", vec![vec![text("ASSISTANT-S1 第一条新话。")]]),
        Rule::new("SINCE-TWO", vec![vec![text("ASSISTANT-S2 第二条新话。")]]),
        Rule::new("SINCE-THREE", vec![vec![text("ASSISTANT-S3 第三条新话。")]]),
        Rule::new("PROBE-RESTORED", vec![vec![text("ASSISTANT-R 都在。")]]),
    ]);
    lp.say("USER-S1 SINCE-ONE 新窗口的第一句", "ASSISTANT-S1");
    lp.say("USER-S2 SINCE-TWO 新窗口的第二句", "ASSISTANT-S2");
    let old_bytes = fs::read(lp.source()).unwrap();
    assert!(
        old_bytes.starts_with(&at_activation),
        "the old transcript was rewritten by the switch"
    );
    let op = lp.store.rollback_request(&op.id, "ROLLBACK").unwrap();
    assert_eq!(op.status, Status::RollbackPending);
    // Sent while the rollback waits for the next Stop.
    lp.tmux.type_line("USER-S3 SINCE-THREE 等回滚时的第三句");
    let op = lp.wait_rolled_back();
    let restore = op.restore.clone().expect("a restore session");
    assert_ne!(restore.session_id, lp.source_id);
    assert_eq!(restore.turns, 3, "{}", notes(&op));
    lp.assert_pane_serves(&restore.session_id);
    let line = format!(
        "rolled back to {}: the 3 turns said since the rebuild came along",
        lp.source_id
    );
    assert!(notes(&op).contains(&line), "{}", notes(&op));
    // The pane's border says it for a while.
    let border = lp.tmux.run(&[
        "show-options",
        "-p",
        "-v",
        "-t",
        claude::PANE,
        "pane-border-format",
    ]);
    assert!(border.contains(&line), "{border}");
    let status = lp.env.sandbox.run("status", None, &[]);
    assert!(status.stdout.contains(&line), "{}", status.stdout);

    let back = lp.probe(
        "USER-R PROBE-RESTORED 都还在吗？",
        "PROBE-RESTORED",
        "ASSISTANT-R",
    );
    let sent = conversation(&back);
    let order = [
        "USER-L1",
        "ASSISTANT-L1",
        "USER-L2",
        "ASSISTANT-L2",
        "USER-L3",
        "ASSISTANT-L3",
        "USER-S1",
        "ASSISTANT-S1",
        "USER-S2",
        "ASSISTANT-S2",
        "USER-S3",
        "ASSISTANT-S3",
        "PROBE-RESTORED",
    ];
    assert_in_order(&sent, &order);
    for said in order {
        assert_eq!(sent.matches(said).count(), 1, "{said} not once: {sent}");
    }
    let mut everything = String::new();
    all_strings(&back.body["messages"], &mut everything);
    assert!(
        everything.contains("TOOL-OUTPUT-LINE"),
        "the old session's tool results are missing after the rollback"
    );
    let now = fs::read(lp.source()).unwrap();
    assert!(
        now == old_bytes,
        "the rollback wrote the old transcript: {} bytes then, {} now; appended: {}",
        old_bytes.len(),
        now.len(),
        String::from_utf8_lossy(now.get(old_bytes.len()..).unwrap_or_default())
    );
    eprintln!(
        "rollback with 3 turns since the rebuild: Stop hook -> rolled_back {:.1} s; restore session {} old + {} new records",
        history_seconds(&op, Status::RollbackScheduled, Status::RolledBack),
        restore.old_records,
        restore.new_records
    );
}

/// Everything that ties the Claude Code process to a session follows an
/// in-place switch: after the first rebuild the same
/// process — whose command line and whose MCP server's
/// `CLAUDE_CODE_SESSION_ID` still name the first session — asks for a
/// second rebuild through MCP. The request binds to the rebuilt session
/// (not the one the environment names), its Stop hook schedules it, the
/// target is found to run it, and it switches in place again.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_session_switched_in_place_is_rebuilt_again_in_place() {
    let bin = claude_bin();
    let _serial = serial();
    let lp = Loop::start(&bin, &[]);
    let pane = lp.tmux.pane_pid();
    lp.talk_until_the_request();
    let first = lp.wait_activated();
    let second_source = first.candidate.clone().unwrap().session_id.to_string();
    lp.assert_pane_serves(&second_source);

    lp.api.add_rules(vec![Rule::new(
        "REBUILD-AGAIN",
        vec![
            vec![tool(
                "mcp__ktr__thread_rebuild_request",
                json!({"reason": "again", "confirmation": "REBUILD"}),
            )],
            vec![text("ASSISTANT-L7 好的，再重建一次。")],
        ],
    )]);
    lp.say("USER-L7 再重建一次 REBUILD-AGAIN，我同意。", "ASSISTANT-L7");
    let op = crate::support::wait_status(
        &lp.store,
        "the second rebuild to finish",
        PIPELINE,
        Status::is_terminal,
        || lp.diagnosis(),
    );
    let op = lp
        .store
        .latest()
        .unwrap()
        .filter(|o| o.id != first.id)
        .unwrap_or(op);
    assert_ne!(op.id, first.id, "no second operation\n{}", lp.diagnosis());
    assert_eq!(
        op.status,
        Status::Activated,
        "{}\n{}",
        notes(&op),
        lp.diagnosis()
    );
    assert_eq!(
        op.session_id.as_deref(),
        Some(second_source.as_str()),
        "the second request did not bind to the session the process serves now"
    );
    let third = op.candidate.clone().unwrap().session_id.to_string();
    assert_eq!(lp.tmux.pane_pid(), pane, "{}", notes(&op));
    lp.assert_pane_serves(&third);
    assert!(
        notes(&op).contains(&format!("in place: /resume {third}")),
        "{}",
        notes(&op)
    );
    // The rebuilt-twice session holds every turn of both.
    let after = lp.probe(
        "USER-L8 PROBE-AFTER 还记得吗？",
        "PROBE-AFTER",
        "ASSISTANT-L4",
    );
    assert_in_order(
        &conversation(&after),
        &[
            "USER-L1",
            "ASSISTANT-L1",
            "REBUILD-ASK",
            "USER-L7",
            "ASSISTANT-L7",
            "PROBE-AFTER",
        ],
    );
}

/// A Claude Code that does not take `/resume` (here: hung, stopped with
/// SIGSTOP right before the switch) is switched by the fallback: after
/// `healthcheck_seconds` without its receipt the pane is respawned with
/// `resume_command` on the rebuilt session, which then answers.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_claude_code_that_does_not_take_resume_is_respawned() {
    let bin = claude_bin();
    let _serial = serial();
    let pause = std::env::temp_dir().join(format!("ktr-switch-pause-{}", std::process::id()));
    let pause_file = pause.display().to_string();
    let lp = Loop::start_as(
        &bin,
        &[
            ("KTR_TEST_PAUSE_AT", "activate:checked"),
            ("KTR_TEST_PAUSE_FILE", pause_file.as_str()),
        ],
        Tmux::start_under_shell,
    );
    let pane = lp.tmux.pane_pid();
    let hung = ktr_pipeline::process::with_descendants(pane)
        .into_iter()
        .find(|pid| {
            ktr_pipeline::process::cmdline(*pid)
                .is_some_and(|argv| argv.first() == Some(&lp.env.bin.display().to_string()))
        })
        .expect("the CLI under the pane's shell");
    lp.talk_until_the_request();
    assert!(
        crate::support::wait_for(PIPELINE, || pause.exists()),
        "activation never reached its pause\n{}",
        lp.diagnosis()
    );
    signal(hung, "-STOP");
    assert!(
        crate::support::wait_for(Duration::from_secs(5), || {
            fs::read_to_string(format!("/proc/{hung}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('T')
            })
        }),
        "the CLI did not stop"
    );
    fs::remove_file(&pause).unwrap();
    let op = lp.wait_activated();
    let new_id = op.candidate.clone().unwrap().session_id.to_string();
    // Respawning the pane usually ends it (its process group is orphaned
    // while stopped: the kernel sends it SIGHUP and SIGCONT); if not, here.
    if ktr_pipeline::process::pid_alive(hung) {
        let _ = Command::new("kill")
            .args(["-KILL", &hung.to_string()])
            .status();
    }
    assert_ne!(lp.tmux.pane_pid(), pane, "{}", notes(&op));
    assert!(
        notes(&op).contains("pane respawned")
            && notes(&op).contains("did not report SessionStart (resume)"),
        "{}",
        notes(&op)
    );
    let argv = lp.tmux.pane_argv();
    assert!(argv.contains(&new_id), "{argv:?}");
    let after = lp.probe(
        "USER-L4 PROBE-AFTER 你还记得吗？",
        "PROBE-AFTER",
        "ASSISTANT-L4",
    );
    assert_in_order(
        &conversation(&after),
        &["USER-L1", "ASSISTANT-L3", "PROBE-AFTER"],
    );
}

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

/// `kill SIGNAL pid` on a process this test started.
fn signal(pid: u32, signal: &str) {
    let done = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(done.success(), "kill {signal} {pid}");
}

/// The switch's latency as a benchmark, not a check of speed:
/// end of reply (the fake API sent the reply's `message_stop`) →
/// `activated`, then the same for a rollback (→ `rolled_back`), with every
/// timing key at its default, in
/// place and by respawn (`tmux_switch_in_place = false`) in the same run,
/// their order alternating, `KTR_BENCH_RUNS` times (default 1, so the suite
/// stays short), each on a fresh CLI: one `latency:` line per switch with
/// the breakdown from the operation's transitions and Claude Code's
/// receipt. `bench/latency.py` runs it and prints the medians; the figures
/// are in bench/README.md.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn switch_latency_with_the_defaults() {
    let bin = claude_bin();
    let _serial = serial();
    let runs: usize = std::env::var("KTR_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    for run in 1..=runs {
        let modes = if run % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        };
        for in_place in modes {
            measure_switch(&bin, run, runs, in_place);
        }
    }
}

/// One fresh CLI: rebuild, then roll back, each timed from the end of the
/// reply that scheduled it; prints the `latency:` lines.
fn measure_switch(bin: &Path, run: usize, runs: usize, in_place: bool) {
    let lp = Loop::start(bin, &[]);
    // Every timing key at the default a new user gets (config_text sets
    // the waits' upper bounds for a loaded machine).
    let config = &lp.env.sandbox.config;
    let mut settings = fs::read_to_string(config).unwrap();
    for line in [
        "stable_file_timeout_seconds = 20\n",
        "healthcheck_seconds = 5\n",
    ] {
        assert!(settings.contains(line), "config_text no longer sets {line}");
        settings = settings.replace(line, "");
    }
    if !in_place {
        settings = settings.replacen(
            "\n[resume_env]",
            "tmux_switch_in_place = false\n\n[resume_env]",
            1,
        );
    }
    fs::write(config, settings).unwrap();
    let mode = if in_place { "in place" } else { "respawn" };
    lp.talk_until_the_request();
    let op = lp.wait_activated();
    let took = lp.since_last_reply(&op, Status::Activated);
    let at = |to: Status| {
        let t = op.history.iter().find(|t| t.to == to).unwrap();
        parse_rfc3339(&t.at).unwrap()
    };
    let ack = parse_rfc3339(&op.ack.as_ref().expect("ktr-ack's receipt").at).unwrap();
    let span = |from: std::time::SystemTime, to: std::time::SystemTime| {
        to.duration_since(from)
            .map_or_else(|e| -e.duration().as_secs_f64(), |d| d.as_secs_f64())
    };
    // activate's "checks passed; switching" step: the last look passed.
    let log = fs::read_to_string(lp.store.worker_log()).unwrap_or_default();
    let switched = log
        .lines()
        .find(|l| l.contains("checks passed; switching"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(parse_rfc3339)
        .expect("activate logged its switch");
    eprintln!(
        "latency: run {run}/{runs} {mode}: reply end -> activated {took:.2} s \
         (scheduled -> running {:.2}; prepare {:.2}; verify {:.2}; \
         activating -> switch {:.2}; switch -> receipt {:.2}; \
         receipt -> activated {:.2})",
        span(at(Status::Scheduled), at(Status::Running)),
        span(at(Status::Running), at(Status::Verifying)),
        span(at(Status::Verifying), at(Status::Activating)),
        span(at(Status::Activating), switched),
        span(switched, ack),
        span(ack, at(Status::Activated)),
    );
    lp.ask_rollback(&op);
    let op = lp.wait_status("the rollback to finish", |s| {
        matches!(s, Status::RolledBack | Status::Failed)
    });
    assert_eq!(op.status, Status::RolledBack, "{}", notes(&op));
    let took = lp.since_last_reply(&op, Status::RolledBack);
    eprintln!(
        "latency: run {run}/{runs} {mode} rollback: reply end -> rolled_back {took:.2} s \
         (Stop hook -> rolled_back {:.2})",
        history_seconds(&op, Status::RollbackScheduled, Status::RolledBack),
    );
}

/// A candidate Claude Code cannot load (every timestamp stripped by the
/// debug-only `KTR_TEST_CORRUPT_CANDIDATE` hook, after which the recorded
/// digests describe the corrupted bytes) is never switched to: ktr-verify
/// refuses it (the timestamp check), the operation fails, the candidate is
/// discarded, and the pane keeps running the old session, whose next
/// request carries the old history.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_candidate_claude_code_cannot_load_is_never_switched_to() {
    let bin = claude_bin();
    let _serial = serial();
    let started = Instant::now();
    let lp = Loop::start(&bin, &[("KTR_TEST_CORRUPT_CANDIDATE", "strip-timestamps")]);
    let pane_before = lp.tmux.pane_pid();
    let ended = lp.talk_until_the_request();
    let op = lp.wait_status("the rebuild to finish", Status::is_terminal);
    let refused_after = ended.elapsed();
    assert!(
        matches!(op.status, Status::Failed | Status::RolledBack),
        "a corrupted candidate ended {}\n{}",
        op.status,
        notes(&op)
    );
    // What really happens: verification catches it before any switch.
    assert_eq!(op.status, Status::Failed, "{}", notes(&op));
    let error = op.error.clone().unwrap_or_default();
    assert!(
        error.contains("timestamp missing or not ISO-8601"),
        "{error}"
    );
    assert_eq!(op.verification.as_ref().map(|v| v.ok), Some(false));
    assert!(
        !op.history.iter().any(|t| t.to == Status::Activating),
        "the target was touched: {}",
        notes(&op)
    );
    assert!(!op.needs_attention && !op.session_conflict);
    let log = fs::read_to_string(lp.store.worker_log()).unwrap_or_default();
    assert!(
        log.contains("stripped every timestamp"),
        "the test hook did not run:\n{log}"
    );
    let candidate = op.candidate.clone().expect("the candidate stays on record");
    assert!(
        !candidate.path.exists(),
        "the refused candidate {} was not discarded",
        candidate.path.display()
    );

    // The pane never moved: same process, still on the original session.
    assert_eq!(lp.tmux.pane_pid(), pane_before, "the pane was respawned");
    let argv = lp.tmux.pane_argv();
    assert!(argv.contains(&lp.source_id), "{argv:?}");

    let next = lp.probe("USER-P PROBE-OLD 还在吗？", "PROBE-OLD", "ASSISTANT-P");
    let sent = conversation(&next);
    assert_in_order(
        &sent,
        &[
            "USER-L1",
            "ASSISTANT-L1",
            "USER-L2",
            "ASSISTANT-L3",
            "PROBE-OLD",
        ],
    );
    let mut everything = String::new();
    all_strings(&next.body["messages"], &mut everything);
    assert!(everything.contains("TOOL-OUTPUT-LINE"));
    eprintln!(
        "refusal: reply end -> failed {:.1} s ({error}); test took {:.1} s",
        refused_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn another_session_of_the_project_asking_through_mcp_is_refused_with_the_reason() {
    let bin = claude_bin();
    let _serial = serial();
    let lp = Loop::start(&bin, &[]);
    let pane = lp.tmux.pane_pid();
    // A second live session in the same project, in another window: not
    // the pane ktr switches.
    let other = uuid::Uuid::new_v4().to_string();
    let work = lp.env.sandbox.work.display().to_string();
    let cli = lp.env.bin.display().to_string();
    lp.tmux.run(&[
        "new-window",
        "-d",
        "-t",
        "cc:",
        "-c",
        &work,
        "--",
        &cli,
        "--session-id",
        &other,
    ]);
    let window = "cc:1.0";
    lp.tmux.wait_idle_of(window, TURN);
    lp.tmux.type_line_to(window, TALK[2].0);
    lp.tmux
        .wait_screen_of(window, "the reply ASSISTANT-L3", TURN, |s| {
            s.contains("ASSISTANT-L3")
        });
    // The model got the refusal as the tool's result, naming both sessions.
    let needle = format!("not the Claude of session {other}");
    let refused = lp
        .api
        .turns()
        .into_iter()
        .find(|r| {
            r.messages().iter().any(|m| {
                m["content"].as_array().into_iter().flatten().any(|b| {
                    let mut text = String::new();
                    all_strings(&b["content"], &mut text);
                    b["type"] == "tool_result" && b["is_error"] == true && text.contains(&needle)
                })
            })
        })
        .unwrap_or_else(|| {
            let mut seen = String::new();
            for r in lp.api.turns() {
                for m in r.messages() {
                    if m["role"] != "system" {
                        let _ = std::fmt::Write::write_fmt(
                            &mut seen,
                            format_args!(
                                "{}\n",
                                &m.to_string().chars().take(600).collect::<String>()
                            ),
                        );
                    }
                }
                seen.push_str("----\n");
            }
            panic!(
                "the model never saw the refusal\nrequests:\n{seen}\n{}",
                lp.diagnosis()
            )
        });
    let mut said = String::new();
    all_strings(&refused.body["messages"], &mut said);
    assert!(
        said.contains(&format!("target tmux pane {}", claude::PANE))
            && said.contains(&format!("(session {}…)", &lp.source_id[..8])),
        "the refusal names the target and the session it runs: {said}"
    );
    assert!(
        lp.store.latest().unwrap().is_none(),
        "nothing was requested"
    );
    assert_eq!(lp.tmux.pane_pid(), pane, "the target pane was not touched");
}
