//! `ktr demo [--keep]`: a complete rebuild drill in a throwaway sandbox.
//!
//! Nothing to set up and nothing real touched: a temp HOME, project, state
//! dir and config with `activation = "pointer"`, holding the example
//! transcript compiled into this binary. It walks the path a real rebuild
//! takes — doctor, dirty, plan, request, the Stop hook (the real `ktr-stop`
//! binary), then the detached stages prepare → verify → activate — and ends
//! with what changed. `--keep` leaves the sandbox for a look around.

use std::fs;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ktr_admin::report::StatusView;
use ktr_admin::settings::Edit;
use ktr_base::Error;
use ktr_base::config::{Config, encode_project_name};
use ktr_base::digest::{sha256_file, sha256_hex};
use ktr_engine::plan;
use ktr_engine::turns::estimate_tokens;
use ktr_pipeline::operation::{Operation, Status, Store};
use ktr_pipeline::window_cache;

use crate::cli::DemoArgs;
use crate::{dirty, out, status};
use ktr_base::ids::OperationId;

/// The example session: a companion + engineering conversation with tool
/// calls, channel messages, a queued message, a slash command, a compaction.
const EXAMPLE: &str = include_str!("../../examples/session.jsonl");
/// Its session id (the `sessionId` inside it).
const EXAMPLE_SESSION: &str = "5d1c9a8e-3b7f-4e2a-9c61-0f2b7d4e8a13";
/// How long the detached stages may take before the demo gives up.
const STAGE_TIMEOUT: Duration = Duration::from_secs(60);

pub fn run(args: &DemoArgs) -> Result<u8, Error> {
    let mut sandbox = Sandbox::create()?;
    let result = drill(&sandbox);
    // A failed drill keeps its sandbox: that is where the evidence is.
    sandbox.keep = args.keep || result.is_err();
    if sandbox.keep {
        out::print(&format!(
            "\nsandbox kept: {}\n  look around: ktr --config {} status\n  remove it:   rm -r {}\n",
            sandbox.root.display(),
            sandbox.config.display(),
            sandbox.root.display()
        ));
    } else {
        let root = sandbox.root.clone();
        drop(sandbox);
        out::print(&if root.exists() {
            format!(
                "\nthe sandbox {} could not be removed; rm -r it\n",
                root.display()
            )
        } else {
            format!(
                "\nsandbox removed: {} (ktr demo --keep keeps it)\n",
                root.display()
            )
        });
    }
    result
}

