//! ktr as a Claude Code plugin, with the real CLI: the checkout
//! is a marketplace whose plugin `ktr` (in `plugin/`) carries the hooks, the
//! MCP server and the `/ktr:` commands. `claude plugin validate` finds
//! nothing to warn about; `./install --plugin` fills `plugin/bin` and runs
//! the real `claude plugin marketplace add` and `claude plugin install`
//! into a throw-away HOME; then, with the config where the plugin's hooks
//! look for it (`~/.config/ktr/config.toml`, no `--config` anywhere):
//! - a session of another project sees nothing of ktr: no tools, no hook
//!   output, a pending request stays untouched, the state dir unchanged;
//! - the configured project's session is rebuilt end to end through the
//!   plugin's hooks (Stop → prepare → verify → activate in place → ack);
//! - `/ktr:status` expands, and the model calls ktr's tool by its plugin
//!   name `mcp__plugin_ktr_ktr__thread_rebuild_status`;
//! - `./install --uninstall` leaves the settings as they were,
//!   but for the two empty objects Claude Code itself keeps.
//!
//! The installer runs on a copy of the checkout's plugin files (the test
//! never writes into the repository). Ignored by default: it needs the real
//! CLI (`KTR_CLAUDE_BIN`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::claude_loop::config_text;
use crate::support::claude::{ClaudeEnv, Tmux};
use crate::support::fake_api::{FakeApi, Logged, Rule, all_strings, conversation, text, tool};
use crate::support::{OptionOrPanic, claude_bin, printed, repo_file};
use ktr_pipeline::operation::{Operation, Status, Store};

/// How long a turn of the CLI may take on a busy two-core machine.
const TURN: Duration = Duration::from_secs(60);
/// How long the pipeline may take from the Stop hook to a terminal status.
const PIPELINE: Duration = Duration::from_secs(90);
/// What the model sees ktr's tools as when the plugin provides them.
const PLUGIN_TOOL: &str = "mcp__plugin_ktr_ktr__thread_rebuild_";

/// The scripted model.
fn rules() -> Vec<Rule> {
    vec![
        Rule::new(
            "USER-P1",
            vec![
                vec![tool(
                    "Bash",
                    json!({"command": "echo TOOL-OUTPUT-RESIDUE", "description": "print a line"}),
                )],
                vec![text("ASSISTANT-P1 看过了。")],
            ],
        ),
        Rule::new("USER-P2", vec![vec![text("ASSISTANT-P2 好。")]]),
        Rule::new("PROBE-AFTER", vec![vec![text("ASSISTANT-P3 都记得。")]]),
        Rule::new("UNSERVED-ASK", vec![vec![text("ASSISTANT-ELSEWHERE hi")]]),
        Rule::new(
            "KTR-COMMAND status",
            vec![
                vec![tool(&format!("{PLUGIN_TOOL}status"), json!({}))],
                vec![text("ASSISTANT-STATUS done")],
            ],
        ),
    ]
}

/// The files of the checkout the plugin install reads, copied to `dest`
/// (without a `plugin/bin` the checkout may hold).
pub(crate) fn copy_checkout(dest: &Path) {
    fn copy_tree(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap().flatten() {
            let (src, dst) = (entry.path(), to.join(entry.file_name()));
            if entry.file_type().unwrap().is_dir() {
                if entry.file_name() != "bin" {
                    copy_tree(&src, &dst);
                }
            } else {
                fs::copy(&src, &dst).unwrap();
            }
        }
    }
    for dir in [".claude-plugin", "plugin"] {
        copy_tree(&repo_file(dir), &dest.join(dir));
    }
    for file in ["install", "Cargo.toml", "hooks.json"] {
        fs::copy(repo_file(file), dest.join(file)).unwrap();
    }
    // The installer names the executables after bins/<name>/Cargo.toml.
    for entry in fs::read_dir(repo_file("bins")).unwrap().flatten() {
        let to = dest.join("bins").join(entry.file_name());
        fs::create_dir_all(&to).unwrap();
        fs::copy(entry.path().join("Cargo.toml"), to.join("Cargo.toml")).unwrap();
    }
}

