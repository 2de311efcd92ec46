//! Running the real Claude Code CLI offline, in a throw-away HOME, against
//! the [`crate::fake_api::FakeApi`] (CLAUDE-CODE.md, "Running the real CLI
//! offline").
//!
//! The binary comes from `$KTR_CLAUDE_BIN` ([`super::claude_bin`]; the
//! tests that need it are ignored by default). The CLI never sees the
//! caller's environment: `env_clear()` plus an explicit allow-list, so no
//! inherited `CLAUDE*`/`ANTHROPIC*` variable and no real `~/.claude` can be
//! reached.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use super::fake_api::FakeApi;
use super::{ResultOrPanic, Sandbox, TmuxServer};

/// The API key the CLI is given (the fake API accepts anything).
pub const API_KEY: &str = "sk-ant-dummy-ktr-e2e-0123456789abcdefghij";

/// Variables passed through from the test's own environment.
const ALLOWED: &[&str] = &["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"];

/// A finished CLI run.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// A throw-away installation for the CLI: a [`Sandbox`] (its HOME, its
/// `work` as the CLI's cwd, its project dir where the CLI keeps that
/// directory's sessions) and a TMPDIR inside it.
pub struct ClaudeEnv {
    pub sandbox: Sandbox,
    pub bin: PathBuf,
    pub tmpdir: PathBuf,
    pub base_url: String,
    /// Extra variables for the CLI (after the fixed ones, replacing one of
    /// the same name).
    pub extra_env: Vec<(String, String)>,
    /// No `LANG`, `LC_ALL`, `LC_CTYPE` at all (a container, `env -i`, a
    /// service): the CLI, its tmux server and ktr's hooks and stages run
    /// without a UTF-8 locale.
    pub without_locale: bool,
}

impl ClaudeEnv {
    pub fn new(bin: &Path, api: &FakeApi) -> ClaudeEnv {
        let sandbox = Sandbox::new();
        let tmpdir = sandbox.root().join("tmp");
        fs::create_dir_all(&tmpdir).unwrap();
        ClaudeEnv {
            sandbox,
            bin: bin.to_path_buf(),
            tmpdir,
            base_url: api.base_url(),
            extra_env: Vec::new(),
            without_locale: false,
        }
    }

    /// A ktr config whose project is the CLI's project folder (its sessions),
    /// with `extra` TOML lines.
    #[track_caller]
    pub fn config(&self, extra: &str) -> ktr_base::config::Config {
        ktr_base::config::Config::from_toml(&format!(
            "project_dir = {:?}\nstate_dir = {:?}\nclaude_workdir = {:?}\n{extra}",
            self.sandbox.project, self.sandbox.state, self.sandbox.work,
        ))
        .or_panic(|e| format!("the test config does not parse: {e}"))
    }

    /// The transcript of `session`.
    pub fn transcript(&self, session: &str) -> PathBuf {
        self.sandbox.project.join(format!("{session}.jsonl"))
    }

    /// The complete environment the CLI runs with.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = ALLOWED
            .iter()
            .filter(|k| !(self.without_locale && (**k == "LANG" || k.starts_with("LC_"))))
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        if !self.without_locale && !env.iter().any(|(k, _)| k == "LANG") {
            env.push(("LANG".into(), "C.UTF-8".into()));
        }
        for (k, v) in [
            ("HOME", self.sandbox.home.display().to_string()),
            ("TMPDIR", self.tmpdir.display().to_string()),
            ("ANTHROPIC_BASE_URL", self.base_url.clone()),
            ("ANTHROPIC_API_KEY", API_KEY.to_string()),
            ("DISABLE_TELEMETRY", "1".into()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("DISABLE_ERROR_REPORTING", "1".into()),
            ("TERM", "xterm-256color".into()),
        ] {
            env.push((k.to_string(), v));
        }
        // An extra variable replaces a fixed one of the same name (PATH).
        env.retain(|(k, _)| !self.extra_env.iter().any(|(e, _)| e == k));
        env.extend(self.extra_env.iter().cloned());
        env
    }

