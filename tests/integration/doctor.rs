//! `ktr doctor` as a human runs it: the real binary in a sandbox HOME.

use std::fs;
use std::path::Path;

use crate::support::{Sandbox, TmuxServer};
use ktr_admin::settings::Edit;
use serde_json::{Value, json};

/// `ktr --config C doctor [--json]`: (stdout, exit code).
fn doctor(sb: &Sandbox, json: bool) -> (String, i32) {
    let mut cmd = sb.command(crate::support::exe("ktr"));
    cmd.arg("doctor").env_remove("KTR_TMUX_SOCKET");
    if json {
        cmd.arg("--json");
    }
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        out.status.code().unwrap_or(-1),
    )
}

/// The check named `name` of a JSON report.
#[track_caller]
fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {report:#}"))
}

fn report(sb: &Sandbox) -> Value {
    serde_json::from_str(&doctor(sb, true).0).unwrap()
}

/// Install the hooks (binaries beside `ktr`) and the MCP server into the
/// sandbox HOME, both with `--config config`.
fn install(sb: &Sandbox, config: &Path) {
    let bin_dir = Path::new(crate::support::exe("ktr")).parent().unwrap();
    Edit::merge(
        &sb.home.join(".claude/settings.json"),
        bin_dir,
        Some(config),
    )
    .unwrap()
    .apply()
    .unwrap();
    let claude_json = json!({"mcpServers": {"ktr": {
        "type": "stdio",
        "command": bin_dir.join("ktr-mcp"),
        "args": ["--config", config],
    }}});
    fs::write(sb.home.join(".claude.json"), claude_json.to_string()).unwrap();
}

#[test]
fn a_broken_config_exits_2_and_still_runs_the_checks_that_can_run() {
    let sb = Sandbox::new();
    fs::write(&sb.config, "project_dir = \"/p\"\ncolour = \"blue\"\n").unwrap();
    let (text, code) = doctor(&sb, false);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("FAIL config"), "{text}");
    assert!(
        text.contains(&format!(
            "fix: edit {}: remove or rename that key",
            sb.config.display()
        )),
        "{text}"
    );
    // hooks and mcp do not need the config; each says how to fix it.
    for name in ["hooks", "mcp"] {
        assert!(text.contains(&format!("FAIL {name}")), "{text}");
    }
    assert_eq!(text.matches("fix: ").count(), 3, "{text}");
    assert!(text.contains("the config does not load"), "{text}");

    // A missing config says how to get one.
    fs::remove_file(&sb.config).unwrap();
    let r = report(&sb);
    assert_eq!(r["config_error"], true);
    let fix = check(&r, "config")["fix"].as_str().unwrap();
    assert!(fix.contains("run ./install"), "{fix}");
}

#[test]
fn each_config_error_gets_its_own_way_out() {
    let sb = Sandbox::new();
    let path = sb.config.display().to_string();
    let cases: [(&[u8], &str); 5] = [
        // Without project_dir a file serves every session, but a systemd
        // (or pointer) household names its one project.
        (b"activation = \"systemd\"\n", "add project_dir = "),
        (b"project_dir = [\n", "fix the TOML syntax"),
        (b"project_dir = \"/p\xff\"\n", "fix the TOML syntax"),
        (
            b"project_dir = \"/p\"\ncolour = 1\n",
            "remove or rename that key",
        ),
        (
            b"project_dir = \"/p\"\nhealthcheck_seconds = 0\n",
            "set the key the message names",
        ),
    ];
    for (config, way_out) in cases {
        fs::write(&sb.config, config).unwrap();
        let r = report(&sb);
        let fix = check(&r, "config")["fix"].as_str().unwrap().to_string();
        assert!(fix.contains(way_out) && fix.contains(&path), "{fix}");
    }
}

