//! A small harness for driving `ktr plan` like a spec:
//!
//! ```ignore
//! let report = Plan::new("two_turns").config("stamp_turns = false").run_json();
//! assert_eq!(report.carried(), vec![user("First question."), assistant("First answer.")]);
//! ```
//!
//! Every run gets its own sandbox: a temporary HOME, project dir and state dir,
//! and a config file naming them. The fixture is copied into the project dir as
//! `<SOURCE_SESSION>.jsonl` and passed with `--transcript`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The admin binary under test.
pub const KTR: &str = env!("CARGO_BIN_EXE_ktr");

/// The file name (without `.jsonl`) the fixture gets inside the project dir.
pub const SOURCE_SESSION: &str = "7c0ffee0-1111-4222-8333-444455556666";

/// Default templates (SPEC §2).
pub const STAMP_PREFIX: &str = "[发生时间: ";
pub const STARTUP_HEADER_PREFIX: &str = "[续窗启动快照 · 冻结于 ";

/// Path of a hand-written fixture in `tests/fixtures/rules/`.
pub fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/rules")
        .join(format!("{name}.jsonl"))
}

/// Bytes of a fixture.
pub fn fixture_bytes(name: &str) -> Vec<u8> {
    let path = fixture_path(name);
    fs::read(&path).unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()))
}

/// `(role, text)` of a carried item, for readable expectations.
pub type Item = (String, String);

pub fn user(text: &str) -> Item {
    ("user".to_string(), text.to_string())
}

