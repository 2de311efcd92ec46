//! No config needed (SPEC §2, "Zero config"): with no config file at the
//! default place the hooks serve every session whose transcript lies in a
//! project folder of Claude Code's projects folder, with the defaults
//! (state dir `~/.local/state/ktr`); a session elsewhere is refused with a
//! line that says why; a `--config` or `$KTR_CONFIG` naming a missing file
//! stays an error. Real hook binaries in a sandbox HOME, stand-in stages.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::stop_hook::message;
use crate::support::Sandbox;
use ktr_pipeline::operation::{Status, Store};
const SESSION: &str = "2e4d6f80-1a3c-4e5f-8a7b-9c0d1e2f3a4b";

/// A hook as a zero-config household runs it: the sandbox's HOME (no
/// config file in it), no `--config`, no `$KTR_CONFIG`; `flags` added.
fn zero(sandbox: &Sandbox, bin: &str, flags: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .envs(sandbox.hook_base_env())
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The state dir of a zero-config household in the sandbox.
fn default_state(sandbox: &Sandbox) -> std::path::PathBuf {
    sandbox.home.join(".local/state/ktr")
}

/// A request in the zero-config household's state dir: the store and it.
fn requested(sandbox: &Sandbox) -> (Store, ktr_pipeline::operation::Operation) {
    let store = Store::open(&default_state(sandbox)).unwrap();
    let op = store.request("zero config", "REBUILD", None).unwrap();
    (store, op)
}

/// The Stop hook with no config file, on `input`: what it printed.
fn stop(sandbox: &Sandbox, input: &str) -> String {
    Sandbox::run_hook(
        zero(sandbox, crate::support::exe("ktr-stop"), &[]),
        input,
        &[],
    )
    .0
}

#[test]
fn with_no_config_the_stop_hook_serves_a_session_of_the_projects_folder() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    let input = sandbox.stop_input(SESSION, &transcript);
    // Nothing pending: the plugin's hook runs (it serves this session)
    // and has nothing to say.
    let (out, code) = Sandbox::run_hook(
        zero(&sandbox, crate::support::exe("ktr-stop"), &["--plugin"]),
        &input,
        &[],
    );
    assert_eq!((out.as_str(), code), ("{\"suppressOutput\":true}\n", 0));

    // A request in the default state dir is bound to this session and
    // its prepare started, without a --config.
    let (store, op) = requested(&sandbox);
    let out = stop(&sandbox, &input);
    assert!(message(&out).contains("rebuild scheduled"), "{out}");
    let bound = store.load(&op.id).unwrap();
    assert_eq!(bound.session_id.as_deref(), Some(SESSION));
    assert_eq!(bound.transcript_path.as_deref(), Some(transcript.as_path()));
    let runs = sandbox.wait_records("ktr-prepare", 1);
    let argv = &runs[0].1;
    assert!(
        argv.iter().any(|a| a == op.id.as_str()) && !argv.iter().any(|a| a == "--config"),
        "{argv:?}"
    );
}

#[test]
fn a_session_outside_the_projects_folder_is_refused_with_a_line_saying_why() {
    let sandbox = Sandbox::new();
    let elsewhere = sandbox.root().join("elsewhere/-w");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let transcript = elsewhere.join(format!("{SESSION}.jsonl"));
    std::fs::write(&transcript, "{\"type\":\"user\"}\n").unwrap();
    let input = sandbox.stop_input(SESSION, &transcript);
    let (store, op) = requested(&sandbox);
    let out = stop(&sandbox, &input);
    let line = message(&out);
    let projects = sandbox.home.join(".claude/projects");
    assert!(
        line.contains(&transcript.display().to_string())
            && line.contains(&format!(
                "Claude Code's projects folder {}",
                projects.display()
            ))
            && line.contains("stays pending"),
        "{line}"
    );
    let untouched = store.load(&op.id).unwrap();
    assert_eq!(
        (untouched.status, untouched.session_id),
        (Status::Pending, None)
    );
    assert!(sandbox.records("ktr-prepare").is_empty());
    // The plugin's hook is silent there: ktr does not serve it.
    let (out, _) = Sandbox::run_hook(
        zero(&sandbox, crate::support::exe("ktr-stop"), &["--plugin"]),
        &input,
        &[],
    );
    assert_eq!(out, "");
    // $CLAUDE_CONFIG_DIR moves Claude Code's projects folder, and with it
    // what ktr serves.
    let config_dir = sandbox.root().join("elsewhere");
    let env = [(
        "CLAUDE_CONFIG_DIR".to_string(),
        config_dir.display().to_string(),
    )];
    std::fs::create_dir_all(config_dir.join("projects")).unwrap();
    let moved = config_dir.join("projects/-w");
    std::fs::rename(&elsewhere, &moved).unwrap();
    let input = sandbox.stop_input(SESSION, &moved.join(format!("{SESSION}.jsonl")));
    let (out, _) = Sandbox::run_hook(
        zero(&sandbox, crate::support::exe("ktr-stop"), &[]),
        &input,
        &env,
    );
    assert!(message(&out).contains("rebuild scheduled"), "{out}");
}

