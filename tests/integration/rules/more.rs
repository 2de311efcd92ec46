//! More of SPEC §3–§8: roots, dangling links, fallbacks, timestamps, elision.

use std::fs;

use super::{NO_STAMPS, two_plain_turns};
use super::{assert_file_order_fallback, assert_summaries_dropped};
use crate::support::plan::*;

// ---------------------------------------------------------------------------
// More of SPEC §3–§8: roots, dangling links, fallbacks, timestamps, elision,
// sidechains, scheduled prompts, channels, ledger window
// ---------------------------------------------------------------------------

#[test]
fn a_later_null_parent_starts_a_new_root_and_abandons_what_precedes() {
    let r = Plan::new("new_root").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![user("Fresh start."), assistant("Fresh answer.")]
    );
    assert_eq!(r.count("abandoned_branch_records"), 2);
}

#[test]
fn a_dangling_link_that_hides_earlier_speech_falls_back_to_file_order() {
    let r = Plan::new("dangling_hides_speech")
        .config(NO_STAMPS)
        .run_json();
    assert_file_order_fallback(&r);
    assert_eq!(r.carried(), two_plain_turns());
}

#[test]
fn a_dangling_link_that_hides_nothing_is_a_root() {
    let r = Plan::new("dangling_hides_nothing")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(r.string("history_mode"), "chain");
    assert!(r["history_fallback_reason"].is_null());
    assert_eq!(r.carried().len(), 4);
}

#[test]
fn a_boundary_without_logical_parent_hiding_speech_falls_back_to_file_order() {
    let r = Plan::new("boundary_without_logical")
        .config(NO_STAMPS)
        .run_json();
    assert_file_order_fallback(&r);
    // The earlier turns are in the selection, so the summary is dropped.
    assert_eq!(
        r.carried(),
        vec![
            user("Before compaction: how does the cache work?"),
            assistant("Before compaction: it is an LRU."),
            user("After compaction: and eviction?"),
            assistant("After compaction: oldest first."),
        ]
    );
    assert_eq!(r.count("compact_summaries_dropped"), 1);
}

#[test]
fn repeated_uuids_fall_back_to_file_order() {
    let r = Plan::new("repeated_uuids").config(NO_STAMPS).run_json();
    assert_file_order_fallback(&r);
    assert_eq!(r.carried().len(), 4);
}

#[test]
fn a_parent_cycle_falls_back_to_file_order() {
    let r = Plan::new("uuid_cycle").config(NO_STAMPS).run_json();
    assert_file_order_fallback(&r);
    assert_eq!(r.carried(), two_plain_turns());
}

#[test]
fn history_file_mode_uses_file_order_even_with_a_fork() {
    let r = Plan::new("rewind_fork")
        .config(NO_STAMPS)
        .config("history = \"file\"")
        .run_json();
    assert_eq!(r.string("history_mode"), "file");
    assert_eq!(r.carried().len(), 6);
    assert_eq!(r.count("abandoned_branch_records"), 0);
}

#[test]
fn interrupt_markers_are_carried() {
    let r = Plan::new("interrupted_for_tool_use")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Delete the build folder."),
            assistant("Deleting it now."),
            user("[Request interrupted by user for tool use]"),
            user("Move it to the trash instead."),
            assistant("Moved to the trash."),
        ]
    );
}

fn long_answer() -> String {
    let body: String = (0..60)
        .map(|i| format!("sentence {i} of a very long reply. "))
        .collect();
    format!("BEGIN-OF-ANSWER {body} END-OF-ANSWER")
}

#[test]
fn max_event_chars_elides_the_middle_with_a_visible_marker() {
    let original = long_answer();
    assert!(original.chars().count() > 2000);
    let r = Plan::new("long_event")
        .config(NO_STAMPS)
        .config("max_event_chars = 500")
        .run_json();
    assert_eq!(r.count("elided_items"), 1);
    let carried = r.carried();
    assert_eq!(carried.len(), 4);
    let (role, text) = &carried[1];
    assert_eq!(role, "assistant");
    assert!(text.starts_with("BEGIN-OF-ANSWER sentence 0"), "{text}");
    assert!(text.ends_with("END-OF-ANSWER"), "{text}");
    assert!(text.chars().count() < original.chars().count(), "{text}");
    // What is left is the start and end of the original, plus the marker.
    assert!(
        text.chars().count() <= 700,
        "{} chars",
        text.chars().count()
    );
    assert!(!original.contains(text.as_str()));
    // Short items are untouched.
    assert_eq!(carried[3], assistant("Short reply."));
}

#[test]
fn without_max_event_chars_nothing_is_elided() {
    let r = Plan::new("long_event").config(NO_STAMPS).run_json();
    assert_eq!(r.count("elided_items"), 0);
    assert_eq!(r.carried()[1], assistant(&long_answer()));
}

