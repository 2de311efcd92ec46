//! The strongest proof of a rebuild: the real Claude Code CLI loads the
//! candidate with `--resume`, and the request it then sends to the (fake)
//! Messages API carries every carried user and assistant text, in order,
//! and nothing of the source's tool traffic or thinking.
//!
//! Runs when `KTR_CLAUDE_BIN` names the CLI (`.ci/run` installs it); under
//! `CI` a missing CLI fails instead of skipping.

mod claude;
mod fake_api;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use claude::ClaudeEnv;
use fake_api::{FakeApi, Logged, message_texts};
use ktr::config::Config;
use ktr::plan;
use serde_json::Value;

/// Namespace for the fixed new session ids of these tests.
const TEST_NS: uuid::Uuid = uuid::Uuid::from_u128(0x6b74_7200_e2e0_4000_8000_0000_0000_0001);

fn corpus_dir() -> PathBuf {
    match std::env::var_os("KTR_CORPUS") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"),
    }
}

/// A config whose project is the CLI's project folder.
fn config_for(env: &ClaudeEnv, extra: &str) -> Config {
    Config::from_toml(&format!(
        "project_dir = {:?}\nstate_dir = {:?}\nclaude_workdir = {:?}\n{extra}",
        env.project_dir(),
        env.tmp.path().join("state"),
        env.work,
    ))
    .unwrap()
}

/// One carried item of a candidate: role and text.
#[derive(Debug, Clone)]
struct Item {
    role: String,
    text: String,
}

fn candidate_items(lines: &[String]) -> Vec<Item> {
    lines
        .iter()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            let message = &v["message"];
            Item {
                role: v["type"].as_str().unwrap().to_string(),
                text: message_texts(message).join(""),
            }
        })
        .collect()
}

/// What the source holds that must never reach the model after a rebuild:
/// tool results, tool inputs (except channel replies, which are speech)
/// and thinking text — each piece long enough to be unambiguous and not
/// also part of the carried speech.
fn residue(source: &Path, config: &Config, carried: &[Item]) -> Vec<String> {
    let speech: String = carried
        .iter()
        .map(|i| i.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut add = |s: &str| {
        let s = s.trim();
        if s.chars().count() >= 24 && !speech.contains(s) {
            out.push(s.to_string());
        }
    };
    for line in fs::read_to_string(source).unwrap_or_default().lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        for block in v["message"]["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("tool_result") => match &block["content"] {
                    Value::String(s) => add(s),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .for_each(&mut add),
                    _ => {}
                },
                Some("tool_use") => {
                    let name = block["name"].as_str().unwrap_or("");
                    if !config.reply_tool_pattern.is_match(name) {
                        for value in block["input"].as_object().into_iter().flatten() {
                            if let Some(s) = value.1.as_str() {
                                add(s);
                            }
                        }
                    }
                }
                Some("thinking") => add(block["thinking"].as_str().unwrap_or("")),
                _ => {}
            }
        }
    }
    out
}

/// The conversation of a request as (role, text) per text block, system
/// messages left aside.
fn request_blocks(request: &Logged) -> Vec<Item> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] != "system")
        .flat_map(|m| {
            let role = m["role"].as_str().unwrap_or("").to_string();
            message_texts(m).into_iter().map(move |text| Item {
                role: role.clone(),
                text,
            })
        })
        .collect()
}

/// Claude Code sends consecutive user lines as one message, one text
/// block each, ending every block but the last with a newline.
fn same_text(sent: &str, carried: &str) -> bool {
    sent == carried || sent.strip_suffix('\n') == Some(carried)
}

/// Every string inside `v`, each followed by a NUL.
fn all_strings(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\0');
        }
        Value::Array(a) => a.iter().for_each(|x| all_strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| all_strings(x, out)),
        _ => {}
    }
}

/// A row of the acceptance table.
struct Row {
    file: String,
    carried: usize,
    messages: usize,
    bytes: usize,
}

