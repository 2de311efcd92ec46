//! A whole installation for pipeline tests: the real stage binaries, a
//! private tmux server whose pane runs the stand-in `claude` on the source
//! session (or a stand-in systemd unit, or a pointer file), the example
//! transcript as the source, and helpers to drive it through `ktr-stop`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ktr::config::{Config, encode_project_name};
use ktr::fsutil::sha256_file;
use ktr::pipeline::operation::{Operation, Status, Store};

use super::{Sandbox, TmuxServer, support, wait_for};

/// The source session: `examples/session.jsonl` under this id.
pub const SRC: &str = "5d1c9a8e-3b7f-4e2a-9c61-0f2b7d4e8a13";

/// How long a whole pipeline run may take in a test.
pub const SETTLE: Duration = Duration::from_secs(30);

/// Which target the rig drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tmux,
    Systemd,
    Pointer,
}

pub struct Rig {
    pub sandbox: Sandbox,
    pub kind: Kind,
    pub tmux: Option<TmuxServer>,
    /// `<home>/.claude/projects/<encoded workdir>`: matches `claude_workdir`.
    pub project: PathBuf,
    pub source: PathBuf,
    /// The stand-in claude's record file (`.read`, `.history` beside it).
    pub record: PathBuf,
    pub pointer: PathBuf,
    pub pause_file: PathBuf,
    /// `KTR_TEST_PAUSE_AT` for the next Stop, if any.
    pub pause_at: Option<String>,
    /// Extra environment for every hook and stage.
    pub env: Vec<(String, String)>,
}

impl Rig {
    /// A tmux rig whose pane runs `claude --resume SRC`.
    pub fn tmux() -> Rig {
        Rig::with(Kind::Tmux, "", &[])
    }

