//! The three targets of SPEC §12 against a real private tmux server and
//! stand-in systemctl / claude programs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::support::{Sandbox, TmuxServer, stand_in, wait_for};
use ktr_base::config::Config;
use ktr_base::ids::SessionId;
use ktr_pipeline::process;
use ktr_pipeline::targets::{Pointer, Systemd, Target, Tmux};

const SESSION: &str = "0b7c9a4e-5d3f-4e21-9c8a-1f2e3d4c5b6a";

fn session() -> SessionId {
    SessionId::parse(SESSION).unwrap()
}

/// A config whose resume command is the stand-in claude, recording to `record`.
fn config(sandbox: &Sandbox, record: &Path, mode: &str) -> Config {
    Config::from_toml(&format!(
        r#"project_dir = {project:?}
claude_workdir = {work:?}
resume_command = [{claude:?}, "--resume", "{{session_id}}", "--append-system-prompt", "be kind"]
resume_env = {{ FAKE_CLAUDE_RECORD = {record:?}, FAKE_CLAUDE_MARKER = "hello world", FAKE_CLAUDE_MODE = {mode:?} }}
"#,
        project = sandbox.project,
        work = sandbox.work,
        claude = stand_in("fake-claude"),
    ))
    .unwrap()
}

fn tmux_target(server: &TmuxServer) -> Target {
    Target::Tmux(Tmux {
        program: "tmux".into(),
        socket: Some(server.socket.clone()),
        target: "t:0.0".into(),
        bindings: None,
    })
}

#[test]
fn tmux_identity_is_the_pane_pid() {
    let server = TmuxServer::start();
    let target = tmux_target(&server);
    let pid: u32 = target.identity().unwrap().parse().unwrap();
    assert_eq!(
        pid.to_string(),
        server.tmux(&["display-message", "-p", "-t", "t:0.0", "#{pane_pid}"])
    );
    // tmux forks the pane's process from the server: until it has run
    // `exec` its command line is the server's.
    let execed = crate::support::wait_for(std::time::Duration::from_secs(5), || {
        process::cmdline(pid).is_some_and(|argv| argv == ["sleep", "3600"])
    });
    assert!(execed, "{:?}", process::cmdline(pid));
    let missing = Target::Tmux(Tmux {
        program: "tmux".into(),
        socket: Some(server.socket.clone()),
        target: "nosuch:0.0".into(),
        bindings: None,
    });
    let err = missing.identity().unwrap_err();
    assert!(err.message.contains("nosuch:0.0"), "{err}");
}

#[test]
fn tmux_switch_respawns_the_pane_with_workdir_env_and_argv() {
    let sandbox = Sandbox::new();
    let server = TmuxServer::start();
    let target = tmux_target(&server);
    let before = target.identity().unwrap();
    let record = sandbox.root().join("claude.record");
    let config = config(&sandbox, &record, "stay");
    target.switch(&session(), &config).unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || record.exists()),
        "the resumed program never started"
    );
    let text = fs::read_to_string(&record).unwrap();
    let expected = format!(
        "cwd={}\nmarker=hello world\narg=--resume\narg={SESSION}\narg=--append-system-prompt\narg=be kind\n",
        sandbox.work.canonicalize().unwrap().display()
    );
    assert_eq!(text, expected);
    let after = target.identity().unwrap();
    assert_ne!(before, after, "the pane runs a new process");
    assert!(
        !process::pid_alive(before.parse().unwrap()),
        "the old process was killed"
    );
    let healthy = target
        .health(&session(), Duration::from_millis(1200))
        .unwrap();
    assert_eq!(healthy, after);
    let err = target
        .health(
            &SessionId::parse("another-session").unwrap(),
            Duration::from_millis(300),
        )
        .unwrap_err();
    assert!(
        err.message.contains("does not run session another-session"),
        "{err}"
    );
}

#[test]
fn tmux_health_fails_when_the_resumed_program_exits() {
    let sandbox = Sandbox::new();
    let server = TmuxServer::start();
    // Keep the dead pane around so the server survives and reports it dead.
    server.tmux(&["set-option", "-g", "remain-on-exit", "on"]);
    let target = tmux_target(&server);
    let record = sandbox.root().join("claude.record");
    target
        .switch(&session(), &config(&sandbox, &record, "exit"))
        .unwrap();
    let err = target
        .health(&session(), Duration::from_millis(1500))
        .unwrap_err();
    assert!(err.message.contains(SESSION), "{err}");
    assert!(record.exists(), "it did start");
}