/// Run `<checkout>/install ARGS` as the household would (the real CLI
/// first on PATH), with the test's binaries; its output. Panics with it
/// when the installer fails.
#[track_caller]
pub(crate) fn install(env: &ClaudeEnv, checkout: &Path, args: &[&str]) -> String {
    let path_dir = &env.sandbox.path_dir;
    let _ = std::os::unix::fs::symlink(&env.bin, path_dir.join("claude"));
    let path = env
        .env()
        .into_iter()
        .find(|(k, _)| k == "PATH")
        .map_or_else(|| "/usr/bin:/bin".to_string(), |(_, v)| v);
    let bin_dir = Path::new(crate::support::exe("ktr")).parent().unwrap();
    let out = Command::new("sh")
        .arg(checkout.join("install"))
        .args(args)
        .arg("--prefix")
        .arg(env.sandbox.root().join("prefix/bin"))
        .arg("--bin-dir")
        .arg(bin_dir)
        .env_clear()
        .envs(env.env())
        .env("PATH", format!("{}:{path}", path_dir.display()))
        .current_dir(&env.sandbox.work)
        .output()
        .unwrap();
    let said = printed(&out);
    assert!(out.status.success(), "install {args:?} failed: {said}");
    said
}

/// `claude plugin validate DIR` in the sandbox: what it printed.
#[track_caller]
fn validate(env: &ClaudeEnv, dir: &Path) -> String {
    let out = env
        .command(&["plugin", "validate"])
        .arg(dir)
        .output()
        .unwrap();
    let said = printed(&out);
    assert!(out.status.success(), "validate {}: {said}", dir.display());
    said
}

/// The names of the tools a request offered: its `tools`, and the deferred
/// ones (2.1.328 defers MCP tools: it lists their names, one a line, for
/// `ToolSearch` to load).
fn tool_names(request: &Logged) -> Vec<String> {
    let mut names = loaded_tools(request);
    names.extend(deferred_tools(request));
    names
}

/// The tools a request offered with their schema (`tools`).
pub(crate) fn loaded_tools(request: &Logged) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect()
}

/// The MCP tools a request named only, for `ToolSearch` to load.
pub(crate) fn deferred_tools(request: &Logged) -> Vec<String> {
    everything(request)
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("mcp__") && !l.contains(char::is_whitespace))
        .map(String::from)
        .collect()
}

/// Everything a request carried, as one string.
fn everything(request: &Logged) -> String {
    let mut out = String::new();
    all_strings(&request.body, &mut out);
    out
}

