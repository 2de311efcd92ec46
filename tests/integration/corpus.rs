//! Sweep over every real transcript in the corpus (`$KTR_CORPUS`, default
//! `<repo>/../shared/corpus`): `ktr plan --json --show-candidate` must succeed
//! or block with a reason, carry only text found in the source, never carry
//! tool/thinking content, and conserve the speech it did not count as dropped.
//!
//! The checks here read the source with their own, deliberately simple reading;
//! they share no code with the selector. Run with `--nocapture` to see the table.

use std::collections::HashSet;
use std::fs;
use std::path::PathBuf;

use crate::support::corpus_dir;
use crate::support::fake_api::content_texts;
use crate::support::plan::*;
use serde_json::Value;

/// Elements Claude Code injects into user text (SPEC §5).
const INJECTED: &[&str] = ktr_engine::classify::INJECTED_TAGS;

/// Remove every complete injected element anywhere in the text (simpler and
/// greedier than the selector's edge rule; good enough for counting).
fn strip_injected(text: &str) -> String {
    let mut out = text.to_string();
    for tag in INJECTED {
        let open = format!("<{tag}");
        let close = format!("</{tag}>");
        while let Some(start) = out.find(&open) {
            let after = &out[start + open.len()..];
            if !(after.starts_with('>') || after.starts_with(' ') || after.starts_with('\n')) {
                break;
            }
            match out[start..].find(&close) {
                Some(rel) => out.replace_range(start..start + rel + close.len(), ""),
                None => break,
            }
        }
    }
    out
}

fn is_reply_tool(name: &str) -> bool {
    name.starts_with("mcp__")
        && name.ends_with("__reply")
        && (name.contains("companion") || name.contains("telegram"))
}

/// The content of a record's `message`; a bare string `message` counts as its
/// own content (the selector reads it leniently, and so does this test).
fn message_content(record: &Value) -> &Value {
    match &record["message"] {
        m @ Value::String(_) => m,
        m => &m["content"],
    }
}

/// Text of a user/assistant message and of a queued prompt.
fn message_texts(record: &Value) -> Vec<String> {
    let mut out = content_texts(message_content(record));
    out.extend(content_texts(&record["attachment"]["prompt"]));
    out
}

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// What the test itself reads from a source transcript.
#[derive(Default)]
struct Source {
    /// Every decoded string value of every parseable line.
    strings: HashSet<String>,
    /// The same strings joined, for substring look-ups.
    haystack: String,
    /// Tool results, tool inputs and thinking (≥ 20 chars, trimmed): never carried.
    forbidden: HashSet<String>,
    /// Texts that are also typed/spoken somewhere (exempt from `forbidden`).
    spoken: HashSet<String>,
    /// Real user + assistant texts by the simple reading: (user, assistant).
    speech_records: (u64, u64),
}

fn read_source(bytes: &[u8]) -> Source {
    let mut src = Source::default();
    let mut all = Vec::new();
    for line in bytes.split(|&b| b == b'\n') {
        let Ok(record) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if !record.is_object() {
            continue;
        }
        collect_strings(&record, &mut all);
        collect_forbidden(&record, &mut src.forbidden);
        if is_speech_record(&record) {
            if record["type"] == "assistant" {
                src.speech_records.1 += 1;
            } else {
                src.speech_records.0 += 1;
            }
        }
        for t in message_texts(&record) {
            src.spoken.insert(t.trim().to_string());
        }
    }
    for s in all {
        src.haystack.push_str(&s);
        src.haystack.push('\u{1}');
        src.strings.insert(s);
    }
    src
}

fn collect_forbidden(record: &Value, out: &mut HashSet<String>) {
    let mut add = |s: &str| {
        let t = s.trim();
        if t.chars().count() >= 20 {
            out.insert(t.to_string());
        }
    };
    let Some(blocks) = record["message"]["content"].as_array() else {
        return;
    };
    for block in blocks {
        match block["type"].as_str() {
            Some("tool_result") => {
                for t in content_texts(&block["content"]) {
                    add(&t);
                }
            }
            Some("thinking") => add(block["thinking"].as_str().unwrap_or("")),
            Some("tool_use") => {
                let mut strings = Vec::new();
                if is_reply_tool(block["name"].as_str().unwrap_or("")) {
                    let mut input = block["input"].clone();
                    if let Some(obj) = input.as_object_mut() {
                        obj.remove("text");
                    }
                    collect_strings(&input, &mut strings);
                } else {
                    collect_strings(&block["input"], &mut strings);
                }
                for s in &strings {
                    add(s);
                }
            }
            _ => {}
        }
    }
}

