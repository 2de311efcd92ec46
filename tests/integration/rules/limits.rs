//! Size (token estimate and cap), blocks (poison, malformed lines), robustness.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;

use super::{NO_STAMPS, two_plain_turns};
use crate::support::plan::*;

// ---------------------------------------------------------------------------
// Size: token estimate and cap
// ---------------------------------------------------------------------------

#[test]
fn token_estimate_counts_cjk_and_other_code_points_per_item() {
    // 你好，世界 = 5 CJK → 5.5 → 5; "Hello there, friend!" = 20 → 13.33 → 13;
    // こんにちは abc = 5 CJK + 4 other → 5.5 + 2.67 → 8; "OK" → 1.33 → 1.
    let r = Plan::new("token_estimate").config(NO_STAMPS).run_json();
    assert_eq!(r.count("estimated_tokens"), 27);
}

#[test]
fn token_cap_drop_oldest_removes_whole_oldest_turns() {
    // Four turns of 2010 estimated tokens each (8040); a cap of 5000 leaves two.
    let r = Plan::new("token_cap")
        .config(NO_STAMPS)
        .config("carry_max_tokens = 5000")
        .config("carry_overflow = \"drop_oldest\"")
        .run_json();
    assert_eq!(r.count("source_turns"), 4);
    assert_eq!(r.count("dropped_oldest_turns"), 2);
    assert_eq!(r.count("selected_turns"), 2);
    let carried = r.carried();
    assert_eq!(carried.len(), 4, "{carried:?}");
    assert_eq!(carried[0], user("Turn 3 question."));
    assert!(carried[1].1.starts_with("Answer 3: "));
    assert_eq!(carried[2], user("Turn 4 question."));
    assert!(carried[3].1.starts_with("Answer 4: "));
    assert!(r.count("estimated_tokens") <= 5000);
}

#[test]
fn token_cap_never_drops_the_last_turn() {
    // The last turn alone (≈6000 tokens) is over the cap: it stays.
    let r = Plan::new("token_cap_big_tail")
        .config(NO_STAMPS)
        .config("carry_max_tokens = 5000")
        .run_json();
    assert_eq!(r.count("dropped_oldest_turns"), 2);
    let carried = r.carried();
    assert_eq!(carried.len(), 2, "{carried:?}");
    assert_eq!(carried[0], user("Tell me everything."));
    assert!(carried[1].1.starts_with("Everything: "));
    assert_eq!(carried[1].1.chars().count(), 9000);
}

#[test]
fn token_cap_block_refuses_and_reports_the_overflow() {
    let r = Plan::new("token_cap")
        .config(NO_STAMPS)
        .config("carry_max_tokens = 5000")
        .config("carry_overflow = \"block\"")
        .expect_blocked();
    let reason = r.blocked_reason().to_lowercase();
    assert!(
        reason.contains("carry_max_tokens")
            || reason.contains("overflow")
            || reason.contains("5000"),
        "reason: {reason}"
    );
    assert_eq!(r.count("dropped_oldest_turns"), 0);
}

// ---------------------------------------------------------------------------
// Blocks: poison, malformed lines
// ---------------------------------------------------------------------------

#[test]
fn two_poison_hits_in_the_last_ten_turns_block() {
    let r = Plan::new("poison_recent")
        .config(NO_STAMPS)
        .expect_blocked();
    let reason = r.blocked_reason();
    assert!(reason.contains("poisoned"), "reason: {reason}");
    assert_eq!(r.count("poison_hits"), 2);
}

#[test]
fn the_poison_pattern_is_configurable() {
    let r = Plan::new("poison_recent")
        .config(NO_STAMPS)
        .config("poison_pattern = 'zzz-never-matches-zzz'")
        .run_json();
    assert_eq!(r.count("poison_hits"), 0);
    assert_eq!(r.count("source_turns"), 5);
}

#[test]
fn poison_hits_older_than_ten_turns_do_not_block() {
    let r = Plan::new("poison_old").config(NO_STAMPS).run_json();
    assert_eq!(r.count("source_turns"), 12);
    assert_eq!(r.count("selected_turns"), 12);
}

