//! Processes: liveness and identity from `/proc`, detached stage workers, and
//! controller calls that can never hang.
//!
//! No shell is used anywhere: every command is an argv vector.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ktr_base::error::{Error, Result};

/// The fields of `/proc/<pid>/stat` that ktr uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// One-letter state (`R`, `S`, `Z`, …).
    pub state: char,
    /// Parent pid.
    pub ppid: u32,
    /// Start time in clock ticks after boot (field 22); with the pid it
    /// identifies a process even after the pid is reused.
    pub start_time: u64,
    /// Its controlling terminal's device number (field 7); 0: none.
    pub tty_nr: u64,
}

/// Parse `/proc/<pid>/stat` text. The command name (field 2) may contain
/// spaces and parentheses, so fields are counted after the *last* `)`.
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // rest starts at field 3 (state): field N is fields[N - 3].
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
        tty_nr: fields.get(4)?.parse().ok()?,
    })
}

/// The stat of a running process, if it exists.
pub fn stat(pid: u32) -> Option<Stat> {
    if pid == 0 {
        return None;
    }
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether `pid` is a live process (zombies count as dead).
pub fn pid_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|s| !matches!(s.state, 'Z' | 'X' | 'x'))
}

/// The start time (clock ticks after boot) of a live process.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).filter(|_| pid_alive(pid)).map(|s| s.start_time)
}

/// Whether the process `pid` that started at `start_time` is still running
/// (false when it died or the pid now belongs to another process).
pub(crate) fn same_process_alive(pid: u32, start_time: u64) -> bool {
    self::start_time(pid) == Some(start_time)
}

/// The command line of a process, one string per argument.
pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// `pid` and all its live descendants (breadth first, `pid` first).
pub fn with_descendants(pid: u32) -> Vec<u32> {
    let mut parents: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some(s) = stat(child) {
                parents.entry(s.ppid).or_default().push(child);
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() && out.len() < 4096 {
        if let Some(children) = parents.get(&out[i]) {
            for child in children {
                if !out.contains(child) {
                    out.push(*child);
                }
            }
        }
        i += 1;
    }
    out.retain(|p| pid_alive(*p));
    out
}

/// A process told apart from any later one that reuses its pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    /// `/proc/<pid>/stat` field 22.
    pub start_time: u64,
}

impl ProcessId {
    /// A live process (None when it is gone).
    pub fn of(pid: u32) -> Option<ProcessId> {
        Some(ProcessId {
            pid,
            start_time: start_time(pid)?,
        })
    }

    /// Whether that very process still runs.
    pub fn alive(self) -> bool {
        same_process_alive(self.pid, self.start_time)
    }
}

/// A shell running a command string (`sh -c CMD`, `bash -c CMD`, …):
/// Claude Code starts every hook this way.
fn is_command_shell(argv: &[String]) -> bool {
    let Some(program) = argv.first() else {
        return false;
    };
    let name = Path::new(program)
        .file_name()
        .map_or_else(|| program.clone(), |n| n.to_string_lossy().into_owned());
    let shell = matches!(
        name.trim_start_matches('-'),
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "busybox"
    );
    shell
        && argv[1..]
            .iter()
            .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
}

/// The process that ran `pid`: its nearest ancestor that is not a
/// `sh -c` wrapper. For a hook that is the Claude Code process whose event
/// it handles (measured on 2.1.328: `claude` → `/bin/sh -c CMD` → hook;
/// an MCP server is started directly by `claude`). None when the chain
/// cannot be read.
pub fn runner_of(pid: u32) -> Option<ProcessId> {
    let mut current = stat(pid)?.ppid;
    // A chain of wrappers is short; stop at init or after a few steps.
    for _ in 0..16 {
        if current <= 1 {
            return None;
        }
        let argv = cmdline(current)?;
        if !is_command_shell(&argv) {
            return ProcessId::of(current);
        }
        current = stat(current)?.ppid;
    }
    None
}

/// The working directory of a process, if it can be read.
pub fn cwd(pid: u32) -> Option<std::path::PathBuf> {
    fs::read_link(format!("/proc/{pid}/cwd")).ok()
}