pub fn assistant(text: &str) -> Item {
    ("assistant".to_string(), text.to_string())
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------
// Temporary directories (std only; removed on drop unless KTR_KEEP_TMP is set)
// ---------------------------------------------------------------------------

pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("ktr-{tag}-{}-{n}-{nanos:08x}", std::process::id()));
        fs::create_dir_all(&path).expect("create temp dir");
        // Resolve symlinks (e.g. /tmp -> /private/tmp) so paths compare cleanly.
        TempDir(fs::canonicalize(&path).unwrap_or(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("KTR_KEEP_TMP").is_none() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

// ---------------------------------------------------------------------------
// Sandbox: HOME, project dir, state dir, config
// ---------------------------------------------------------------------------

pub struct Sandbox {
    root: TempDir,
    pub home: PathBuf,
    pub project: PathBuf,
    pub state: PathBuf,
    pub config: PathBuf,
}

impl Sandbox {
    /// A fresh sandbox whose config holds `project_dir`, `state_dir`, a tmux
    /// target that cannot exist, and the given extra lines.
    pub fn new(extra_config: &[String]) -> Sandbox {
        let root = TempDir::new("rules");
        let home = root.path().join("home");
        let project = home.join(".claude/projects/-home-alice-proj");
        let state = root.path().join("state");
        for dir in [&home, &project, &state] {
            fs::create_dir_all(dir).expect("create sandbox dir");
        }
        let config = root.path().join("config.toml");
        let mut text = format!(
            "project_dir = '{}'\nstate_dir = '{}'\ntmux_target = 'ktr-rules-no-such-session:0.0'\n",
            project.display(),
            state.display()
        );
        for line in extra_config {
            text.push_str(line);
            text.push('\n');
        }
        fs::write(&config, text).expect("write config");
        Sandbox {
            root,
            home,
            project,
            state,
            config,
        }
    }

    /// The sandbox root (holds home/, state/, config.toml).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Write a transcript into the project dir as `<session>.jsonl`.
    pub fn add_transcript(&self, session: &str, bytes: &[u8]) -> PathBuf {
        let path = self.project.join(format!("{session}.jsonl"));
        fs::write(&path, bytes).expect("write transcript");
        path
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

    /// Run `ktr` with the sandbox environment (HOME etc. point inside it).
    pub fn ktr(&self, args: &[OsString]) -> Outcome {
        let mut cmd = Command::new(KTR);
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("XDG_STATE_HOME", self.home.join(".local/state"))
            .env("LANG", "C.UTF-8");
        let out = cmd.output().expect("run ktr");
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

// ---------------------------------------------------------------------------
// Outcome of one run
// ---------------------------------------------------------------------------

pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stdout_bytes: Vec<u8>,
    pub stderr: String,
    pub args: Vec<String>,
}

impl Outcome {
    pub fn describe(&self) -> String {
        let cut = |s: &str| -> String {
            if s.len() > 4000 {
                let mut end = 4000;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{}… ({} bytes)", &s[..end], s.len())
            } else {
                s.to_string()
            }
        };
        format!(
            "ktr {}\nexit: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args.join(" "),
            self.code,
            cut(&self.stdout),
            cut(&self.stderr)
        )
    }

    /// No input may make ktr panic or print a backtrace (SPEC §14).
    pub fn assert_no_panic(&self) {
        assert!(
            !self.stderr.contains("panicked") && !self.stderr.contains("RUST_BACKTRACE"),
            "ktr panicked:\n{}",
            self.describe()
        );
        assert!(
            self.code.is_some(),
            "ktr was killed by a signal:\n{}",
            self.describe()
        );
    }

    pub fn assert_exit(&self, code: i32) {
        assert_eq!(
            self.code,
            Some(code),
            "unexpected exit code:\n{}",
            self.describe()
        );
    }

    /// stdout parsed as one JSON object.
    pub fn json(&self) -> Report {
        let value: Value = serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!("stdout is not one JSON object ({e}):\n{}", self.describe())
        });
        assert!(
            value.is_object(),
            "stdout is JSON but not an object:\n{}",
            self.describe()
        );
        Report(value)
    }

    /// A usage/config error: exit 2, one line on stderr saying what is wrong.
    pub fn assert_usage_error(&self) -> String {
        self.assert_exit(2);
        self.assert_one_line_error();
        self.stderr.trim().to_string()
    }

    /// A refusal (exit 1 or 2) with a one-line error.
    pub fn assert_refused(&self) -> String {
        assert!(
            matches!(self.code, Some(1 | 2)),
            "expected a refusal (exit 1 or 2):\n{}",
            self.describe()
        );
        if self.code == Some(2) || self.stdout.trim().is_empty() {
            self.assert_one_line_error();
            self.stderr.trim().to_string()
        } else {
            // Exit 1 with a JSON report: the reason is in blocked_reason.
            let report = self.json();
            report.blocked_reason()
        }
    }

    fn assert_one_line_error(&self) {
        let text = self.stderr.trim();
        assert!(
            !text.is_empty(),
            "expected an error message on stderr:\n{}",
            self.describe()
        );
        assert_eq!(
            text.lines().count(),
            1,
            "the error must be one line:\n{}",
            self.describe()
        );
    }
}

// ---------------------------------------------------------------------------
// The parsed `plan --json` report
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct Report(pub Value);

impl std::ops::Deref for Report {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.0
    }
}

impl Report {
    /// An unsigned count field, e.g. `report.count("source_turns")`.
    pub fn count(&self, field: &str) -> u64 {
        self.0[field]
            .as_u64()
            .unwrap_or_else(|| panic!("report field {field} is not a count: {}", self.0[field]))
    }

    pub fn flag(&self, field: &str) -> bool {
        self.0[field]
            .as_bool()
            .unwrap_or_else(|| panic!("report field {field} is not a bool: {}", self.0[field]))
    }

    pub fn string(&self, field: &str) -> String {
        self.0[field]
            .as_str()
            .unwrap_or_else(|| panic!("report field {field} is not a string: {}", self.0[field]))
            .to_string()
    }

    /// `not_speech.<kind>`.
    pub fn not_speech(&self, kind: &str) -> u64 {
        self.0["not_speech"][kind]
            .as_u64()
            .unwrap_or_else(|| panic!("not_speech.{kind} is not a count: {}", self.0["not_speech"]))
    }

    /// The blocked reason; panics when the plan is not blocked.
    pub fn blocked_reason(&self) -> String {
        match &self.0["blocked_reason"] {
            Value::String(s) if !s.trim().is_empty() => s.clone(),
            other => panic!("expected a non-empty blocked_reason, got {other}"),
        }
    }

    /// The candidate line objects (`--show-candidate`).
    pub fn candidate(&self) -> &Vec<Value> {
        self.0["candidate"]
            .as_array()
            .unwrap_or_else(|| panic!("report has no candidate array: {}", self.0))
    }

    /// Carried items as `(role, text)`, in order.
    pub fn carried(&self) -> Vec<Item> {
        self.candidate().iter().map(line_item).collect()
    }

    /// Carried texts only.
    pub fn carried_texts(&self) -> Vec<String> {
        self.carried().into_iter().map(|(_, t)| t).collect()
    }

    /// How many carried texts contain `needle`.
    pub fn occurrences(&self, needle: &str) -> usize {
        self.carried_texts()
            .iter()
            .map(|t| t.matches(needle).count())
            .sum()
    }

    /// `{name: count}` maps such as `unknown_record_types`.
    pub fn name_counts(&self, field: &str) -> BTreeMap<String, u64> {
        let obj = self.0[field]
            .as_object()
            .unwrap_or_else(|| panic!("report field {field} is not an object: {}", self.0[field]));
        obj.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_u64()
                        .unwrap_or_else(|| panic!("{field}.{k} is not a count")),
                )
            })
            .collect()
    }

    /// Bytes of one ledger category (0 when absent).
    pub fn ledger_category(&self, name: &str) -> u64 {
        ledger_category(&self.0["ledger"], name)
    }
}

/// Bytes of one category in a ledger object (0 when absent).
pub fn ledger_category(ledger: &Value, name: &str) -> u64 {
    ledger["categories"]
        .as_array()
        .unwrap_or_else(|| panic!("ledger.categories is not an array: {ledger}"))
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["bytes"].as_u64())
        .unwrap_or(0)
}

