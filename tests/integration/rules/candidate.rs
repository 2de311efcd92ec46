//! The candidate itself; read-only, paths, config errors, transcript choice, dirty.

use std::fs;
use std::path::Path;

use ktr_base::digest::sha256_hex;

use super::{NO_STAMPS, ts};
use crate::support::plan::*;
use crate::support::{Sandbox, tree};
use serde_json::Value;

// ---------------------------------------------------------------------------
// The candidate itself
// ---------------------------------------------------------------------------

const FIXED_SESSION: &str = "0d15ea5e-0000-4000-8000-00000000beef";

#[test]
fn show_candidate_is_byte_identical_across_runs_with_the_same_session_id() {
    let plan = Plan::new("channel_messages")
        .arg("--session-id")
        .arg(FIXED_SESSION);
    let one = plan.show_candidate();
    let two = plan.show_candidate();
    assert!(!one.is_empty());
    assert_eq!(one, two, "two runs gave different candidates");
    let lines = parse_jsonl(&String::from_utf8(one).expect("candidate is UTF-8"));
    assert_eq!(lines.len(), 7);
    for line in &lines {
        assert_eq!(line["sessionId"], FIXED_SESSION);
    }
}

#[test]
fn show_candidate_text_and_json_agree() {
    let plan = Plan::new("channel_messages")
        .config(NO_STAMPS)
        .arg("--session-id")
        .arg(FIXED_SESSION);
    let text = plan.show_candidate();
    let json = plan.run_json();
    assert_eq!(
        &parse_jsonl(&String::from_utf8(text).unwrap()),
        json.candidate()
    );
}

#[test]
fn candidate_lines_have_exactly_the_contract_shape() {
    let r = Plan::new("two_turns")
        .config(NO_STAMPS)
        .arg("--session-id")
        .arg(FIXED_SESSION)
        .run_json();
    let lines = r.candidate();
    assert_eq!(lines.len(), 4);
    let source_ids = ["u1", "a1", "u2", "a2"];
    let mut previous = Value::Null;
    for (i, line) in lines.iter().enumerate() {
        let obj = line.as_object().expect("line object");
        let mut keys: Vec<&str> = obj.keys().map(std::string::String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            vec![
                "cwd",
                "entrypoint",
                "gitBranch",
                "isMeta",
                "isSidechain",
                "message",
                "parentUuid",
                "sessionId",
                "timestamp",
                "type",
                "userType",
                "uuid",
                "version"
            ],
            "line {i}: {line}"
        );
        assert_eq!(line["parentUuid"], previous, "line {i}");
        let uuid = line["uuid"].as_str().expect("uuid string");
        assert_eq!(uuid.len(), 36, "line {i}: {uuid}");
        assert_eq!(&uuid[14..15], "5", "item uuids are UUID v5: {uuid}");
        assert_ne!(uuid, source_ids[i]);
        previous = line["uuid"].clone();
        assert_eq!(line["sessionId"], FIXED_SESSION);
        assert_eq!(line["timestamp"], ts(i as u32 + 1).as_str());
        assert_eq!(line["cwd"], "/home/alice/proj");
        assert_eq!(line["version"], "2.1.300");
        assert_eq!(line["gitBranch"], "main");
        assert_eq!(line["userType"], "external");
        assert_eq!(line["entrypoint"], "cli");
        assert_eq!(line["isSidechain"], false);
        assert_eq!(line["isMeta"], false);
        let message = line["message"].as_object().expect("message object");
        let mut mkeys: Vec<&str> = message.keys().map(std::string::String::as_str).collect();
        mkeys.sort_unstable();
        if line["type"] == "assistant" {
            assert_eq!(mkeys, vec!["content", "id", "role"], "line {i}");
            assert_eq!(message["id"], format!("msg_{}", source_ids[i]).as_str());
        } else {
            assert_eq!(mkeys, vec!["content", "role"], "line {i}");
        }
    }
    let uuids: std::collections::BTreeSet<&str> =
        lines.iter().map(|l| l["uuid"].as_str().unwrap()).collect();
    assert_eq!(uuids.len(), 4, "item uuids must be distinct");
}

