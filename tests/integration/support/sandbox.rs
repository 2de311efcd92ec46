//! [`Sandbox`]: the one throw-away installation every test runs in (temp
//! HOME, project, state dir, config, stand-in stages and system tools).
//! Nothing here can reach a real installation or a real Claude Code.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ktr_base::config::{Config, encode_project_name};
use ktr_pipeline::operation::{Operation, Status, Store};

use super::plan::Outcome;
use super::{stand_in, wait_for};
use ktr_base::ids::OperationId;

/// What Claude Code passes a Stop hook as `last_assistant_message`: the
/// last text of the transcript's last assistant record with text ("done"
/// when there is none).
fn last_assistant_text(transcript: &Path) -> String {
    // Only a regular file: hostile tests name FIFOs and directories.
    let regular = fs::metadata(transcript).is_ok_and(|m| m.is_file());
    let text = if regular {
        fs::read_to_string(transcript).unwrap_or_default()
    } else {
        String::new()
    };
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "assistant")
        .find_map(|v| match &v["message"]["content"] {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Array(blocks) => blocks
                .iter()
                .rev()
                .find_map(|b| (b["type"] == "text").then(|| b["text"].as_str())?)
                .map(String::from),
            _ => None,
        })
        .unwrap_or_else(|| "done".into())
}