#[test]
fn tmux_health_fails_when_the_pane_disappears() {
    let sandbox = Sandbox::new();
    let server = TmuxServer::start();
    let target = tmux_target(&server);
    let record = sandbox.root().join("claude.record");
    target
        .switch(&session(), &config(&sandbox, &record, "exit"))
        .unwrap();
    assert!(target.health(&session(), Duration::from_secs(1)).is_err());
}

#[test]
fn tmux_switch_refuses_a_missing_workdir_and_bad_session_ids_without_touching_the_pane() {
    let sandbox = Sandbox::new();
    let server = TmuxServer::start();
    let target = tmux_target(&server);
    let before = target.identity().unwrap();
    let record = sandbox.root().join("claude.record");
    let mut config = config(&sandbox, &record, "stay");
    let err = SessionId::parse("../../etc").unwrap_err();
    assert!(err.message.starts_with("invalid session id"), "{err}");
    config.claude_workdir = sandbox.root().join("gone");
    let err = target.switch(&session(), &config).unwrap_err();
    assert!(err.message.contains("is not a directory"), "{err}");
    assert_eq!(target.identity().unwrap(), before);
}

#[test]
fn pointer_target_reads_writes_and_checks_the_file() {
    let sandbox = Sandbox::new();
    let path = sandbox.root().join("new-dir/resume_session");
    let target = Target::Pointer(Pointer { path: path.clone() });
    assert_eq!(target.identity().unwrap(), "", "no pointer yet");
    assert!(target.health(&session(), Duration::ZERO).is_err());
    let config = config(&sandbox, &sandbox.root().join("unused"), "stay");
    target.switch(&session(), &config).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), format!("{SESSION}\n"));
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(target.identity().unwrap(), SESSION);
    assert_eq!(target.health(&session(), Duration::ZERO).unwrap(), SESSION);
    let err = target
        .health(&SessionId::parse("other").unwrap(), Duration::ZERO)
        .unwrap_err();
    assert!(
        err.message.contains("names") && err.message.contains("not other"),
        "{err}"
    );
    assert!(SessionId::parse("a b").is_err());
    assert_eq!(
        target.identity().unwrap(),
        SESSION,
        "a refused switch writes nothing"
    );
}

/// Kills the emulated unit's process when the test ends.
struct Unit(std::path::PathBuf);

impl Drop for Unit {
    fn drop(&mut self) {
        if let Ok(pid) = fs::read_to_string(self.0.join("mainpid")) {
            let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        }
    }
}

#[test]
fn systemd_user_target_talks_to_the_user_manager() {
    // The system manager is tested for real (pipeline, target_binding); a
    // user manager is out of the real systemd's reach, so the calls are
    // checked against the stand-in here.
    let sandbox = Sandbox::new();
    let dir = &sandbox.path_dir;
    let _unit = Unit(dir.clone());
    std::os::unix::fs::symlink(stand_in("systemctl"), dir.join("systemctl")).unwrap();
    let pointer = sandbox.root().join("resume_session");
    fs::write(dir.join("pointer-path"), pointer.to_str().unwrap()).unwrap();
    fs::write(
        dir.join("claude"),
        stand_in("fake-claude").to_str().unwrap(),
    )
    .unwrap();
    let target = Target::Systemd(Systemd {
        systemctl: dir.join("systemctl").to_string_lossy().into_owned(),
        user: true,
        unit: "claude-session.service".into(),
        pointer: pointer.clone(),
        restart_timeout: Duration::from_secs(30),
    });
    assert_eq!(target.identity().unwrap(), "0", "the unit is stopped");

    let config = config(&sandbox, &sandbox.root().join("unused"), "stay");
    target.switch(&session(), &config).unwrap();
    assert_eq!(
        fs::read_to_string(&pointer).unwrap(),
        format!("{SESSION}\n")
    );
    let main_pid = target.identity().unwrap();
    assert_eq!(
        target
            .health(&session(), Duration::from_millis(800))
            .unwrap(),
        main_pid
    );
    let calls = fs::read_to_string(dir.join("calls")).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    let show = "--user show -p MainPID --value claude-session.service";
    assert_eq!(
        calls[..3],
        [
            show,
            "--user reset-failed claude-session.service",
            "--user restart claude-session.service"
        ]
    );
    assert!(calls[3..].iter().all(|c| *c == show), "{calls:?}");
}
