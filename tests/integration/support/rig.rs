//! A whole installation for pipeline tests: the real stage binaries, a
//! private tmux server whose pane runs the stand-in `claude` on the source
//! session (or a stand-in systemd unit, or a pointer file), the example
//! transcript as the source, and helpers to drive it through `ktr-stop`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ktr_base::config::Config;
use ktr_base::digest::sha256_file;
use ktr_pipeline::operation::{Operation, Status, Store};

use super::systemd::RealSystemd;
use super::{Sandbox, TmuxServer, example, stand_in, wait_for};
use ktr_base::ids::OperationId;

/// The source session: `examples/session.jsonl` under this id.
pub const SRC: &str = "5d1c9a8e-3b7f-4e2a-9c61-0f2b7d4e8a13";
/// The health window of a test whose new (or old) session must be found
/// unhealthy: a stand-in that exits "at once" may take a second to get
/// there on a loaded machine, and within the default 1 s window it would
/// then pass for healthy (no receipt: alive through the window is healthy).
/// The watch ends as soon as it sees the process die, so a longer window
/// costs nothing when it does.
pub const UNHEALTHY_WINDOW: &str = "healthcheck_seconds = 4";

/// How long a whole pipeline run may take in a test.
pub const SETTLE: Duration = Duration::from_secs(30);

/// Which target the rig drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tmux,
    /// A real systemd ([`RealSystemd`]) whose unit `claude-session.service`
    /// runs a start script that resumes the session the pointer names.
    Systemd,
    Pointer,
    /// No tmux, no target configured: the stand-in claude runs in a
    /// pseudo-terminal of its own (`script`), so the hand target is found.
    Hand,
}

/// The unit a systemd rig runs.
pub const UNIT: &str = "claude-session.service";

/// Fields drop in order: the tmux server and the real systemd stop first
/// (their control files live in the sandbox), the sandbox goes last.
pub struct Rig {
    pub kind: Kind,
    pub tmux: Option<TmuxServer>,
    /// The real systemd of a systemd rig.
    pub sysd: Option<RealSystemd>,
    /// Where the stand-in claude picks up hooks to run (`FAKE_CLAUDE_HOOKS`).
    pub hooks: PathBuf,
    pub source: PathBuf,
    /// The stand-in claude's record file (`.read`, `.history` beside it).
    pub record: PathBuf,
    pub pointer: PathBuf,
    pub pause_file: PathBuf,
    /// `KTR_TEST_PAUSE_AT` for the next Stop, if any.
    pub pause_at: Option<String>,
    /// The source session the target runs at first ([`SRC`] unless
    /// [`Rig::beside`] chose another).
    pub src: String,
    /// Extra environment for every hook and stage.
    pub env: Vec<(String, String)>,
    /// A hand rig's terminal (`script` holding the stand-in claude's
    /// pseudo-terminal; its stdin kept open).
    pub terminal: Option<std::process::Child>,
    /// Last: removed after everything that runs in it has stopped.
    pub sandbox: Sandbox,
}

impl Rig {
    /// A tmux rig whose pane runs `claude --resume SRC`.
    pub fn tmux() -> Rig {
        Rig::with(Kind::Tmux, "", &[])
    }

    /// A rig of `kind`; `extra` TOML lines; `claude_env` is extra
    /// environment of the stand-in claude (e.g. `FAKE_CLAUDE_ONLY`).
    pub fn with(kind: Kind, extra: &str, claude_env: &[(&str, &str)]) -> Rig {
        Rig::build(kind, extra, claude_env, SRC, None)
    }

    /// A second installation beside `other` (several sessions at once):
    /// its own HOME, project folder, tmux server and pane, running session
    /// `src`, and a config of its own naming `other`'s state dir.
    pub fn beside(other: &Rig, src: &str) -> Rig {
        Rig::build(Kind::Tmux, "", &[], src, Some(&other.sandbox.state))
    }

