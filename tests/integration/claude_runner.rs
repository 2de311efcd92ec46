//! `examples/runner.sh` with the real Claude Code CLI: a rebuild
//! requested while a `claude -p` turn runs, with the next prompt already
//! queued, loses nothing — the next prompt runs on the rebuilt session,
//! which carries every earlier turn — and the runner says what happened.
//!
//! ktr is installed with `install` (Stop, `UserPromptSubmit` and `SessionStart`
//! hooks in settings.json, `ktr-mcp` registered). `KTR_RUNNER_TRIALS`
//! (default 3) repeats the mid-turn case with random timings; the first
//! trial asks through the MCP tool from inside the `claude -p` turn (the
//! runner passes `--allowedTools mcp__ktr__thread_rebuild_request`), the
//! others with `ktr request` at a random moment of the turn.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert_in_order;
use crate::support::claude::ClaudeEnv;
use crate::support::fake_api::{FakeApi, Rule, conversation, last_user_text, text, tool};
use ktr_pipeline::operation::{Operation, Status, Store};
use serde_json::json;
/// How long the fake model holds back each reply.
const REPLY_DELAY: Duration = Duration::from_millis(2500);
/// How long one trial may take on a busy two-core machine.
const TRIAL: Duration = Duration::from_secs(240);

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_rebuild_requested_mid_turn_loses_no_queued_prompt() {
    let bin = crate::support::claude_bin();
    let trials = std::env::var("KTR_RUNNER_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3usize);
    let mut seconds = Vec::new();
    for n in 0..trials {
        let start = Instant::now();
        mid_turn_trial(&bin, n, n == 0);
        seconds.push(start.elapsed().as_secs_f64());
        eprintln!("runner trial {n}: ok in {:.1} s", seconds[n]);
    }
    let lines: Vec<String> = seconds
        .iter()
        .enumerate()
        .map(|(n, s)| format!("runner trial {n}: nothing lost, {s:.1} s"))
        .collect();
    crate::support::report(
        "runner",
        &format!(
            "pointer runner, rebuild requested mid-turn with a queued prompt: {} of {trials} trials lost nothing\n{}",
            seconds.len(),
            lines.join("\n")
        ),
    );
}

fn mid_turn_trial(bin: &Path, n: usize, via_mcp: bool) {
    let tag = format!("R{n:02}");
    let rig = PointerRig::start(bin, &tag);
    if via_mcp {
        rig.api.add_rules(vec![Rule::new(
            &format!("{tag}-P1"),
            vec![
                vec![tool(
                    "mcp__ktr__thread_rebuild_request",
                    json!({"reason": "MCP-REASON asked mid-turn", "confirmation": "REBUILD"}),
                )],
                vec![text(&format!("{tag}-A1 answered."))],
            ],
        )]);
    }
    let first = rig.first_session();
    rig.api.set_turn_delay(REPLY_DELAY);
    let mut runner = rig.runner();
    let mut stdin = runner.stdin.take().unwrap();
    writeln!(stdin, "{tag}-P1 first question").unwrap();
    rig.api
        .wait_turn(&format!("{tag}-P1"), TRIAL)
        .unwrap_or_else(|| panic!("P1 never reached the model"));
    if !via_mcp {
        // The request lands at a random moment of P1's turn.
        thread::sleep(REPLY_DELAY.mul_f64(random_unit() * 0.8));
        rig.ktr(&["request", "--confirm", "REBUILD", "--reason", "mid-turn"]);
    }
    // P2 is queued while P1 runs.
    writeln!(stdin, "{tag}-P2 second question").unwrap();
    drop(stdin);
    let out = wait_output(runner, TRIAL);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "runner failed: {stderr}");

    let op = rig.operation();
    assert_eq!(op.status, Status::Activated, "{op:#?}\n{stderr}");
    if via_mcp {
        assert!(
            op.reasons.iter().any(|r| r.contains("MCP-REASON")),
            "the MCP tool did not make the request: {:?}\n{stderr}",
            op.reasons
        );
        assert_eq!(op.session_id.as_deref(), Some(first.as_str()));
    }
    let new_id = op.candidate.as_ref().unwrap().session_id.clone();
    assert_eq!(rig.pointer_now(), new_id);
    assert!(
        stderr.contains(&format!(
            "operation {} activated: now resuming {new_id}",
            op.id
        )),
        "the runner did not report the outcome: {stderr}"
    );
    // Health was proven by Claude Code itself: the probe resumed the new
    // session (its SessionStart reached ktr-ack) without a model call.
    assert!(
        op.ack.as_ref().is_some_and(|a| a.session_id == new_id),
        "no resume receipt for the new session: {op:#?}"
    );
    // P2 ran on the new session, with P1 and its reply carried.
    let p2 = rig
        .api
        .wait_turn(&format!("{tag}-P2"), Duration::from_secs(1))
        .expect("P2 reached the model");
    let said = conversation(&p2);
    assert_in_order(
        &said,
        &[
            &format!("{tag}-P0"),
            &format!("{tag}-A0"),
            &format!("{tag}-P1"),
            &format!("{tag}-A1"),
            &format!("{tag}-P2"),
        ],
    );
    let new = fs::read_to_string(rig.env.transcript(&new_id)).unwrap();
    assert_in_order(
        &new,
        &[
            &format!("{tag}-P1"),
            &format!("{tag}-A1"),
            &format!("{tag}-P2"),
            &format!("{tag}-A2"),
        ],
    );
    let old = fs::read_to_string(rig.env.transcript(&first)).unwrap();
    assert!(
        !old.contains(&format!("{tag}-P2")),
        "P2 ran on the old session"
    );
    assert!(
        !new.contains("No response requested"),
        "a turn was cut: the new session holds Claude Code's synthetic reply"
    );
    if via_mcp {
        rollback(&rig, &op, &first, &new_id);
    }
}