/// Make `command`'s child lead a new session (`setsid(2)`): no controlling
/// terminal, outside the caller's process group, so a terminal's SIGHUP
/// does not reach it.
#[allow(unsafe_code)]
fn in_new_session(command: &mut Command) {
    // SAFETY: `pre_exec` is unsafe because its closure runs in the forked
    // child before exec; this one only makes the setsid(2) system call
    // (async-signal-safe, no allocation, no lock; rustix's wrapper is a
    // direct syscall and its error converts without allocating). std has
    // no stable way to ask for a new session (CommandExt::setsid is
    // unstable; process_group(0) keeps the controlling terminal), so this
    // block stays (docs/ARCHITECTURE.md, "unsafe").
    unsafe {
        command.pre_exec(|| {
            rustix::process::setsid()?;
            Ok(())
        });
    }
}

/// Start `argv` as a detached worker: a new session (`setsid(2)`, so it has
/// no controlling terminal and is outside the caller's process group and is
/// not hit by the SIGHUP a pane kill sends), stdin `/dev/null`, stdout and
/// stderr appended to `log_file` (created 0600). Returns the worker's pid.
/// The child is not waited for; it is reparented to init when we exit.
pub(crate) fn spawn_detached(
    argv: &[String],
    env: &[(String, String)],
    log_file: &Path,
) -> Result<u32> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| Error::usage("cannot start a worker: empty command"))?;
    // Never through a link planted in the state dir (SPEC §15).
    let log = ktr_base::open::append_private(log_file)?;
    let err_log = log
        .try_clone()
        .map_err(|e| Error::io_at("open worker log", log_file, &e))?;
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log);
    in_new_session(&mut command);
    let child = command
        .spawn()
        .map_err(|e| Error::io(format!("cannot start {program}: {e}")))?;
    Ok(child.id())
}

/// Wait until our child `pid` has exec'd `program` (its command line names
/// it), e.g. `systemd-run --scope … -- program`. An error when the child
/// exited first (it is reaped; its exit status is in the message) or did
/// not get there within `timeout`.
pub(crate) fn wait_exec(pid: u32, program: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        // A script names itself second (`/bin/sh /path/program …`).
        let argv = cmdline(pid).unwrap_or_default();
        let ran = argv
            .iter()
            .take(2)
            .any(|a| Path::new(a).file_name().is_some_and(|n| n == program));
        if ran && pid_alive(pid) {
            return Ok(());
        }
        let reaped = rustix_pid(pid).and_then(|child| {
            rustix::process::waitpid(Some(child), rustix::process::WaitOptions::NOHANG)
                .ok()
                .flatten()
        });
        if let Some((_, status)) = reaped {
            let status = ExitStatus::from_raw(status.as_raw());
            // Exit 0: it ran and is done already.
            if status.success() {
                return Ok(());
            }
            return Err(Error::io(format!(
                "it exited with {}",
                describe_status(status)
            )));
        }
        if Instant::now() >= deadline {
            return Err(Error::io(format!(
                "{program} did not start within {:.0} s",
                timeout.as_secs_f64()
            )));
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Run `argv` to completion, but never longer than `timeout`: on expiry the
/// whole process group is killed and an error names the command. stdin is
/// `/dev/null`; stdout and stderr are captured. A non-zero exit is *not* an
/// error here (see [`run_checked`]).
pub(crate) fn run_with_timeout(argv: &[String], timeout: Duration) -> Result<Output> {
    run_as(argv, timeout, false)
}

/// [`run_checked`] in a session of its own (`setsid(2)`: no controlling
/// terminal): for a process whose terminal may hang up meanwhile, such as
/// `ktr-keep` in a popup whose client detaches (measured: the `tmux`
/// it ran then was killed by SIGHUP in 4 of 20 runs; 0 of 30 apart).
pub(crate) fn run_checked_apart(argv: &[String], timeout: Duration) -> Result<String> {
    checked(argv, &run_as(argv, timeout, true)?)
}

fn run_as(argv: &[String], timeout: Duration, own_session: bool) -> Result<Output> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| Error::usage("cannot run an empty command"))?;
    let name = display_command(argv);
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if own_session {
        // Its new process group is the child's own, as below.
        in_new_session(&mut command);
    } else {
        command.process_group(0);
    }
    let mut child = command
        .spawn()
        .map_err(|e| Error::io(format!("cannot run {name}: {e}")))?;
    let (tx, rx) = mpsc::channel();
    for (which, pipe) in [
        (
            0,
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
        (
            1,
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
    ] {
        let tx = tx.clone();
        let mut pipe = pipe.expect("piped above");
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send((which, buf));
        });
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                kill_group(child.id());
                let _ = child.wait();
                return Err(Error::io(format!(
                    "{name} did not finish within {:.0} s and was killed",
                    timeout.as_secs_f64()
                )));
            }
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(Error::io(format!("cannot wait for {name}: {e}"))),
        }
    };
    // A grandchild may still hold the pipes open: collect what arrives
    // before the deadline (plus a moment) and never wait longer.
    let mut out = Output {
        status,
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    let collect_until = deadline.max(Instant::now()) + Duration::from_millis(200);
    for _ in 0..2 {
        let left = collect_until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((0, buf)) => out.stdout = buf,
            Ok((_, buf)) => out.stderr = buf,
            Err(_) => break,
        }
    }
    Ok(out)
}

