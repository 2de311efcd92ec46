//! A small harness for driving `ktr plan` like a spec:
//!
//! ```ignore
//! let report = Plan::new("two_turns").config("stamp_turns = false").run_json();
//! assert_eq!(report.carried(), vec![user("First question."), assistant("First answer.")]);
//! ```
//!
//! Every run gets its own [`Sandbox`], its config extended by the plan's
//! lines. The fixture is copied into the project dir as
//! `<SOURCE_SESSION>.jsonl` and passed with `--transcript`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{OptionOrPanic, ResultOrPanic};
use super::{Sandbox, repo_file};

/// The file name (without `.jsonl`) the fixture gets inside the project dir.
pub const SOURCE_SESSION: &str = "7c0ffee0-1111-4222-8333-444455556666";

/// Default templates (SPEC §2).
pub const STAMP_PREFIX: &str = "[发生时间: ";
pub const STARTUP_HEADER_PREFIX: &str = "[续窗启动快照 · 冻结于 ";

/// Path of a hand-written fixture in `tests/fixtures/rules/`.
pub fn fixture_path(name: &str) -> PathBuf {
    repo_file("tests/fixtures/rules").join(format!("{name}.jsonl"))
}

/// Bytes of a fixture.
#[track_caller]
pub fn fixture_bytes(name: &str) -> Vec<u8> {
    let path = fixture_path(name);
    fs::read(&path).or_panic(|e| format!("cannot read fixture {}: {e}", path.display()))
}

/// `(role, text)` of a carried item, for readable expectations.
pub type Item = (String, String);

pub fn user(text: &str) -> Item {
    ("user".to_string(), text.to_string())
}

pub fn assistant(text: &str) -> Item {
    ("assistant".to_string(), text.to_string())
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
    #[track_caller]
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

    #[track_caller]
    pub fn assert_exit(&self, code: i32) {
        assert_eq!(
            self.code,
            Some(code),
            "unexpected exit code:\n{}",
            self.describe()
        );
    }

    /// stdout parsed as one JSON object.
    #[track_caller]
    pub fn json(&self) -> Report {
        let value: Value = serde_json::from_str(self.stdout.trim())
            .or_panic(|e| format!("stdout is not one JSON object ({e}):\n{}", self.describe()));
        assert!(
            value.is_object(),
            "stdout is JSON but not an object:\n{}",
            self.describe()
        );
        Report(value)
    }

    /// A usage/config error: exit 2, one line on stderr saying what is wrong.
    #[track_caller]
    pub fn assert_usage_error(&self) -> String {
        self.assert_exit(2);
        self.assert_one_line_error();
        self.stderr.trim().to_string()
    }

    /// A refusal (exit 1 or 2) with a one-line error.
    #[track_caller]
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

    #[track_caller]
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
    #[track_caller]
    pub fn count(&self, field: &str) -> u64 {
        self.0[field]
            .as_u64()
            .or_panic(|| format!("report field {field} is not a count: {}", self.0[field]))
    }

    #[track_caller]
    pub fn flag(&self, field: &str) -> bool {
        self.0[field]
            .as_bool()
            .or_panic(|| format!("report field {field} is not a bool: {}", self.0[field]))
    }

    #[track_caller]
    pub fn string(&self, field: &str) -> String {
        self.0[field]
            .as_str()
            .or_panic(|| format!("report field {field} is not a string: {}", self.0[field]))
            .to_string()
    }

    /// `not_speech.<kind>`.
    #[track_caller]
    pub fn not_speech(&self, kind: &str) -> u64 {
        self.0["not_speech"][kind]
            .as_u64()
            .or_panic(|| format!("not_speech.{kind} is not a count: {}", self.0["not_speech"]))
    }

    /// The blocked reason; panics when the plan is not blocked.
    #[track_caller]
    pub fn blocked_reason(&self) -> String {
        match &self.0["blocked_reason"] {
            Value::String(s) if !s.trim().is_empty() => s.clone(),
            other => panic!("expected a non-empty blocked_reason, got {other}"),
        }
    }

    /// The candidate line objects (`--show-candidate`).
    #[track_caller]
    pub fn candidate(&self) -> &Vec<Value> {
        self.0["candidate"]
            .as_array()
            .or_panic(|| format!("report has no candidate array: {}", self.0))
    }

    /// Carried items as `(role, text)`, in order.
    #[track_caller]
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
    #[track_caller]
    pub fn name_counts(&self, field: &str) -> BTreeMap<String, u64> {
        let obj = self.0[field]
            .as_object()
            .or_panic(|| format!("report field {field} is not an object: {}", self.0[field]));
        obj.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_u64()
                        .or_panic(|| format!("{field}.{k} is not a count")),
                )
            })
            .collect()
    }

    /// Bytes of one ledger category (0 when absent).
    #[track_caller]
    pub fn ledger_category(&self, name: &str) -> u64 {
        ledger_category(&self.0["ledger"], name)
    }
}

/// Bytes of one category in a ledger object (0 when absent).
#[track_caller]
pub fn ledger_category(ledger: &Value, name: &str) -> u64 {
    ledger["categories"]
        .as_array()
        .or_panic(|| format!("ledger.categories is not an array: {ledger}"))
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["bytes"].as_u64())
        .unwrap_or(0)
}

/// `(role, text)` of one candidate line, checking its message shape (SPEC §7).
/// A carried `SessionStart` context reads as `("attachment", its text)`.
#[track_caller]
pub fn line_item(line: &Value) -> Item {
    let role = line["type"]
        .as_str()
        .or_panic(|| format!("candidate line without type: {line}"))
        .to_string();
    if role == "attachment" {
        let a = &line["attachment"];
        assert_eq!(a["type"], "hook_additional_context", "{line}");
        assert_eq!(a["hookEvent"], "SessionStart", "{line}");
        let parts: Vec<&str> = a["content"]
            .as_array()
            .or_panic(|| format!("context content must be a list: {line}"))
            .iter()
            .map(|p| p.as_str().or_panic(|| format!("not a string: {line}")))
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
            .or_panic(|| format!("user content must be a string: {line}"))
            .to_string(),
        "assistant" => {
            let blocks = message["content"]
                .as_array()
                .or_panic(|| format!("assistant content must be a block list: {line}"));
            assert_eq!(
                blocks.len(),
                1,
                "assistant content must be exactly one text block: {line}"
            );
            assert_eq!(blocks[0]["type"], "text", "only text blocks: {line}");
            blocks[0]["text"]
                .as_str()
                .or_panic(|| format!("text block without text: {line}"))
                .to_string()
        }
        other => panic!("candidate line of type {other}: {line}"),
    };
    (role, text)
}

/// Parse `--show-candidate` text output into line objects.
#[track_caller]
pub fn parse_jsonl(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).or_panic(|e| format!("candidate line is not JSON ({e}): {l}"))
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
        let sandbox = Sandbox::new();
        sandbox.write_config(&self.config.join("\n"));
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
    #[track_caller]
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
    #[track_caller]
    pub fn expect_blocked(&self) -> Report {
        let outcome = self.run();
        outcome.assert_exit(1);
        let report = outcome.json();
        report.blocked_reason();
        report
    }

    /// `plan --show-candidate` (no JSON): the exact candidate JSONL as it would be written.
    #[track_caller]
    pub fn show_candidate(&self) -> Vec<u8> {
        let (sandbox, path) = self.prepare();
        let outcome = sandbox.ktr(&self.plan_args(&sandbox, &path, false));
        outcome.assert_exit(0);
        outcome.stdout_bytes
    }
}