#[test]
fn items_without_a_usable_timestamp_borrow_one() {
    // u1 has none (→ the file's earliest), u2 has garbage (→ the previous item's).
    let r = Plan::new("missing_timestamps").config(NO_STAMPS).run_json();
    let stamps: Vec<&str> = r
        .candidate()
        .iter()
        .map(|l| l["timestamp"].as_str().expect("every line has a timestamp"))
        .collect();
    assert_eq!(
        stamps,
        vec![
            "2026-03-01T10:00:02.000Z",
            "2026-03-01T10:00:02.000Z",
            "2026-03-01T10:00:02.000Z",
            "2026-03-01T10:00:04.000Z",
        ]
    );
    assert_eq!(r.carried().len(), 4);
}

#[test]
fn a_final_line_without_newline_is_a_complete_record() {
    let mut source = fixture_bytes("two_turns");
    assert_eq!(source.pop(), Some(b'\n'));
    let r = Plan::from_bytes(source).config(NO_STAMPS).run_json();
    assert_eq!(r.count("malformed_lines"), 0);
    assert_eq!(r.carried().len(), 4);
    assert_eq!(r["last_carried"]["text"], "Second answer.");
}

#[test]
fn a_cut_final_line_is_malformed() {
    let mut source = fixture_bytes("two_turns");
    source.extend_from_slice(b"{\"type\":\"user\",\"uuid\":\"u3\",\"message\":{\"role\":\"us");
    let r = Plan::from_bytes(source).config(NO_STAMPS).expect_blocked();
    assert_eq!(r.count("malformed_lines"), 1);
    assert_eq!(r["malformed_line_numbers"], serde_json::json!([5]));
}

#[test]
fn inline_sidechain_records_are_not_speech_and_not_abandoned() {
    let r = Plan::new("inline_sidechain").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Search the repo for TODOs."),
            assistant("Starting a sub-agent."),
            assistant("The sub-agent found three TODOs."),
            user("Fix them."),
            assistant("Fixed."),
        ]
    );
    assert_eq!(r.not_speech("sidechain_records"), 2);
    assert_eq!(r.count("abandoned_branch_records"), 0);
    assert_eq!(r.string("history_mode"), "chain");
}

#[test]
fn prompts_claude_code_scheduled_itself_and_peer_messages_are_not_speech() {
    let r = Plan::new("system_and_peer_prompts")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Start the nightly check."),
            assistant("Nightly check scheduled."),
            assistant("Nightly check done: all green."),
            user("Thanks, stop for today."),
            assistant("Stopped."),
        ]
    );
    assert_eq!(r.not_speech("system_prompts"), 1);
    assert_eq!(r.count("source_turns"), 2);
}

#[test]
fn old_channel_envelopes_and_replies_mixed_with_text_are_carried_in_block_order() {
    let r = Plan::new("channel_old_and_mixed_reply")
        .config(NO_STAMPS)
        .run_json();
    let carried = r.carried();
    assert_eq!(
        carried[0],
        user(
            "<channel source=\"telegram\" chat_id=\"77\" message_id=\"5\" user=\"bob\" ts=\"2025-10-01T08:00:00Z\">\nAre you there?\n</channel>"
        )
    );
    let assistant_text: Vec<&str> = carried[1..]
        .iter()
        .map(|(role, text)| {
            assert_eq!(role, "assistant");
            text.as_str()
        })
        .collect();
    let joined = assistant_text.join("\n\n");
    assert_eq!(joined, "Replying on Telegram.\n\nYes, I am here.");
    // A `…__reply` tool of a server that is not a channel is not speech.
    assert_eq!(r.occurrences("not a channel reply"), 0);
}

#[test]
fn the_ledger_measures_the_window_after_the_last_compaction() {
    let r = Plan::new("ledger_window").config(NO_STAMPS).run_json();
    let tool_result = r.ledger_category("tool_result");
    assert!(tool_result > 100, "ledger: {}", r["ledger"]);
    assert!(
        tool_result < 20_000,
        "the 20 kB result before the boundary is not in the window: {}",
        r["ledger"]
    );
    assert!(r.ledger_category("compact_summary") > 0, "{}", r["ledger"]);
}