/// The files of `dir` and their contents (for "unchanged").
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(snapshot(&p));
            } else {
                out.push((p.clone(), fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

fn settings_of(env: &ClaudeEnv) -> Value {
    let path = env.sandbox.home.join(".claude/settings.json");
    serde_json::from_slice(&fs::read(&path).unwrap()).unwrap()
}

/// The real CLI in a throw-away HOME against the fake API with the
/// scripted model, and the tmux socket its session will run on (ktr is
/// told it).
fn sandboxed_cli() -> (FakeApi, ClaudeEnv, String) {
    let api = FakeApi::start(rules());
    let mut env = ClaudeEnv::new(&claude_bin(), &api);
    let socket = Tmux::unique_socket();
    env.extra_env
        .push(("KTR_TMUX_SOCKET".into(), socket.clone()));
    (api, env, socket)
}

/// Why a wait failed: the latest operation, the worker's log, the screen.
fn diagnosis(store: &Store, tmux: &Tmux) -> String {
    format!(
        "operation: {:?}\nworker.log:\n{}\nscreen:\n{}",
        store.latest().ok().flatten(),
        fs::read_to_string(store.worker_log()).unwrap_or_default(),
        tmux.screen_of(crate::support::claude::PANE)
    )
}

/// The served project's session, rebuilt in place through the plugin's
/// hooks: the CLI in tmux (on `socket`) answers a turn with tool residue; a
/// rebuild is requested (`between` runs then, with the request); the next
/// turn's Stop runs prepare → verify → activate in place → ack. Returns once
/// the rebuilt session answered a probe that carried every turn and not the
/// tool output, with the activated operation.
fn rebuilt_in_place(
    env: &ClaudeEnv,
    socket: &str,
    api: &FakeApi,
    between: impl FnOnce(&Store, &Operation),
) -> (Tmux, Store, Operation) {
    let source_id = uuid::Uuid::new_v4().to_string();
    let tmux = Tmux::start_on(env, socket, &["--session-id", &source_id]);
    tmux.wait_idle(TURN);
    let say = |line: &str, marker: &str| {
        tmux.type_line(line);
        tmux.wait_screen(&format!("the reply {marker}"), TURN, |s| s.contains(marker));
        tmux.wait_idle(TURN);
    };
    say("USER-P1 看看这台机器。", "ASSISTANT-P1");
    // A request waits for its session's Stop.
    let store = Store::open(&env.sandbox.state).unwrap();
    let op = store
        .request("plugin e2e: tidy the window", "REBUILD", None)
        .unwrap();
    between(&store, &op);

    say("USER-P2 继续。", "ASSISTANT-P2");
    let done = crate::support::wait_status(
        &store,
        "the rebuild to finish",
        PIPELINE,
        Status::is_terminal,
        || diagnosis(&store, &tmux),
    );
    assert_eq!(
        done.status,
        Status::Activated,
        "{}",
        diagnosis(&store, &tmux)
    );
    assert_eq!(done.session_id.as_deref(), Some(source_id.as_str()));
    assert!(done.ack.is_some(), "no receipt from the plugin's ktr-ack");
    tmux.wait_idle(TURN);
    tmux.type_line("PROBE-AFTER 还记得吗？");
    let after = api.wait_turn("PROBE-AFTER", TURN).or_panic(|| {
        format!(
            "the probe never reached the model\n{}",
            diagnosis(&store, &tmux)
        )
    });
    let carried = conversation(&after);
    for said in ["USER-P1", "ASSISTANT-P1", "USER-P2", "ASSISTANT-P2"] {
        assert!(carried.contains(said), "{said} was not carried: {carried}");
    }
    assert!(
        !everything(&after).contains("TOOL-OUTPUT-RESIDUE"),
        "the tool output was carried"
    );
    assert!(
        everything(&after).contains(&format!("{PLUGIN_TOOL}recall finds them verbatim")),
        "the rebuilt session's notice names recall by its plugin name"
    );
    tmux.wait_screen("the reply ASSISTANT-P3", TURN, |s| {
        s.contains("ASSISTANT-P3")
    });
    tmux.wait_idle(TURN);
    (tmux, store, done)
}

/// A session of another project (one `claude -p` turn) sees nothing of
/// ktr: the plugin's hooks run silent, no tool of ktr's is offered, the
/// pending request `op` stays untouched and the state dir unchanged.
fn elsewhere_sees_nothing(env: &ClaudeEnv, api: &FakeApi, store: &Store, op: &Operation) {
    let before = snapshot(&env.sandbox.state);
    // Another project: nothing of ktr.
    let elsewhere = env.sandbox.root().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    let out = env
        .command(&[
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-hook-events",
            "UNSERVED-ASK hello",
        ])
        .current_dir(&elsewhere)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let result = events.iter().rfind(|e| e["type"] == "result");
    assert!(
        result.is_some_and(|r| r["result"]
            .as_str()
            .is_some_and(|t| t.contains("ASSISTANT-ELSEWHERE"))),
        "{stdout}{stderr}"
    );
    // The plugin's hooks ran there (UserPromptSubmit is only ktr's) and
    // said nothing at all: not even `{"suppressOutput":true}`.
    let responses: Vec<&Value> = events
        .iter()
        .filter(|e| e["subtype"] == "hook_response")
        .collect();
    for event in ["UserPromptSubmit", "Stop"] {
        assert!(
            responses.iter().any(|r| r["hook_event"] == event),
            "no {event} hook ran: {stdout}"
        );
    }
    for r in &responses {
        assert!(
            r["stdout"] == "" && r["stderr"] == "" && r["exit_code"] == 0,
            "a hook was not silent where ktr does not serve: {r}"
        );
    }
    let there = api.wait_turn("UNSERVED-ASK", TURN).unwrap();
    let names = tool_names(&there);
    assert!(
        !names.iter().any(|n| n.contains("thread_rebuild")),
        "ktr's tools offered where ktr does not serve: {names:?}"
    );
    let sent = everything(&there);
    assert!(
        !sent.contains("thread_rebuild")
            && !sent.contains("ktr: ")
            && !sent.contains("ktr rebuilt"),
        "something of ktr reached the model elsewhere: {sent}"
    );
    let untouched = store.load(&op.id).unwrap();
    assert_eq!(untouched.status, Status::Pending, "{untouched:?}");
    assert_eq!(untouched.session_id, None);
    assert_eq!(
        snapshot(&env.sandbox.state),
        before,
        "the state dir changed"
    );
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_plugin_rebuilds_its_project_stays_silent_elsewhere_and_uninstalls_cleanly() {
    let _one_cli = crate::claude_loop::serial();
    let (api, env, socket) = sandboxed_cli();

    // The manifests pass Claude Code's own check with nothing to warn about.
    for dir in [repo_file(""), repo_file("plugin")] {
        let said = validate(&env, &dir);
        assert!(
            said.contains("Validation passed")
                && !said.contains('⚠')
                && !said.contains('✘')
                && !said.to_lowercase().contains("warning"),
            "validate {}:\n{said}",
            dir.display()
        );
    }

    // The household before ktr: a foreign hook and an allow-list.
    env.prepare_interactive(&["Bash", "mcp__plugin_ktr_ktr"]);
    let mut settings = settings_of(&env);
    settings["hooks"]["Stop"] =
        json!([{"hooks": [{"type": "command", "command": "true # foreign"}]}]);
    fs::write(
        env.sandbox.home.join(".claude/settings.json"),
        serde_json::to_string_pretty(&settings).unwrap(),
    )
    .unwrap();
    let before = settings_of(&env);

    // The config where the plugin's hooks look for it.
    let state = env.sandbox.state.clone();
    let config = env.sandbox.home.join(".config/ktr/config.toml");
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    fs::write(&config, config_text(&env, &state)).unwrap();

    let checkout = env.sandbox.root().join("checkout");
    copy_checkout(&checkout);
    let said = install(&env, &checkout, &["--plugin", "--statusline"]);
    let installed = settings_of(&env);
    assert_eq!(
        installed["enabledPlugins"]["ktr@ktr"], true,
        "{installed}\n{said}"
    );
    let text = installed.to_string();
    assert!(
        !text.contains("ktr-stop") && !text.contains("ktr-mcp"),
        "--plugin put hooks or the MCP server into settings.json: {text}"
    );
    assert!(
        installed["statusLine"]["command"]
            .as_str()
            .is_some_and(|c| c.ends_with("/prefix/bin/ktr-statusline' --plugin")
                || c.ends_with("/prefix/bin/ktr-statusline --plugin")),
        "{installed}"
    );
    assert!(
        env.claude_json().pointer("/mcpServers/ktr").is_none(),
        "no MCP registration of its own"
    );

    // The served project's session, rebuilt; meanwhile another project's
    // session sees nothing of ktr.
    let (tmux, store, done) = rebuilt_in_place(&env, &socket, &api, |store, op| {
        elsewhere_sees_nothing(&env, &api, store, op);
    });
    let diagnosis = || diagnosis(&store, &tmux);
    let new_id = done.candidate.clone().unwrap().session_id.to_string();

    // A slash command of the plugin expands, and its tool answers.
    tmux.type_line("/ktr:status");
    let asked = api
        .wait_turn("KTR-COMMAND status", TURN)
        .or_panic(|| format!("/ktr:status did not expand\n{}", diagnosis()));
    assert!(
        everything(&asked).contains("thread_rebuild_status"),
        "the expansion names the tool"
    );
    // ktr's tools (SPEC §11), by their plugin names only.
    let names = tool_names(&asked);
    for t in crate::support::mcp_tools("docs/SPEC.md") {
        let t = t.trim_start_matches("thread_rebuild_");
        assert!(
            names.iter().any(|n| *n == format!("{PLUGIN_TOOL}{t}")),
            "{PLUGIN_TOOL}{t} is not offered: {names:?}"
        );
    }
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__ktr__")),
        "{names:?}"
    );

    tmux.wait_screen("the reply ASSISTANT-STATUS", TURN, |s| {
        s.contains("ASSISTANT-STATUS")
    });
    let answered = api.turns().into_iter().find(|t| t.at > asked.at).unwrap();
    let result = everything(&answered);
    assert!(
        result.contains(&done.id.to_string()) && result.contains("activated"),
        "the status tool did not answer with the operation: {result}"
    );
    assert!(
        fs::read_to_string(env.transcript(&new_id)).is_ok(),
        "the rebuilt session's transcript"
    );
    // `ktr doctor` finds the hooks and the MCP server in the plugin.
    let doctor = Command::new(env.sandbox.root().join("prefix/bin/ktr"))
        .args(["doctor", "--json"])
        .env_clear()
        .envs(env.env())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&doctor.stdout)
        .unwrap_or_else(|_| panic!("ktr doctor: {}", String::from_utf8_lossy(&doctor.stderr)));
    for name in ["hooks", "mcp"] {
        let check = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap();
        assert!(
            check["ok"] == true && check["detail"].as_str().unwrap().contains("ktr@ktr"),
            "doctor's {name}: {check}"
        );
    }
    drop(tmux);

    // Uninstall (plain --uninstall: plugin/bin says the plugin is there):
    // settings as before, but for what Claude Code keeps.
    let said = install(&env, &checkout, &["--uninstall"]);
    assert!(
        said.contains("uninstalling the plugin ktr@ktr too"),
        "{said}"
    );
    let mut after = settings_of(&env);
    for kept in ["enabledPlugins", "extraKnownMarketplaces"] {
        assert_eq!(after[kept], json!({}), "{kept}: {after}\n{said}");
        after.as_object_mut().unwrap().remove(kept);
    }
    assert_eq!(after, before, "{said}");
    assert!(!checkout.join("plugin/bin").exists(), "{said}");
}

/// The host's target triple, which names the archive.
fn host_triple() -> String {
    let out = Command::new("rustc").arg("-vV").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap()
        .to_string()
}

/// `./install --package` writes `ktr-<version>-<host triple>.tar.gz`;
/// unpacked anywhere on a machine without cargo, it installs with the
/// real CLI's own two commands (`claude plugin marketplace add <folder>`,
/// `claude plugin install ktr@ktr`) into a fresh HOME, and its plugin
/// rebuilds the served session in place. The archive holds the test's
/// binaries (`--bin-dir`): the dist build takes minutes.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_package_installs_without_cargo_and_its_plugin_rebuilds_in_place() {
    let _one_cli = crate::claude_loop::serial();
    let (api, mut env, socket) = sandboxed_cli();

    // The archive, made from a copy of the checkout.
    let checkout = env.sandbox.root().join("checkout");
    copy_checkout(&checkout);
    let dist = env.sandbox.root().join("dist");
    let bin_dir = Path::new(crate::support::exe("ktr")).parent().unwrap();
    let out = Command::new("sh")
        .arg(checkout.join("install"))
        .args(["--package", "--bin-dir"])
        .arg(bin_dir)
        .arg("--out")
        .arg(&dist)
        .output()
        .unwrap();
    let said = printed(&out);
    assert!(out.status.success(), "install --package failed: {said}");
    let name = format!("ktr-{}-{}", env!("CARGO_PKG_VERSION"), host_triple());
    let written: Vec<String> = fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(written, [format!("{name}.tar.gz")], "{said}");

    // Unpacked elsewhere, on a PATH with only what the CLI, its hooks and
    // tmux need: no cargo there.
    let unpacked = env.sandbox.root().join("unpacked");
    fs::create_dir_all(&unpacked).unwrap();
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(dist.join(format!("{name}.tar.gz")))
        .arg("-C")
        .arg(&unpacked)
        .output()
        .unwrap();
    assert!(untar.status.success(), "{}", printed(&untar));
    let folder = unpacked.join(&name);
    let path = "/usr/bin:/bin";
    let cargo = Command::new("sh")
        .args(["-c", "command -v cargo"])
        .env_clear()
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        !cargo.status.success(),
        "cargo is on the test's PATH {path}: {}",
        printed(&cargo)
    );
    env.extra_env.push(("PATH".into(), path.into()));

    // A fresh HOME: the CLI's settings, ktr's config where the plugin's
    // hooks look for it, and the archive's two install commands.
    env.prepare_interactive(&["Bash", "mcp__plugin_ktr_ktr"]);
    let config = env.sandbox.home.join(".config/ktr/config.toml");
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    fs::write(&config, config_text(&env, &env.sandbox.state)).unwrap();
    let marketplace = folder.display().to_string();
    for args in [
        &["plugin", "marketplace", "add", marketplace.as_str()][..],
        &["plugin", "install", "ktr@ktr"],
    ] {
        let out = env.command(args).output().unwrap();
        assert!(out.status.success(), "claude {args:?}: {}", printed(&out));
    }
    let installed = settings_of(&env);
    assert_eq!(installed["enabledPlugins"]["ktr@ktr"], true, "{installed}");

    let (tmux, _store, done) = rebuilt_in_place(&env, &socket, &api, |_, _| {});
    assert!(
        fs::read_to_string(env.transcript(done.candidate.unwrap().session_id.as_ref())).is_ok(),
        "the rebuilt session's transcript"
    );
    drop(tmux);
}
