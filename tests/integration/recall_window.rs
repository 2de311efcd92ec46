//! Recall leaves aside what the window already holds: a match on a record
//! a rebuild carried into the current session — told through the
//! rebuilds' manifests, the source record each carried item came from — is
//! folded into one line with its older copies and does not use the limit;
//! what the window lost (a tool result, thinking) comes first.

use std::fs;

use serde_json::{Value, json};

use crate::recall::{A, B, C, hits, line, rebuilt, recall_in};
use crate::support::Sandbox;
use ktr_engine::{ItemKind, ManifestEntry, Role};
use ktr_pipeline::operation::manifest::ManifestWriter;

const TERM: &str = "ROTATE-LOGS";

fn record(kind: &str, uuid: &str, content: &Value, at: &str) -> String {
    line(&json!({"type": kind, "uuid": uuid, "timestamp": at,
        "message": {"role": kind, "content": content}}))
}

/// A session that asked about the term, ran a command whose output holds
/// it, and answered with it: the prompt and the answer are speech (a
/// rebuild carries them), the call and its output are not.
fn first_session() -> String {
    [
        record(
            "user",
            "a-1",
            &json!(format!("please set up {TERM} for nginx")),
            "2026-01-01T10:00:00Z",
        ),
        record(
            "assistant",
            "a-2",
            &json!([{"type": "tool_use", "id": "toolu_a", "name": "Bash",
            "input": {"command": "cat /etc/logrotate.d/nginx"}}]),
            "2026-01-01T10:00:01Z",
        ),
        record(
            "user",
            "a-3",
            &json!([{"type": "tool_result", "tool_use_id": "toolu_a",
            "content": format!("{TERM}: weekly, rotate 4, compress")}]),
            "2026-01-01T10:00:02Z",
        ),
        record(
            "assistant",
            "a-4",
            &json!([{"type": "text", "text": format!("{TERM} is weekly now.")}]),
            "2026-01-01T10:00:03Z",
        ),
    ]
    .concat()
}

/// The items a rebuild writes: each carried record again under a new uuid.
fn carried(items: &[(&str, &str, &str, &str)]) -> String {
    items
        .iter()
        .map(|(kind, uuid, text, at)| {
            let content = if *kind == "user" {
                json!(text)
            } else {
                json!([{"type": "text", "text": text}])
            };
            record(kind, uuid, &content, at)
        })
        .collect()
}

/// Record the manifest of operation `op`: item uuid ← source uuid.
fn manifest(sb: &Sandbox, op: &str, items: &[(&str, &str)]) {
    let store = sb.store();
    let id = ktr_base::ids::OperationId::parse(op).unwrap();
    let mut w = ManifestWriter::create(&store, &id).unwrap();
    for (position, (item, source)) in items.iter().enumerate() {
        w.push_item(&ManifestEntry {
            position,
            role: if position % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            },
            kind: ItemKind::Speech,
            source_uuid: Some(source.to_string()),
            source_line: position + 1,
            source_timestamp: None,
            source_sha256: String::new(),
            carried_sha256: String::new(),
            uuid: item.to_string(),
            elided_chars: 0,
        })
        .unwrap();
    }
    let recorded = w.finish().unwrap();
    store
        .with_lock(|tx| {
            let mut o = tx.load(&id)?;
            o.manifest_artifact = Some(recorded.clone());
            tx.save(&mut o)
        })
        .unwrap();
}

/// A → B → C: B carried A's prompt and answer, C carried them on from B;
/// A's transcript deleted (its backup kept). C is current.
fn lineage() -> Sandbox {
    let sb = Sandbox::new();
    let now = std::time::SystemTime::now();
    let ago = |s| now - std::time::Duration::from_secs(s);
    sb.add_transcript(A, first_session().as_bytes());
    let op1 = rebuilt(&sb, A, B, ago(20));
    let speech = |p: &str| {
        vec![
            (
                "user",
                format!("{p}-1"),
                format!("please set up {TERM} for nginx"),
            ),
            (
                "assistant",
                format!("{p}-4"),
                format!("{TERM} is weekly now."),
            ),
        ]
    };
    let as_items = |v: &[(&'static str, String, String)]| -> String {
        let refs: Vec<(&str, &str, &str, &str)> = v
            .iter()
            .map(|(k, u, t)| (*k, u.as_str(), t.as_str(), "2026-02-01T09:00:00Z"))
            .collect();
        carried(&refs)
    };
    sb.add_transcript(B, as_items(&speech("b")).as_bytes());
    manifest(&sb, &op1, &[("b-1", "a-1"), ("b-4", "a-4")]);
    let op2 = rebuilt(&sb, B, C, ago(10));
    sb.add_transcript(C, as_items(&speech("c")).as_bytes());
    manifest(&sb, &op2, &[("c-1", "b-1"), ("c-4", "b-4")]);
    fs::remove_file(sb.project.join(format!("{A}.jsonl"))).unwrap();
    sb
}

fn recall(sb: &Sandbox, args: &[&str]) -> Value {
    recall_in(sb, C, args)
}

#[test]
fn what_the_window_carries_folds_into_one_line_and_what_it_lost_comes_first() {
    let sb = lineage();
    let v = recall(&sb, &[TERM, "--limit", "1"]);
    // The one hit the limit allows is the dropped tool output, not a copy
    // of the conversation the window already holds.
    assert_eq!(hits(&v).len(), 1, "{v}");
    let hit = &hits(&v)[0];
    assert_eq!(hit["kind"], "tool_result", "{v}");
    assert_eq!(hit["session"], A);
    assert_eq!(hit["tool"], "Bash");
    // The prompt and the answer: one line each, their two older copies
    // (in B and in A) folded in.
    let carried = v["carried"].as_array().unwrap();
    assert_eq!(carried.len(), 2, "{v}");
    for c in carried {
        assert_eq!(
            c["session"], C,
            "the window's own copy stands for them: {c}"
        );
        assert_eq!(c["older_copies"], 2, "{c}");
    }
    let human = sb.run("recall", None, &[TERM, "--current", C, "--limit", "1"]);
    assert!(
        human
            .stdout
            .contains("also carried in the window; 2 older copies"),
        "{}",
        human.stdout
    );
    // Every copy on request: then they are hits like any other.
    let all = recall(&sb, &[TERM, "--all-copies", "--limit", "50"]);
    assert_eq!(hits(&all).len(), 7, "2 in C, 2 in B, 3 in A: {all}");
    assert!(all.get("carried").is_none(), "{all}");
}

#[test]
fn within_a_session_what_the_window_lost_comes_before_conversation_text() {
    let sb = lineage();
    let v = recall(&sb, &[TERM, "--all-copies", "--session", A]);
    let kinds: Vec<&str> = hits(&v)
        .iter()
        .map(|h| h["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tool_result", "user", "assistant"], "{v}");
}

#[test]
fn after_the_current_session_compacted_nothing_it_carried_is_in_the_window() {
    let sb = lineage();
    assert_eq!(
        recall(&sb, &[TERM])["carried"].as_array().map(Vec::len),
        Some(2)
    );
    let path = sb.project.join(format!("{C}.jsonl"));
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str(&line(
        &json!({"type": "system", "subtype": "compact_boundary",
        "uuid": "c-9", "content": "Conversation compacted", "timestamp": "2026-03-01T10:00:00Z"}),
    ));
    fs::write(&path, text).unwrap();
    let v = recall(&sb, &[TERM, "--limit", "50"]);
    assert!(v.get("carried").is_none(), "{v}");
    assert_eq!(hits(&v).len(), 7, "{v}");
}