/// Claude Code's per-start attachments: the newest of each kind is
/// overhead; an older `skill_listing` (sent again after a resume) is
/// residue; an older `prompt_snapshot` (a record of the system prompt,
/// never in the messages) is file-only.
#[test]
fn per_start_attachments_are_overhead_and_an_older_prompt_snapshot_is_file_only() {
    let attachment =
        |kind: &str, fill: usize| serde_json::json!({"type": kind, "content": "x".repeat(fill)});
    let record = |kind: &str, fill: usize, n: usize| {
        serde_json::json!({"type": "attachment", "uuid": format!("a{n}"),
            "attachment": attachment(kind, fill)})
        .to_string()
    };
    let mut lines = Vec::new();
    for (start, (listing, snapshot)) in [(1000, 3000), (1100, 9000)].into_iter().enumerate() {
        lines.push(record("skill_listing", listing, start * 10));
        lines.push(record("prompt_snapshot", snapshot, start * 10 + 1));
    }
    let source = format!(
        "{}\n{}\n{}\n",
        serde_json::json!({"type": "user", "uuid": "u1", "parentUuid": null,
            "message": {"role": "user", "content": "hello"}}),
        lines.join("\n"),
        serde_json::json!({"type": "assistant", "uuid": "r1", "parentUuid": "u1",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}}),
    );
    let r = Plan::from_bytes(source.into_bytes())
        .config(NO_STAMPS)
        .run_json();
    let ledger = &r["ledger"];
    // What is measured is the attachment object, not the whole line.
    let size = |kind: &str, fill: usize| attachment(kind, fill).to_string().len() as u64;
    assert_eq!(
        r.ledger_category("attachment"),
        size("skill_listing", 1000),
        "only the replaced skill_listing is residue: {ledger}"
    );
    assert_eq!(
        ledger["per_start_bytes"],
        size("skill_listing", 1100) + size("prompt_snapshot", 9000),
        "{ledger}"
    );
    assert_eq!(
        ledger["file_only_bytes"],
        size("prompt_snapshot", 3000),
        "{ledger}"
    );
}

#[test]
fn the_ledger_advises_a_rebuild_over_the_byte_budget() {
    let r = Plan::new("injected_mid_turn")
        .config(NO_STAMPS)
        .config("dirty_budget_bytes = 100")
        .run_json();
    let ledger = &r["ledger"];
    assert_eq!(ledger["dirty_budget_bytes"], 100);
    assert_eq!(ledger["should_rebuild"], true, "{ledger}");
    assert!(
        !ledger["reasons"].as_array().unwrap().is_empty(),
        "{ledger}"
    );

    let r = Plan::new("injected_mid_turn")
        .config(NO_STAMPS)
        .config("dirty_budget_bytes = 0")
        .run_json();
    let ledger = &r["ledger"];
    assert_eq!(ledger["should_rebuild"], false, "{ledger}");
}

#[test]
fn the_poison_pattern_is_case_insensitive() {
    let r = Plan::new("poison_lowercase")
        .config(NO_STAMPS)
        .expect_blocked();
    assert_eq!(r.count("poison_hits"), 2);
}

#[test]
fn a_transcript_without_speech_is_blocked() {
    let r = Plan::from_bytes(Vec::new())
        .config(NO_STAMPS)
        .expect_blocked();
    assert_eq!(r.count("source_turns"), 0);
}

#[test]
fn a_missing_or_non_jsonl_transcript_is_refused() {
    let plan = Plan::new("two_turns");
    let (sandbox, _) = plan.prepare();
    let text = sandbox.project.join("notes.txt");
    fs::write(&text, fixture_bytes("two_turns")).unwrap();
    for path in [sandbox.project.join("no-such-session.jsonl"), text] {
        let outcome = sandbox.run("plan", Some(&path), &["--json"]);
        outcome.assert_refused();
    }
}

#[test]
fn a_system_sourced_prompt_is_not_speech_even_without_is_meta() {
    // SPEC §5: prompts Claude Code scheduled itself (isMeta, promptSource:
    // "system") are not speech and are counted.
    let r = Plan::new("system_prompt_not_meta")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Start the nightly check."),
            assistant("Nightly check scheduled."),
            assistant("Nightly check done: all green."),
        ]
    );
    assert_eq!(r.not_speech("system_prompts"), 1);
}

#[test]
fn typed_and_spoken_text_is_carried_verbatim_with_its_whitespace() {
    let r = Plan::new("verbatim_whitespace")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("  indented first line\n    code()\n"),
            // the whitespace-only block is not speech; the other is verbatim
            assistant("\n\nAnswer after two newlines.\n"),
        ]
    );
}

#[test]
fn two_compactions_are_crossed_and_both_summaries_dropped() {
    let r = Plan::new("compaction_twice").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Question before the first compaction."),
            assistant("Answer before the first compaction."),
            user("Question between the compactions."),
            assistant("Answer between the compactions."),
            user("Question after the second compaction."),
            assistant("Answer after the second compaction."),
        ]
    );
    assert_summaries_dropped(&r, 2);
}

#[test]
fn the_plan_names_each_compaction_it_undoes_and_the_turns_it_restores() {
    let r = Plan::new("compaction_twice").config(NO_STAMPS).run_json();
    assert_eq!(
        r["compactions_undone"],
        serde_json::json!([
            {"summary_line": 4, "summary_uuid": "s1", "turns_before": 1, "turns_restored": 1},
            {"summary_line": 8, "summary_uuid": "s2", "turns_before": 2, "turns_restored": 2},
        ])
    );
    // No compaction crossed: none named.
    let r = Plan::new("compaction_unreachable")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(r["compactions_undone"], serde_json::json!([]));
}
