//! A hit with its context: a tool call and its result are one hit (linked
//! by `tool_use_id`) with the prompt that asked for it; the records around
//! a hit on request; `get` pages that end on line ends; a tool call's
//! command shown once; the MCP answer's advice fits what it found.

use serde_json::{Value, json};

use crate::recall::{D, call, hits, recall, result, said, user};
use crate::support::Sandbox;

/// Two turns: a command whose input and output both hold the term, then
/// a file read.
fn session(sb: &Sandbox, big: &str) {
    let at = |s: u32| format!("2026-01-01T10:00:{s:02}Z");
    let text = [
        user("why does the deploy fail?", &at(0)),
        said(&json!([{"type": "text", "text": "let me look"}]), &at(1)),
        call(
            "toolu_1",
            "Bash",
            &json!({"command": "grep -r DEPLOY-KEY /etc/app"}),
            &at(2),
        ),
        result("toolu_1", "/etc/app/env: DEPLOY-KEY=expired", &at(3)),
        said(
            &json!([{"type": "text", "text": "the key expired"}]),
            &at(4),
        ),
        user("show me the long log", &at(5)),
        call(
            "toolu_2",
            "Bash",
            &json!({"command": "cat /var/log/app.log"}),
            &at(6),
        ),
        result("toolu_2", big, &at(7)),
    ]
    .concat();
    sb.add_transcript(D, text.as_bytes());
}

fn long_log() -> String {
    (0..2000)
        .map(|i| format!("{i:05} 日志轮转 rotated segment {i} LOG-LINE\n"))
        .collect()
}

#[test]
fn a_tool_call_and_its_result_are_one_hit_with_the_prompt_that_asked_for_it() {
    let sb = Sandbox::new();
    session(&sb, &long_log());
    let v = recall(&sb, &["DEPLOY-KEY"]);
    assert_eq!(
        hits(&v).len(),
        1,
        "one hit for the call and its result: {v}"
    );
    let hit = &hits(&v)[0];
    assert_eq!(hit["kind"], "tool_result");
    assert_eq!(hit["line"], 4);
    assert_eq!(hit["tool"], "Bash");
    assert_eq!(hit["input"], "command: grep -r DEPLOY-KEY /etc/app");
    assert_eq!(hit["call"]["line"], 3, "{hit}");
    assert_eq!(hit["prompt"], "why does the deploy fail?", "{hit}");
    // The call's id reads the call.
    let out = sb.run(
        "recall",
        None,
        &["--get", hit["call"]["id"].as_str().unwrap()],
    );
    assert!(
        out.stdout.contains("grep -r DEPLOY-KEY /etc/app"),
        "{}",
        out.stdout
    );
    // A call whose result does not match names its result.
    let v = recall(&sb, &["cat /var/log"]);
    let hit = &hits(&v)[0];
    assert_eq!(hit["kind"], "tool_use", "{v}");
    assert_eq!(hit["result"]["line"], 8, "{hit}");
    assert_eq!(hit["prompt"], "show me the long log");
}

#[test]
fn a_tool_call_hit_shows_its_command_once() {
    let sb = Sandbox::new();
    session(&sb, &long_log());
    let out = sb.run("recall", None, &["cat /var/log", "--current", D]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout.matches("app.log").count(), 1, "{}", out.stdout);
}

#[test]
fn context_shows_the_records_around_a_hit() {
    let sb = Sandbox::new();
    session(&sb, &long_log());
    let v = recall(&sb, &["the key expired", "--context", "1"]);
    let hit = &hits(&v)[0];
    let around: Vec<(u64, &str)> = hit["context"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["line"].as_u64().unwrap(), n["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(around, [(4, "tool_result"), (6, "user")], "{hit}");
    assert!(
        recall(&sb, &["the key expired"])["hits"][0]
            .get("context")
            .is_none()
    );
}

#[test]
fn get_pages_end_on_line_ends() {
    let sb = Sandbox::new();
    let log = long_log();
    session(&sb, &log);
    let v = recall(&sb, &["01999 日志轮转"]);
    let id = hits(&v)[0]["id"].as_str().unwrap().to_string();
    let page = |n: u64| -> Value {
        let out = sb.run(
            "recall",
            None,
            &["--json", "--get", &id, "--page", &n.to_string()],
        );
        serde_json::from_str(&out.stdout).unwrap()
    };
    let pages = page(0)["pages"].as_u64().unwrap();
    assert!(pages >= 4, "{pages}");
    let mut joined = String::new();
    for n in 0..pages {
        let text = page(n)["text"].as_str().unwrap().to_string();
        assert!(text.len() <= 16_000);
        if n + 1 < pages {
            assert!(
                text.ends_with('\n'),
                "page {n} ends mid-line: {:?}",
                &text[text.len() - 40..]
            );
        }
        joined.push_str(&text);
    }
    assert!(joined.contains(&log));
}

#[test]
fn the_mcp_answer_advises_nothing_when_nothing_was_found() {
    let sb = Sandbox::new();
    session(&sb, &long_log());
    let (mut c, _) = crate::mcp::Client::start(&sb, Some(D));
    let (err, found) = c.call("thread_rebuild_recall", json!({"query": "NOWHERE-AT-ALL"}));
    assert!(!err, "{found}");
    assert!(found["hits"].as_array().unwrap().is_empty());
    assert!(found["next"].is_null(), "{found}");
    let (_, found) = c.call("thread_rebuild_recall", json!({"query": "DEPLOY-KEY"}));
    assert!(
        found["next"]
            .as_str()
            .unwrap()
            .contains("thread_rebuild_recall_get"),
        "{found}"
    );
}