/// The test's own reading of "a real user or assistant text" (one per record).
fn is_speech_record(record: &Value) -> bool {
    if record["isSidechain"] == true {
        return false;
    }
    match record["type"].as_str() {
        Some("user") => {
            let content = message_content(record);
            if let Some(blocks) = content.as_array()
                && blocks.iter().any(|b| b["type"] == "tool_result")
            {
                return blocks.iter().any(|b| {
                    b["type"] == "tool_result"
                        && content_texts(&b["content"])
                            .iter()
                            .any(|t| t.contains("the user said:\n"))
                });
            }
            let text = content_texts(content).join("\n\n");
            if record["isCompactSummary"] == true {
                return !text.trim().is_empty();
            }
            if record["isMeta"] == true {
                return text.starts_with("<channel");
            }
            if text.contains("<command-name>") {
                return true;
            }
            !strip_injected(&text).trim().is_empty()
        }
        Some("attachment") => {
            let att = &record["attachment"];
            att["type"] == "queued_command"
                && att["commandMode"] == "prompt"
                && content_texts(&att["prompt"])
                    .iter()
                    .any(|t| !t.trim().is_empty())
        }
        Some("assistant") => {
            let message = &record["message"];
            if message["model"] == "<synthetic>" || record["isMeta"] == true {
                return false;
            }
            let content = message_content(record);
            content_texts(content).iter().any(|t| !t.trim().is_empty())
                || content.as_array().is_some_and(|blocks| {
                    blocks.iter().any(|b| {
                        b["type"] == "tool_use"
                            && is_reply_tool(b["name"].as_str().unwrap_or(""))
                            && b["input"]["text"].is_string()
                    })
                })
        }
        _ => false,
    }
}

/// Is a carried text found in the source (allowing the `/name args` rewrite,
/// the startup header and blocks joined by a blank line)?
fn found_in_source(text: &str, src: &Source) -> bool {
    if src.strings.contains(text) || src.haystack.contains(text) {
        return true;
    }
    if let Some(rest) = text.strip_prefix(STARTUP_HEADER_PREFIX)
        && let Some((_, raw)) = rest.split_once('\n')
    {
        return found_in_source(raw, src);
    }
    if let Some(command) = text.strip_prefix('/') {
        let (name, args) = command.split_once(' ').unwrap_or((command, ""));
        let tag = format!("<command-name>/{name}</command-name>");
        let tag_old = format!("<command-name>{name}</command-name>");
        if (src.haystack.contains(&tag) || src.haystack.contains(&tag_old))
            && (args.is_empty() || src.haystack.contains(args))
        {
            return true;
        }
    }
    if text.contains("\n\n") {
        return text
            .split("\n\n")
            .filter(|p| !p.trim().is_empty())
            .all(|p| found_in_source(p, src));
    }
    false
}

/// `(role, text)` of a candidate line, or what is wrong with it.
fn check_line(line: &Value) -> Result<Item, String> {
    let role = line["type"].as_str().unwrap_or("");
    let message = &line["message"];
    if role == "attachment" {
        // A carried SessionStart context (the startup snapshot).
        let a = &line["attachment"];
        let parts = a["content"].as_array().cloned().unwrap_or_default();
        if line["isSidechain"] != false
            || a["type"] != "hook_additional_context"
            || a["hookEvent"] != "SessionStart"
            || parts.is_empty()
            || parts.iter().any(|p| !p.is_string())
        {
            return Err(format!(
                "attachment line is not a SessionStart context: {line}"
            ));
        }
        let texts: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
        return Ok(("attachment".to_string(), texts.join("\n")));
    }
    if line["isSidechain"] != false || line["isMeta"] != false {
        return Err(format!("isSidechain/isMeta not false: {line}"));
    }
    match role {
        "user" => match message["content"].as_str() {
            Some(text) => Ok(user(text)),
            None => Err(format!("user content is not a string: {line}")),
        },
        "assistant" => {
            let blocks = message["content"].as_array().cloned().unwrap_or_default();
            if blocks.len() != 1 || blocks[0]["type"] != "text" || !blocks[0]["text"].is_string() {
                return Err(format!("assistant content is not one text block: {line}"));
            }
            Ok(assistant(blocks[0]["text"].as_str().unwrap()))
        }
        _ => Err(format!("candidate line of type {role:?}: {line}")),
    }
}

