//! A private tmux server (`tmux -L <socket>`): the tests' own, never a
//! user's.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

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
    #[track_caller]
    pub fn tmux(&self, args: &[&str]) -> String {
        let out = self.command(args).output().unwrap();
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    /// Type `words` into `pane` one character at a time, 30–150 ms apart,
    /// as a person at a keyboard does.
    pub fn type_slowly(&self, pane: &str, words: &str, rng: &mut super::rng::Rng) {
        for c in words.chars() {
            self.tmux(&["send-keys", "-t", pane, "-l", &c.to_string()]);
            std::thread::sleep(std::time::Duration::from_millis(
                rng.between(30, 150).unsigned_abs(),
            ));
        }
    }

    /// Enter into `pane`, a moment after the last key.
    pub fn press_enter(&self, pane: &str) {
        std::thread::sleep(std::time::Duration::from_millis(120));
        self.tmux(&["send-keys", "-t", pane, "Enter"]);
    }

    /// The server's socket path (`#{socket_path}`).
    pub fn socket_path(&self) -> &std::path::Path {
        &self.socket_path
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

    /// A person's terminal: a server of its own (session `out`, 110×35)
    /// whose pane runs `tmux attach -t SESSION` to this server; returned
    /// once this server lists the client.
    #[track_caller]
    pub fn person_attached(&self, session: &str) -> TmuxServer {
        let person = TmuxServer::start_on(
            &TmuxServer::unique_socket("ktr-person"),
            None,
            &[
                "-s",
                "out",
                "-x",
                "110",
                "-y",
                "35",
                "--",
                "tmux",
                "-L",
                &self.socket,
                "attach",
                "-t",
                session,
            ],
        );
        let attached = super::wait_for(std::time::Duration::from_secs(10), || {
            self.tmux(&["list-clients", "-F", "#{client_name}"])
                .lines()
                .count()
                == 1
        });
        assert!(attached, "the person's client never attached");
        person
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