/// `ktr rollback-request`, then one prompt on the rebuilt session: its Stop
/// hook runs the rollback, the runner waits for it, says so, and the next
/// prompt runs on the old conversation — a restore session that carries,
/// after the old transcript's records, the turns said in the rebuilt
/// session since the switch (P2 and P3); the old transcript is not written.
fn rollback(rig: &PointerRig, op: &Operation, old: &str, new_id: &str) {
    let tag = &rig.tag;
    let old_bytes = fs::read(rig.env.transcript(old)).unwrap();
    rig.ktr(&["rollback-request", &op.id, "--confirm", "ROLLBACK"]);
    let mut runner = rig.runner();
    let mut stdin = runner.stdin.take().unwrap();
    writeln!(
        stdin,
        "{tag}-P3 on the new session\n{tag}-P4 back on the old one"
    )
    .unwrap();
    drop(stdin);
    let out = wait_output(runner, TRIAL);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "runner failed: {stderr}");
    let op = rig.operation();
    assert_eq!(op.status, Status::RolledBack, "{stderr}");
    let restore = op
        .restore
        .expect("a restore session")
        .session_id
        .to_string();
    assert_eq!(rig.pointer_now(), restore);
    assert!(
        stderr.contains(&format!(
            "operation {} rolled back: now resuming {restore}",
            op.id
        )),
        "the runner did not report the rollback: {stderr}"
    );
    let new = fs::read_to_string(rig.env.transcript(new_id)).unwrap();
    let back = fs::read_to_string(rig.env.transcript(&restore)).unwrap();
    assert_in_order(&new, &[&format!("{tag}-P3"), &format!("{tag}-A3")]);
    assert!(
        !new.contains(&format!("{tag}-P4")),
        "P4 ran on the rebuilt session"
    );
    assert_in_order(
        &back,
        &[
            &format!("{tag}-P1"),
            &format!("{tag}-A1"),
            &format!("{tag}-P2"),
            &format!("{tag}-A2"),
            &format!("{tag}-P3"),
            &format!("{tag}-A3"),
            &format!("{tag}-P4"),
        ],
    );
    assert_eq!(
        fs::read(rig.env.transcript(old)).unwrap(),
        old_bytes,
        "the old transcript was written"
    );
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_new_session_claude_code_cannot_resume_puts_the_old_pointer_back() {
    let bin = crate::support::claude_bin();
    let tag = "RH";
    let rig = PointerRig::start(&bin, tag);
    let first = rig.first_session();
    // resume_command resumes the first session only: any other is "not
    // found", as a broken candidate or a wrong command line would be.
    let wrapper = rig.env.sandbox.root().join("claude-first-only");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nfor a; do [ \"$prev\" = --resume ] && s=$a; prev=$a; done\n\
             [ \"$s\" = {first} ] || {{ echo \"No conversation found with session ID: $s\" >&2; exit 1; }}\n\
             exec {} \"$@\"\n",
            rig.env.bin.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    let config = fs::read_to_string(&rig.config).unwrap().replace(
        &format!("resume_command = [{:?},", rig.env.bin.display().to_string()),
        &format!("resume_command = [{:?},", wrapper.display().to_string()),
    );
    assert!(config.contains("claude-first-only"), "{config}");
    fs::write(&rig.config, config).unwrap();

    rig.ktr(&["request", "--confirm", "REBUILD", "--reason", "probe fails"]);
    let mut runner = rig.runner();
    let mut stdin = runner.stdin.take().unwrap();
    writeln!(stdin, "{tag}-P1 after the failed switch").unwrap();
    drop(stdin);
    let out = wait_output(runner, TRIAL);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let op = rig.operation();
    assert_eq!(op.status, Status::RolledBack, "{op:#?}\n{stderr}");
    let error = op.error.clone().unwrap_or_default();
    assert!(
        error.contains("No conversation found"),
        "the reason names what Claude Code said: {error}"
    );
    assert_eq!(rig.pointer_now(), first, "the old pointer is back");
    assert!(
        stderr.contains(&format!("operation {} rolled back", op.id)),
        "the runner says so: {stderr}"
    );
    let old = fs::read_to_string(rig.env.transcript(&first)).unwrap();
    assert_in_order(&old, &[&format!("{tag}-P1"), &format!("{tag}-A1")]);
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_failing_rebuild_is_reported_by_the_runner_and_the_old_session_stays() {
    let bin = crate::support::claude_bin();
    let tag = "RF";
    let rig = PointerRig::start(&bin, tag);
    // Two hits of the poison pattern in the last turns block the plan.
    let mut config = fs::read_to_string(&rig.config).unwrap();
    config.push_str(&format!("poison_pattern = \"{tag}-P[0-9]\"\n"));
    fs::write(&rig.config, config).unwrap();
    let first = rig.first_session();
    let mut runner = rig.runner();
    let mut stdin = runner.stdin.take().unwrap();
    writeln!(stdin, "{tag}-P1 first question").unwrap();
    rig.api
        .wait_turn(&format!("{tag}-P1"), TRIAL)
        .unwrap_or_else(|| panic!("P1 never reached the model"));
    rig.ktr(&["request", "--confirm", "REBUILD", "--reason", "doomed"]);
    writeln!(stdin, "{tag}-P2 second question").unwrap();
    drop(stdin);
    let out = wait_output(runner, TRIAL);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let op = rig.operation();
    assert_eq!(op.status, Status::Failed, "{op:#?}\n{stderr}");
    let error = op.error.clone().unwrap_or_default();
    assert!(
        stderr.contains(&format!("operation {} failed: ", op.id))
            && stderr.contains(&format!("resuming {first}")),
        "the runner did not report the failure ({error}): {stderr}"
    );
    assert_eq!(rig.pointer_now(), first);
    let old = fs::read_to_string(rig.env.transcript(&first)).unwrap();
    assert_in_order(
        &old,
        &[
            &format!("{tag}-P1"),
            &format!("{tag}-A1"),
            &format!("{tag}-P2"),
            &format!("{tag}-A2"),
        ],
    );
}

/// The first session's reply reports a full
/// window; the runner's next prompt makes Claude Code auto-compact, ktr's
/// guard blocks it (`claude -p` exits 1, "Prompt is too long") and starts
/// the rebuild; once it is activated the runner sends that prompt once
/// more, to the rebuilt session, which does not carry it: it reaches the
/// model exactly once.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_prompt_the_guard_blocked_is_sent_again_by_the_runner() {
    let bin = crate::support::claude_bin();
    let tag = "RB";
    let rig = PointerRig::start(&bin, tag);
    let mut config = fs::read_to_string(&rig.config).unwrap();
    config.insert_str(0, "on_auto_compaction = \"rebuild\"\n");
    fs::write(&rig.config, config).unwrap();
    // The first reply measures the fixed overhead (the fake API's own
    // count); the second one reports a full window.
    let first = rig.first_session();
    rig.api.set_usage(Some(999_000));
    let full = rig.env.resume(&first, &format!("{tag}-P1 fill the window"));
    assert!(full.status.success(), "{}", full.stderr);
    rig.api.set_usage(None);
    let mut runner = rig.runner();
    let mut stdin = runner.stdin.take().unwrap();
    writeln!(stdin, "{tag}-P2 the prompt that triggers the compaction").unwrap();
    drop(stdin);
    let out = wait_output(runner, TRIAL);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "runner failed: {stderr}");
    let op = rig.store.latest().unwrap().unwrap_or_else(|| {
        panic!(
            "no operation; runner: {stderr}{}; notices: {:?}",
            String::from_utf8_lossy(&out.stdout),
            fs::read_dir(rig.store.dir().join("window"))
                .map(|d| d
                    .flatten()
                    .map(|e| fs::read_to_string(e.path()).unwrap_or_default())
                    .collect::<Vec<_>>())
                .unwrap_or_default()
        )
    });
    assert_eq!(op.status, Status::Activated, "{op:#?}\n{stderr}");
    assert!(
        op.history
            .iter()
            .any(|t| t.note.contains("PreCompact hook")),
        "not started by the guard: {:?}",
        op.history
    );
    assert!(op.prompt_back.is_some(), "{op:#?}");
    let new_id = op.candidate.as_ref().unwrap().session_id.to_string();
    assert_eq!(rig.pointer_now(), new_id);
    assert!(
        stderr.contains(&format!("claude -p --resume {first} exited with status 1"))
            && stderr.contains(&format!(
                "the prompt ktr's compaction guard blocked goes to the rebuilt session {new_id}"
            )),
        "{stderr}"
    );
    let asked: Vec<_> = rig
        .api
        .turns()
        .into_iter()
        .filter(|t| last_user_text(t.messages()).contains(&format!("{tag}-P2")))
        .collect();
    assert_eq!(asked.len(), 1, "sent {} times: {stderr}", asked.len());
    let said = conversation(&asked[0]);
    assert_eq!(said.matches(&format!("{tag}-P2")).count(), 1, "{said}");
    assert_in_order(
        &said,
        &[
            &format!("{tag}-P0"),
            &format!("{tag}-A0"),
            &format!("{tag}-P1"),
        ],
    );
    let new = fs::read_to_string(rig.env.transcript(&new_id)).unwrap();
    assert_in_order(&new, &[&format!("{tag}-P2"), &format!("{tag}-A2")]);
    assert!(!new.contains("No response requested"), "{new}");
    let marks: Vec<_> = fs::read_dir(rig.store.dir().join("prompts"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&first))
        .collect();
    assert!(marks.is_empty(), "left behind: {marks:?}");
}

