//! Fidelity, proven per transcript against the real CLI: resume
//! the ORIGINAL transcript and the REBUILT candidate with the same probe
//! prompt against the fake API, and compare the two requests text by text.
//!
//! Every text the original request holds before the probe is either found
//! again in the rebuilt request (in the same order) or falls in a named
//! residue category; the startup context (`SessionStart` hook context) is in
//! both, once in the rebuilt; the rebuilt request holds nothing the
//! original did not, except what the rebuild adds on purpose (stamps, the
//! startup header, turns from before a compaction boundary the original
//! resume starts after) and Claude Code's own per-start context. Anything
//! else is "unexplained" and fails the test. The per-file table is printed.

mod compare;
mod run;
mod source;

use compare::*;
use source::*;

use std::fs;
use std::path::PathBuf;

use crate::support::fake_api::Logged;
use crate::support::plan::fixture_path as fixture;
use crate::support::{ResultOrPanic, corpus_dir, example};
use serde_json::Value;

/// Files resumed at once (the machines have 2 cores).
const WORKERS: usize = 2;

/// Namespace of the fixed session ids of this test.
const NS: uuid::Uuid = uuid::Uuid::from_u128(0x6b74_7200_f1de_4000_8000_0000_0000_0010);

/// How Claude Code 2.1.328 renders a `SessionStart` hook context.
const SESSION_START: &str = "SessionStart hook additional context: ";

fn fixed_id(name: &str) -> String {
    uuid::Uuid::new_v5(&NS, name.as_bytes()).to_string()
}

/// One transcript to compare.
struct Case {
    name: String,
    source: PathBuf,
}

/// The corpus, the example session and this issue's own fixtures.
fn cases() -> Vec<Case> {
    let corpus = corpus_dir();
    let mut files: Vec<PathBuf> = fs::read_dir(&corpus)
        .or_panic(|e| format!("corpus {} is required: {e}", corpus.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files.push(example());
    for own in [
        "session_start_context",
        "command_expansions",
        "broken_timestamps",
        "startup_meta_reminder",
    ] {
        files.push(fixture(own));
    }
    files
        .into_iter()
        .map(|source| Case {
            name: source.file_name().unwrap().to_string_lossy().into_owned(),
            source,
        })
        .collect()
}

/// One text (or non-text block) of a request, in order.
#[derive(Debug, Clone)]
struct Unit {
    role: String,
    kind: String,
    text: String,
    block: Value,
    /// The message also holds a `tool_result` block.
    beside_tool_result: bool,
}

/// The units of `request` before the probe's own text block.
fn history(request: &Logged, probe: &str) -> Vec<Unit> {
    let mut units = Vec::new();
    for m in request.messages() {
        let role = m["role"].as_str().unwrap_or("").to_string();
        let blocks = match &m["content"] {
            Value::String(s) => vec![serde_json::json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            _ => Vec::new(),
        };
        let beside_tool_result = blocks.iter().any(|b| b["type"] == "tool_result");
        for block in blocks {
            let kind = block["type"].as_str().unwrap_or("").to_string();
            let text = match kind.as_str() {
                "text" => block["text"].as_str().unwrap_or("").to_string(),
                _ => block.to_string(),
            };
            units.push(Unit {
                role: role.clone(),
                kind,
                text,
                block,
                beside_tool_result,
            });
        }
    }
    let probe_at = units
        .iter()
        .rposition(|u| u.role == "user" && u.kind == "text" && u.text.contains(probe))
        .expect("the probe is in the request");
    units.truncate(probe_at);
    units
}