#[test]
fn hooks_and_mcp_must_use_this_config() {
    let sb = Sandbox::new();
    sb.transcript("s1");
    install(&sb, &sb.config);
    let r = report(&sb);
    assert_eq!(check(&r, "hooks")["level"], "ok", "{r:#}");
    assert_eq!(check(&r, "mcp")["level"], "ok", "{r:#}");

    // Installed for another config: both fail and name it.
    let other = sb.root().join("other.toml");
    install(&sb, &other);
    let r = report(&sb);
    for name in ["hooks", "mcp"] {
        let c = check(&r, name);
        assert_eq!(c["level"], "fail", "{c}");
        let detail = c["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("--config {}", other.display()))
                && detail.contains(&format!("not this config {}", sb.config.display())),
            "{detail}"
        );
        let fix = c["fix"].as_str().unwrap();
        assert!(
            fix.contains(&format!("./install --config {}", sb.config.display())),
            "{fix}"
        );
    }
    // The MCP fix is a command that works as given: with --config.
    let fix = check(&r, "mcp")["fix"].as_str().unwrap();
    assert!(
        fix.contains(&format!(
            "claude mcp add --scope user ktr -- {} --config {}",
            Path::new(crate::support::exe("ktr"))
                .parent()
                .unwrap()
                .join("ktr-mcp")
                .display(),
            sb.config.display()
        )),
        "{fix}"
    );
}

