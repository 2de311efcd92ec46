//! The startup snapshot, stamps, rebuilding a rebuilt session.

use ktr_base::digest::sha256_hex;

use super::{NO_STAMPS, ts};
use crate::support::plan::*;

// ---------------------------------------------------------------------------
// Startup snapshot, stamps, rebuilding a rebuilt session
// ---------------------------------------------------------------------------

const STARTUP: &str = "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\nAlways answer in English.\n# memory\n- alice prefers short answers\n</system-reminder>\n";
const STARTUP_TS: &str = "2026-03-01T09:00:00.000Z";

fn startup_item(raw: &str) -> Item {
    user(&format!("[续窗启动快照 · 冻结于 {STARTUP_TS}]\n{raw}"))
}

#[test]
fn startup_snapshot_is_frozen_with_its_digest_and_carried_once() {
    let r = Plan::new("startup_snapshot").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            startup_item(STARTUP),
            user("Let's start with the parser."),
            assistant("Sure, the parser first."),
            // a later reminder is an ordinary injection, not a second snapshot
            user("Next the lexer."),
            assistant("Lexer next."),
        ]
    );
    assert!(r.flag("startup_frozen"));
    assert_eq!(r.string("startup_sha256"), sha256_hex(STARTUP.as_bytes()));
    assert_eq!(r.occurrences("alice prefers short answers"), 1);
    assert_eq!(r.occurrences(STARTUP_HEADER_PREFIX), 1);
}

const STARTUP_WITH_WORDS: &str = "<system-reminder>\n# claudeMd\nReply in English.\n</system-reminder>\nHello, let's begin with the backlog.";

#[test]
fn startup_snapshot_with_typed_words_carries_the_words_once_and_opens_the_first_turn() {
    let r = Plan::new("startup_with_words").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            startup_item(STARTUP_WITH_WORDS),
            assistant("Hi! The backlog has three items."),
            user("Take the first one."),
            assistant("Done with the first one."),
        ]
    );
    assert!(r.flag("startup_frozen"));
    assert_eq!(
        r.string("startup_sha256"),
        sha256_hex(STARTUP_WITH_WORDS.as_bytes())
    );
    assert_eq!(r.occurrences("Hello, let's begin with the backlog."), 1);
    assert_eq!(r.count("source_turns"), 2);
    assert_eq!(r.count("leading_assistant_turns"), 0);
}

#[test]
fn without_freeze_the_startup_reminder_is_stripped_like_any_injection() {
    let r = Plan::new("startup_with_words")
        .config(NO_STAMPS)
        .config("freeze_startup_snapshot = false")
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Hello, let's begin with the backlog."),
            assistant("Hi! The backlog has three items."),
            user("Take the first one."),
            assistant("Done with the first one."),
        ]
    );
    assert!(!r.flag("startup_frozen"));
    assert!(r["startup_sha256"].is_null());
}

#[test]
fn stamps_prefix_the_first_user_item_of_each_turn() {
    let r = Plan::new("consecutive_user_messages").run_json();
    let stamped = |n: u32, text: &str| user(&format!("[发生时间: {}]\n{text}", ts(n)));
    assert_eq!(
        r.carried(),
        vec![
            stamped(1, "First half of my question."),
            // the second user record of the same turn is not stamped
            user("Second half, sent right after."),
            assistant("One answer for both halves."),
            stamped(4, "Next topic."),
            assistant("Next answer."),
        ]
    );
    for (role, text) in r.carried() {
        if text.starts_with(STAMP_PREFIX) {
            assert_eq!(role, "user");
            assert!(text.contains("2026-03-01T10:00:0"), "{text}");
        }
    }
}

#[test]
fn rebuilding_a_rebuilt_session_stacks_no_second_header_or_stamp() {
    // First rebuild with the default config (stamps and startup header on).
    let first_jsonl = Plan::new("startup_with_words").show_candidate();
    let first: Vec<Item> = parse_jsonl(&String::from_utf8_lossy(&first_jsonl))
        .iter()
        .map(line_item)
        .collect();
    assert!(first[0].1.starts_with(STARTUP_HEADER_PREFIX), "{first:?}");
    assert!(first[2].1.starts_with(STAMP_PREFIX), "{first:?}");

    // Feed the candidate back as the source: the same texts come out.
    let second = Plan::from_bytes(first_jsonl).run_json();
    assert_eq!(second.carried(), first);
    assert_eq!(second.occurrences(STARTUP_HEADER_PREFIX), 1);
    assert_eq!(second.occurrences(STAMP_PREFIX), 1);
}

#[test]
fn rebuilding_a_rebuilt_startup_snapshot_keeps_its_trailing_reminder() {
    // The frozen snapshot ends with `</system-reminder>\n`: an item that starts
    // with the header is carried as it is, not stripped a second time.
    let first_jsonl = Plan::new("startup_snapshot").show_candidate();
    let first: Vec<Item> = parse_jsonl(&String::from_utf8_lossy(&first_jsonl))
        .iter()
        .map(line_item)
        .collect();
    assert_eq!(first[0], startup_item(STARTUP));
    let second = Plan::from_bytes(first_jsonl).run_json();
    assert_eq!(second.carried(), first);
    // Still the startup snapshot, with the digest of the same raw text.
    assert!(second.flag("startup_frozen"));
    assert_eq!(
        second.string("startup_sha256"),
        sha256_hex(STARTUP.as_bytes())
    );
}
