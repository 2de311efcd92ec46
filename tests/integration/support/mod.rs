//! Everything the integration tests share: one [`Sandbox`] (a throw-away
//! installation), a private [`TmuxServer`], the pipeline [`rig`], the
//! `ktr plan` [`plan`] harness, the real CLI ([`claude`]) and its fake API
//! ([`fake_api`]), and the requirements of the ignored tests.
//! Stand-in programs (`claude`, stages, systemd tools) are scripts in
//! `support/bin/`; fixtures are in `tests/fixtures/`.
//! Nothing here can reach a real installation or a real Claude Code.

pub mod claude;
pub mod exe;
pub mod fake_api;
pub mod plan;
pub mod rig;
pub mod rng;
pub mod sandbox;
pub mod systemd;
pub mod terminal;
pub mod tmux;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

pub use exe::exe;
pub use sandbox::Sandbox;
pub use tmux::TmuxServer;

/// `Option::unwrap` that panics with a message built on failure, at the
/// caller's line (a `panic!` inside `unwrap_or_else`'s closure would lose
/// `#[track_caller]`).
pub trait OptionOrPanic<T> {
    #[track_caller]
    fn or_panic(self, why: impl FnOnce() -> String) -> T;
}

impl<T> OptionOrPanic<T> for Option<T> {
    #[track_caller]
    fn or_panic(self, why: impl FnOnce() -> String) -> T {
        match self {
            Some(value) => value,
            None => panic!("{}", why()),
        }
    }
}

/// `Result::unwrap` that panics with a message built from the error, at
/// the caller's line.
pub trait ResultOrPanic<T, E> {
    #[track_caller]
    fn or_panic(self, why: impl FnOnce(E) -> String) -> T;
}

impl<T, E> ResultOrPanic<T, E> for Result<T, E> {
    #[track_caller]
    fn or_panic(self, why: impl FnOnce(E) -> String) -> T {
        match self {
            Ok(value) => value,
            Err(e) => panic!("{}", why(e)),
        }
    }
}

/// `bin` under `strace -f` (at most 8 s), logging the system calls
/// `calls` (`trace=` syntax, e.g. `unlink,unlinkat,rmdir`) into `log`.
pub fn straced(log: &Path, calls: &str, bin: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("timeout");
    cmd.args(["8", "strace", "-f", "-qq", "-e"])
        .arg(format!("trace={calls}"))
        .arg("-o")
        .arg(log)
        .arg(bin);
    cmd
}

/// Make a FIFO at `path`.
pub fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}