#[test]
fn a_workdir_of_home_lists_each_hook_once() {
    let sb = Sandbox::new();
    // Claude Code runs in HOME: the project settings are the user's.
    let project = sb
        .home
        .join(".claude/projects")
        .join(ktr_base::config::encode_project_name(&sb.home));
    fs::create_dir_all(&project).unwrap();
    fs::write(project.join("s1.jsonl"), "{}\n").unwrap();
    fs::write(
        &sb.config,
        format!(
            "project_dir = {project:?}\nstate_dir = {:?}\nclaude_workdir = \"~\"\n",
            sb.state
        ),
    )
    .unwrap();
    install(&sb, &sb.config);
    let c = check(&report(&sb), "hooks").clone();
    assert_eq!(c["level"], "ok", "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert_eq!(detail.matches("ktr-stop").count(), 1, "{detail}");
    assert_eq!(detail.matches("ktr-ack").count(), 1, "{detail}");
}

#[test]
fn a_project_dir_before_the_first_transcript_is_a_warning_that_says_so() {
    let sb = Sandbox::new();
    fs::remove_dir(&sb.project).unwrap();
    let c = check(&report(&sb), "project dir").clone();
    assert_eq!(c["level"], "warn", "{c}");
    assert_eq!(c["ok"], true, "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.contains("does not exist yet")
            && detail.contains("creates it with its first transcript"),
        "{detail}"
    );
    // An existing folder without transcripts: the same warning.
    fs::create_dir(&sb.project).unwrap();
    let c = check(&report(&sb), "project dir").clone();
    assert_eq!(c["level"], "warn", "{c}");
    assert!(
        c["fix"].as_str().unwrap().contains("start Claude Code in"),
        "{c}"
    );
    let (text, _) = doctor(&sb, false);
    assert!(text.contains("warn project dir"), "{text}");
}

/// Configure the pane `t:0.0` of `server` as the target.
fn target_pane_on(sb: &Sandbox, server: &TmuxServer) {
    sb.write_config(&format!("tmux_socket = {:?}", server.socket));
    fs::write(
        &sb.config,
        fs::read_to_string(&sb.config)
            .unwrap()
            .replace("ktr-test-nowhere:0.0", "t:0.0"),
    )
    .unwrap();
}

#[test]
fn the_target_check_says_what_runs_in_the_pane_on_the_configured_socket() {
    let server = TmuxServer::start();
    let sb = Sandbox::new();
    sb.transcript("s1");
    target_pane_on(&sb, &server);
    // KTR_TMUX_SOCKET is removed: the config key alone picks the server.
    let c = check(&report(&sb), "target").clone();
    let detail = c["detail"].as_str().unwrap();
    assert_eq!(c["level"], "fail", "a pane running sleep is no Claude: {c}");
    assert!(
        detail.contains(&format!("(server -L {})", server.socket))
            && detail.contains("runs `sleep 3600`, not Claude Code"),
        "{detail}"
    );

    // No server on that socket: the fix names tmux_socket.
    sb.write_config("tmux_socket = \"ktr-test-no-such-server\"");
    let c = check(&report(&sb), "target").clone();
    assert_eq!(c["level"], "fail", "{c}");
    assert!(
        c["fix"].as_str().unwrap().contains("set tmux_socket"),
        "{c}"
    );
    server.kill();
}

/// A lost `active` with a request pending is repaired by
/// doctor, which says what it repaired (it used to say ok).
#[test]
fn a_lost_active_is_repaired_and_doctor_says_so() {
    let sb = Sandbox::new();
    let op = sb.store().request("big", "REBUILD", None).unwrap();
    std::fs::remove_file(sb.state.join("active")).unwrap();
    let ops = report(&sb);
    let check = check(&ops, "operations");
    assert_eq!(check["level"], "warn", "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("repaired: the state file `active` was missing")
            && detail.contains(&format!("operation {} is pending", op.id)),
        "{detail}"
    );
    assert_eq!(
        sb.store().active(),
        Some((op.id, ktr_pipeline::operation::Status::Pending))
    );
}

/// Only regular `*.jsonl` files count as transcripts.
#[test]
fn fifos_folders_and_symlinks_are_not_counted_as_transcripts() {
    let sb = Sandbox::new();
    sb.transcript("11111111-2222-4333-8444-555555555555");
    let made = std::process::Command::new("mkfifo")
        .arg(sb.project.join("fifo.jsonl"))
        .status()
        .unwrap();
    assert!(made.success());
    fs::create_dir(sb.project.join("folder.jsonl")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", sb.project.join("link.jsonl")).unwrap();
    let report = report(&sb);
    let detail = check(&report, "project dir")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        detail.contains("(1 transcripts; 3 *.jsonl entries that are not regular files"),
        "{detail}"
    );
}

/// `ktr-watch` beside the stages: without it a killed stage's operation
/// waits for the next hook, and doctor says so.
#[test]
fn doctor_warns_when_the_stage_watchdog_is_not_beside_the_stages() {
    let sb = Sandbox::new();
    sb.transcript("s1");
    let c = check(&report(&sb), "stage watchdog").clone();
    assert_eq!(c["level"], "warn", "{c}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("ktr-watch is missing: an operation whose stage dies stays in flight")
            && c["fix"].as_str().unwrap().contains("./install"),
        "{c}"
    );
    fs::copy(crate::support::exe("ktr-watch"), sb.bin.join("ktr-watch")).unwrap();
    let c = check(&report(&sb), "stage watchdog").clone();
    assert_eq!(c["level"], "ok", "{c}");
}

/// `ktr-keep` beside the stages: without it an in-place switch has no
/// popup, and doctor says what that costs; only for tmux in place.
#[test]
fn doctor_warns_when_the_key_keeper_is_not_beside_the_stages() {
    let sb = Sandbox::new();
    sb.transcript("s1");
    let c = check(&report(&sb), "key keeper").clone();
    let (detail, fix) = (c["detail"].as_str().unwrap(), c["fix"].as_str().unwrap());
    assert_eq!(c["level"], "warn", "{c}");
    assert!(
        detail.contains("ktr-keep is missing: an in-place switch runs without its popup")
            && fix.contains("./install"),
        "{c}"
    );

    fs::copy(crate::support::exe("ktr-keep"), sb.bin.join("ktr-keep")).unwrap();
    let keeper_says = |level: &str, words: &str| {
        let c = check(&report(&sb), "key keeper").clone();
        assert_eq!(c["level"], level, "{c}");
        assert!(c["detail"].as_str().unwrap().contains(words), "{c}");
    };
    // No server: the switch could not find a client to hold, and says so.
    keeper_says(
        "warn",
        "cannot find the clients showing ktr-test-nowhere:0.0",
    );
    // The pane, first with nobody watching it, then with a client.
    let server = TmuxServer::start();
    target_pane_on(&sb, &server);
    keeper_says(
        "ok",
        "no popup would open now: no tmux client shows the pane",
    );
    let _person = server.person_attached("t");
    keeper_says("ok", "a popup would open on /dev/pts/");

    sb.write_config("tmux_switch_in_place = false");
    let r = report(&sb);
    assert!(
        r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "key keeper"),
        "no keeper check when nothing switches in place: {r:#}"
    );
}