/// A pointer-mode installation: ktr installed by `install`, the runner's
/// claude is the real CLI.
struct PointerRig {
    api: FakeApi,
    env: ClaudeEnv,
    store: Store,
    config: PathBuf,
    pointer: PathBuf,
    tag: String,
}

impl PointerRig {
    fn start(bin: &Path, tag: &str) -> PointerRig {
        let rules = (0..4)
            .map(|i| {
                Rule::new(
                    &format!("{tag}-P{i}"),
                    vec![vec![text(&format!("{tag}-A{i} answered."))]],
                )
            })
            .collect();
        let api = FakeApi::start(rules);
        let env = ClaudeEnv::new(bin, &api);
        let root = env.sandbox.root().canonicalize().unwrap();
        let state = root.join("state");
        let pointer = root.join("pointer");
        let config = root.join("config.toml");
        let q = |p: &Path| serde_json::to_string(&p.display().to_string()).unwrap();
        fs::write(
            &config,
            format!(
                "project_dir = {}\nstate_dir = {}\nactivation = \"pointer\"\nresume_pointer_path = {}\n\
                 claude_workdir = {}\nresume_command = [{}, \"-p\", \"--resume\", \"{{session_id}}\"]\n\
                 activation_delay_seconds = 0.5\nstable_file_seconds = 0.5\nstable_file_timeout_seconds = 30\n",
                q(&env.sandbox.project),
                q(&state),
                q(&pointer),
                q(&env.sandbox.work),
                q(&env.bin),
            ),
        )
        .unwrap();
        env.install_ktr(
            Path::new(env!("CARGO_MANIFEST_DIR")),
            Path::new(crate::support::exe("ktr")).parent().unwrap(),
            &config,
        );
        PointerRig {
            api,
            env,
            store: Store::open(&state).unwrap(),
            config,
            pointer,
            tag: tag.to_string(),
        }
    }

