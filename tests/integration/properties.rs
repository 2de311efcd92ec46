//! Property tests: for arbitrary transcripts built from real record shapes
//! (and garbage), the candidate always satisfies SPEC §7's invariants, is
//! deterministic, and passes independent verification.

use std::path::Path;

use crate::support::sid;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Value, json};

const SESSION: &str = "3f2a1b0c-9d8e-4f7a-8b6c-5d4e3f2a1b0c";

#[derive(Debug, Clone)]
enum Shape {
    UserText(String),
    UserBlocks(Vec<String>),
    UserMeta(String),
    Channel(String),
    ToolResult {
        rejected: bool,
        words: String,
    },
    Assistant {
        texts: Vec<String>,
        thinking: bool,
        tool: bool,
    },
    Reply(String),
    Synthetic,
    Sidechain(String),
    Queued(String),
    Summary(String),
    Boundary,
    FileOnly,
    Garbage(Vec<u8>),
    NullMessage,
}

fn words() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{1,40}",
        "[你好世界小满日志]{1,12}",
        Just("<system-reminder>ctx</system-reminder>\nhello".to_string()),
        Just("explain the <system-reminder> tag".to_string()),
        Just("<command-name>/plan</command-name><command-args>do it</command-args>".to_string()),
        Just("<command-name>/cost</command-name>".to_string()),
        Just("<local-command-stdout>$1</local-command-stdout>".to_string()),
        Just("  ".to_string()),
        Just("AUP".to_string()),
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        4 => words().prop_map(Shape::UserText),
        1 => prop::collection::vec(words(), 1..3).prop_map(Shape::UserBlocks),
        1 => words().prop_map(Shape::UserMeta),
        1 => words().prop_map(Shape::Channel),
        2 => (any::<bool>(), words()).prop_map(|(rejected, words)| Shape::ToolResult { rejected, words }),
        4 => (prop::collection::vec(words(), 0..3), any::<bool>(), any::<bool>())
            .prop_map(|(texts, thinking, tool)| Shape::Assistant { texts, thinking, tool }),
        1 => words().prop_map(Shape::Reply),
        1 => Just(Shape::Synthetic),
        1 => words().prop_map(Shape::Sidechain),
        1 => words().prop_map(Shape::Queued),
        1 => words().prop_map(Shape::Summary),
        1 => Just(Shape::Boundary),
        1 => Just(Shape::FileOnly),
        1 => prop::collection::vec(any::<u8>(), 0..30).prop_map(Shape::Garbage),
        1 => Just(Shape::NullMessage),
    ]
}

/// (shape, parent choice: 0 previous, 1 null, 2 a random earlier record, 3 dangling, 4 missing field, timestamp ok)
fn transcript() -> impl Strategy<Value = Vec<(Shape, u8, usize, bool)>> {
    prop::collection::vec(
        (
            shape(),
            prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8), 1 => Just(4u8)],
            any::<usize>(),
            prop_oneof![9 => Just(true), 1 => Just(false)],
        ),
        0..40,
    )
}