    fn build(
        kind: Kind,
        extra: &str,
        claude_env: &[(&str, &str)],
        src: &str,
        state: Option<&Path>,
    ) -> Rig {
        let mut sandbox = Sandbox::new();
        if let Some(state) = state {
            sandbox.state = state.to_path_buf();
        }
        for stage in [
            "ktr-prepare",
            "ktr-verify",
            "ktr-activate",
            "ktr-rollback",
            "ktr-watch",
        ] {
            let link = sandbox.bin.join(stage);
            let _ = fs::remove_file(&link);
            std::os::unix::fs::symlink(stage_binary(stage), &link).unwrap();
        }
        let source = sandbox.project.join(format!("{src}.jsonl"));
        fs::copy(example(), &source).unwrap();
        let root = sandbox.root().to_path_buf();
        let hooks = root.join("hooks");
        fs::create_dir_all(&hooks).unwrap();
        let mut env = vec![
            ("KTR_WORKER_GRACE_SECONDS".to_string(), "0".to_string()),
            ("FAKE_CLAUDE_HOOKS".into(), hooks.display().to_string()),
            (
                "FAKE_CLAUDE_RECORD".into(),
                root.join("claude").display().to_string(),
            ),
            (
                "FAKE_CLAUDE_PROJECT".into(),
                sandbox.project.display().to_string(),
            ),
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
        let sysd = (kind == Kind::Systemd).then(|| RealSystemd::start(&root.join("sysd")));
        let mut rig = Rig {
            kind,
            tmux,
            sysd,
            hooks,
            source,
            record: root.join("claude"),
            pointer: root.join("pointer"),
            pause_file: root.join("paused.pid"),
            pause_at: None,
            src: src.to_string(),
            env,
            terminal: None,
            sandbox,
        };
        rig.write_config(extra);
        if kind == Kind::Hand {
            rig.terminal = Some(rig.start_in_terminal());
        }
        rig.start_old_session();
        rig
    }

    /// The stand-in claude on the source session in a pseudo-terminal
    /// outside tmux (`script`; no `TMUX` in its environment), as a person
    /// runs Claude Code in a plain terminal.
    fn start_in_terminal(&self) -> std::process::Child {
        let claude = stand_in("fake-claude").display().to_string();
        let line = format!("exec '{claude}' --resume {}", self.src);
        Command::new("script")
            .args(["-q", "-f", "-e", "-c", &line, "/dev/null"])
            .env_clear()
            .envs(self.sandbox.hook_base_env())
            .envs(
                self.env
                    .iter()
                    .filter(|(k, _)| k.starts_with("FAKE_CLAUDE_"))
                    .cloned(),
            )
            .env("SHELL", "/bin/sh")
            .current_dir(&self.sandbox.work)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("script(1) runs the stand-in claude in a pseudo-terminal")
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
            Kind::Hand => String::new(),
        };
        // A healthy stand-in needs only a short window (alive through it);
        // a test whose new session must die sets a longer one
        // (`UNHEALTHY_WINDOW`), so that a loaded machine still sees it die
        // within the window.
        let window = if extra.contains("healthcheck_seconds") {
            ""
        } else {
            "healthcheck_seconds = 1\n"
        };
        let text = format!(
            "project_dir = {:?}\nstate_dir = {:?}\nclaude_workdir = {:?}\n{target}\nresume_command = [{:?}, \"--resume\", \"{{session_id}}\"]\nresume_env = {{ {} }}\nactivation_delay_seconds = 0\nstable_file_seconds = 0.2\nstable_file_timeout_seconds = 3\n{window}{extra}\n",
            self.sandbox.project,
            self.sandbox.state,
            self.sandbox.work,
            stand_in("fake-claude"),
            resume_env.join(", "),
        );
        fs::write(&self.sandbox.config, text).unwrap();
    }

    /// Run the old session in the target, as the user's setup would.
    #[track_caller]
    fn start_old_session(&self) {
        match self.kind {
            Kind::Tmux => {
                let claude = stand_in("fake-claude").display().to_string();
                self.respawn_pane(&[&claude, "--resume", &self.src]);
            }
            Kind::Systemd => {
                let sysd = self.sysd.as_ref().unwrap();
                fs::write(&self.pointer, format!("{}\n", self.src)).unwrap();
                sysd.install_unit(UNIT, &self.unit_text(""));
                sysd.systemctl(&["start", UNIT]);
            }
            Kind::Pointer => {
                fs::write(&self.pointer, format!("{}\n", self.src)).unwrap();
                return;
            }
            Kind::Hand => {}
        }
        assert!(
            wait_for(Duration::from_secs(10), || self.resumed().as_deref()
                == Some(self.src.as_str())),
            "the old session never started"
        );
    }