#[test]
fn the_report_has_every_contract_field() {
    let r = Plan::new("two_turns").config(NO_STAMPS).run_json();
    for field in [
        "source_path",
        "session_id",
        "source_sha256",
        "history_mode",
        "ledger",
        "first_carried",
        "last_carried",
        "not_speech",
        "unknown_record_types",
        "unknown_attachment_types",
        "versions_seen",
        "malformed_line_numbers",
    ] {
        assert!(!r[field].is_null(), "missing {field}: {}", r.0);
    }
    for field in [
        "source_bytes",
        "source_turns",
        "selected_turns",
        "dropped_oldest_turns",
        "leading_assistant_turns",
        "carried_items",
        "estimated_tokens",
        "compact_summaries_dropped",
        "compact_summaries_carried",
        "abandoned_branch_records",
        "malformed_lines",
        "elided_items",
        "poison_hits",
    ] {
        r.count(field);
    }
    for field in ["open_tail", "open_tail_kept", "startup_frozen"] {
        r.flag(field);
    }
    for kind in [
        "teammate_messages",
        "task_notifications",
        "system_prompts",
        "meta_injections",
        "local_commands",
        "synthetic_assistant",
        "sidechain_records",
    ] {
        r.not_speech(kind);
    }
    for field in [
        "blocked_reason",
        "history_fallback_reason",
        "startup_sha256",
    ] {
        assert!(r[field].is_null(), "{field} should be null: {}", r[field]);
    }
    let source = fixture_bytes("two_turns");
    assert_eq!(r.string("source_sha256"), sha256_hex(&source));
    assert_eq!(r.count("source_bytes"), source.len() as u64);
    assert_eq!(r.string("session_id"), SOURCE_SESSION);
    assert!(
        r.string("source_path")
            .ends_with(&format!("{SOURCE_SESSION}.jsonl"))
    );
    assert_eq!(r["versions_seen"], serde_json::json!(["2.1.300"]));
    assert_eq!(r.count("carried_items"), 4);
    assert_eq!(r.candidate().len(), 4);
    let ledger = &r["ledger"];
    for field in [
        "total_bytes",
        "conversation_bytes",
        "conversation_turns",
        "preview_image_count",
        "original_image_view_count",
        "dirty_budget_bytes",
    ] {
        assert!(ledger[field].is_u64(), "ledger.{field}: {ledger}");
    }
    assert!(ledger["categories"].is_array(), "{ledger}");
    assert!(ledger["noise_ratio"].is_number(), "{ledger}");
    assert!(ledger["should_rebuild"].is_boolean(), "{ledger}");
    assert!(ledger["reasons"].is_array(), "{ledger}");
}

// ---------------------------------------------------------------------------
// Read-only, paths, config errors, transcript choice, dirty
// ---------------------------------------------------------------------------

#[test]
fn plan_writes_nothing() {
    let plan = Plan::new("startup_snapshot");
    let (sandbox, path) = plan.prepare();
    let before = tree(sandbox.root());
    sandbox
        .run("plan", Some(&path), &["--show-candidate", "--json"])
        .assert_exit(0);
    sandbox
        .run("plan", Some(&path), &["--show-candidate"])
        .assert_exit(0);
    // Without --transcript too (newest transcript in project_dir).
    sandbox.run("plan", None, &[]).assert_exit(0);
    let after = tree(sandbox.root());
    assert_eq!(
        before, after,
        "plan changed the sandbox (HOME, project or state dir)"
    );
}

#[test]
fn a_transcript_outside_project_dir_is_refused() {
    let plan = Plan::new("two_turns");
    let (sandbox, _) = plan.prepare();
    let outside = sandbox.root().join("elsewhere");
    fs::create_dir_all(&outside).unwrap();
    let path = outside.join(format!("{SOURCE_SESSION}.jsonl"));
    fs::write(&path, fixture_bytes("two_turns")).unwrap();
    let outcome = sandbox.run("plan", Some(&path), &["--json"]);
    outcome.assert_refused();
}