/// `(role, text)` of one candidate line, checking its message shape (SPEC §7).
/// A carried `SessionStart` context reads as `("attachment", its text)`.
pub fn line_item(line: &Value) -> Item {
    let role = line["type"]
        .as_str()
        .unwrap_or_else(|| panic!("candidate line without type: {line}"))
        .to_string();
    if role == "attachment" {
        let a = &line["attachment"];
        assert_eq!(a["type"], "hook_additional_context", "{line}");
        assert_eq!(a["hookEvent"], "SessionStart", "{line}");
        let parts: Vec<&str> = a["content"]
            .as_array()
            .unwrap_or_else(|| panic!("context content must be a list: {line}"))
            .iter()
            .map(|p| p.as_str().unwrap_or_else(|| panic!("not a string: {line}")))
            .collect();
        return (role, parts.join("\n"));
    }
    let message = &line["message"];
    assert_eq!(
        message["role"], role,
        "message.role must match type: {line}"
    );
    let text = match role.as_str() {
        "user" => message["content"]
            .as_str()
            .unwrap_or_else(|| panic!("user content must be a string: {line}"))
            .to_string(),
        "assistant" => {
            let blocks = message["content"]
                .as_array()
                .unwrap_or_else(|| panic!("assistant content must be a block list: {line}"));
            assert_eq!(
                blocks.len(),
                1,
                "assistant content must be exactly one text block: {line}"
            );
            assert_eq!(blocks[0]["type"], "text", "only text blocks: {line}");
            blocks[0]["text"]
                .as_str()
                .unwrap_or_else(|| panic!("text block without text: {line}"))
                .to_string()
        }
        other => panic!("candidate line of type {other}: {line}"),
    };
    (role, text)
}

/// Parse `--show-candidate` text output into line objects.
pub fn parse_jsonl(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("candidate line is not JSON ({e}): {l}"))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The builder
// ---------------------------------------------------------------------------

/// One `ktr plan` invocation against a transcript in a fresh sandbox.
pub struct Plan {
    source: Vec<u8>,
    config: Vec<String>,
    args: Vec<OsString>,
}

impl Plan {
    /// Plan a hand-written fixture from `tests/fixtures/rules/`.
    pub fn new(fixture: &str) -> Plan {
        Plan::from_bytes(fixture_bytes(fixture))
    }

    /// Plan a transcript given as bytes.
    pub fn from_bytes(source: Vec<u8>) -> Plan {
        Plan {
            source,
            config: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Add one TOML line to the config, e.g. `.config("stamp_turns = false")`.
    pub fn config(mut self, line: &str) -> Plan {
        self.config.push(line.to_string());
        self
    }

    /// Add a command-line argument after the defaults.
    pub fn arg(mut self, arg: &str) -> Plan {
        self.args.push(arg.into());
        self
    }

    /// Set up the sandbox and write the source; returns it with the transcript path.
    pub fn prepare(&self) -> (Sandbox, PathBuf) {
        let sandbox = Sandbox::new(&self.config);
        let path = sandbox.add_transcript(SOURCE_SESSION, &self.source);
        (sandbox, path)
    }

    fn plan_args(&self, sandbox: &Sandbox, transcript: &Path, json: bool) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "plan".into(),
            "--config".into(),
            sandbox.config.clone().into(),
            "--transcript".into(),
            transcript.into(),
        ];
        if json {
            args.push("--json".into());
        }
        args.push("--show-candidate".into());
        args.extend(self.args.iter().cloned());
        args
    }

    /// `plan --json --show-candidate`, whatever the exit code.
    pub fn run(&self) -> Outcome {
        let (sandbox, path) = self.prepare();
        sandbox.ktr(&self.plan_args(&sandbox, &path, true))
    }

    /// `plan --json --show-candidate`; the plan must be ok (exit 0, no `blocked_reason`).
    pub fn run_json(&self) -> Report {
        let outcome = self.run();
        outcome.assert_exit(0);
        let report = outcome.json();
        assert!(
            report["blocked_reason"].is_null(),
            "plan ok but blocked_reason is set: {}",
            report["blocked_reason"]
        );
        report
    }

    /// `plan --json --show-candidate`; the plan must be blocked (exit 1 with a reason).
    pub fn expect_blocked(&self) -> Report {
        let outcome = self.run();
        outcome.assert_exit(1);
        let report = outcome.json();
        report.blocked_reason();
        report
    }

    /// `plan --show-candidate` (no JSON): the exact candidate JSONL as it would be written.
    pub fn show_candidate(&self) -> Vec<u8> {
        let (sandbox, path) = self.prepare();
        let outcome = sandbox.ktr(&self.plan_args(&sandbox, &path, false));
        outcome.assert_exit(0);
        outcome.stdout_bytes
    }
}
