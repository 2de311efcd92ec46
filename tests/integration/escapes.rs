//! The candidate keeps the source's own escaping.
//!
//! A carried text is written as the source wrote it: `\u00e9`, `\/`,
//! `\u4f60`, an escaped control character or quote stays that escape in
//! the candidate (it used to be decoded and written again by `serde_json`,
//! which writes `é`, `/`, `你`, `\b`). Only what ktr adds around it (a
//! stamp line) is ktr's own escaping. Conservation and verify compare the
//! decoded texts, as before.

use std::fs;

use crate::support::Sandbox;
use crate::support::claude::ClaudeEnv;
use crate::support::fake_api::FakeApi;
use crate::support::plan::Plan;
use crate::support::{claude_bin, sid};

/// The source session of the chain test.
const SESSION: &str = "e5ca9e00-0000-4000-8000-00000000aaaa";

/// The texts as the source writes them (inside their quotes): escapes
/// `serde_json` would write otherwise, in user and assistant text, in a
/// tool-free turn and around a tool call.
const WRITTEN: &[&str] = &[
    r#"caf\u00e9 and caf\u00E9, a\/b, \u4f60\u597d, bell \u0007, backspace \u0008, a \"quoted\" word, \ud83d\ude00"#,
    r#"r\u00e9ponse \/ \u4f60 \"ok\"\u000aline two\u000d \u001f \u0060tick\u0060"#,
    r"run \u0060ls\u0060 in \/tmp please \u00e9",
    r"listed: \/tmp holds \u4f60.txt \b\f\t",
    r#"a last plain \"quote\" and a \\ backslash"#,
    r"Bye\u0021",
];

fn line(kind: &str, uuid: &str, parent: &str, second: u32, message: &str) -> String {
    format!(
        r#"{{"type":"{kind}","parentUuid":{parent},"isSidechain":false,"uuid":"{uuid}","timestamp":"2026-03-01T10:00:{second:02}.000Z","sessionId":"7c0ffee0-1111-4222-8333-444455556666","cwd":"/home/alice/proj","version":"2.1.328","gitBranch":"main","userType":"external","entrypoint":"cli","message":{message}}}"#
    )
}