/// [`run_with_timeout`], then require exit 0; returns trimmed stdout. The
/// error names the command and carries the first line of its stderr.
pub fn run_checked(argv: &[String], timeout: Duration) -> Result<String> {
    checked(argv, &run_with_timeout(argv, timeout)?)
}

fn checked(argv: &[String], out: &Output) -> Result<String> {
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        return Err(Error::io(format!(
            "{} failed ({}){}",
            display_command(argv),
            describe_status(out.status),
            if first.is_empty() {
                String::new()
            } else {
                format!(": {first}")
            }
        ))
        .because(Failed {
            stderr: first.to_string(),
        }));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Under [`run_checked`]'s error: what the command said on stderr (its
/// first line), for a caller that knows the command's words.
#[derive(Debug)]
pub struct Failed {
    pub stderr: String,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the command failed: {}", self.stderr)
    }
}

impl std::error::Error for Failed {}

/// Read at most `limit` bytes of stdin. `Ok(None)` when the input was longer
/// (the rest is drained so the writer never sees a broken pipe).
pub(crate) fn read_stdin_capped(limit: usize) -> io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    let stdin = io::stdin();
    let mut lock = stdin.lock();
    (&mut lock).take(limit as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > limit {
        io::copy(&mut lock, &mut io::sink())?;
        return Ok(None);
    }
    Ok(Some(buf))
}

/// SIGKILL to the one process `pid` (a pid this caller checked to be the
/// process it means). One already gone is not an error here.
pub fn kill(pid: u32) {
    if let Some(pid) = rustix_pid(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// SIGKILL to the process group `pgid`; the group was created for this
/// child only (`process_group(0)`), so nothing else can be hit. A group
/// already gone is not an error here.
fn kill_group(pgid: u32) {
    if let Some(pgid) = rustix_pid(pgid) {
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
}

/// Block until process `pid` is gone (a zombie counts as gone): asleep on
/// its pidfd, or where there is none (an older kernel), by looking every
/// 200 ms.
pub(crate) fn wait_gone(pid: u32) {
    use rustix::event::{PollFd, PollFlags, poll};
    let pidfd = rustix_pid(pid)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    if let Some(fd) = pidfd {
        // Readable once the process exited; a signal only wakes it.
        while let Err(rustix::io::Errno::INTR) = poll(&mut [PollFd::new(&fd, PollFlags::IN)], None)
        {
        }
    }
    while pid_alive(pid) {
        thread::sleep(Duration::from_millis(200));
    }
}

/// `pid` as rustix names a process: None for 0 and for what does not fit
/// a `pid_t`, which name no single process.
fn rustix_pid(pid: u32) -> Option<rustix::process::Pid> {
    rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)
}

fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "unknown status".into(),
    }
}