/// A file of this repository, by its path from the root.
/// `cmd` with nothing of the caller's installation: `HOME` and `XDG_*`
/// name a folder that does not exist, and no `KTR_*` variable is passed.
/// For the few commands a test runs without a [`Sandbox`] (which sets its
/// own); a ktr that still looked for the default state dir would fail
/// instead of touching the operator's `~/.local/state/ktr`.
pub fn isolated(cmd: &mut std::process::Command) -> &mut std::process::Command {
    let nowhere = std::env::temp_dir().join(format!("ktr-test-no-home-{}", std::process::id()));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("KTR_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("HOME", &nowhere)
        .env("XDG_CONFIG_HOME", nowhere.join(".config"))
        .env("XDG_STATE_HOME", nowhere.join(".local/state"))
        .env("XDG_CACHE_HOME", nowhere.join(".cache"))
}

/// `ktr --config CONFIG ARGS…` with `HOME` = `home`: its stdout, or one
/// line with what it said when it failed (for harnesses that keep going).
pub fn ktr_as(home: &Path, config: &Path, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(crate::support::exe("ktr"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env("HOME", home)
        .output()
        .map_err(|e| e.to_string())?;
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(said)
    } else {
        Err(format!(
            "ktr {args:?}: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The stdout of `ktr ARGS` that must have succeeded; panics with its
/// stderr otherwise.
#[track_caller]
pub fn ktr_stdout(out: &std::process::Output, args: &[&str]) -> String {
    assert!(
        out.status.success(),
        "ktr {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// What a finished command printed: stdout, then stderr.
/// A session id a test names (the engine takes [`ktr_base::ids::SessionId`]).
#[track_caller]
pub fn sid(id: &str) -> ktr_base::ids::SessionId {
    ktr_base::ids::SessionId::parse(id).unwrap()
}

pub fn printed(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The MCP tools a document's tables list (rows starting with a
/// backquoted `thread_rebuild_…` name), in order. SPEC.md §11 is where the tools are named and counted; the
/// tests compare the server and the READMEs with it.
pub fn mcp_tools(doc: &str) -> Vec<String> {
    fs::read_to_string(repo_file(doc))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("| `thread_rebuild_"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| format!("thread_rebuild_{name}"))
        .collect()
}

/// The example transcript (`examples/session.jsonl`).
pub fn example() -> PathBuf {
    repo_file("examples/session.jsonl")
}

/// A stand-in program from `tests/integration/support/bin/`.
pub fn stand_in(name: &str) -> PathBuf {
    repo_file("tests/integration/support/bin").join(name)
}

/// Show a measured table: on stderr (cargo shows it for a failing test or
/// with `--nocapture`), and as `$KTR_REPORT_DIR/<name>.txt` when set
/// (`.ci/run` prints those after the suite, so CI output has every table).
pub fn report(name: &str, text: &str) {
    eprintln!("{text}");
    if let Some(dir) = std::env::var_os("KTR_REPORT_DIR") {
        let dir = PathBuf::from(dir);
        let _ = fs::create_dir_all(&dir);
        let _ = fs::write(dir.join(format!("{name}.txt")), text);
    }
}

/// `needles` all occur in `haystack`, in this order.
#[track_caller]
pub fn assert_in_order(haystack: &str, needles: &[&str]) {
    let mut from = 0;
    for needle in needles {
        match haystack[from..].find(needle) {
            Some(at) => from += at + needle.len(),
            None => panic!("{needle} is missing (or out of order) in:\n{haystack}"),
        }
    }
}

/// Poll `cond` every 20 ms for up to `timeout`.
/// Wait until the latest operation's status satisfies `done`; panics
/// after `timeout` with `what` and `diagnosis()`.
#[track_caller]
pub fn wait_status(
    store: &ktr_pipeline::operation::Store,
    what: &str,
    timeout: Duration,
    done: impl Fn(ktr_pipeline::operation::Status) -> bool,
    diagnosis: impl Fn() -> String,
) -> ktr_pipeline::operation::Operation {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(op) = store.latest().unwrap().filter(|op| done(op.status)) {
            return op;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            diagnosis()
        );
        // Reading the latest operation is cheap: look often, so a test
        // waits for the state it needs, not for the next tick.
        thread::sleep(Duration::from_millis(20));
    }
}

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

/// Every file and directory below `root`: directories with their mode,
/// files with mode, size, mtime and content digest (to show that a command
/// changed nothing, or exactly what it removed).
pub fn tree(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let desc = if meta.is_dir() {
                stack.push(path.clone());
                format!("dir {:o}", meta.permissions().mode())
            } else {
                format!(
                    "file {:o} {} {:?} {}",
                    meta.permissions().mode(),
                    meta.len(),
                    meta.modified().ok(),
                    ktr_base::digest::sha256_hex(&fs::read(&path).unwrap_or_default())
                )
            };
            out.insert(path, desc);
        }
    }
    out
}

/// The corpus of real transcripts: `$KTR_CORPUS`, default
/// `<repo>/../shared/corpus`. Tests that call this are ignored by default
/// (`needs the corpus`); run with `--include-ignored` they fail here when
/// it is missing, never pass without having looked.
#[track_caller]
pub fn corpus_dir() -> PathBuf {
    let (dir, from) = match std::env::var_os("KTR_CORPUS") {
        Some(dir) => (PathBuf::from(dir), "KTR_CORPUS"),
        None => (
            repo_file("../shared/corpus"),
            "the default ../shared/corpus",
        ),
    };
    let has_transcripts = fs::read_dir(&dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
    });
    assert!(
        has_transcripts,
        "this test needs the corpus of real transcripts, but {} ({from}) holds no *.jsonl; \
         set KTR_CORPUS to the corpus directory",
        dir.display()
    );
    dir
}

/// The real Claude Code CLI: `$KTR_CLAUDE_BIN`. Tests that call this are
/// ignored by default (`needs the real Claude Code CLI`); run with
/// `--include-ignored` they fail here when it is missing.
#[track_caller]
pub fn claude_bin() -> PathBuf {
    let bin = std::env::var_os("KTR_CLAUDE_BIN").map(PathBuf::from);
    match bin {
        Some(path) if path.is_file() => path,
        Some(path) => panic!(
            "this test needs the real Claude Code CLI, but KTR_CLAUDE_BIN={} is not a file; \
             run .ci/run (it installs it) or point KTR_CLAUDE_BIN at the `claude` binary",
            path.display()
        ),
        None => panic!(
            "this test needs the real Claude Code CLI, but KTR_CLAUDE_BIN is not set; \
             run .ci/run (it installs it) or point KTR_CLAUDE_BIN at the `claude` binary"
        ),
    }
}