fn user(text: &str) -> String {
    format!(r#"{{"role":"user","content":"{text}"}}"#)
}

fn assistant(id: &str, content: &str) -> String {
    format!(
        r#"{{"id":"{id}","type":"message","role":"assistant","model":"claude-opus-5","content":[{content}],"stop_reason":"end_turn"}}"#
    )
}

fn text_block(text: &str) -> String {
    format!(r#"{{"type":"text","text":"{text}"}}"#)
}

/// Three turns: a tool-free one, one around a tool call, a last one.
fn source() -> Vec<u8> {
    let tool_use =
        r#"{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls \/tmp"}}"#;
    let tool_result = r#"{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"\u4f60.txt","is_error":false}]}"#;
    let lines = [
        line("user", "u1", "null", 1, &user(WRITTEN[0])),
        line(
            "assistant",
            "a1",
            r#""u1""#,
            2,
            &assistant("msg_a1", &text_block(WRITTEN[1])),
        ),
        line("user", "u2", r#""a1""#, 3, &user(WRITTEN[2])),
        line(
            "assistant",
            "a2",
            r#""u2""#,
            4,
            &assistant("msg_a2", tool_use),
        ),
        line("user", "u3", r#""a2""#, 5, tool_result),
        line(
            "assistant",
            "a3",
            r#""u3""#,
            6,
            &assistant("msg_a3", &text_block(WRITTEN[3])),
        ),
        line("user", "u4", r#""a3""#, 7, &user(WRITTEN[4])),
        line(
            "assistant",
            "a4",
            r#""u4""#,
            8,
            &assistant("msg_a4", &text_block(WRITTEN[5])),
        ),
    ];
    let mut out = lines.join("\n").into_bytes();
    out.push(b'\n');
    out
}

/// `text` decoded.
fn decoded(written: &str) -> String {
    serde_json::from_str(&format!("\"{written}\"")).unwrap()
}

/// Every text of [`WRITTEN`] appears in `candidate` once, byte for byte.
#[track_caller]
fn assert_kept(candidate: &str) {
    for written in WRITTEN {
        assert_eq!(
            candidate.matches(&format!("{written}\"")).count(),
            1,
            "{written} is carried once as the source wrote it in:\n{candidate}"
        );
    }
}

#[test]
fn the_escapes_are_ones_serde_json_would_write_otherwise() {
    // (Else the tests below would prove nothing.)
    for written in WRITTEN.iter().take(4) {
        let again = serde_json::to_string(&decoded(written)).unwrap();
        assert_ne!(again, format!("\"{written}\""));
    }
}

#[test]
fn short_texts_keep_the_sources_escaping_byte_for_byte() {
    for config in ["stamp_turns = false", ""] {
        let plan = Plan::from_bytes(source()).config(config);
        let report = plan.run_json();
        assert_eq!(report.count("carried_items"), 6, "{config}");
        assert_eq!(
            report.carried_texts().last().map(String::as_str),
            Some("Bye!")
        );
        let candidate = String::from_utf8(plan.show_candidate()).unwrap();
        assert_kept(&candidate);
        if config.is_empty() {
            // The stamp line is ktr's; the text after it is the source's.
            assert!(
                candidate.contains(&format!(r#"]\n{}""#, WRITTEN[0])),
                "{candidate}"
            );
        }
    }
}

#[test]
fn the_candidate_with_kept_escapes_is_deterministic_and_decodes_to_the_texts() {
    let source = source();
    let config = ktr_base::config::Config::from_toml(
        "project_dir = \"/nonexistent\"\nstate_dir = \"/nonexistent/ktr\"\nstamp_turns = false\n",
    )
    .unwrap();
    let id = sid("e5ca9e00-0000-4000-8000-00000000bbbb");
    let path = std::path::Path::new("/nonexistent/source.jsonl");
    let first = ktr_engine::plan::build_from_bytes(&config, path, &source, Some(&id)).unwrap();
    let again = ktr_engine::plan::build_from_bytes(&config, path, &source, Some(&id)).unwrap();
    assert!(!first.is_blocked(), "{:?}", first.report.blocked_reason);
    assert_eq!(first.candidate.bytes(), again.candidate.bytes());
    assert_eq!(first.candidate.manifest, again.candidate.manifest);
    let texts: Vec<String> = first
        .candidate
        .lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            match &v["message"]["content"] {
                serde_json::Value::String(s) => s.clone(),
                blocks => blocks[0]["text"].as_str().unwrap().to_string(),
            }
        })
        .collect();
    let want: Vec<String> = WRITTEN.iter().map(|w| decoded(w)).collect();
    assert_eq!(texts, want);
    for (entry, text) in first.candidate.manifest.iter().zip(&want) {
        assert_eq!(
            entry.carried_sha256,
            ktr_base::digest::sha256_hex(text.as_bytes()),
            "the manifest digests the decoded text"
        );
    }
}

#[test]
fn the_chain_verifies_and_switches_to_a_candidate_with_kept_escapes() {
    let sandbox = Sandbox::new();
    let pointer = sandbox.write_pointer_config(SESSION, "");
    let source = source();
    let path = sandbox.add_transcript(SESSION, &source);
    let candidate = sandbox.rebuild_by_hand(&path, &pointer, SESSION);
    assert_kept(&candidate);
    assert_eq!(fs::read(&path).unwrap(), source, "the source is untouched");
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_real_cli_resumes_a_candidate_with_kept_escapes() {
    let api = FakeApi::start(Vec::new());
    let env = ClaudeEnv::new(&claude_bin(), &api);
    let config = env.config("");
    let id = "e5ca9e00-0000-4000-8000-00000000eeee";
    let source = env.sandbox.project.join("source.jsonl");
    let plan =
        ktr_engine::plan::build_from_bytes(&config, &source, &self::source(), Some(&sid(id)))
            .unwrap();
    assert!(!plan.is_blocked(), "{:?}", plan.report.blocked_reason);
    let candidate = String::from_utf8(plan.candidate.bytes()).unwrap();
    assert_kept(&candidate);
    let request = env.resume_written(&api, id, candidate.as_bytes(), "PROBE-ESCAPES");
    let body: serde_json::Value = serde_json::from_slice(&request.raw).unwrap();
    let mut sent = String::new();
    crate::support::fake_api::all_strings(&body, &mut sent);
    for written in WRITTEN {
        let text = decoded(written);
        assert!(sent.contains(&text), "{text:?} was sent: {sent}");
    }
}

#[test]
fn a_lone_surrogate_keeps_its_case_beside_kept_escapes() {
    let source = String::from_utf8(source())
        .unwrap()
        .replace("a last plain", r"\uD83D a last plain");
    let candidate = String::from_utf8(
        Plan::from_bytes(source.into_bytes())
            .config("stamp_turns = false")
            .show_candidate(),
    )
    .unwrap();
    assert!(
        candidate.contains(&format!(r#""\uD83D {}""#, WRITTEN[4])),
        "{candidate}"
    );
    assert_kept(&candidate);
}