    /// A first turn on a new session, written into the pointer.
    fn first_session(&self) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        let run = self.env.run(
            &["-p", "--session-id", &id, &format!("{}-P0 hello", self.tag)],
            TRIAL,
        );
        assert!(run.status.success(), "first turn failed: {}", run.stderr);
        fs::write(&self.pointer, format!("{id}\n")).unwrap();
        id
    }

    fn pointer_now(&self) -> String {
        fs::read_to_string(&self.pointer)
            .unwrap()
            .trim()
            .to_string()
    }

    /// The runner, reading prompts from a pipe, with the CLI's environment.
    fn runner(&self) -> std::process::Child {
        let bin_dir = self
            .env
            .sandbox
            .root()
            .canonicalize()
            .unwrap()
            .join("prefix/bin");
        Command::new("sh")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/runner.sh"))
            .arg("--config")
            .arg(&self.config)
            .env_clear()
            .envs(self.env.env())
            .env("CLAUDE", &self.env.bin)
            .env("KTR", bin_dir.join("ktr"))
            .env("KTR_PREPARE", bin_dir.join("ktr-prepare"))
            .args(["--", "--allowedTools", "mcp__ktr__thread_rebuild_request"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn ktr(&self, args: &[&str]) -> String {
        let out = Command::new(crate::support::exe("ktr"))
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env("HOME", &self.env.sandbox.home)
            .output()
            .unwrap();
        assert!(out.status.success(), "ktr {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn operation(&self) -> Operation {
        self.store.latest().unwrap().expect("an operation")
    }
}

/// Wait for `child` (killed after `timeout`, then the test fails).
fn wait_output(mut child: std::process::Child, timeout: Duration) -> std::process::Output {
    let deadline = Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!(
                "the runner did not finish in {timeout:?}: {:?}",
                child.wait_with_output()
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

/// A number in [0, 1) from the system's randomness.
fn random_unit() -> f64 {
    let v = uuid::Uuid::new_v4().as_u128() as u64;
    (v >> 11) as f64 / (1u64 << 53) as f64
}