/// A command for messages: the program and its first argument.
fn display_command(argv: &[String]) -> String {
    let program = argv
        .first()
        .map(|p| {
            Path::new(p)
                .file_name()
                .map_or(p.clone(), |n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    match argv.get(1) {
        Some(sub) => format!("`{program} {sub}`"),
        None => format!("`{program}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(std::string::ToString::to_string).collect()
    }

    #[test]
    fn stat_is_parsed_after_the_last_parenthesis() {
        let text =
            "1234 (we (ird) name) S 77 1234 1234 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1 2 3";
        let s = parse_stat(text).unwrap();
        assert_eq!((s.state, s.ppid, s.start_time), ('S', 77, 98765));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn own_process_is_alive_and_identified() {
        let me = std::process::id();
        assert!(pid_alive(me));
        let t = start_time(me).unwrap();
        assert!(same_process_alive(me, t));
        assert!(
            !same_process_alive(me, t + 1),
            "a different start time is another process"
        );
        assert!(cmdline(me).unwrap()[0].contains("ktr"));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX - 1));
    }

    #[test]
    fn the_runner_of_a_hook_skips_the_sh_c_wrapper() {
        let shell = |words: &[&str]| is_command_shell(&argv(words));
        assert!(shell(&["/bin/sh", "-c", "ktr-stop --config x"]));
        assert!(shell(&["bash", "-ec", "x"]));
        assert!(!shell(&[
            "/bin/sh",
            "/usr/bin/fake-claude",
            "--resume",
            "a"
        ]));
        assert!(
            !shell(&["claude", "-c"]),
            "claude --continue is not a shell"
        );
        assert!(!shell(&["bash", "--rcfile", "x"]));
        // This test's runner: `sh -c 'sleep'` is skipped, the test is found.
        let me = ProcessId::of(std::process::id()).unwrap();
        let mut child = Command::new("sh")
            .args(["-c", "sleep 5; true"])
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let sleeper = loop {
            let kids = with_descendants(child.id());
            if let Some(pid) = kids.iter().find(|p| **p != child.id()) {
                break *pid;
            }
            assert!(Instant::now() < deadline, "sleep never started");
            thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(runner_of(sleeper), Some(me));
        assert_eq!(runner_of(child.id()), Some(me));
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn run_with_timeout_kills_a_hanging_command() {
        let start = Instant::now();
        let err =
            run_with_timeout(&argv(&["sleep", "30"]), Duration::from_millis(200)).unwrap_err();
        assert!(err.message.contains("`sleep 30` did not finish"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn wait_exec_reaps_a_child_that_exits_before_naming_the_program() {
        // Exit 0 first: it ran and is done already.
        // (wait_exec is what waits for these children.)
        let done = Command::new("sh")
            .args(["-c", "exit 0"])
            .spawn()
            .unwrap()
            .id();
        wait_exec(done, "never-named", Duration::from_secs(10)).unwrap();
        // Any other exit: an error with its status, at once, not at the
        // deadline, and the child is reaped (no zombie left: gone).
        let failed = Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap()
            .id();
        let start = Instant::now();
        let err = wait_exec(failed, "never-named", Duration::from_secs(10)).unwrap_err();
        assert!(err.message.contains("exited with exit 3"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(stat(failed), None, "the child must be reaped");
        assert!(!pid_alive(failed));
    }

    #[test]
    fn run_with_timeout_does_not_wait_for_a_grandchild_holding_the_pipe() {
        // The shell exits at once but leaves `sleep` holding stdout.
        let start = Instant::now();
        let out = run_with_timeout(
            &argv(&["sh", "-c", "echo hi; sleep 30 & exit 0"]),
            Duration::from_millis(500),
        )
        .unwrap();
        assert!(out.status.success());
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn run_checked_reports_stderr_and_exit_code() {
        assert_eq!(
            run_checked(&argv(&["echo", " x "]), Duration::from_secs(5)).unwrap(),
            "x"
        );
        let err = run_checked(
            &argv(&["sh", "-c", "echo 'no such pane' >&2; exit 3"]),
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert_eq!(err.message, "`sh -c` failed (exit 3): no such pane");
        let err = run_checked(&argv(&["/nonexistent/x"]), Duration::from_secs(1)).unwrap_err();
        assert!(err.message.starts_with("cannot run `x`"), "{err}");
    }

    #[test]
    fn detached_worker_gets_its_own_session_and_the_log() {
        let dir = std::env::temp_dir().join(format!("ktr-proc-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("worker.log");
        let pid = spawn_detached(
            &argv(&["sh", "-c", "echo out=$KTR_T; echo err >&2; sleep 2"]),
            &[("KTR_T".into(), "v".into())],
            &log,
        )
        .unwrap();
        assert!(pid_alive(pid));
        // Field 6 of stat is the session id: a setsid child leads its own.
        let text = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = text[text.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .collect();
        assert_eq!(fields[3], pid.to_string(), "worker must lead a new session");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !fs::read_to_string(&log).unwrap_or_default().contains("err")
            && Instant::now() < deadline
        {
            thread::sleep(Duration::from_millis(20));
        }
        let text = fs::read_to_string(&log).unwrap();
        assert!(text.contains("out=v") && text.contains("err"), "{text}");
        kill(pid);
        fs::remove_dir_all(&dir).unwrap();
    }
}