#[test]
fn a_named_config_file_that_is_missing_stays_an_error() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    let input = sandbox.stop_input(SESSION, &transcript);
    let missing = sandbox.root().join("missing.toml");
    let env = [("KTR_CONFIG".to_string(), missing.display().to_string())];
    for (cmd, env) in [
        (
            zero(&sandbox, crate::support::exe("ktr-stop"), &[]),
            &env[..],
        ),
        (
            {
                let mut cmd = zero(&sandbox, crate::support::exe("ktr-stop"), &["--config"]);
                cmd.arg(&missing);
                cmd
            },
            &[][..],
        ),
    ] {
        let (out, _) = Sandbox::run_hook(cmd, &input, env);
        let line = message(&out);
        assert!(
            line.contains(&missing.display().to_string()) && line.contains("does not exist"),
            "{line}"
        );
    }
    assert!(
        !Path::new(&default_state(&sandbox)).exists(),
        "no default state dir is made for a config that is not there"
    );
    // Without them, the same session is served.
    let (out, _) = Sandbox::run_hook(
        zero(&sandbox, crate::support::exe("ktr-stop"), &["--plugin"]),
        &input,
        &[],
    );
    assert_eq!(out, "{\"suppressOutput\":true}\n");
}

#[test]
fn a_session_whose_claude_code_runs_in_no_tmux_pane_is_not_switched_and_says_why() {
    let sandbox = Sandbox::new();
    let transcript = sandbox.transcript(SESSION);
    let input = sandbox.stop_input(SESSION, &transcript);
    let (store, op) = requested(&sandbox);
    // The hook's Claude Code: a process outside tmux (`timeout`, not a
    // shell, so it is the hook's runner), in the project's working
    // directory; the real stages beside the hook.
    let bin_dir = Path::new(crate::support::exe("ktr-stop")).parent().unwrap();
    let mut cmd = Command::new("timeout");
    cmd.env_clear()
        .envs(sandbox.hook_base_env())
        .env("KTR_BIN_DIR", bin_dir)
        .current_dir(&sandbox.work)
        .args(["60", crate::support::exe("ktr-stop")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (out, _) = Sandbox::run_hook(cmd, &input, &[]);
    assert!(message(&out).contains("rebuild scheduled"), "{out}");
    let done = crate::support::wait_status(
        &store,
        "prepare to refuse",
        std::time::Duration::from_secs(30),
        Status::is_terminal,
        || std::fs::read_to_string(store.worker_log()).unwrap_or_default(),
    );
    assert_eq!(done.id, op.id);
    assert_eq!(done.status, Status::Failed, "{done:?}");
    let error = done.error.unwrap_or_default();
    assert!(
        error.contains("no target") && error.contains("not switching"),
        "{error}"
    );
    assert!(done.candidate.is_none(), "nothing was written");
}

#[test]
fn doctor_without_a_config_says_what_ktr_serves_and_how() {
    let sandbox = Sandbox::new();
    sandbox.transcript(SESSION);
    let doctor = |dir: &Path| {
        let out = Command::new(crate::support::exe("ktr"))
            .args(["doctor", "--json"])
            .env_clear()
            .envs(sandbox.hook_base_env())
            .current_dir(dir)
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        let config = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "config")
            .cloned()
            .unwrap();
        assert_eq!(report["config_error"], false, "{report}");
        assert_eq!(config["ok"], true, "{config}");
        config["detail"].as_str().unwrap().to_string()
    };
    let projects = sandbox.home.join(".claude/projects");
    let default = sandbox.home.join(".config/ktr/config.toml");
    // In a project's working directory: that session's project too.
    let here = doctor(&sandbox.work);
    for said in [
        format!("no config file at {}", default.display()),
        format!(
            "every Claude Code session whose transcript lies in {}",
            projects.display()
        ),
        "found from that process".to_string(),
        format!(
            "a session started here: project {}",
            sandbox.project.display()
        ),
    ] {
        assert!(here.contains(&said), "{said:?} not in {here}");
    }
    // Anywhere else: what is served, without a project.
    let elsewhere = doctor(sandbox.root());
    assert!(
        elsewhere.contains("every Claude Code session") && !elsewhere.contains("started here"),
        "{elsewhere}"
    );
}