    /// A rig of `kind`; `extra` TOML lines; `claude_env` is extra
    /// environment of the stand-in claude (e.g. `FAKE_CLAUDE_ONLY`).
    pub fn with(kind: Kind, extra: &str, claude_env: &[(&str, &str)]) -> Rig {
        let sandbox = Sandbox::new();
        for stage in ["ktr-prepare", "ktr-verify", "ktr-activate", "ktr-rollback"] {
            let link = sandbox.bin.join(stage);
            let _ = fs::remove_file(&link);
            std::os::unix::fs::symlink(stage_binary(stage), &link).unwrap();
        }
        let project = sandbox
            .home
            .join(".claude/projects")
            .join(encode_project_name(&sandbox.work));
        fs::create_dir_all(&project).unwrap();
        let source = project.join(format!("{SRC}.jsonl"));
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/session.jsonl");
        fs::copy(example, &source).unwrap();
        let root = sandbox.tmp.path().to_path_buf();
        let mut env = vec![
            ("KTR_WORKER_GRACE_SECONDS".to_string(), "0".to_string()),
            (
                "FAKE_CLAUDE_RECORD".into(),
                root.join("claude").display().to_string(),
            ),
            ("FAKE_CLAUDE_PROJECT".into(), project.display().to_string()),
        ];
        env.extend(
            claude_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let tmux = (kind == Kind::Tmux).then(TmuxServer::start);
        if let Some(server) = &tmux {
            env.push(("KTR_TMUX_SOCKET".into(), server.socket.clone()));
        }
        let rig = Rig {
            kind,
            tmux,
            project,
            source,
            record: root.join("claude"),
            pointer: root.join("pointer"),
            pause_file: root.join("paused.pid"),
            pause_at: None,
            env,
            sandbox,
        };
        rig.write_config(extra);
        rig.start_old_session();
        rig
    }

    /// Write the config: fast timings, the stand-in claude, this target.
    pub fn write_config(&self, extra: &str) {
        let resume_env: Vec<String> = self
            .env
            .iter()
            .filter(|(k, _)| k.starts_with("FAKE_CLAUDE_"))
            .map(|(k, v)| format!("{k} = {v:?}"))
            .collect();
        let target = match self.kind {
            Kind::Tmux => "activation = \"tmux\"\ntmux_target = \"t:0.0\"".to_string(),
            Kind::Systemd => format!(
                "activation = \"systemd\"\nsystemd_restart_timeout_seconds = 10\nresume_pointer_path = {:?}",
                self.pointer
            ),
            Kind::Pointer => format!(
                "activation = \"pointer\"\nresume_pointer_path = {:?}",
                self.pointer
            ),
        };
        let text = format!(
            "project_dir = {:?}\nstate_dir = {:?}\nclaude_workdir = {:?}\n{target}\nresume_command = [{:?}, \"--resume\", \"{{session_id}}\"]\nresume_env = {{ {} }}\nactivation_delay_seconds = 0\nstable_file_seconds = 0.2\nstable_file_timeout_seconds = 3\nhealthcheck_seconds = 1\n{extra}\n",
            self.project,
            self.sandbox.state,
            self.sandbox.work,
            support("fake-claude"),
            resume_env.join(", "),
        );
        fs::write(&self.sandbox.config, text).unwrap();
    }

    /// Run the old session in the target, as the user's setup would.
    fn start_old_session(&self) {
        match self.kind {
            Kind::Tmux => {
                let server = self.tmux.as_ref().unwrap();
                // tmux's defaults, as on a user's machine: an exiting claude
                // takes its pane with it unless ktr keeps the pane itself.
                let mut args: Vec<String> = ["respawn-pane", "-k", "-t", "t:0.0", "-c"]
                    .map(String::from)
                    .to_vec();
                args.push(self.sandbox.work.display().to_string());
                for (k, v) in self
                    .env
                    .iter()
                    .filter(|(k, _)| k.starts_with("FAKE_CLAUDE_"))
                {
                    args.extend(["-e".into(), format!("{k}={v}")]);
                }
                args.extend([
                    "--".into(),
                    support("fake-claude").display().to_string(),
                    "--resume".into(),
                    SRC.into(),
                ]);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                server.tmux(&args);
            }
            Kind::Systemd => {
                let dir = &self.sandbox.path_dir;
                for tool in ["systemctl", "systemd-run"] {
                    std::os::unix::fs::symlink(support(tool), dir.join(tool)).unwrap();
                }
                fs::write(dir.join("pointer-path"), self.pointer.display().to_string()).unwrap();
                fs::write(
                    dir.join("claude"),
                    support("fake-claude").display().to_string(),
                )
                .unwrap();
                fs::write(&self.pointer, format!("{SRC}\n")).unwrap();
                let status = Command::new(dir.join("systemctl"))
                    .args(["restart", "claude-session.service"])
                    .envs(self.env.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::null())
                    .status()
                    .unwrap();
                assert!(status.success());
            }
            Kind::Pointer => {
                fs::write(&self.pointer, format!("{SRC}\n")).unwrap();
                return;
            }
        }
        assert!(
            wait_for(Duration::from_secs(10), || self.resumed().as_deref()
                == Some(SRC)),
            "the old session never started"
        );
    }

    pub fn config(&self) -> Config {
        Config::load(Some(&self.sandbox.config)).unwrap()
    }

    pub fn store(&self) -> Store {
        self.sandbox.store()
    }

    /// Request a rebuild (`REBUILD`), unbound.
    pub fn request(&self) -> Operation {
        self.store()
            .request("test rebuild", "REBUILD", None)
            .unwrap()
    }

    /// The environment of hooks and stages (with the pause hook if set).
    pub fn hook_env(&self) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        if let Some(at) = &self.pause_at {
            env.push(("KTR_TEST_PAUSE_AT".into(), at.clone()));
            env.push((
                "KTR_TEST_PAUSE_FILE".into(),
                self.pause_file.display().to_string(),
            ));
        }
        env
    }

    /// Feed `ktr-stop` the Stop hook JSON of `session`; returns its stdout.
    pub fn stop(&self, session: &str, transcript: &Path) -> String {
        let (out, code) = self.sandbox.hook_env(
            env!("CARGO_BIN_EXE_ktr-stop"),
            &self.sandbox.stop_input(session, transcript),
            &self.hook_env(),
        );
        assert_eq!(code, 0, "ktr-stop always exits 0");
        out
    }