fn short(text: &str, n: usize) -> String {
    let t: String = text.chars().take(n).collect();
    if t.len() < text.len() {
        format!("{t}…")
    } else {
        t
    }
}

/// Keep the start and the end of a long name (corpus names share long prefixes).
fn middle_cut(text: &str, n: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= n {
        return text.to_string();
    }
    let head: String = chars[..20].iter().collect();
    let tail: String = chars[chars.len() - (n - 21)..].iter().collect();
    format!("{head}…{tail}")
}

struct Row {
    file: String,
    exit: String,
    source_turns: String,
    selected_turns: String,
    items: String,
    noise: String,
    mode: String,
    conservation: String,
    blocked: String,
}

#[test]
#[ignore = "needs the corpus (KTR_CORPUS, default ../shared/corpus)"]
fn corpus_sweep() {
    let dir = corpus_dir();
    assert!(
        dir.is_dir(),
        "corpus folder {} is missing (set KTR_CORPUS to the folder of real transcripts)",
        dir.display()
    );
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("read corpus dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl") && p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.jsonl in {}", dir.display());

    let mut failures: Vec<String> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = fs::read(path).expect("read corpus file");
        let src = read_source(&bytes);
        let mut fail = |msg: String| failures.push(format!("{name}: {msg}"));

        let outcome = Plan::from_bytes(bytes.clone())
            .config("stamp_turns = false")
            .run();
        let mut exit = format!("{:?}", outcome.code.unwrap_or(-1));
        if !matches!(outcome.code, Some(0 | 1)) {
            fail(format!(
                "plan neither succeeded nor blocked:\n{}",
                outcome.describe()
            ));
            rows.push(Row {
                file: name.clone(),
                exit,
                source_turns: "-".into(),
                selected_turns: "-".into(),
                items: "-".into(),
                noise: "-".into(),
                mode: "-".into(),
                conservation: "-".into(),
                blocked: short(outcome.stderr.trim(), 60),
            });
            continue;
        }
        let Ok(mut report) = serde_json::from_str::<Value>(outcome.stdout.trim()) else {
            fail(format!("stdout is not JSON:\n{}", outcome.describe()));
            continue;
        };
        let blocked = report["blocked_reason"].as_str().unwrap_or("").to_string();
        if outcome.code == Some(1) && blocked.trim().is_empty() {
            fail("exit 1 without a blocked_reason".into());
        }
        if outcome.code == Some(0) && !report["blocked_reason"].is_null() {
            fail(format!(
                "exit 0 but blocked_reason = {}",
                report["blocked_reason"]
            ));
        }
        // Malformed lines block by default; look at what skipping them gives.
        if outcome.code == Some(1) && report["malformed_lines"].as_u64().unwrap_or(0) > 0 {
            let skip = Plan::from_bytes(bytes.clone())
                .config("stamp_turns = false")
                .config("on_malformed_line = \"skip\"")
                .run();
            exit = format!("1→{:?} (skip)", skip.code.unwrap_or(-1));
            if let Ok(r) = serde_json::from_str::<Value>(skip.stdout.trim()) {
                report = r;
            }
        }

        let count = |v: &Value| v.as_u64().unwrap_or(0);
        let mut conservation = "-".to_string();
        if let Some(lines) = report["candidate"].as_array() {
            let mut items = Vec::new();
            for line in lines {
                match check_line(line) {
                    Ok(item) => items.push(item),
                    Err(e) => fail(e),
                }
            }
            let lines = count(&report["carried_items"]) + count(&report["startup_attachments"]);
            if lines != items.len() as u64 {
                fail(format!(
                    "carried_items + startup_attachments = {lines} but the candidate has {} lines",
                    items.len()
                ));
            }
            for (role, text) in &items {
                if text.trim().is_empty() {
                    fail(format!("empty {role} item carried"));
                    continue;
                }
                if !found_in_source(text, &src) {
                    fail(format!(
                        "carried {role} text not found in the source: {:?}",
                        short(text, 200)
                    ));
                }
                if src.forbidden.contains(text.trim()) && !src.spoken.contains(text.trim()) {
                    fail(format!(
                        "carried {role} text is tool/thinking content: {:?}",
                        short(text, 200)
                    ));
                }
            }
            // Conservation: the test's own count of speech records vs. items.
            let startup_without_words = items.first().is_some_and(|(_, t)| {
                t.strip_prefix(STARTUP_HEADER_PREFIX)
                    .and_then(|rest| rest.split_once('\n'))
                    .is_some_and(|(_, raw)| strip_injected(raw).trim().is_empty())
            });
            let carried_user = items.iter().filter(|(r, _)| r == "user").count() as u64
                - u64::from(startup_without_words);
            let carried_assistant = items.iter().filter(|(r, _)| r == "assistant").count() as u64;
            let ns = &report["not_speech"];
            let abandoned = count(&report["abandoned_branch_records"]);
            let user_drops = abandoned
                + count(&report["compact_summaries_dropped"])
                + count(&ns["local_commands"])
                + count(&ns["teammate_messages"])
                + count(&ns["task_notifications"])
                + count(&ns["system_prompts"]);
            let dropped_turns = count(&report["dropped_oldest_turns"]);
            let open_tail_dropped =
                report["open_tail"] == true && report["open_tail_kept"] == false;
            let (s_user, s_assistant) = src.speech_records;
            conservation = format!(
                "{carried_user}/{s_user}-{user_drops} {carried_assistant}/{s_assistant}-{abandoned}"
            );
            if dropped_turns == 0 && !open_tail_dropped {
                for (role, carried, s, drops) in [
                    ("user", carried_user, s_user, user_drops),
                    ("assistant", carried_assistant, s_assistant, abandoned),
                ] {
                    if carried > s {
                        fail(format!(
                            "conservation: {carried} {role} items carried but the source holds only {s} {role} speech records"
                        ));
                    }
                    if carried + drops < s {
                        fail(format!(
                            "conservation: source holds {s} {role} speech records, {carried} carried, only {drops} counted as dropped"
                        ));
                    }
                }
            }
        } else if outcome.code == Some(0) {
            fail("plan ok but no candidate with --show-candidate".into());
        }

        let noise = report["ledger"]["noise_ratio"]
            .as_f64()
            .map_or_else(|| "-".into(), |r| format!("{r:.3}"));
        rows.push(Row {
            file: name.clone(),
            exit,
            source_turns: report["source_turns"].to_string(),
            selected_turns: report["selected_turns"].to_string(),
            items: report["carried_items"].to_string(),
            noise,
            mode: report["history_mode"].as_str().unwrap_or("-").to_string(),
            conservation,
            blocked: short(&blocked, 60),
        });
    }

    let mut table = String::new();
    table.push_str(&format!(
        "{:<64} {:>10} {:>6} {:>6} {:>6} {:>6} {:>6} {:>22}  {}\n",
        "file",
        "exit",
        "src_t",
        "sel_t",
        "items",
        "noise",
        "mode",
        "user / asst carr/src-drop",
        "blocked"
    ));
    for r in &rows {
        table.push_str(&format!(
            "{:<64} {:>10} {:>6} {:>6} {:>6} {:>6} {:>6} {:>22}  {}\n",
            middle_cut(&r.file, 63),
            r.exit,
            r.source_turns,
            r.selected_turns,
            r.items,
            r.noise,
            r.mode,
            r.conservation,
            r.blocked
        ));
    }
    println!("{table}");
    eprintln!("{table}");
    assert!(
        failures.is_empty(),
        "{} corpus failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