/// The drill itself: each step prints a heading and what happened.
fn drill(sb: &Sandbox) -> Result<u8, Error> {
    heading(
        1,
        "a throwaway installation",
        "A temp HOME with one Claude Code project holding the example session, a state dir, a\n\
         config in pointer mode (the switch rewrites a pointer file a `claude -p --resume` loop\n\
         reads, so no Claude Code process is touched), and the hooks and MCP server registered\n\
         in that HOME as ./install would.",
    );
    out::print(&format!(
        "sandbox     {}\ntranscript  {}\nconfig      {}\n",
        sb.root.display(),
        sb.transcript.display(),
        sb.config.display()
    ));
    let config = Config::load(Some(&sb.config))?;

    heading(2, "ktr doctor", "Read-only checks of the installation.");
    let doctor = sb.run(&sb.bin_dir.join("ktr"), &["doctor"], None)?;
    out::print(&doctor);

    heading(
        3,
        "ktr dirty",
        "What fills the current context window besides the conversation: tool results,\n\
         injections, thinking. This residue is what a rebuild drops.",
    );
    let planned = window_cache::assess(&config, &sb.transcript)?;
    out::print(&dirty::human(&planned.report.ledger));
    if !planned.report.ledger.should_rebuild {
        out::print(
            "(a household would not rebuild yet; the demo goes on anyway, to show the whole path)\n",
        );
    }

    heading(
        4,
        "ktr plan",
        "What a rebuild would carry: every real user/assistant turn, verbatim. Writes nothing.",
    );
    out::print(&crate::plan::human(&planned.report));
    if let Some(why) = &planned.report.blocked_reason {
        return Err(Error::refused(format!(
            "the example plan is blocked: {why}"
        )));
    }

    heading(
        5,
        "ktr request --confirm REBUILD",
        "The human said yes. Nothing happens yet: the switch waits until the current reply\n\
         has finished.",
    );
    let store = Store::for_config(&config)?;
    let op = store.request(
        "ktr demo: the window is mostly tool residue",
        "REBUILD",
        None,
    )?;
    out::print(&format!("operation {} is {}\n", op.id, op.status));

    heading(
        6,
        "the reply finishes: Claude Code runs the Stop hook",
        "The real ktr-stop binary gets the Stop hook JSON on stdin, binds the operation to this\n\
         session, marks it scheduled and starts ktr-prepare detached.",
    );
    let hook_output = sb.stop_hook()?;
    out::print(&format!("ktr-stop printed: {hook_output}"));
    let op = store.load(&op.id)?;
    if op.status == Status::Pending {
        return Err(Error::refused(format!(
            "the Stop hook did not schedule operation {}: {}",
            op.id,
            hook_output.trim()
        )));
    }

    heading(
        7,
        "ktr-prepare → ktr-verify → ktr-activate",
        "Detached stages: freeze a backup of the source, write the candidate session, verify it\n\
         against the backup independently, then compare-and-swap the pointer.",
    );
    let op = follow(&store, &op.id, STAGE_TIMEOUT)?;

    heading(8, "ktr status", "The operation's record.");
    out::print(&status::human(&StatusView::of(&op)));
    if op.status != Status::Activated {
        let log = fs::read_to_string(store.worker_log()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        out::print(&format!("worker.log (last lines):\n{}\n", tail.join("\n")));
        return Err(Error::refused(format!(
            "the demo rebuild ended {}: {}",
            op.status,
            op.error.as_deref().unwrap_or("see the status above")
        )));
    }

    heading(9, "before / after", "");
    out::print(&summary(sb, &planned.report, &op)?);
    out::print("\ndemo finished: operation activated\n");
    Ok(0)
}

/// Print a step heading and what it is about.
fn heading(n: u32, title: &str, about: &str) {
    let mut s = format!("\n== {n}. {title} ==\n");
    if !about.is_empty() {
        s.push_str(about);
        s.push_str("\n\n");
    }
    out::print(&s);
}

/// Poll `id` until it is terminal, printing each transition as it lands.
fn follow(store: &Store, id: &OperationId, timeout: Duration) -> Result<Operation, Error> {
    let deadline = Instant::now() + timeout;
    let mut shown = 0;
    loop {
        let op = store.load(id)?;
        for t in op.history.iter().skip(shown) {
            out::print(&format!("  {} → {}  {}\n", t.from, t.to, t.note));
        }
        shown = op.history.len();
        if op.status.is_terminal() {
            return Ok(op);
        }
        if Instant::now() >= deadline {
            return Err(Error::refused(format!(
                "the stages did not finish within {} s (operation {id} is {}); see {}",
                timeout.as_secs(),
                op.status,
                store.worker_log().display()
            )));
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// What changed, in numbers.
fn summary(sb: &Sandbox, report: &plan::PlanReport, op: &Operation) -> Result<String, Error> {
    let candidate = op
        .candidate
        .as_ref()
        .ok_or_else(|| Error::refused("the activated operation records no candidate"))?;
    let after_bytes = fs::metadata(&candidate.path)
        .map_err(|e| Error::io_at("read", &candidate.path, &e))?
        .len();
    let window = window_tokens(&sb.transcript, report.ledger.window_start_line)?;
    let pointer = fs::read_to_string(&sb.pointer).unwrap_or_default();
    // Prove, do not claim, that the source was left alone.
    if sha256_file(&sb.transcript)? != sha256_hex(EXAMPLE.as_bytes()) {
        return Err(Error::refused(format!(
            "the source transcript {} changed during the demo",
            sb.transcript.display()
        )));
    }
    let mut s = String::new();
    let mut line = |k: &str, before: String, after: String| {
        s.push_str(&format!("{k:<22}{before:>24}  →  {after}\n"));
    };
    line(
        "session",
        report.session_id.clone(),
        candidate.session_id.to_string(),
    );
    line(
        "turns",
        report.source_turns.to_string(),
        format!("{} (all carried verbatim)", report.selected_turns),
    );
    line(
        "transcript bytes",
        out::bytes(report.source_bytes),
        out::bytes(after_bytes),
    );
    line(
        "window tokens",
        format!("~{window} (raw JSON, rough)"),
        format!(
            "{} estimated (+ the fixed overhead of a fresh window)",
            op.estimated_tokens.unwrap_or(report.estimated_tokens)
        ),
    );
    s.push_str(&format!(
        "\ncarried items   {}\ncandidate       {}\npointer now     {}\nsource          {} (unchanged: same sha256 as before)\n",
        op.manifest_artifact.as_ref().map_or(0, |m| m.items),
        candidate.path.display(),
        pointer.trim(),
        sb.transcript.display()
    ));
    Ok(s)
}

/// The token estimate applied to the raw lines of the current window: a
/// rough figure for what the old window holds (JSON escapes inflate it).
fn window_tokens(transcript: &Path, start_line: usize) -> Result<u64, Error> {
    let text = fs::read_to_string(transcript).map_err(|e| Error::io_at("read", transcript, &e))?;
    Ok(text
        .lines()
        .skip(start_line.saturating_sub(1))
        .map(estimate_tokens)
        .sum())
}

/// The throwaway installation. Removed on drop unless `keep`.
struct Sandbox {
    root: PathBuf,
    home: PathBuf,
    transcript: PathBuf,
    pointer: PathBuf,
    config: PathBuf,
    /// Where the ktr executables are: beside this one.
    bin_dir: PathBuf,
    keep: bool,
}

impl Sandbox {
    fn create() -> Result<Sandbox, Error> {
        let bin_dir = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .ok_or_else(|| Error::io("cannot find the directory of the ktr executable"))?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let root = std::env::temp_dir().join(format!("ktr-demo-{}-{nanos}", std::process::id()));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .map_err(|e| Error::io_at("create", &root, &e))?;
        let root = root
            .canonicalize()
            .map_err(|e| Error::io_at("resolve", &root, &e))?;
        let home = root.join("home");
        let workdir = home.join("companion");
        let project = home
            .join(".claude/projects")
            .join(encode_project_name(&workdir));
        let sandbox = Sandbox {
            transcript: project.join(format!("{EXAMPLE_SESSION}.jsonl")),
            pointer: root.join("resume_session"),
            config: root.join("config.toml"),
            home,
            root,
            bin_dir,
            keep: false,
        };
        for dir in [&workdir, &project] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| Error::io_at("create", dir, &e))?;
        }
        let write = |path: &Path, text: &str| {
            fs::write(path, text).map_err(|e| Error::io_at("write", path, &e))
        };
        write(&sandbox.transcript, EXAMPLE)?;
        // The loop currently resumes the example session.
        write(&sandbox.pointer, &format!("{EXAMPLE_SESSION}\n"))?;
        let config = format!(
            "# ktr demo sandbox: nothing here touches a real installation.\n\
             project_dir = {}\n\
             state_dir = {}\n\
             claude_workdir = {}\n\
             activation = \"pointer\"\n\
             resume_pointer_path = {}\n\
             # The demo never starts Claude Code; a real config copies its launch command.\n\
             resume_command = [\"true\", \"--resume\", \"{{session_id}}\"]\n\
             # No Claude Code to prove the new session loads (a real pointer household keeps it on).\n\
             pointer_health_probe = false\n\
             activation_delay_seconds = 0\n\
             stable_file_seconds = 0.2\n\
             stable_file_timeout_seconds = 5\n\
             healthcheck_seconds = 1\n",
            toml_str(&project)?,
            toml_str(&sandbox.root.join("state"))?,
            toml_str(&workdir)?,
            toml_str(&sandbox.pointer)?,
        );
        write(&sandbox.config, &config)?;
        sandbox.install()?;
        Ok(sandbox)
    }

    /// Run one of the installed ktr programs with `--config` and `args`,
    /// only the sandbox in its environment and `stdin` as its input;
    /// returns what it printed.
    fn run(&self, program: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, Error> {
        if !program.is_file() {
            return Err(Error::io(format!(
                "{} is missing; install every ktr binary into one directory",
                program.display()
            )));
        }
        let mut child = Command::new(program)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TMPDIR", &self.root)
            .env("KTR_BIN_DIR", &self.bin_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io_at("run", program, &e))?;
        if let Some(mut pipe) = child.stdin.take() {
            pipe.write_all(stdin.unwrap_or("").as_bytes())
                .map_err(|e| Error::io_at("write to", program, &e))?;
        }
        let output = child
            .wait_with_output()
            .map_err(|e| Error::io_at("wait for", program, &e))?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Run the real `ktr-stop` with the Stop hook JSON Claude Code would
    /// send; returns what it printed.
    fn stop_hook(&self) -> Result<String, Error> {
        let input = serde_json::json!({
            "session_id": EXAMPLE_SESSION,
            "transcript_path": self.transcript,
            "cwd": self.home.join("companion"),
            "hook_event_name": "Stop",
            "stop_hook_active": false,
            "last_assistant_message": "好的，我们明天继续。",
        });
        self.run(
            &self.bin_dir.join("ktr-stop"),
            &[],
            Some(&input.to_string()),
        )
    }

    /// Register the hooks (`settings.json`) and the MCP server
    /// (`.claude.json`) in the sandbox HOME, as `./install` does.
    fn install(&self) -> Result<(), Error> {
        Edit::merge(
            &self.home.join(".claude/settings.json"),
            &self.bin_dir,
            Some(&self.config),
        )?
        .apply()?;
        let claude_json = serde_json::json!({
            "mcpServers": {"ktr": {
                "type": "stdio",
                "command": self.bin_dir.join("ktr-mcp"),
                "args": ["--config", self.config],
            }}
        });
        let path = self.home.join(".claude.json");
        fs::write(&path, format!("{claude_json:#}\n")).map_err(|e| Error::io_at("write", &path, &e))
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

/// A path as a TOML basic string (JSON string escapes are valid TOML).
fn toml_str(path: &Path) -> Result<String, Error> {
    let text = path.to_str().ok_or_else(|| {
        Error::io(format!(
            "temp dir path {} is not UTF-8; set TMPDIR to a plain path",
            path.display()
        ))
    })?;
    Ok(serde_json::Value::String(text.into()).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_example_is_the_named_session() {
        let first: serde_json::Value =
            serde_json::from_str(EXAMPLE.lines().next().unwrap()).unwrap();
        assert_eq!(first["sessionId"], EXAMPLE_SESSION);
    }
}