#[test]
fn a_symlink_escaping_project_dir_is_refused() {
    let plan = Plan::new("two_turns");
    let (sandbox, _) = plan.prepare();
    let outside = sandbox.root().join("elsewhere");
    fs::create_dir_all(&outside).unwrap();
    let target = outside.join("secret.jsonl");
    fs::write(&target, fixture_bytes("two_turns")).unwrap();
    let link = sandbox
        .project
        .join("0d15ea5e-0000-4000-8000-0000000011ec.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let outcome = sandbox.run("plan", Some(&link), &["--json"]);
    outcome.assert_refused();
}

#[test]
fn a_dotdot_path_escaping_project_dir_is_refused() {
    let plan = Plan::new("two_turns");
    let (sandbox, _) = plan.prepare();
    let outside = sandbox.root().join("elsewhere");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("x.jsonl"), fixture_bytes("two_turns")).unwrap();
    let sneaky = sandbox
        .project
        .join("..")
        .join("..")
        .join("..")
        .join("..")
        .join("elsewhere/x.jsonl");
    assert!(sneaky.exists(), "{}", sneaky.display());
    let outcome = sandbox.run("plan", Some(&sneaky), &["--json"]);
    outcome.assert_refused();
}

#[test]
fn an_unknown_config_key_is_a_usage_error_naming_the_key() {
    let plan = Plan::new("two_turns").config("stamp_turn = false");
    let outcome = plan.run();
    let message = outcome.assert_usage_error();
    assert!(message.contains("stamp_turn"), "message: {message}");
}

#[test]
fn a_wrongly_typed_config_value_is_a_usage_error_naming_the_key() {
    let plan = Plan::new("two_turns").config("stamp_turns = \"no\"");
    let message = plan.run().assert_usage_error();
    assert!(message.contains("stamp_turns"), "message: {message}");
}

#[test]
fn a_missing_config_file_is_a_usage_error() {
    let sandbox = Sandbox::new();
    let outcome = sandbox.ktr(&[
        "plan".into(),
        "--config".into(),
        sandbox.root().join("nope.toml").into(),
    ]);
    outcome.assert_usage_error();
}

#[test]
fn without_transcript_the_newest_jsonl_directly_in_project_dir_is_used() {
    let sandbox = Sandbox::new();
    sandbox.write_config(NO_STAMPS);
    let old = sandbox.add_transcript(
        "0d15ea5e-0000-4000-8000-000000000001",
        &fixture_bytes("consecutive_user_messages"),
    );
    let new = sandbox.add_transcript(
        "0d15ea5e-0000-4000-8000-000000000002",
        &fixture_bytes("two_turns"),
    );
    // A newer file in a subfolder (subagent layout) is not a session.
    let sub = sandbox
        .project
        .join("0d15ea5e-0000-4000-8000-000000000002/subagents");
    fs::create_dir_all(&sub).unwrap();
    let agent = sub.join("agent-a1b2c3.jsonl");
    fs::write(&agent, fixture_bytes("leading_assistant")).unwrap();
    let t = std::time::SystemTime::now();
    let set = |p: &Path, secs: u64| {
        fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(t - std::time::Duration::from_secs(secs))
            .unwrap();
    };
    set(&old, 300);
    set(&new, 200);
    set(&agent, 10);
    let outcome = sandbox.run("plan", None, &["--json", "--show-candidate"]);
    outcome.assert_exit(0);
    let r = outcome.json();
    assert_eq!(
        r.string("session_id"),
        "0d15ea5e-0000-4000-8000-000000000002"
    );
    assert_eq!(r.carried()[0], user("First question."));
}

#[test]
fn dirty_prints_the_ledger() {
    let plan = Plan::new("injected_mid_turn");
    let (sandbox, path) = plan.prepare();
    let outcome = sandbox.run("dirty", Some(&path), &["--json"]);
    outcome.assert_exit(0);
    let value: Value = serde_json::from_str(outcome.stdout.trim()).expect("dirty --json is JSON");
    // Either the ledger itself or an object holding it.
    let ledger = if value.get("categories").is_some() {
        value.clone()
    } else {
        value["ledger"].clone()
    };
    assert!(ledger["total_bytes"].as_u64().unwrap() > 0, "{ledger}");
    assert!(ledger_category(&ledger, "tool_result") > 0, "{ledger}");
    assert!(ledger_category(&ledger, "tool_use") > 0, "{ledger}");
    assert!(ledger_category(&ledger, "thinking") > 0, "{ledger}");
    assert!(
        ledger["conversation_bytes"].as_u64().unwrap() > 0,
        "{ledger}"
    );
    let ratio = ledger["noise_ratio"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&ratio), "{ledger}");
}