    /// Run `argv` in the pane (tmux rigs) in the workdir with the stand-in
    /// claude's environment, as the user's setup would; tmux's defaults
    /// otherwise (an exiting claude takes its pane with it unless ktr
    /// keeps the pane itself).
    pub fn respawn_pane(&self, argv: &[&str]) {
        let server = self.tmux.as_ref().unwrap();
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
        args.push("--".into());
        args.extend(argv.iter().map(std::string::ToString::to_string));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        server.tmux(&args);
    }

    /// Copy the source transcript to session `id` in the same project (a
    /// second Claude Code session there); returns its path.
    pub fn second_session(&self, id: &str) -> PathBuf {
        let path = self.sandbox.project.join(format!("{id}.jsonl"));
        fs::copy(&self.source, &path).unwrap();
        path
    }

    /// The household's unit: a start script that resumes the session the
    /// pointer names (exec, so `MainPID` is Claude itself), the stand-in
    /// claude's environment, restarted like a real service; `extra` lines
    /// go into `[Service]`.
    pub fn unit_text(&self, extra: &str) -> String {
        let start = self.sandbox.root().join("claude-start");
        fs::write(
            &start,
            format!(
                "#!/bin/sh\n# resume the session the pointer names\nexec {} --resume \"$(cat {})\"\n",
                stand_in("fake-claude").display(),
                self.pointer.display()
            ),
        )
        .unwrap();
        let mut perms = fs::metadata(&start).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        fs::set_permissions(&start, perms).unwrap();
        let env: Vec<String> = self
            .env
            .iter()
            .filter(|(k, _)| k.starts_with("FAKE_CLAUDE_"))
            .map(|(k, v)| format!("Environment=\"{k}={v}\""))
            .collect();
        format!(
            "[Unit]\nDescription=ktr test: Claude Code resumed from the pointer file\n[Service]\nExecStart={}\nWorkingDirectory={}\n{}\nRestart=always\nRestartSec=200ms\n{extra}\n",
            start.display(),
            self.sandbox.work.display(),
            env.join("\n")
        )
    }

    /// A ktr program run as a hook or by hand: the sandbox's environment,
    /// inside the real systemd's namespaces for a systemd rig.
    pub fn program(&self, bin: &str) -> Command {
        match &self.sysd {
            Some(sysd) => self.sandbox.command_via(sysd.command(&[bin])),
            None => self.sandbox.command(bin),
        }
    }

