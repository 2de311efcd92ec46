//! Recall through the real interactive CLI: a long tool output
//! that Claude Code offloads to `<session>/tool-results/`; a rebuild; the
//! new session's first request carries ktr-ack's one-line notice; the
//! (scripted) model calls `thread_rebuild_recall` for a line of that
//! output and `thread_rebuild_recall_get` for the hit, and the line reaches
//! the next API requests verbatim, with its citation. A term both in that
//! dropped output and in the answer the rebuild carried comes back as the
//! tool result first, the carried answer folded aside.

use std::fs;

use serde_json::{Value, json};

use crate::claude_loop::{Loop, TALK, serial};
use crate::claude_plugin::{deferred_tools, loaded_tools};
use crate::support::claude_bin;
use crate::support::fake_api::{Logged, Rule, all_strings, text, tool};

const MARKER: &str = "OFFLOAD-MARKER 777:";
/// In every line of the long output, and in the answer the rebuild carries.
const BOTH: &str = "lazy dog once more";

/// Every string of a request (system prompt, messages, tool results).
fn everything(request: &Logged) -> String {
    let mut out = String::new();
    all_strings(&request.body, &mut out);
    out
}

/// The first conversation request after `first` whose text holds `needle`.
#[track_caller]
fn request_with(lp: &Loop, after: &Logged, needle: &str) -> Logged {
    lp.api
        .turns()
        .into_iter()
        .filter(|r| r.at > after.at)
        .find(|r| everything(r).contains(needle))
        .unwrap_or_else(|| {
            panic!(
                "no request after the probe holds {needle:?}\n{}",
                lp.diagnosis()
            )
        })
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn after_a_rebuild_the_model_is_told_and_recalls_an_offloaded_output_verbatim() {
    let bin = claude_bin();
    let _serial = serial();
    let lp = Loop::start(&bin, &[]);
    lp.api.add_rules(vec![Rule::new(
        "OFFLOAD-ASK",
        vec![
            vec![tool(
                "Bash",
                json!({
                    "command": "seq -f 'OFFLOAD-MARKER %g: the quick brown fox jumps over the lazy dog once more' 1 1000",
                    "description": "print a long output",
                }),
            )],
            vec![text(&format!("ASSISTANT-R1 输出很长，每行都以 {BOTH} 结尾。"))],
        ],
    )]);
    lp.say("USER-R1 请运行那条很长的命令 OFFLOAD-ASK。", "ASSISTANT-R1");
    let side = lp
        .env
        .sandbox
        .project
        .join(&lp.source_id)
        .join("tool-results");
    let offloaded = fs::read_dir(&side).is_ok_and(|d| {
        d.flatten()
            .any(|e| fs::read_to_string(e.path()).is_ok_and(|t| t.contains(MARKER)))
    });
    assert!(
        offloaded,
        "Claude Code did not offload the long output to {}",
        side.display()
    );

    let (ask, replied) = TALK[2];
    lp.say(ask, replied);
    let op = lp.wait_activated();
    let new_id = op.candidate.clone().unwrap().session_id.to_string();

    // The hit as recall sees it from the new session (the scripted model
    // cannot read tool results, so the test gives it the id recall returns).
    let found = ktr_recall(&lp, &["--current", &new_id, MARKER]);
    let hit = found["hits"][0].clone();
    assert_eq!(hit["session"], lp.source_id.as_str(), "{found}");
    assert_eq!(
        hit["tool"], "Bash",
        "cited by the record that referenced the file: {hit}"
    );
    let id = hit["id"].as_str().unwrap().to_string();
    assert!(
        id.contains(&format!("live:{}:", lp.source_id)),
        "the hit is in the offloaded file: {id}"
    );

    // The term is in the carried answer and in the dropped output: the
    // output comes first, the answer (the window has it) folded aside.
    let both = ktr_recall(&lp, &["--current", &new_id, BOTH, "--limit", "1"]);
    assert_first_is_the_tool_result(&both);

    lp.api.add_rules(vec![Rule::new(
        "RECALL-ASK",
        vec![
            vec![tool(
                "mcp__ktr__thread_rebuild_recall",
                json!({"query": BOTH, "limit": 1}),
            )],
            vec![tool(
                "mcp__ktr__thread_rebuild_recall",
                json!({"query": MARKER}),
            )],
            vec![tool(
                "mcp__ktr__thread_rebuild_recall_get",
                json!({"id": id, "page": hit["page"]}),
            )],
            vec![text("ASSISTANT-R2 找到了，原文如上。")],
        ],
    )]);
    let first = lp.probe(
        "USER-R2 之前那条长输出的第777行是什么？RECALL-ASK",
        "RECALL-ASK",
        "ASSISTANT-R2",
    );
    // The first request of the rebuilt session carries the one-line notice.
    let sent = everything(&first);
    assert!(
        sent.contains("ktr rebuilt this session")
            && sent.contains("mcp__ktr__thread_rebuild_recall finds them verbatim"),
        "the notice did not reach the model\n{}",
        lp.diagnosis()
    );
    assert_eq!(
        sent.matches("ktr rebuilt this session").count(),
        1,
        "told once"
    );
    // 2.1.328 defers MCP tools: the request names them for ToolSearch to
    // load (their schema is not sent), and the notice's names are those.
    let (loaded, deferred) = (loaded_tools(&first), deferred_tools(&first));
    assert!(loaded.iter().any(|t| t == "ToolSearch"), "{loaded:?}");
    for name in [
        "mcp__ktr__thread_rebuild_recall",
        "mcp__ktr__thread_rebuild_recall_get",
    ] {
        assert!(
            sent.contains(&format!("{name} ")) || sent.contains(&format!("{name},")),
            "the notice names {name}"
        );
        assert!(
            deferred.iter().any(|t| t == name),
            "{name} is deferred: {deferred:?}"
        );
        assert!(
            !loaded.iter().any(|t| t == name),
            "{name} is not loaded up front: {loaded:?}"
        );
    }
    assert!(
        sent.contains("load them with ToolSearch"),
        "the notice says the tools must be loaded first"
    );
    // The model's first recall: the dropped output first.
    let answered = request_with(&lp, &first, &format!("⟦{BOTH}⟧"));
    let mut strings = Vec::new();
    all_strings_of(&answered.body, &mut strings);
    let answer = strings
        .iter()
        .filter(|s| s.contains(&format!("⟦{BOTH}⟧")))
        .filter_map(|s| serde_json::from_str::<Value>(s).ok())
        .find(|v| v.get("hits").is_some())
        .unwrap_or_else(|| panic!("no recall answer reached the model\n{}", lp.diagnosis()));
    assert_first_is_the_tool_result(&answer);
    // The recall result and the page reach the model verbatim, with the citation.
    let recalled = request_with(&lp, &answered, &format!("⟦{MARKER}⟧"));
    let recalled_text = everything(&recalled);
    assert!(
        recalled_text.contains(&lp.source_id[..8]) && recalled_text.contains(&id),
        "no citation"
    );
    let got = request_with(
        &lp,
        &recalled,
        &format!("{MARKER} the quick brown fox jumps over the lazy dog once more"),
    );
    assert!(
        everything(&got).contains("OFFLOAD-MARKER 778:"),
        "the page holds the lines around it"
    );
}

/// Every string inside `v`, each whole.
fn all_strings_of(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| all_strings_of(v, out)),
        Value::Object(o) => o.values().for_each(|v| all_strings_of(v, out)),
        _ => {}
    }
}

/// The one hit the limit allows is the dropped tool output; the carried
/// answer is folded into `carried`.
#[track_caller]
fn assert_first_is_the_tool_result(answer: &Value) {
    let first = &answer["hits"][0];
    assert_eq!(first["kind"], "tool_result", "{answer}");
    assert_eq!(first["tool"], "Bash", "{answer}");
    let carried = answer["carried"].as_array().cloned().unwrap_or_default();
    assert!(
        carried.iter().any(|c| c["kind"] == "assistant"
            && c["snippet"].as_str().unwrap_or("").contains("ASSISTANT-R1")),
        "the carried answer is folded aside: {answer}"
    );
}

/// `ktr recall --json` in the loop's sandbox.
#[track_caller]
fn ktr_recall(lp: &Loop, args: &[&str]) -> Value {
    let out = std::process::Command::new(crate::support::exe("ktr"))
        .arg("recall")
        .arg("--json")
        .args(args)
        .env("KTR_CONFIG", &lp.env.sandbox.config)
        .env("HOME", &lp.env.sandbox.home)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("ktr recall: {}", String::from_utf8_lossy(&out.stderr)))
}
