//! A real systemd for tests: `support/bin/real-systemd.sh` starts a
//! systemd system manager as PID 1 of private mount, pid, cgroup, uts and
//! ipc namespaces (about 0.4 s), with its own `/run`, `/dev` and
//! `/etc/systemd/system`. Every test gets its own manager (its own
//! `SYSD_DIR` and `SYSD_NAME`), stopped on drop.
//!
//! Needs root and a cgroup2 hierarchy: tests using it are
//! `#[ignore = "needs a real systemd (root, cgroup2)"]`; `.ci/run` runs
//! them with `--include-ignored`.
//!
//! Processes inside see the manager's pids: everything that talks to
//! systemd or reads a `MainPID` (ktr's hooks and stages, `systemctl`) runs
//! through [`RealSystemd::command`] (`real-systemd.sh exec`). The file
//! system is shared, so the test reads and writes files as usual.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::stand_in;

pub struct RealSystemd {
    /// `SYSD_DIR`: the manager's private files (`etc-system/` holds units).
    pub dir: PathBuf,
    /// `SYSD_NAME`: its cgroup under the host's cgroup2 root.
    pub name: String,
    /// The manager's process (PID 1 inside; host pid and start time):
    /// killing it ends the whole pid namespace, even when the script's
    /// files are gone. The start time keeps a reused pid (`pid_max` is 32768
    /// here, and a CI run wraps it) from being killed instead.
    pid1: Option<ktr_pipeline::process::ProcessId>,
}

impl RealSystemd {
    /// Start a manager in `dir` (created), named uniquely for this process.
    #[track_caller]
    pub fn start(dir: &Path) -> RealSystemd {
        RealSystemd::start_once(dir).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The error says what the script, the manager's stderr and its
    /// console said (and how unshare ended: 128+N is signal N).
    fn start_once(dir: &Path) -> Result<RealSystemd, String> {
        static N: AtomicUsize = AtomicUsize::new(0);
        fs::create_dir_all(dir).unwrap();
        let mut sysd = RealSystemd {
            dir: dir.to_path_buf(),
            name: format!(
                "ktr-sysd-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ),
            pid1: None,
        };
        let out = sysd.script().arg("start").output().unwrap();
        // Read before the assertion, so that a manager that started but
        // did not come up is still stopped on drop.
        sysd.pid1 = fs::read_to_string(dir.join("pid1"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .and_then(ktr_pipeline::process::ProcessId::of);
        if !out.status.success() {
            return Err(format!(
                "real systemd did not start: {}{}\nmanager.log: {}\nconsole.log: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                fs::read_to_string(dir.join("manager.log")).unwrap_or_default(),
                fs::read_to_string(dir.join("console.log")).unwrap_or_default()
            ));
        }
        Ok(sysd)
    }

    /// The script, told which manager through `env` arguments, so that a
    /// caller may still clear the environment.
    fn script(&self) -> Command {
        let mut cmd = Command::new("/usr/bin/env");
        cmd.arg(format!("SYSD_DIR={}", self.dir.display()))
            .arg(format!("SYSD_NAME={}", self.name))
            .arg(stand_in("real-systemd.sh"))
            .stdin(Stdio::null());
        cmd
    }

    /// `argv` run inside the manager's namespaces (the caller sets env,
    /// stdin and the rest as for any command; `env_clear` is fine).
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut cmd = self.script();
        cmd.arg("exec").args(argv);
        cmd
    }

    /// Run `argv` inside; returns (success, stdout, stderr).
    pub fn run(&self, argv: &[&str]) -> (bool, String, String) {
        let out = self.command(argv).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )
    }

    /// `systemctl ARGS…` inside; panics on failure; returns stdout.
    #[track_caller]
    pub fn systemctl(&self, args: &[&str]) -> String {
        let mut argv = vec!["systemctl"];
        argv.extend_from_slice(args);
        let (ok, out, err) = self.run(&argv);
        assert!(ok, "systemctl {args:?}: {err}");
        out
    }

    /// Install `/etc/systemd/system/NAME` with `text` and reload.
    #[track_caller]
    pub fn install_unit(&self, name: &str, text: &str) {
        let dir = self.dir.join("etc-system");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(name), text).unwrap();
        self.systemctl(&["daemon-reload"]);
    }

    /// The unit's `MainPID` (a pid of the manager's namespace; 0 = stopped).
    pub fn main_pid(&self, unit: &str) -> u32 {
        self.systemctl(&["show", "-p", "MainPID", "--value", unit])
            .parse()
            .unwrap()
    }

    /// One property of a unit.
    pub fn property(&self, unit: &str, name: &str) -> String {
        self.systemctl(&["show", "-p", name, "--value", unit])
    }
}

impl Drop for RealSystemd {
    fn drop(&mut self) {
        // Powers the manager off: every process inside (the stand-in
        // Claude, stages) ends with it; its cgroup is removed.
        let _ = self
            .script()
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // The script stops what its files name; if they were gone, the
        // manager would outlive the test: end its namespace by its pid.
        if let Some(pid1) = self.pid1.filter(|p| p.alive()) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid1.pid.to_string()])
                .status();
        }
    }
}
