//! Helpers shared by the integration tests: a throw-away installation (temp
//! HOME, project, state dir, stand-in programs) and a private tmux server.
//! Nothing here can reach a real installation or a real Claude Code.
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use ktr::pipeline::operation::{Operation, Status, Store};

pub mod rig;

/// A stand-in program from `tests/support/`.
pub fn support(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(name)
}

/// Poll `cond` every 20 ms for up to `timeout`.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A temp directory laid out like an installation.
pub struct Sandbox {
    pub tmp: tempfile::TempDir,
    pub home: PathBuf,
    pub project: PathBuf,
    pub state: PathBuf,
    /// `KTR_BIN_DIR`: stand-in stages.
    pub bin: PathBuf,
    /// Put first on PATH: stand-in system tools.
    pub path_dir: PathBuf,
    /// Where stand-ins record their argv.
    pub records: PathBuf,
    pub work: PathBuf,
    pub config: PathBuf,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let sandbox = Sandbox {
            home: root.join("home"),
            project: root.join("home/.claude/projects/-work"),
            state: root.join("state"),
            bin: root.join("bin"),
            path_dir: root.join("path"),
            records: root.join("records"),
            work: root.join("work"),
            config: root.join("config.toml"),
            tmp,
        };
        for dir in [
            &sandbox.home,
            &sandbox.project,
            &sandbox.bin,
            &sandbox.path_dir,
            &sandbox.records,
            &sandbox.work,
        ] {
            fs::create_dir_all(dir).unwrap();
        }
        for stage in ["ktr-prepare", "ktr-rollback"] {
            std::os::unix::fs::symlink(support("fake-stage"), sandbox.bin.join(stage)).unwrap();
        }
        sandbox.write_config("");
        sandbox
    }

    /// Write the config file: a safe base (a tmux target on no server, a
    /// resume command that cannot start Claude) plus `extra` TOML lines.
    pub fn write_config(&self, extra: &str) {
        let text = format!(
            "project_dir = {:?}\nstate_dir = {:?}\nclaude_workdir = {:?}\ntmux_target = \"ktr-test-nowhere:0.0\"\nresume_command = [{:?}, \"--resume\", \"{{session_id}}\"]\n{extra}\n",
            self.project,
            self.state,
            self.work,
            support("fake-claude"),
        );
        fs::write(&self.config, text).unwrap();
    }

    /// Create `<project>/<session>.jsonl`.
    pub fn transcript(&self, session: &str) -> PathBuf {
        let path = self.project.join(format!("{session}.jsonl"));
        fs::write(&path, "{\"type\":\"user\"}\n").unwrap();
        path
    }

    pub fn store(&self) -> Store {
        Store::open(&self.state).unwrap()
    }

    /// Drive operation `id` through `path` with the library, as the stages
    /// would, after `edit`; returns it.
    pub fn walk(&self, id: &str, path: &[Status], edit: impl FnOnce(&mut Operation)) -> Operation {
        self.store()
            .with_lock(|tx| {
                let mut op = tx.load(id)?;
                edit(&mut op);
                for to in path {
                    tx.transition(&mut op, *to, "test")?;
                }
                Ok(op)
            })
            .unwrap()
    }

    /// The Stop hook input Claude Code would send for `session`.
    pub fn stop_input(&self, session: &str, transcript: &Path) -> String {
        serde_json::json!({
            "session_id": session,
            "transcript_path": transcript,
            "cwd": self.work,
            "hook_event_name": "Stop",
            "stop_hook_active": false,
            "prompt_id": "p1",
            "last_assistant_message": "done",
        })
        .to_string()
    }

    /// A hook command with a clean environment pointing only into the sandbox.
    pub fn command(&self, bin: &str) -> Command {
        let mut cmd = Command::new(bin);
        cmd.env_clear()
            .env("HOME", &self.home)
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", self.path_dir.display()),
            )
            .env("KTR_BIN_DIR", &self.bin)
            .env("KTR_TEST_RECORDS", &self.records)
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Run a hook with `stdin`; returns (stdout, exit code).
    pub fn hook(&self, bin: &str, stdin: &str) -> (String, i32) {
        self.hook_env(bin, stdin, &[])
    }

    /// [`Sandbox::hook`] with extra environment variables.
    pub fn hook_env(&self, bin: &str, stdin: &str, env: &[(String, String)]) -> (String, i32) {
        let mut child = self
            .command(bin)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            String::from_utf8(out.stdout).unwrap(),
            out.status.code().unwrap_or(-1),
        )
    }

    /// The argv recorded by stand-in `name` (`<name>.<pid>` files), with pids.
    pub fn records(&self, name: &str) -> Vec<(u32, Vec<String>)> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.records).unwrap().flatten() {
            let file = entry.file_name().into_string().unwrap();
            if let Some(pid) = file.strip_prefix(&format!("{name}.")) {
                let text = fs::read_to_string(entry.path()).unwrap();
                out.push((
                    pid.parse().unwrap(),
                    text.lines().map(String::from).collect(),
                ));
            }
        }
        out
    }

    /// Wait until stand-in `name` has recorded `n` runs.
    pub fn wait_records(&self, name: &str, n: usize) -> Vec<(u32, Vec<String>)> {
        wait_for(Duration::from_secs(10), || self.records(name).len() >= n);
        self.records(name)
    }
}