    /// `ktr ARGS` as a human runs it against this installation; panics
    /// with its stderr unless it succeeds; returns its stdout.
    #[track_caller]
    pub fn ktr(&self, args: &[&str]) -> String {
        let out = self
            .program(crate::support::exe("ktr"))
            .envs(self.hook_env())
            .args(args)
            .output()
            .unwrap();
        super::ktr_stdout(&out, args)
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
    /// When a stand-in claude of this rig runs `session`, that process runs
    /// the hook (as Claude Code does: claude → `sh -c` → ktr-stop), so the
    /// hook records it as the session's Claude; otherwise the test runs it.
    #[track_caller]
    pub fn stop(&self, session: &str, transcript: &Path) -> String {
        let input = self.sandbox.stop_input(session, transcript);
        let (out, code) = if self.claude_of(session).is_some() {
            self.hook_from_claude(session, crate::support::exe("ktr-stop"), &input)
        } else {
            let cmd = self.program(crate::support::exe("ktr-stop"));
            Sandbox::run_hook(cmd, &input, &self.hook_env())
        };
        assert_eq!(code, 0, "ktr-stop always exits 0");
        out
    }

    /// The pid (as the test sees it) of a live stand-in claude of this rig
    /// running `session`.
    pub fn claude_of(&self, session: &str) -> Option<u32> {
        let matches = self.stand_ins(session);
        // The stand-in is a shell script: every command it runs is first a
        // fork with the same command line (`$(pwd)`, `sleep` before its
        // exec). Such a child's parent is the stand-in itself; with pids
        // wrapping (pid_max 32768) it can also come first in /proc.
        matches
            .iter()
            .filter(|(_, stat)| !matches.iter().any(|(pid, _)| *pid == stat.ppid))
            .min_by_key(|(_, stat)| stat.start_time)
            .map(|(pid, _)| *pid)
    }

    /// The live stand-in claude running `session` that `parent` started
    /// (a shell in the pane running claude as its child). Not whichever
    /// [`Rig::claude_of`] finds first: the claude the pane ran before
    /// (`respawn-pane -k` does not wait for it to exit: on a loaded
    /// machine it may still be alive when tmux returns), or a fork of it
    /// orphaned before its exec, is an older stand-in of this rig on the
    /// same session and would be taken for the shell's.
    pub fn claude_started_by(&self, session: &str, parent: u32) -> Option<u32> {
        self.stand_ins(session)
            .iter()
            .find(|(_, stat)| stat.ppid == parent)
            .map(|(pid, _)| *pid)
    }

    /// Every live process running the stand-in claude on `session` with
    /// this rig's environment (forks of one before their exec included),
    /// with its stat.
    fn stand_ins(&self, session: &str) -> Vec<(u32, ktr_pipeline::process::Stat)> {
        let hooks = format!("FAKE_CLAUDE_HOOKS={}", self.hooks.display());
        let program = stand_in("fake-claude").display().to_string();
        let Ok(entries) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                let argv = ktr_pipeline::process::cmdline(pid)?;
                let runs = argv.contains(&program)
                    && argv
                        .windows(2)
                        .any(|w| w[0] == "--resume" && w[1] == session);
                let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
                let ours = environ.split(|b| *b == 0).any(|v| v == hooks.as_bytes());
                let stat = ktr_pipeline::process::stat(pid)?;
                (runs && ours && ktr_pipeline::process::pid_alive(pid)).then_some((pid, stat))
            })
            .collect()
    }

    /// Have the stand-in claude running `session` run `bin --config C`
    /// with `stdin` as one of its hooks; returns (stdout, exit code).
    pub fn hook_from_claude(&self, session: &str, bin: &str, stdin: &str) -> (String, i32) {
        let base = self.hooks.join(session);
        let file = |ext: &str| base.with_extension(ext);
        for ext in ["out", "code", "err"] {
            let _ = fs::remove_file(file(ext));
        }
        let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        let mut words = vec!["exec".to_string(), "env".into(), "-i".into()];
        words.extend(
            self.sandbox
                .hook_base_env()
                .into_iter()
                .chain(self.hook_env())
                .map(|(k, v)| quote(&format!("{k}={v}"))),
        );
        words.extend([
            quote(bin),
            "--config".into(),
            quote(&self.sandbox.config.to_string_lossy()),
        ]);
        fs::write(file("in"), stdin).unwrap();
        fs::write(file("run.tmp"), words.join(" ")).unwrap();
        fs::rename(file("run.tmp"), file("run")).unwrap();
        assert!(
            wait_for(SETTLE, || file("code").exists()),
            "the stand-in claude of {session} never ran the hook"
        );
        let code = fs::read_to_string(file("code"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        (fs::read_to_string(file("out")).unwrap(), code)
    }

    /// Start another Claude Code session on `session` in the same project
    /// but outside the target (a second terminal): a tmux window of the
    /// rig's server, or a transient service of the real systemd.
    /// Returns its pid as the test sees it.
    pub fn bystander(&self, session: &str) -> u32 {
        let mut argv: Vec<String> = vec!["env".into()];
        argv.extend(
            self.env
                .iter()
                .filter(|(k, _)| k.starts_with("FAKE_CLAUDE_"))
                .map(|(k, v)| format!("{k}={v}")),
        );
        argv.extend([
            stand_in("fake-claude").display().to_string(),
            "--resume".into(),
            session.into(),
        ]);
        let words: Vec<&str> = argv.iter().map(String::as_str).collect();
        match (&self.tmux, &self.sysd) {
            (Some(server), _) => {
                let mut args = vec!["new-window", "-d", "-t", "t:", "-c"];
                let work = self.sandbox.work.display().to_string();
                args.push(&work);
                args.push("--");
                args.extend(&words);
                server.tmux(&args);
            }
            (None, Some(sysd)) => {
                let mut run = vec![
                    "systemd-run",
                    "--quiet",
                    "--collect",
                    "-p",
                    "WorkingDirectory=/",
                ];
                run.extend_from_slice(&words);
                let (ok, _, err) = sysd.run(&run);
                assert!(ok, "bystander: {err}");
            }
            (None, None) => panic!("a pointer rig runs no Claude: no bystander"),
        }
        let mut pid = None;
        assert!(
            wait_for(Duration::from_secs(10), || {
                pid = self.claude_of(session);
                pid.is_some()
            }),
            "the bystander claude on {session} never started"
        );
        pid.unwrap()
    }

    /// The Stop hook of the source session.
    pub fn stop_source(&self) -> String {
        self.stop(&self.src, &self.source)
    }

    /// The Stop hook of the session the target runs now (the stand-in
    /// claude's last resume): after an activation that is the candidate.
    pub fn stop_current(&self) -> String {
        let session = self
            .resumed()
            .expect("the stand-in claude resumed a session");
        let transcript = self.sandbox.project.join(format!("{session}.jsonl"));
        self.stop(&session, &transcript)
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
    #[track_caller]
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
    #[track_caller]
    pub fn wait_until(&self, id: &str, done: impl Fn(&Operation) -> bool) -> Operation {
        let store = self.store();
        let mut last = None;
        wait_for(SETTLE, || {
            last = store.load(&OperationId::parse(id).unwrap()).ok();
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

    /// ktr's notice on the pane's border, if any.
    pub fn notice(&self) -> Option<String> {
        let tmux = self.tmux.as_ref()?;
        ktr_pipeline::targets::Target::Tmux(ktr_pipeline::targets::Tmux {
            program: "tmux".into(),
            socket: Some(tmux.socket.clone()),
            target: "t:0.0".into(),
            bindings: None,
        })
        .shown_notice()
    }

    /// Whether the pane's keyboard is off (`#{pane_input_off}`): ktr never
    /// turns it off (versions before the in-place switch held it).
    pub fn input_off(&self) -> bool {
        let server = self.tmux.as_ref().unwrap();
        server
            .tmux(&["display-message", "-p", "-t", "t:0.0", "#{pane_input_off}"])
            .trim()
            == "1"
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
        let mut names: Vec<String> = fs::read_dir(&self.sandbox.project)
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
        // A hand rig's terminal: closing it hangs up the stand-in claude.
        if let Some(mut terminal) = self.terminal.take() {
            let _ = terminal.kill();
            let _ = terminal.wait();
        }
        // A stage still paused (a failed test) must not outlive it. Only
        // that stage: a pid left in the file by a stage that has ended may
        // since belong to anything (pid_max is 32768 here; a CI run wraps
        // it), e.g. another test's systemd manager.
        let Some(pid) = fs::read_to_string(&self.pause_file)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
        else {
            return;
        };
        let config = self.sandbox.config.display().to_string();
        let ours = ktr_pipeline::process::cmdline(pid)
            .is_some_and(|argv| argv.iter().any(|a| a == &config));
        if ours {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// The real stage executable (or the stages' watchdog) built for these tests.
pub fn stage_binary(stage: &str) -> &'static str {
    match stage {
        "ktr-prepare" => crate::support::exe("ktr-prepare"),
        "ktr-verify" => crate::support::exe("ktr-verify"),
        "ktr-activate" => crate::support::exe("ktr-activate"),
        "ktr-rollback" => crate::support::exe("ktr-rollback"),
        "ktr-watch" => crate::support::exe("ktr-watch"),
        other => panic!("no stage {other}"),
    }
}