fn render(records: &[(Shape, u8, usize, bool)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut uuids: Vec<String> = Vec::new();
    for (i, (shape, link, pick, ts_ok)) in records.iter().enumerate() {
        let uuid = format!("00000000-0000-4000-8000-{i:012}");
        let parent = match link {
            0 => uuids.last().cloned().map_or(Value::Null, Value::String),
            2 if !uuids.is_empty() => Value::String(uuids[pick % uuids.len()].clone()),
            3 => Value::String("ffffffff-0000-4000-8000-000000000000".into()),
            _ => Value::Null,
        };
        let ts = if *ts_ok {
            format!("2026-01-01T00:{:02}:{:02}.000Z", i / 60, i % 60)
        } else {
            "soon".into()
        };
        let mut r = json!({"uuid": uuid, "parentUuid": parent, "timestamp": ts, "sessionId": "s", "cwd": "/w", "version": "2.1.328"});
        if *link == 4 {
            r.as_object_mut().unwrap().remove("parentUuid");
        }
        let mid = format!("msg_{}", i / 2);
        let (kind, extra): (&str, Value) = match shape {
            Shape::UserText(t) => ("user", json!({"message": {"role": "user", "content": t}})),
            Shape::UserBlocks(ts) => (
                "user",
                json!({"message": {"role": "user", "content": ts.iter().map(|t| json!({"type": "text", "text": t})).collect::<Vec<_>>()}}),
            ),
            Shape::UserMeta(t) => (
                "user",
                json!({"isMeta": true, "message": {"role": "user", "content": t}}),
            ),
            Shape::Channel(t) => (
                "user",
                json!({"isMeta": true, "message": {"role": "user", "content": format!("<channel source=\"telegram\" chat_id=\"1\">\n{t}\n</channel>")}}),
            ),
            Shape::ToolResult { rejected, words } => (
                "user",
                json!({"message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": rejected, "content": format!("rejected. the user said:\n{words}")}]}, "toolUseResult": {"stdout": "x".repeat(100)}}),
            ),
            Shape::Assistant {
                texts,
                thinking,
                tool,
            } => {
                let mut blocks: Vec<Value> = Vec::new();
                if *thinking {
                    blocks.push(json!({"type": "thinking", "thinking": "hmm", "signature": "s"}));
                }
                blocks.extend(texts.iter().map(|t| json!({"type": "text", "text": t})));
                if *tool {
                    blocks.push(json!({"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "ls"}}));
                }
                (
                    "assistant",
                    json!({"message": {"id": mid, "role": "assistant", "model": "m", "content": blocks}}),
                )
            }
            Shape::Reply(t) => (
                "assistant",
                json!({"message": {"id": mid, "role": "assistant", "content": [{"type": "tool_use", "name": "mcp__companion__reply", "input": {"text": t}}]}}),
            ),
            Shape::Synthetic => (
                "assistant",
                json!({"message": {"role": "assistant", "model": "<synthetic>", "content": [{"type": "text", "text": "No response requested."}]}}),
            ),
            Shape::Sidechain(t) => (
                "user",
                json!({"isSidechain": true, "message": {"role": "user", "content": t}}),
            ),
            Shape::Queued(t) => (
                "attachment",
                json!({"attachment": {"type": "queued_command", "prompt": t, "commandMode": "prompt"}}),
            ),
            Shape::Summary(t) => (
                "user",
                json!({"isCompactSummary": true, "message": {"role": "user", "content": t}}),
            ),
            Shape::Boundary => (
                "system",
                json!({"subtype": "compact_boundary", "parentUuid": null, "logicalParentUuid": uuids.last()}),
            ),
            Shape::FileOnly => ("last-prompt", json!({})),
            Shape::NullMessage => ("user", json!({"message": null})),
            Shape::Garbage(bytes) => {
                out.extend(bytes.iter().filter(|b| **b != b'\n'));
                out.push(b'\n');
                continue;
            }
        };
        let obj = r.as_object_mut().unwrap();
        obj.insert("type".into(), json!(kind));
        for (k, v) in extra.as_object().unwrap() {
            obj.insert(k.clone(), v.clone());
        }
        out.extend(serde_json::to_vec(&r).unwrap());
        out.push(b'\n');
        uuids.push(uuid);
    }
    out
}

fn config(dir: &Path) -> ktr_base::config::Config {
    ktr_base::config::Config::from_toml(&format!(
        "project_dir = \"{}\"\non_malformed_line = \"skip\"\nmax_event_chars = 500",
        dir.display()
    ))
    .unwrap()
}

proptest! {
    // The regressions file sits beside this file
    // (`properties.proptest-regressions`); proptest's default would look for
    // `tests/proptest-regressions/properties.txt`, since main.rs is here.
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    #[ignore = "slow: 200 generated transcripts through plan and verify (~30 s)"]
    fn candidate_invariants_hold(records in transcript()) {
        let dir = std::env::temp_dir().join(format!("ktr-prop-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("source.jsonl");
        std::fs::write(&source, render(&records)).unwrap();
        let config = config(&dir);
        let plan = ktr_engine::plan::build(&config, &source, Some(&sid(SESSION))).unwrap();
        let again = ktr_engine::plan::build(&config, &source, Some(&sid(SESSION))).unwrap();
        prop_assert_eq!(plan.candidate.bytes(), again.candidate.bytes());
        prop_assert_eq!(plan.candidate.lines.len(), plan.candidate.manifest.len());
        let mut previous = Value::Null;
        for (line, entry) in plan.candidate.lines.iter().zip(&plan.candidate.manifest) {
            let v: Value = serde_json::from_str(line).unwrap();
            let kind = v["type"].as_str().unwrap();
            prop_assert!(kind == "user" || kind == "assistant");
            prop_assert_eq!(&v["uuid"], &json!(entry.uuid));
            prop_assert_eq!(&v["parentUuid"], &previous);
            prop_assert_eq!(&v["sessionId"], &json!(SESSION));
            prop_assert!(ktr_engine::transcript::is_timestamp(v["timestamp"].as_str().unwrap()));
            prop_assert_eq!(&v["isSidechain"], &json!(false));
            prop_assert_eq!(&v["isMeta"], &json!(false));
            let content = &v["message"]["content"];
            let text = if kind == "user" {
                content.as_str().unwrap().to_string()
            } else {
                prop_assert_eq!(content.as_array().unwrap().len(), 1);
                prop_assert_eq!(&content[0]["type"], &json!("text"));
                content[0]["text"].as_str().unwrap().to_string()
            };
            prop_assert!(!text.trim().is_empty());
            previous = v["uuid"].clone();
        }
        // Independent verification accepts every candidate the selector writes.
        let candidate = dir.join(format!("{SESSION}.jsonl"));
        std::fs::write(&candidate, plan.candidate.bytes()).unwrap();
        let sha = ktr_base::digest::sha256_file(&candidate).unwrap();
        let verified = ktr_engine::conserve::check(&config, &source, &candidate, &ktr_engine::conserve::Expected {
            session_id: &sid(SESSION),
            backup_sha256: &ktr_base::digest::sha256_file(&source).unwrap(),
            candidate_sha256: &sha,
            manifest: &plan.candidate.manifest,
            left_out: &plan.report.left_out,
        }, &ktr_engine::meter::Meter::default());
        std::fs::remove_dir_all(&dir).unwrap();
        prop_assert!(verified.is_ok(), "{:?}", verified.err());
    }
}