/// A private tmux server (`tmux -L <socket>`): the tests' own, never a
/// user's. Killed (only this server) on drop.
pub struct TmuxServer {
    pub socket: String,
    socket_path: PathBuf,
    /// The whole environment of every tmux call (so of the server and the
    /// panes it starts), when set; else the test's own without `TMUX`.
    env: Option<Vec<(String, String)>>,
}

impl TmuxServer {
    /// A socket name no other test (or real user) has: `<prefix>-<pid>-<n>`.
    pub fn unique_socket(prefix: &str) -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        )
    }

    /// A server `ktr-test-<pid>-<n>` with one session `t` running `sleep`.
    pub fn start() -> TmuxServer {
        TmuxServer::start_on(
            &TmuxServer::unique_socket("ktr-test"),
            None,
            &["-s", "t", "-x", "80", "-y", "24", "sleep", "3600"],
        )
    }

    /// Start a server on `socket`, without any tmux config file, by
    /// `new-session -d NEW_SESSION…`; `env` as in [`TmuxServer::env`].
    pub fn start_on(
        socket: &str,
        env: Option<Vec<(String, String)>>,
        new_session: &[&str],
    ) -> TmuxServer {
        let mut server = TmuxServer {
            socket: socket.to_string(),
            socket_path: PathBuf::new(),
            env,
        };
        let mut args = vec!["-f", "/dev/null", "new-session", "-d"];
        args.extend_from_slice(new_session);
        server.tmux(&args);
        server.socket_path =
            PathBuf::from(server.tmux(&["display-message", "-p", "#{socket_path}"]));
        server
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.arg("-L")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null());
        match &self.env {
            Some(env) => cmd.env_clear().envs(env.iter().cloned()),
            None => cmd.env_remove("TMUX"),
        };
        cmd
    }

    /// Run a tmux command on this server; panics on failure. Returns stdout
    /// without trailing whitespace.
    pub fn tmux(&self, args: &[&str]) -> String {
        let out = self.command(args).output().unwrap();
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    /// The pids of every pane's process (none if the server is gone).
    pub fn pane_pids(&self) -> Vec<u32> {
        self.command(&["list-panes", "-a", "-F", "#{pane_pid}"])
            .stderr(Stdio::null())
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Kill this server (only this one); quiet if it is already gone.
    pub fn kill(&self) {
        let _ = self
            .command(&["kill-server"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // kill-server leaves the socket file behind.
        let _ = fs::remove_file(&self.socket_path);
    }
}

impl Drop for TmuxServer {
    fn drop(&mut self) {
        self.kill();
    }
}