/// A temp directory laid out like an installation. Removed on drop,
/// unless `KTR_KEEP_TMP` is set.
pub struct Sandbox {
    /// Kept for its drop, which removes the directory.
    _tmp: tempfile::TempDir,
    /// The temp directory (canonical, so paths compare cleanly).
    root: PathBuf,
    pub home: PathBuf,
    /// `<home>/.claude/projects/<encoded work>`: where Claude Code keeps
    /// the sessions of `work`.
    pub project: PathBuf,
    pub state: PathBuf,
    /// `KTR_BIN_DIR`: stand-in stages.
    pub bin: PathBuf,
    /// Put first on PATH: stand-in system tools.
    pub path_dir: PathBuf,
    /// Where stand-ins record their argv.
    pub records: PathBuf,
    /// `claude_workdir`: where Claude Code runs.
    pub work: PathBuf,
    pub config: PathBuf,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let mut tmp = tempfile::Builder::new()
            .prefix("ktr-test-")
            .tempdir()
            .unwrap();
        tmp.disable_cleanup(std::env::var_os("KTR_KEEP_TMP").is_some());
        let root = tmp.path().canonicalize().unwrap();
        let work = root.join("work");
        let home = root.join("home");
        let sandbox = Sandbox {
            project: home
                .join(".claude/projects")
                .join(encode_project_name(&work)),
            home,
            state: root.join("state"),
            bin: root.join("bin"),
            path_dir: root.join("path"),
            records: root.join("records"),
            work,
            config: root.join("config.toml"),
            root,
            _tmp: tmp,
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
            std::os::unix::fs::symlink(stand_in("fake-stage"), sandbox.bin.join(stage)).unwrap();
        }
        sandbox.write_config("");
        sandbox
    }

    /// The sandbox's root directory (holds every other one).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Write the config file: a safe base (a tmux target on no server, a
    /// resume command that cannot start Claude) plus `extra` TOML lines.
    pub fn write_config(&self, extra: &str) {
        self.write_config_with_state(&self.state.display().to_string(), extra);
    }

    /// [`Sandbox::write_config`] with `state_dir` written as given.
    pub fn write_config_with_state(&self, state_dir: &str, extra: &str) {
        let text = format!(
            "project_dir = {:?}\nstate_dir = {state_dir:?}\nclaude_workdir = {:?}\ntmux_target = \"ktr-test-nowhere:0.0\"\nresume_command = [{:?}, \"--resume\", \"{{session_id}}\"]\n{extra}\n",
            self.project,
            self.work,
            stand_in("fake-claude"),
        );
        fs::write(&self.config, text).unwrap();
    }

    /// Configure a pointer-mode installation whose pointer file names
    /// `session` (one `ktr-prepare` then runs the whole chain: prepare,
    /// verify, activate, with no wait), plus `extra` TOML lines; returns
    /// the pointer file.
    pub fn write_pointer_config(&self, session: &str, extra: &str) -> PathBuf {
        let pointer = self.root.join("pointer");
        fs::write(&pointer, format!("{session}\n")).unwrap();
        self.write_config(&format!(
            "activation = \"pointer\"\nresume_pointer_path = {pointer:?}\npointer_health_probe = false\n\
             verify_workdir_matches_project = false\nactivation_delay_seconds = 0\n\
             stable_file_seconds = 0.05\n{extra}"
        ));
        pointer
    }

    /// Create `<project>/<session>.jsonl` holding one user record.
    pub fn transcript(&self, session: &str) -> PathBuf {
        self.add_transcript(session, b"{\"type\":\"user\"}\n")
    }

    /// Write `bytes` into the project dir as `<session>.jsonl`.
    pub fn add_transcript(&self, session: &str, bytes: &[u8]) -> PathBuf {
        let path = self.project.join(format!("{session}.jsonl"));
        fs::write(&path, bytes).unwrap();
        path
    }

    /// The config file, loaded.
    pub fn load_config(&self) -> Config {
        Config::load(Some(&self.config)).unwrap()
    }

    pub fn store(&self) -> Store {
        Store::open(&self.state).unwrap()
    }

    /// Drive operation `id` through `path` with the library, as the stages
    /// would, after `edit`; returns it.
    pub fn walk(&self, id: &str, path: &[Status], edit: impl FnOnce(&mut Operation)) -> Operation {
        self.store()
            .with_lock(|tx| {
                let mut op = tx.load(&OperationId::parse(id).unwrap())?;
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
            "last_assistant_message": last_assistant_text(transcript),
        })
        .to_string()
    }

    /// The whole environment of a hook: only the sandbox.
    pub fn hook_base_env(&self) -> Vec<(String, String)> {
        vec![
            ("HOME".into(), self.home.display().to_string()),
            (
                "PATH".into(),
                format!("{}:/usr/local/bin:/usr/bin:/bin", self.path_dir.display()),
            ),
            ("KTR_BIN_DIR".into(), self.bin.display().to_string()),
            (
                "KTR_TEST_RECORDS".into(),
                self.records.display().to_string(),
            ),
        ]
    }

    /// A hook command with a clean environment pointing only into the sandbox.
    pub fn command(&self, bin: &str) -> Command {
        self.command_via(Command::new(bin))
    }

    /// [`Sandbox::command`] for a command built elsewhere (e.g. run inside
    /// a real systemd's namespaces).
    pub fn command_via(&self, mut cmd: Command) -> Command {
        cmd.env_clear()
            .envs(self.hook_base_env())
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// `ktr-prepare --transcript PATH --confirm REBUILD` in pointer mode
    /// (the whole chain in one process, as a runner calls it): it must
    /// succeed and move the pointer off `old_session`; the candidate's text.
    #[track_caller]
    pub fn rebuild_by_hand(&self, transcript: &Path, pointer: &Path, old_session: &str) -> String {
        let out = self
            .command(crate::support::exe("ktr-prepare"))
            .arg("--transcript")
            .arg(transcript)
            .args(["--confirm", "REBUILD"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let new_session = fs::read_to_string(pointer).unwrap().trim().to_string();
        assert_ne!(
            new_session, old_session,
            "the pointer names the new session"
        );
        fs::read_to_string(transcript.with_file_name(format!("{new_session}.jsonl"))).unwrap()
    }

    /// Run a hook with `stdin`; returns (stdout, exit code).
    pub fn hook(&self, bin: &str, stdin: &str) -> (String, i32) {
        self.hook_env(bin, stdin, &[])
    }

    /// [`Sandbox::hook`] with extra environment variables.
    pub fn hook_env(&self, bin: &str, stdin: &str, env: &[(String, String)]) -> (String, i32) {
        Sandbox::run_hook(self.command(bin), stdin, env)
    }

    /// Run `cmd` (from [`Sandbox::command`]) as a hook with `stdin` and `env`.
    pub fn run_hook(mut cmd: Command, stdin: &str, env: &[(String, String)]) -> (String, i32) {
        let mut child = cmd.envs(env.iter().map(|(k, v)| (k, v))).spawn().unwrap();
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

    /// `ktr <command> --config C [--transcript P] <flags…>` in this sandbox.
    pub fn run(&self, command: &str, transcript: Option<&Path>, flags: &[&str]) -> Outcome {
        let mut args: Vec<OsString> = vec![
            command.into(),
            "--config".into(),
            self.config.clone().into(),
        ];
        if let Some(path) = transcript {
            args.push("--transcript".into());
            args.push(path.into());
        }
        args.extend(flags.iter().map(OsString::from));
        self.ktr(&args)
    }

    /// Run `ktr ARGS` with the sandbox environment (HOME etc. point inside it).
    #[track_caller]
    pub fn ktr(&self, args: &[OsString]) -> Outcome {
        self.ktr_via(Command::new(crate::support::exe("ktr")), args)
    }

    /// `ktr COMMAND --config CONFIG FLAGS…` under strace, logging the
    /// system calls `calls`: the outcome and the log.
    #[track_caller]
    pub fn ktr_traced(&self, calls: &str, command: &str, flags: &[&str]) -> (Outcome, String) {
        let log = self
            .root
            .join(format!("strace-{}.log", uuid::Uuid::new_v4()));
        let traced = super::straced(&log, calls, crate::support::exe("ktr"));
        let mut args: Vec<OsString> = vec![
            command.into(),
            "--config".into(),
            self.config.clone().into(),
        ];
        args.extend(flags.iter().map(OsString::from));
        let out = self.ktr_via(traced, &args);
        (out, fs::read_to_string(&log).unwrap_or_default())
    }

    /// [`Sandbox::ktr`] through `cmd` (ktr itself, or a tracer that runs it).
    #[track_caller]
    fn ktr_via(&self, mut cmd: Command, args: &[OsString]) -> Outcome {
        let out = cmd
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("XDG_STATE_HOME", self.home.join(".local/state"))
            .env("LANG", "C.UTF-8")
            .output()
            .expect("run ktr");
        let outcome = Outcome {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stdout_bytes: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            args: args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        };
        outcome.assert_no_panic();
        outcome
    }
}