/// Place `candidate` as session `id` in the CLI's project folder, resume it
/// with `claude -p --resume ID PROBE`, and check the request the model got.
fn resume_and_check(
    env: &ClaudeEnv,
    api: &FakeApi,
    config: &Config,
    source: &Path,
    candidate: &plan::Plan,
    probe: &str,
) -> Row {
    let id = &candidate.candidate.session_id;
    fs::create_dir_all(env.project_dir()).unwrap();
    fs::write(env.transcript(id), candidate.candidate.bytes()).unwrap();
    let run = env.resume(id, probe);
    let name = source.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        run.status.success(),
        "{name}: claude --resume failed ({}): {} {}",
        run.status,
        run.stdout,
        run.stderr
    );
    let request = api
        .wait_turn(probe, Duration::from_secs(5))
        .unwrap_or_else(|| panic!("{name}: no request carried {probe}"));
    let carried = candidate_items(&candidate.candidate.lines);
    let blocks = request_blocks(&request);

    // Every carried item, in order, as its own text block.
    let mut at = 0;
    for (n, item) in carried.iter().enumerate() {
        let found = blocks[at..]
            .iter()
            .position(|b| b.role == item.role && same_text(&b.text, &item.text));
        let Some(offset) = found else {
            for b in &blocks {
                eprintln!(
                    "  request {}: {:?}",
                    b.role,
                    b.text.chars().take(150).collect::<String>()
                );
            }
            let preview: String = item.text.chars().take(120).collect();
            panic!(
                "{name}: carried item {n} ({}) is not in the request after block {at}: {preview:?}",
                item.role
            );
        };
        at += offset + 1;
    }
    // … followed by the probe.
    assert!(
        blocks[at..]
            .iter()
            .any(|b| b.role == "user" && b.text.contains(probe)),
        "{name}: the probe does not follow the carried items"
    );
    // No tool traffic, no thinking.
    for message in request.messages() {
        for block in message["content"].as_array().into_iter().flatten() {
            let kind = block["type"].as_str().unwrap_or("");
            assert!(
                !matches!(
                    kind,
                    "tool_use" | "tool_result" | "thinking" | "redacted_thinking" | "image"
                ),
                "{name}: the resumed request holds a {kind} block"
            );
        }
    }
    let mut sent = String::new();
    all_strings(&request.body["messages"], &mut sent);
    for piece in residue(source, config, &carried) {
        let head: String = piece.chars().take(200).collect();
        assert!(
            !sent.contains(&head),
            "{name}: source residue reached the model: {:?}",
            piece.chars().take(120).collect::<String>()
        );
    }
    Row {
        file: name,
        carried: carried.len(),
        messages: request.messages().len(),
        bytes: request.messages_bytes(),
    }
}

fn print_table(title: &str, rows: &[Row]) {
    eprintln!("\n{title}");
    eprintln!(
        "{:<72} {:>7} {:>8} {:>9}",
        "file", "carried", "messages", "bytes"
    );
    for r in rows {
        let file: String = r
            .file
            .chars()
            .rev()
            .take(72)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        eprintln!(
            "{file:<72} {:>7} {:>8} {:>9}",
            r.carried, r.messages, r.bytes
        );
    }
}

fn fixed_id(name: &str) -> String {
    uuid::Uuid::new_v5(&TEST_NS, name.as_bytes()).to_string()
}

#[test]
fn corpus_candidates_resume_in_the_real_cli() {
    let Some(bin) = claude::claude_bin() else {
        return;
    };
    let corpus = corpus_dir();
    let mut files: Vec<PathBuf> = fs::read_dir(&corpus)
        .unwrap_or_else(|e| panic!("corpus {} is required: {e}", corpus.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no transcripts in {}", corpus.display());
    let api = FakeApi::start(Vec::new());
    let env = ClaudeEnv::new(&bin, &api);
    let config = config_for(&env, "");
    let skipping = config_for(&env, "on_malformed_line = \"skip\"");
    let mut rows = Vec::new();
    let mut blocked = Vec::new();
    let mut with_compaction = 0;
    for (n, file) in files.iter().enumerate() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let mut plan = plan::build(&config, file, Some(&fixed_id(&name))).unwrap();
        if plan.report.malformed_lines > 0 {
            // What an operator gets after opting in to skipping them.
            plan = plan::build(&skipping, file, Some(&fixed_id(&name))).unwrap();
        }
        if let Some(why) = &plan.report.blocked_reason {
            blocked.push(format!("{name}: {why}"));
            continue;
        }
        if pre_compaction_items(file, &plan) > 0 {
            with_compaction += 1;
        }
        rows.push(resume_and_check(
            &env,
            &api,
            &config,
            file,
            &plan,
            &format!("PROBE-{n}"),
        ));
    }
    print_table("corpus: resumed in claude 2.1.328", &rows);
    eprintln!(
        "accepted {}/{} corpus files ({} carry pre-compaction turns); blocked by plan: {}",
        rows.len(),
        files.len(),
        with_compaction,
        blocked.len()
    );
    for b in &blocked {
        eprintln!("  blocked {b}");
    }
    assert!(!rows.is_empty(), "no corpus transcript was accepted");
    // Only files without a conversation of their own (subagent
    // transcripts, sidechain-only fixtures) may be refused.
    for b in &blocked {
        assert!(b.ends_with("no conversation turns to carry"), "{b}");
    }
}

/// Carried items that come from before the file's first compaction
/// boundary (0 when it has none).
fn pre_compaction_items(source: &Path, plan: &plan::Plan) -> usize {
    let text = fs::read_to_string(source).unwrap_or_default();
    let boundary = text.lines().position(|l| {
        serde_json::from_str::<Value>(l)
            .is_ok_and(|v| v["type"] == "system" && v["subtype"] == "compact_boundary")
    });
    match boundary {
        None => 0,
        Some(b) => plan
            .candidate
            .manifest
            .iter()
            .filter(|m| m.source_line <= b)
            .count(),
    }
}
