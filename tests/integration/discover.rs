//! The target is found, not configured (SPEC §12, "Discovery"): the tmux
//! pane a session's Claude Code process runs in, from its `TMUX` and
//! `TMUX_PANE` (a hint), accepted only when the pane's `#{pane_pid}` is the
//! process or an ancestor of it; a configured `tmux_target` wins. Against
//! real private tmux servers, with `sleep` standing in for Claude Code.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use crate::support::{TmuxServer, wait_for};
use ktr_base::config::{Config, PaneChoice, encode_project_name};
use ktr_pipeline::process::{self, ProcessId};
use ktr_pipeline::targets::discover::{Found, pane_of, settle};
use ktr_pipeline::targets::{Target, Tmux};

/// A server whose first pane runs `sh -c "COMMAND; true"` (the shell
/// stays: the command runs as the pane process's child) in `dir`.
fn server_running(command: &str, dir: &Path) -> TmuxServer {
    let line = format!("{command}; true");
    let dir = dir.to_string_lossy().into_owned();
    TmuxServer::start_on(
        &TmuxServer::unique_socket("ktr-discover"),
        None,
        &[
            "-s", "d", "-x", "80", "-y", "24", "-c", &dir, "sh", "-c", &line,
        ],
    )
}

/// The process whose command line is `argv` below the pane `pane`.
#[track_caller]
fn child_in(server: &TmuxServer, pane: &str, argv: &[&str]) -> ProcessId {
    let root: u32 = server
        .tmux(&["display-message", "-p", "-t", pane, "#{pane_pid}"])
        .parse()
        .unwrap();
    let mut found = None;
    let ok = wait_for(Duration::from_secs(10), || {
        found = process::with_descendants(root)
            .into_iter()
            .find(|p| process::cmdline(*p).is_some_and(|a| a == argv));
        found.is_some()
    });
    assert!(ok, "no {argv:?} below pane {pane} (pid {root})");
    ProcessId::of(found.unwrap()).unwrap()
}

fn pane_id(server: &TmuxServer, pane: &str) -> String {
    server.tmux(&["display-message", "-p", "-t", pane, "#{pane_id}"])
}

fn found_pane(server: &TmuxServer, id: &str) -> Found {
    Found::Pane(Tmux {
        program: "tmux".into(),
        socket: Some(server.socket_path().display().to_string()),
        target: id.to_string(),
        bindings: None,
    })
}

#[test]
fn the_pane_a_process_runs_in_is_found_from_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_running("sleep 3601", dir.path());
    let claude = child_in(&server, "d:0.0", &["sleep", "3601"]);
    let id = pane_id(&server, "d:0.0");
    // The pane's process is an ancestor of it.
    assert_eq!(pane_of(claude, None), found_pane(&server, &id));
    // The pane's process itself.
    let root = ProcessId::of(
        server
            .tmux(&["display-message", "-p", "-t", "d:0.0", "#{pane_pid}"])
            .parse()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(pane_of(root, None), found_pane(&server, &id));
}

#[test]
fn a_hint_naming_another_pane_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_running("sleep 3602", dir.path());
    let first = pane_id(&server, "d:0.0");
    // A process in a second pane whose TMUX_PANE names the first one.
    let line = format!("env TMUX_PANE={first} sleep 3603; true");
    server.tmux(&["new-window", "-d", "-t", "d:1", "sh", "-c", &line]);
    let liar = child_in(&server, "d:1.0", &["sleep", "3603"]);
    let Found::Nowhere(why) = pane_of(liar, None) else {
        panic!("a pane that does not run the process was taken");
    };
    assert!(
        why.contains(&first) && why.contains("not it nor an ancestor"),
        "{why}"
    );

    // A process outside tmux with that server's TMUX and a pane id.
    let mut outside: Child = Command::new("sleep")
        .arg("3604")
        .env("TMUX", format!("{},1,0", server.socket_path().display()))
        .env("TMUX_PANE", &first)
        .spawn()
        .unwrap();
    let forged = ProcessId::of(outside.id()).unwrap();
    assert!(matches!(pane_of(forged, None), Found::Nowhere(_)));
    // And one with no tmux in its environment at all.
    let mut plain: Child = Command::new("sleep")
        .arg("3605")
        .env_remove("TMUX")
        .env_remove("TMUX_PANE")
        .spawn()
        .unwrap();
    let Found::Nowhere(why) = pane_of(ProcessId::of(plain.id()).unwrap(), None) else {
        panic!("a process outside tmux was given a pane");
    };
    assert!(why.contains("does not run inside tmux"), "{why}");
    for child in [&mut outside, &mut plain] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The config a session of the project for `workdir` gets with `text`.
fn config_for(text: &str, workdir: &Path) -> Config {
    let project = Path::new("/nonexistent/projects").join(encode_project_name(workdir));
    let mut config = Config::from_toml(&format!("project_dir = {project:?}\n{text}")).unwrap();
    // As a session's config: its project folder, not a configured one.
    config.project_dir_set = false;
    config
}

#[test]
fn settling_a_config_fills_the_pane_and_workdir_unless_configured() {
    let dir = tempfile::tempdir().unwrap();
    let workdir = dir.path().canonicalize().unwrap();
    let server = server_running("sleep 3606", &workdir);
    let claude = child_in(&server, "d:0.0", &["sleep", "3606"]);
    let id = pane_id(&server, "d:0.0");

    let mut found = config_for("", &workdir);
    found.pane = PaneChoice::Find;
    settle(&mut found, Some(claude));
    assert_eq!(found.pane, PaneChoice::Found);
    assert_eq!(found.claude_workdir, workdir);
    let Target::Tmux(t) = Target::from_config(&found) else {
        panic!("{found:?}");
    };
    assert_eq!(
        (t.target.as_str(), t.socket),
        (
            id.as_str(),
            Some(server.socket_path().display().to_string())
        )
    );

    // A configured tmux_target wins (and its server), and a configured
    // claude_workdir stays.
    let mut configured = config_for(
        "tmux_target = \"cc:3.0\"\ntmux_socket = \"elsewhere\"\nclaude_workdir = \"/w\"",
        &workdir,
    );
    settle(&mut configured, Some(claude));
    assert_eq!(configured.pane, PaneChoice::Configured);
    assert_eq!(configured.claude_workdir, Path::new("/w"));
    let Target::Tmux(t) = Target::from_config(&configured) else {
        panic!("{configured:?}");
    };
    assert_eq!(t.target, "cc:3.0");

    // Nothing configured and no pane: no target, and it says why.
    let mut outside = Command::new("sleep")
        .arg("3607")
        .env_remove("TMUX")
        .env_remove("TMUX_PANE")
        .spawn()
        .unwrap();
    let mut none = config_for("", &workdir);
    settle(&mut none, ProcessId::of(outside.id()));
    let target = Target::from_config(&none);
    let Target::Unfound(why) = &target else {
        panic!("{target:?}");
    };
    assert!(why.why.contains("does not run inside tmux"), "{why}");
    let err = target.identity().unwrap_err();
    assert!(
        err.find::<ktr_pipeline::targets::NoTarget>().is_some(),
        "{err}"
    );
    let _ = outside.kill();
    let _ = outside.wait();
}
