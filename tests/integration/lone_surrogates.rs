//! Lone surrogates and escaped NULs: `\ud83d` alone is
//! what JavaScript writes for half an emoji, and Claude Code loads it, so
//! ktr reads such a line, carries the text as it was written and counts it
//! in the plan report. (Before, the line was "not valid JSON": the rebuild
//! was blocked, or with `on_malformed_line = "skip"` the words were lost.)

use std::ffi::OsString;
use std::fs;

use crate::support::claude::ClaudeEnv;
use crate::support::fake_api::FakeApi;
use crate::support::plan::{Plan, Report, fixture_bytes};
use crate::support::sid;
use crate::support::{Sandbox, claude_bin};

const FIXTURE: &str = "lone_surrogates";

/// The source session of the chain test.
const SESSION: &str = "5e55a9e0-0000-4000-8000-00000000bbbb";

/// The fixture's carried texts as JSON strings, escapes as the candidate
/// must write them: lone surrogates leading and trailing, in user and
/// assistant text, a NUL. (A valid pair stays the escaped pair the source
/// wrote: the candidate keeps the source's escaping, `escapes.rs`.)
const CARRIED: &[&str] = &[
    r#""\ud83d leading: a split emoji starts this message""#,
    r#""trailing: the answer ends with half an emoji \ud83d""#,
    r#""a NUL \u0000 in the middle, a pair \ud83d\ude00, an escaped backslash \\ud83d, and a lone low one at the end \ude00""#,
    r#""\ude00\ud83d reversed halves, both lone""#,
    r#""plain words to close""#,
    r#""Closed.""#,
];

#[track_caller]
fn assert_carries_every_text(candidate: &str) {
    for text in CARRIED {
        assert_eq!(
            candidate.matches(text).count(),
            1,
            "{text} is carried once as written in:\n{candidate}"
        );
    }
}

/// `ktr plan --json` of `plan`'s source, which must exit with `code`
/// (the report only: the harness reads it as a `Value`, which cannot hold a
/// lone surrogate).
#[track_caller]
fn report(plan: &Plan, code: i32) -> Report {
    let (sandbox, transcript) = plan.prepare();
    let args: Vec<OsString> = vec![
        "plan".into(),
        "--json".into(),
        "--config".into(),
        sandbox.config.clone().into(),
        "--transcript".into(),
        transcript.into(),
    ];
    let outcome = sandbox.ktr(&args);
    outcome.assert_exit(code);
    outcome.json()
}

#[test]
fn lone_surrogates_and_nuls_are_carried_as_written_and_counted() {
    let plan = Plan::new(FIXTURE).config("stamp_turns = false");
    let candidate = String::from_utf8(plan.show_candidate()).unwrap();
    assert_carries_every_text(&candidate);
    let r = report(&plan, 0);
    assert_eq!(r.count("malformed_lines"), 0, "the tool result's line too");
    assert_eq!(r.count("carried_items"), 6);
    assert_eq!(r.count("lone_surrogate_texts"), 4);
    assert_eq!(r.count("nul_texts"), 1);
}

#[test]
fn stamped_texts_keep_their_lone_surrogates() {
    let candidate = String::from_utf8(Plan::new(FIXTURE).show_candidate()).unwrap();
    // The stamp goes before the text; the text itself is unchanged.
    assert!(
        candidate.contains(r#"\n\ud83d leading: a split emoji starts this message""#),
        "{candidate}"
    );
    assert!(candidate.contains(CARRIED[1]), "{candidate}");
}

#[test]
fn a_file_with_a_real_stand_in_character_beside_a_lone_surrogate_is_blocked() {
    let mut source = fixture_bytes(FIXTURE);
    // U+10F83D, raw, in the last user text.
    let at = source.windows(5).position(|w| w == b"plain").unwrap();
    source.splice(at..at, "\u{10F83D}".bytes());
    let r = report(&Plan::from_bytes(source), 1);
    assert!(
        r.blocked_reason().contains("U+10F800"),
        "{}",
        r.blocked_reason()
    );
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_real_cli_resumes_a_candidate_with_lone_surrogates() {
    let api = FakeApi::start(Vec::new());
    let env = ClaudeEnv::new(&claude_bin(), &api);
    let config = env.config("");
    let id = "5e55a9e0-0000-4000-8000-00000000eeee";
    let source = env.sandbox.project.join("source.jsonl");
    let plan = ktr_engine::plan::build_from_bytes(
        &config,
        &source,
        &fixture_bytes(FIXTURE),
        Some(&sid(id)),
    )
    .unwrap();
    assert!(!plan.is_blocked(), "{:?}", plan.report.blocked_reason);
    let request = env.resume_written(&api, id, &plan.candidate.bytes(), "PROBE-LONE");
    // Claude Code loads them and sends each lone surrogate as U+FFFD (its
    // request body is UTF-8), the NUL escaped: as it does for the source.
    for sent in [
        "\u{FFFD} leading: a split emoji starts this message",
        "trailing: the answer ends with half an emoji \u{FFFD}",
        r"a NUL \u0000 in the middle, a pair 😀, an escaped backslash \\ud83d, and a lone low one at the end ",
        "\u{FFFD}\u{FFFD} reversed halves, both lone",
    ] {
        assert!(
            request
                .raw
                .windows(sent.len())
                .any(|w| w == sent.as_bytes()),
            "{sent:?} was sent: {}",
            String::from_utf8_lossy(&request.raw)
        );
    }
}

#[test]
fn the_chain_verifies_and_switches_to_a_candidate_with_lone_surrogates() {
    let sandbox = Sandbox::new();
    let pointer = sandbox.write_pointer_config(SESSION, "");
    let source = fixture_bytes(FIXTURE);
    let path = sandbox.add_transcript(SESSION, &source);
    let candidate = sandbox.rebuild_by_hand(&path, &pointer, SESSION);
    for text in CARRIED {
        // After a stamp line or not: the text's end as written.
        let text = text.strip_prefix('"').unwrap();
        assert!(candidate.contains(text), "{text} in:\n{candidate}");
    }
    assert_eq!(fs::read(&path).unwrap(), source, "the source is untouched");
}