/// The numbers that appear in a message, as a set.
fn numbers_in(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

#[test]
fn malformed_lines_block_by_default_naming_lines_and_key() {
    let r = Plan::new("malformed_lines")
        .config(NO_STAMPS)
        .expect_blocked();
    assert_eq!(r.count("malformed_lines"), 3);
    assert_eq!(r["malformed_line_numbers"], serde_json::json!([3, 7, 8]));
    let reason = r.blocked_reason();
    assert!(reason.contains("on_malformed_line"), "reason: {reason}");
    let numbers = numbers_in(&reason);
    for n in [3, 7, 8] {
        assert!(
            numbers.contains(&n),
            "reason does not name line {n}: {reason}"
        );
    }
}

#[test]
fn malformed_lines_are_skipped_with_on_malformed_line_skip() {
    let r = Plan::new("malformed_lines")
        .config(NO_STAMPS)
        .config("on_malformed_line = \"skip\"")
        .run_json();
    assert_eq!(r.count("malformed_lines"), 3);
    assert_eq!(r.carried(), two_plain_turns());
}

// ---------------------------------------------------------------------------
// Robustness: odd shapes, invalid UTF-8, a 50 MB line, unknown types
// ---------------------------------------------------------------------------

#[test]
fn null_string_and_missing_messages_neither_panic_nor_lose_the_rest() {
    let r = Plan::new("odd_messages").config(NO_STAMPS).run_json();
    // Whether a bare string `message` counts as speech is not specified; every
    // other odd record carries nothing, and the real turns are all there.
    let carried: Vec<Item> = r
        .carried()
        .into_iter()
        .filter(|(_, t)| t != "a bare string message")
        .collect();
    assert_eq!(
        carried,
        vec![
            user("Real question one."),
            assistant("Real answer one."),
            user("Real question two."),
            assistant("Real answer two."),
        ]
    );
}

#[track_caller]
fn invalid_utf8_source() -> Vec<u8> {
    let base = fixture_bytes("invalid_utf8");
    let marker = b"@@BAD@@";
    let at = base
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("marker in fixture");
    let mut out = base[..at].to_vec();
    out.extend_from_slice(b"caf\xe9 \xff\xfe broken");
    out.extend_from_slice(&base[at + marker.len()..]);
    assert!(std::str::from_utf8(&out).is_err());
    out
}

#[test]
fn invalid_utf8_in_a_line_is_malformed_and_blocks_by_default() {
    let r = Plan::from_bytes(invalid_utf8_source())
        .config(NO_STAMPS)
        .expect_blocked();
    assert_eq!(r.count("malformed_lines"), 1);
    assert_eq!(r["malformed_line_numbers"], serde_json::json!([3]));
}

#[test]
fn invalid_utf8_in_a_line_loses_nothing_else_when_skipped() {
    let r = Plan::from_bytes(invalid_utf8_source())
        .config(NO_STAMPS)
        .config("on_malformed_line = \"skip\"")
        .run_json();
    assert_eq!(r.count("malformed_lines"), 1);
    assert_eq!(r.carried(), two_plain_turns());
}

#[test]
#[ignore = "slow: plans a 50 MB line (~12 s)"]
fn a_50_mb_single_line_neither_panics_nor_loses_the_rest() {
    const BIG: usize = 50 * 1024 * 1024;
    let base = fixture_bytes("huge_line");
    let marker = b"@@BIG@@";
    let at = base
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("marker in fixture");
    // Generated at test time, never committed.
    let plan = Plan::from_bytes(Vec::new()).config(NO_STAMPS);
    let (sandbox, path) = plan.prepare();
    {
        let mut file = fs::File::create(&path).expect("create big transcript");
        file.write_all(&base[..at]).unwrap();
        let chunk = "0123456789abcdef".repeat(4096);
        let mut written = 0;
        while written < BIG {
            file.write_all(chunk.as_bytes()).unwrap();
            written += chunk.len();
        }
        file.write_all(&base[at + marker.len()..]).unwrap();
        file.sync_all().unwrap();
    }
    assert!(fs::metadata(&path).unwrap().len() > BIG as u64);
    let outcome = sandbox.run("plan", Some(&path), &["--json", "--show-candidate"]);
    outcome.assert_exit(0);
    let r = outcome.json();
    assert_eq!(
        r.carried(),
        vec![
            user("Please read the big dump."),
            assistant("Reading the big dump."),
            assistant("The dump is huge but fine."),
            user("Thanks, that's all."),
            assistant("Bye."),
        ]
    );
    assert_eq!(r.count("malformed_lines"), 0);
    assert!(r.count("source_bytes") > BIG as u64);
    assert!(
        r.ledger_category("tool_result") >= BIG as u64,
        "ledger: {}",
        r["ledger"]
    );
}

#[test]
fn unknown_record_and_attachment_types_are_counted_by_name() {
    let r = Plan::new("unknown_types").config(NO_STAMPS).run_json();
    assert_eq!(r.carried(), two_plain_turns());
    let expected: BTreeMap<String, u64> = [
        ("frobnicate".to_string(), 2),
        ("mystery-record".to_string(), 1),
    ]
    .into();
    assert_eq!(r.name_counts("unknown_record_types"), expected);
    let expected: BTreeMap<String, u64> = [("quantum_hint".to_string(), 1)].into();
    assert_eq!(r.name_counts("unknown_attachment_types"), expected);
}