    /// The CLI with `args`, in `work`, with exactly [`ClaudeEnv::env`].
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env_clear()
            .envs(self.env())
            .args(args)
            .current_dir(&self.sandbox.work)
            .stdin(Stdio::null());
        cmd
    }

    /// Run the CLI with `args` to the end (killed after `timeout`).
    #[track_caller]
    pub fn run(&self, args: &[&str], timeout: Duration) -> Run {
        let out = self.tmpdir.join("run.stdout");
        let err = self.tmpdir.join("run.stderr");
        let start = Instant::now();
        let mut child = self
            .command(args)
            .stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(&err).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > timeout {
                // Only the group this test started.
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
                let status = child.wait().unwrap();
                panic!(
                    "claude {args:?} did not finish in {timeout:?} ({status}); stderr: {}",
                    fs::read_to_string(&err).unwrap_or_default()
                );
            }
            thread::sleep(Duration::from_millis(20));
        };
        Run {
            status,
            stdout: fs::read_to_string(&out).unwrap_or_default(),
            stderr: fs::read_to_string(&err).unwrap_or_default(),
        }
    }

    /// `claude -p --resume SESSION PROMPT`.
    /// Write `candidate` as session `id`'s transcript, resume it with
    /// `claude -p --resume id probe` (which must succeed) and return the
    /// request the fake `api` got carrying `probe`.
    #[track_caller]
    pub fn resume_written(
        &self,
        api: &super::fake_api::FakeApi,
        id: &str,
        candidate: &[u8],
        probe: &str,
    ) -> super::fake_api::Logged {
        fs::create_dir_all(&self.sandbox.project).unwrap();
        fs::write(self.transcript(id), candidate).unwrap();
        let run = self.resume(id, probe);
        assert!(
            run.status.success(),
            "claude --resume failed: {} {}",
            run.stdout,
            run.stderr
        );
        api.wait_turn(probe, Duration::from_secs(5))
            .expect("a request carried the probe")
    }

    pub fn resume(&self, session: &str, prompt: &str) -> Run {
        self.run(
            &["-p", "--resume", session, prompt],
            Duration::from_secs(120),
        )
    }

    /// What interactive mode needs before it shows a prompt: onboarding
    /// done, the API key approved, the workdir trusted, the `default`
    /// permission mode (auto mode runs a server-side check a fake API
    /// cannot pass) and `allow` for the tools the fake model calls.
    pub fn prepare_interactive(&self, allow: &[&str]) {
        let key_tail = &API_KEY[API_KEY.len() - 20..];
        let mut state = self.claude_json();
        state["hasCompletedOnboarding"] = json!(true);
        state["hasSeenAutoDefaultNudge"] = json!(true);
        state["customApiKeyResponses"] = json!({"approved": [key_tail], "rejected": []});
        state["projects"][self.sandbox.work.display().to_string()]["hasTrustDialogAccepted"] =
            json!(true);
        self.write_claude_json(&state);
        let settings_path = self.sandbox.home.join(".claude/settings.json");
        let mut settings: serde_json::Value = fs::read(&settings_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_else(|| json!({}));
        settings["permissions"]["defaultMode"] = json!("default");
        settings["permissions"]["allow"] = json!(allow);
        fs::create_dir_all(settings_path.parent().unwrap()).unwrap();
        fs::write(
            &settings_path,
            serde_json::to_string_pretty(&settings).unwrap(),
        )
        .unwrap();
    }

    /// `$HOME/.claude.json` (or `{}`).
    /// Install ktr as a household would: the installer of `repo` with the
    /// binaries in `bin_dir`, into `<sandbox>/prefix/bin`, hooks into the
    /// sandbox's settings.json, and the MCP server registered by the real
    /// `claude mcp add` (the CLI is first on PATH). Panics with what the
    /// installer said.
    #[track_caller]
    pub fn install_ktr(&self, repo: &Path, bin_dir: &Path, config: &Path) {
        let path_dir = &self.sandbox.path_dir;
        fs::create_dir_all(path_dir).unwrap();
        let _ = std::os::unix::fs::symlink(&self.bin, path_dir.join("claude"));
        let path = self
            .env()
            .into_iter()
            .find(|(k, _)| k == "PATH")
            .map_or_else(|| "/usr/bin:/bin".to_string(), |(_, v)| v);
        let out = Command::new("sh")
            .arg(repo.join("install"))
            .arg("--prefix")
            .arg(self.sandbox.root().join("prefix/bin"))
            .arg("--bin-dir")
            .arg(bin_dir)
            .arg("--settings")
            .arg(self.sandbox.home.join(".claude/settings.json"))
            .arg("--config")
            .arg(config)
            .env_clear()
            .envs(self.env())
            .env("PATH", format!("{}:{path}", path_dir.display()))
            .current_dir(&self.sandbox.work)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "install failed: {said}");
        let registered = &self.claude_json()["mcpServers"]["ktr"];
        assert!(
            registered["command"]
                .as_str()
                .is_some_and(|c| c.ends_with("/prefix/bin/ktr-mcp")),
            "claude mcp add did not register ktr-mcp: {registered}; install said: {said}"
        );
    }

    pub fn claude_json(&self) -> serde_json::Value {
        fs::read(self.sandbox.home.join(".claude.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_else(|| json!({}))
    }

    pub fn write_claude_json(&self, value: &serde_json::Value) {
        fs::write(
            self.sandbox.home.join(".claude.json"),
            serde_json::to_string_pretty(value).unwrap(),
        )
        .unwrap();
    }
}

/// A private tmux server (`tmux -L ktr-e2e-<pid>-<n>`) whose one pane
/// (`cc:0.0`) runs the interactive CLI. The server is started with the
/// CLI's environment only, so panes it respawns get that environment too.
/// Killed (only this server) on drop.
pub struct Tmux {
    pub server: TmuxServer,
}

/// The pane the CLI runs in.
pub const PANE: &str = "cc:0.0";

impl Tmux {
    /// A socket name no other test (or real user) has: `ktr-e2e-<pid>-<n>`.
    pub fn unique_socket() -> String {
        TmuxServer::unique_socket("ktr-e2e")
    }

    /// Start the server running `claude ARGS` in `env.work`.
    pub fn start(env: &ClaudeEnv, args: &[&str]) -> Tmux {
        Tmux::start_on(env, &Tmux::unique_socket(), args)
    }

    /// [`Tmux::start`] on a given socket name (from
    /// [`Tmux::unique_socket`]), for tests that must tell the processes in
    /// the pane which server they run in before it starts.
    pub fn start_on(env: &ClaudeEnv, socket: &str, args: &[&str]) -> Tmux {
        Tmux::start_with(env, socket, &[], args)
    }

    /// [`Tmux::start_on`] with the CLI run by a shell that waits for it
    /// (`sh -c '"$0" "$@"'`): the CLI is then not the pane's own process,
    /// and tmux does not resume it when it is stopped (it sends SIGCONT to a
    /// stopped pane process).
    pub fn start_under_shell(env: &ClaudeEnv, socket: &str, args: &[&str]) -> Tmux {
        Tmux::start_with(env, socket, &["sh", "-c", "\"$0\" \"$@\""], args)
    }

    fn start_with(env: &ClaudeEnv, socket: &str, wrapper: &[&str], args: &[&str]) -> Tmux {
        let work = env.sandbox.work.display().to_string();
        let bin = env.bin.display().to_string();
        let mut new_session = vec!["-s", "cc", "-x", "160", "-y", "50", "-c", &work, "--"];
        new_session.extend_from_slice(wrapper);
        new_session.push(&bin);
        new_session.extend_from_slice(args);
        let server = TmuxServer::start_on(socket, Some(env.env()), &new_session);
        server.tmux(&["set-option", "-g", "remain-on-exit", "off"]);
        Tmux { server }
    }

    /// Run a tmux command on this server; panics on failure.
    pub fn run(&self, args: &[&str]) -> String {
        self.server.tmux(args)
    }

    /// The visible screen of `pane`.
    pub fn screen_of(&self, pane: &str) -> String {
        self.run(&["capture-pane", "-p", "-t", pane])
    }

    /// Wait until `cond(screen)` holds; panics with the screen after `timeout`.
    #[track_caller]
    pub fn wait_screen(&self, what: &str, timeout: Duration, cond: impl Fn(&str) -> bool) {
        self.wait_screen_of(PANE, what, timeout, cond);
    }

    /// [`Tmux::wait_screen`] for `pane`.
    #[track_caller]
    pub fn wait_screen_of(
        &self,
        pane: &str,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&str) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen_of(pane);
            if cond(&screen) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; screen:\n{screen}"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until the CLI is idle at its prompt (no turn running).
    pub fn wait_idle(&self, timeout: Duration) {
        self.wait_idle_of(PANE, timeout);
    }

    /// [`Tmux::wait_idle`] for `pane`.
    pub fn wait_idle_of(&self, pane: &str, timeout: Duration) {
        self.wait_screen_of(pane, "an idle prompt", timeout, |s| {
            // ktr's statusline (installed by `install`) takes the footer
            // line where Claude Code otherwise says `? for shortcuts`.
            !s.contains("esc to interrupt")
                && (s.contains("? for shortcuts") || s.contains(" · ktr "))
        });
    }

    /// Type `text` literally, then Enter.
    pub fn type_line(&self, text: &str) {
        self.type_line_to(PANE, text);
    }

    /// [`Tmux::type_line`] into `pane`.
    pub fn type_line_to(&self, pane: &str, text: &str) {
        self.run(&["send-keys", "-t", pane, "-l", text]);
        thread::sleep(Duration::from_millis(150));
        self.run(&["send-keys", "-t", pane, "Enter"]);
    }

    /// `#{pane_pid}` of the CLI's pane.
    pub fn pane_pid(&self) -> u32 {
        self.run(&["display-message", "-p", "-t", PANE, "#{pane_pid}"])
            .parse()
            .unwrap()
    }

    /// The command line of the process running in the pane.
    pub fn pane_argv(&self) -> Vec<String> {
        let raw = fs::read(format!("/proc/{}/cmdline", self.pane_pid())).unwrap_or_default();
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let panes = self.server.pane_pids();
        self.server.kill();
        // The CLI still writes into its HOME while it exits; wait (bounded)
        // until it is gone so the temp dir can be removed whole.
        let deadline = Instant::now() + Duration::from_secs(10);
        while panes
            .iter()
            .any(|pid| ktr_pipeline::process::pid_alive(*pid))
            && Instant::now() < deadline
        {
            thread::sleep(Duration::from_millis(50));
        }
    }
}