    /// The Stop hook of the source session.
    pub fn stop_source(&self) -> String {
        self.stop(SRC, &self.source)
    }

    /// Request a rebuild, run the source's Stop hook and wait until the
    /// operation is terminal; returns it.
    pub fn rebuild(&self) -> Operation {
        let op = self.request();
        self.stop_source();
        self.wait_terminal(&op.id)
    }

    /// Request a rebuild and run the source's Stop hook with the pipeline
    /// set to pause at `at`; returns (once a stage paused there) the
    /// operation as requested.
    pub fn rebuild_paused_at(&mut self, at: &str) -> Operation {
        self.pause_at = Some(at.into());
        let op = self.request();
        self.stop_source();
        self.wait_paused();
        op
    }

    /// Wait until a stage reached the pause step; returns its pid.
    pub fn wait_paused(&self) -> u32 {
        assert!(
            wait_for(SETTLE, || fs::read_to_string(&self.pause_file)
                .is_ok_and(|t| t.ends_with('\n'))),
            "no stage paused at {:?}",
            self.pause_at
        );
        fs::read_to_string(&self.pause_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Let the paused stage go on.
    pub fn unpause(&self) {
        fs::remove_file(&self.pause_file).unwrap();
    }

    /// Wait until `id` satisfies `done`; returns it.
    pub fn wait_until(&self, id: &str, done: impl Fn(&Operation) -> bool) -> Operation {
        let store = self.store();
        let mut last = None;
        wait_for(SETTLE, || {
            last = store.load(id).ok();
            last.as_ref().is_some_and(&done)
        });
        let op = last.expect("operation readable");
        assert!(done(&op), "operation never got there: {op:#?}");
        op
    }

    /// Wait until `id` is terminal.
    pub fn wait_terminal(&self, id: &str) -> Operation {
        self.wait_until(id, |op| op.status.is_terminal())
    }

    /// The session the stand-in claude last resumed.
    pub fn resumed(&self) -> Option<String> {
        let text = fs::read_to_string(&self.record).ok()?;
        let args: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("arg="))
            .collect();
        let at = args.iter().position(|a| *a == "--resume")?;
        args.get(at + 1).map(std::string::ToString::to_string)
    }

    /// Every session the stand-in claude resumed, in order.
    pub fn resume_history(&self) -> Vec<String> {
        fs::read_to_string(self.record.with_extension("history"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// What the stand-in claude read when it resumed last.
    pub fn read_by_claude(&self) -> Option<Vec<u8>> {
        fs::read(self.record.with_extension("read")).ok()
    }

    /// The pane's pid (tmux rigs).
    pub fn pane_pid(&self) -> String {
        self.tmux
            .as_ref()
            .unwrap()
            .tmux(&["display-message", "-p", "-t", "t:0.0", "#{pane_pid}"])
    }

    pub fn source_sha(&self) -> String {
        sha256_file(&self.source).unwrap()
    }

    /// `*.jsonl` names in the project dir, sorted.
    pub fn transcripts(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.project)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".jsonl"))
            .collect();
        names.sort();
        names
    }

    /// The statuses an operation went through.
    pub fn path_of(op: &Operation) -> Vec<Status> {
        let mut path = vec![Status::Pending];
        path.extend(op.history.iter().map(|t| t.to));
        path
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // The stand-in systemd unit's claude is ours: stop it by pid.
        if let Ok(pid) = fs::read_to_string(self.sandbox.path_dir.join("mainpid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        // A stage still paused (a failed test) must not outlive it.
        if let Ok(pid) = fs::read_to_string(&self.pause_file) {
            let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
        }
    }
}

/// The real stage executable built for these tests.
pub fn stage_binary(stage: &str) -> &'static str {
    match stage {
        "ktr-prepare" => env!("CARGO_BIN_EXE_ktr-prepare"),
        "ktr-verify" => env!("CARGO_BIN_EXE_ktr-verify"),
        "ktr-activate" => env!("CARGO_BIN_EXE_ktr-activate"),
        "ktr-rollback" => env!("CARGO_BIN_EXE_ktr-rollback"),
        other => panic!("no stage {other}"),
    }
}
