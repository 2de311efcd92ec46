//! One hand-written fixture and one test per selection rule (SPEC §3–§8, §14),
//! driven through `ktr plan --json --show-candidate`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use ktr_base::digest::sha256_hex;

use crate::support::plan::*;
use crate::support::{Sandbox, tree};
use serde_json::Value;

const NO_STAMPS: &str = "stamp_turns = false";

/// The four items of the plain two-turn conversation most fixtures share.
fn two_plain_turns() -> Vec<Item> {
    vec![
        user("First question."),
        assistant("First answer."),
        user("Second question."),
        assistant("Second answer."),
    ]
}

/// The source record timestamp of the n-th (1-based) record written by the
/// fixture generator: `2026-03-01T10:00:0n.000Z`.
fn ts(n: u32) -> String {
    format!("2026-03-01T10:{:02}:{:02}.000Z", n / 60, n % 60)
}

// ---------------------------------------------------------------------------
// Turns
// ---------------------------------------------------------------------------

#[test]
fn consecutive_user_messages_stay_one_turn() {
    let r = Plan::new("consecutive_user_messages")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("First half of my question."),
            user("Second half, sent right after."),
            assistant("One answer for both halves."),
            user("Next topic."),
            assistant("Next answer."),
        ]
    );
    assert_eq!(r.count("source_turns"), 2);
    assert_eq!(r.count("selected_turns"), 2);
    assert!(!r.flag("open_tail"));
    assert_eq!(r["first_carried"]["role"], "user");
    assert_eq!(r["first_carried"]["text"], "First half of my question.");
    assert_eq!(r["last_carried"]["role"], "assistant");
    assert_eq!(r["last_carried"]["text"], "Next answer.");
}

#[test]
fn open_tail_is_kept_by_default() {
    let r = Plan::new("open_tail").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Question one."),
            assistant("Answer one."),
            user("Question two, still waiting."),
        ]
    );
    assert!(r.flag("open_tail"));
    assert!(r.flag("open_tail_kept"));
    assert_eq!(r.count("source_turns"), 2);
    assert_eq!(r.count("selected_turns"), 2);
}

#[test]
fn open_tail_is_dropped_when_include_open_tail_is_false() {
    let r = Plan::new("open_tail")
        .config(NO_STAMPS)
        .config("include_open_tail = false")
        .run_json();
    assert_eq!(
        r.carried(),
        vec![user("Question one."), assistant("Answer one.")]
    );
    assert!(r.flag("open_tail"));
    assert!(!r.flag("open_tail_kept"));
    assert_eq!(r.count("source_turns"), 2);
    assert_eq!(r.count("selected_turns"), 1);
}

#[test]
fn injected_items_mid_turn_do_not_split_the_turn() {
    // tool_use, tool_result, a hook attachment and two user records that hold
    // nothing but <system-reminder> sit between the two assistant texts.
    let r = Plan::new("injected_mid_turn").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Please refactor the parser."),
            assistant("Looking at the parser first."),
            assistant("Refactor done: parse() is now split in two."),
            user("Great, thanks."),
            assistant("You're welcome."),
        ]
    );
    assert_eq!(r.count("source_turns"), 2);
    assert_eq!(r.count("selected_turns"), 2);
}

#[test]
fn leading_assistant_speech_is_its_own_turn() {
    let r = Plan::new("leading_assistant").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            assistant("Welcome back! Here is where we left off."),
            user("Thanks, continue."),
            assistant("Continuing."),
        ]
    );
    assert_eq!(r.count("leading_assistant_turns"), 1);
}

// ---------------------------------------------------------------------------
// Injected blocks vs. speech
// ---------------------------------------------------------------------------

#[test]
fn injected_blocks_at_the_edges_are_removed_and_the_words_kept() {
    let r = Plan::new("reminder_prefix").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Hi."),
            assistant("Hello."),
            // a prompt that begins with <system-reminder>
            user("What does parse() return?"),
            assistant("It returns a Result."),
            // a reminder appended at the end
            user("Check the logs please."),
            assistant("The logs are clean."),
            // several injected elements in a row, separated by whitespace
            user("Why is this slow?"),
            assistant("Because of the nested loop."),
            // a whole injected text block next to a typed one
            user("And the second block is my question."),
            assistant("Answered."),
        ]
    );
    assert_eq!(r.count("source_turns"), 5);
}

#[test]
fn a_tag_mentioned_in_prose_is_kept_verbatim() {
    let r = Plan::new("tag_in_prose").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Can you explain the `<system-reminder>` tag and when Claude Code adds it?"),
            assistant("It wraps context that Claude Code injects."),
            user("Quote:<ide_selection>let x = 1;</ide_selection> why is x immutable here?"),
            assistant("Bindings are immutable by default."),
            user("Quote:<ide_selection>fn main() {"),
            assistant("That snippet is cut off."),
        ]
    );
    // Mentioning the tag does not make the first prompt a startup snapshot.
    assert!(!r.flag("startup_frozen"));
    assert!(r["startup_sha256"].is_null());
}

#[test]
fn several_text_blocks_of_one_record_form_one_item() {
    let r = Plan::new("multi_block_join").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Part one of my message.\n\nPart two, after the screenshot."),
            assistant("First paragraph of the answer.\n\nSecond paragraph of the answer."),
        ]
    );
}

#[test]
fn bash_input_memory_input_and_pasted_content_are_the_users_words() {
    let r = Plan::new("own_words").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("<bash-input>git status</bash-input>"),
            user("Why is the tree clean?"),
            assistant("Because everything is committed."),
            user("<user-memory-input>always use tabs</user-memory-input>"),
            user("What does this mean? <pasted_content>ERROR disk full on /var</pasted_content>"),
            assistant("The disk is full."),
        ]
    );
}

// ---------------------------------------------------------------------------
// Channels, queued input, slash commands, rejections, synthetic replies
// ---------------------------------------------------------------------------

const CH1: &str = "<channel source=\"plugin:telegram:telegram\" chat_id=\"4242\" message_id=\"101\" user=\"alice\" ts=\"2026-03-01T08:00:00Z\">\n早上好！今天先做什么？\n</channel>";
const CH2: &str = "<channel source=\"plugin:telegram:telegram\" chat_id=\"4242\" message_id=\"102\" user=\"alice\" ts=\"2026-03-01T08:05:00Z\">\nPlease also check the disk usage.\n</channel>";
const CH3: &str = "<channel source=\"plugin:telegram:telegram\" chat_id=\"4242\" message_id=\"103\" user=\"alice\" ts=\"2026-03-01T08:06:00Z\">\nand the inode usage too\n</channel>";

#[test]
fn channel_messages_queued_commands_and_reply_tools_are_carried() {
    let r = Plan::new("channel_messages").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user(CH1),
            assistant("早上好！先整理日志，然后修复告警。"),
            user(CH2),
            assistant("Checking the disk now."),
            user(CH3),
            user("Restart the worker when you are done."),
            assistant("Disk 41% used, inodes 12%; worker restarted."),
        ]
    );
    assert_eq!(r.count("source_turns"), 3);
    // The enqueue records of the queue log are never used.
    assert_eq!(r.occurrences("and the inode usage too"), 1);
    assert_eq!(r.occurrences("Restart the worker"), 1);
    // A queued task notification is not speech.
    assert_eq!(r.occurrences("bg7"), 0);
}

#[test]
fn queue_operation_records_never_duplicate_a_sentence() {
    let r = Plan::new("queue_operation_once")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Run the linter."),
            assistant("Running it."),
            user("Also fix the warnings you find."),
            assistant("Linter clean; warnings fixed."),
            user("One more thing: commit it."),
            assistant("Committed."),
        ]
    );
    assert_eq!(r.occurrences("Run the linter."), 1);
    assert_eq!(r.occurrences("Also fix the warnings you find."), 1);
    assert_eq!(r.occurrences("One more thing: commit it."), 1);
}

#[test]
fn a_queued_slash_command_is_not_speech() {
    let r = Plan::new("queued_slash_command")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Hi."),
            assistant("Hello."),
            user("/review-notes 重点看中文部分"),
            assistant("Reviewing the notes as requested."),
            user("Thanks."),
            assistant("You're welcome."),
        ]
    );
    assert_eq!(r.occurrences("/cost"), 0);
    assert_eq!(r.occurrences("Total cost"), 0);
    // Neither the queue log nor the skill body repeats the arguments.
    assert_eq!(r.occurrences("重点看中文部分"), 1);
    assert_eq!(r.occurrences("REVIEW-NOTES"), 0);
}

fn long_plan_args() -> String {
    let mut s: String = (0..200)
        .map(|i| format!("step {i}: migrate table t{i}; "))
        .collect();
    s.push_str("END");
    s
}

#[test]
fn slash_commands_answered_by_the_assistant_are_carried_as_name_and_args() {
    let long = long_plan_args();
    assert!(long.len() > 4000);
    let r = Plan::new("slash_commands").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Hello."),
            assistant("Hi, what shall we do?"),
            user(&format!("/plan {long}")),
            assistant("Here is the plan."),
            user("/review"),
            assistant("Review: looks good."),
            user("Thanks!"),
            assistant("Anytime."),
        ]
    );
    // /cost and /model only produced local output.
    assert_eq!(r.occurrences("/cost"), 0);
    assert_eq!(r.occurrences("/model"), 0);
    assert_eq!(r.occurrences("<local-command-stdout>"), 0);
    assert_eq!(r.occurrences("<command-name>"), 0);
    // The skill body (isMeta) repeating the arguments is not carried.
    assert_eq!(r.occurrences("Plan skill"), 0);
    assert!(
        r.not_speech("local_commands") >= 2,
        "not_speech: {}",
        r["not_speech"]
    );
}

#[test]
fn words_typed_when_rejecting_a_tool_call_are_carried() {
    let r = Plan::new("tool_rejection").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Please update the config."),
            assistant("I'll edit config.toml."),
            user("use yaml instead, not toml"),
            assistant("Understood, switching to YAML."),
            user("Stop for now."),
            assistant("Stopped."),
        ]
    );
    assert_eq!(r.occurrences("doesn't want to"), 0);
    assert_eq!(r.count("source_turns"), 3);
}

#[test]
fn synthetic_assistant_records_are_not_speech() {
    let r = Plan::new("synthetic_assistant")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Trigger an error for testing."),
            user("OK, try again."),
            assistant("Worked this time."),
            user("Write a long essay."),
            assistant("Here is the start of a long essay."),
            user("[Request interrupted by user]"),
            user("Never mind, let's move on."),
            assistant("Moving on."),
        ]
    );
    assert_eq!(r.occurrences("API Error"), 0);
    assert_eq!(r.occurrences("No response requested."), 0);
    assert_eq!(r.count("source_turns"), 3);
    assert_eq!(r.not_speech("synthetic_assistant"), 2);
}

#[test]
fn teammate_messages_and_task_notifications_are_not_speech_and_are_counted() {
    let r = Plan::new("teammates_and_notifications")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Spin up the team."),
            assistant("Team started."),
            assistant("Bob finished the relay and the build passed."),
            user("Great, wrap up."),
            assistant("Wrapped up."),
        ]
    );
    assert_eq!(r.count("source_turns"), 2);
    assert_eq!(r.not_speech("teammate_messages"), 1);
    assert_eq!(r.not_speech("task_notifications"), 1);
}

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

// ---------------------------------------------------------------------------
// Which conversation: compaction, forks, chain order, fallback
// ---------------------------------------------------------------------------

const SUMMARY: &str = "This session is being continued from a previous conversation that ran out of context. The summary below covers the earlier portion of the conversation.\n\n<system-reminder>\n<tools-used-before-summary>Bash</tools-used-before-summary>\n</system-reminder>\nSummary:\n1. The user asked about the cache and got an answer.";

#[test]
fn compaction_summary_is_dropped_when_the_earlier_turns_are_reached() {
    let r = Plan::new("compaction_reachable")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Before compaction: how does the cache work?"),
            assistant("Before compaction: it is an LRU."),
            user("After compaction: and eviction?"),
            assistant("After compaction: oldest first."),
        ]
    );
    assert_eq!(r.string("history_mode"), "chain");
    assert_eq!(r.count("compact_summaries_dropped"), 1);
    assert_eq!(r.count("compact_summaries_carried"), 0);
}

#[test]
fn compaction_summary_is_carried_when_the_earlier_turns_are_not_in_the_file() {
    let r = Plan::new("compaction_unreachable")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user(SUMMARY),
            user("After compaction: and eviction?"),
            assistant("After compaction: oldest first."),
        ]
    );
    assert_eq!(r.count("compact_summaries_dropped"), 0);
    assert_eq!(r.count("compact_summaries_carried"), 1);
    // A summary is never a startup snapshot.
    assert!(!r.flag("startup_frozen"));
    // The dangling logicalParentUuid hides nothing: still chain mode.
    assert_eq!(r.string("history_mode"), "chain");
}

#[test]
fn a_blank_compaction_summary_is_dropped_not_carried_as_an_empty_turn() {
    // Found by `properties::candidate_invariants_hold`: a whitespace-only
    // summary before any speech was carried as an empty user item.
    let r = Plan::new("compaction_blank_summary")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("After compaction: and eviction?"),
            assistant("After compaction: oldest first."),
        ]
    );
    assert_eq!(r.count("compact_summaries_dropped"), 1);
    assert_eq!(r.count("compact_summaries_carried"), 0);
}

#[test]
fn a_rewind_fork_carries_only_the_live_branch() {
    let r = Plan::new("rewind_fork").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Start the migration."),
            assistant("Migration started."),
            user("Actually, try approach B."),
            assistant("Approach B worked."),
        ]
    );
    assert_eq!(r.string("history_mode"), "chain");
    assert_eq!(r.count("abandoned_branch_records"), 2);
}

#[test]
fn parallel_tool_call_siblings_sharing_a_message_id_are_carried() {
    let r = Plan::new("parallel_tool_siblings")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("Read both config files."),
            assistant("Reading both files in parallel."),
            assistant("Both files read: a = 1 and b = 2."),
            user("Thanks."),
            assistant("Sure."),
        ]
    );
    assert_eq!(r.string("history_mode"), "chain");
    assert_eq!(r.count("abandoned_branch_records"), 0);
}

#[test]
fn a_child_written_before_its_parent_comes_in_chain_order() {
    let r = Plan::new("child_before_parent")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("First question."),
            assistant("First answer."),
            user("Second question."),
            assistant("Second answer."),
            user("Third question."),
            assistant("Third answer."),
        ]
    );
    assert_eq!(r.string("history_mode"), "chain");
    assert_eq!(r.count("abandoned_branch_records"), 0);
}

#[test]
fn the_newest_leaf_is_found_even_when_written_before_its_parent() {
    // The last record in the file (u2) has a child written just before it
    // (a2): the live branch ends at the leaf a2, which Claude Code resumes.
    let r = Plan::new("child_before_parent_at_end")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(r.carried(), two_plain_turns());
    assert_eq!(r.count("abandoned_branch_records"), 0);
    assert!(!r.flag("open_tail"));
}

#[test]
fn a_user_record_without_uuid_falls_back_to_file_order_and_says_why() {
    let r = Plan::new("uuid_missing_fallback")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(r.string("history_mode"), "file");
    let reason = r.string("history_fallback_reason");
    assert!(reason.contains("uuid"), "reason: {reason}");
    assert_eq!(
        r.carried(),
        vec![
            user("First question."),
            assistant("First answer."),
            user("Second question, my record has no uuid."),
            assistant("Second answer."),
        ]
    );
}

#[test]
fn chain_mode_states_no_fallback_reason() {
    let r = Plan::new("two_turns").config(NO_STAMPS).run_json();
    assert_eq!(r.string("history_mode"), "chain");
    assert!(r["history_fallback_reason"].is_null());
}

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
    assert_eq!(r.string("history_mode"), "file");
    assert!(!r.string("history_fallback_reason").trim().is_empty());
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
    assert_eq!(r.string("history_mode"), "file");
    assert!(!r.string("history_fallback_reason").trim().is_empty());
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
    assert_eq!(r.string("history_mode"), "file");
    assert!(!r.string("history_fallback_reason").trim().is_empty());
    assert_eq!(r.carried().len(), 4);
}

#[test]
fn a_parent_cycle_falls_back_to_file_order() {
    let r = Plan::new("uuid_cycle").config(NO_STAMPS).run_json();
    assert_eq!(r.string("history_mode"), "file");
    assert!(!r.string("history_fallback_reason").trim().is_empty());
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
    assert_eq!(r.string("history_mode"), "chain");
    assert_eq!(r.count("compact_summaries_dropped"), 2);
    assert_eq!(r.count("compact_summaries_carried"), 0);
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

// ---------------------------------------------------------------------------
// Fidelity: broken timestamps, slash names, command expansions, startup context
// ---------------------------------------------------------------------------

#[test]
fn a_broken_timestamp_never_makes_a_stamp() {
    // r1 "[trimmed for fixture]" (nothing parseable before it: no stamp),
    // r3 "not a date" (→ r2's time), r5 none (→ r4's time), r7 its own.
    let r = Plan::new("broken_timestamps").run_json();
    let stamped = |n: u32, text: &str| user(&format!("[发生时间: {}]\n{text}", ts(n)));
    assert_eq!(
        r.carried(),
        vec![
            user("First question, sent with a trimmed timestamp."),
            assistant("First answer."),
            stamped(2, "Second question, garbage time."),
            assistant("Second answer."),
            stamped(4, "Third question, no timestamp field."),
            assistant("Third answer."),
            stamped(7, "Fourth question, a good time."),
            assistant("Fourth answer."),
        ]
    );
    assert_eq!(r.count("broken_timestamps"), 3);
    assert_eq!(r.occurrences("trimmed for fixture"), 0);
    assert_eq!(r.occurrences("not a date"), 0);
    // Every line still carries a parseable timestamp.
    for line in r.candidate() {
        let ts = line["timestamp"].as_str().unwrap();
        assert!(ts.starts_with("2026-03-01T10:00:0"), "{ts}");
    }
}

const REMIND: &str = "Add this to the household reminder list and confirm in one line:";

#[test]
fn a_custom_command_is_carried_with_its_expansion_and_an_old_name_gets_its_slash() {
    let r = Plan::new("command_expansions").config(NO_STAMPS).run_json();
    assert_eq!(
        r.carried(),
        vec![
            user(&format!(
                "/remind water the plants\n\n{REMIND} water the plants"
            )),
            assistant("Added: water the plants."),
            // `<command-name>remind` (older files) is carried as `/remind`
            user(&format!("/remind buy milk\n\n{REMIND} buy milk")),
            assistant("Added: buy milk."),
            user("Thanks, that's all."),
            assistant("You're welcome."),
        ]
    );
    assert_eq!(r.count("command_expansions_carried"), 2);
    // `/cost` had no reply (local), the caveat and the skill body are injections.
    assert_eq!(r.not_speech("local_commands"), 1);
    assert_eq!(r.not_speech("meta_injections"), 2);
    assert_eq!(r.occurrences("A skill body nobody typed."), 0);
}

#[test]
fn without_carry_command_expansions_only_the_command_is_carried() {
    let r = Plan::new("command_expansions")
        .config(NO_STAMPS)
        .config("carry_command_expansions = false")
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user("/remind water the plants"),
            assistant("Added: water the plants."),
            user("/remind buy milk"),
            assistant("Added: buy milk."),
            user("Thanks, that's all."),
            assistant("You're welcome."),
        ]
    );
    assert_eq!(r.count("command_expansions_carried"), 0);
    assert_eq!(r.not_speech("meta_injections"), 4);
}

#[test]
fn a_stamped_command_with_its_expansion_survives_a_second_rebuild_unchanged() {
    let first_jsonl = Plan::new("command_expansions").show_candidate();
    let first: Vec<Item> = parse_jsonl(&String::from_utf8_lossy(&first_jsonl))
        .iter()
        .map(line_item)
        .collect();
    assert_eq!(
        first[0].1,
        format!(
            "[发生时间: {}]\n/remind water the plants\n\n{REMIND} water the plants",
            ts(2)
        )
    );
    let second = Plan::from_bytes(first_jsonl).run_json();
    assert_eq!(second.carried(), first);
    assert_eq!(second.occurrences(STAMP_PREFIX), 3);
}

const PERSONA: &str = "PERSONA: You are Xiaoman, the household companion of the Lin family.";
const MEMORY_INDEX: &str = "MEMORY INDEX: milk on Fridays; the cat is called Mochi.";

fn context_item(text: &str) -> Item {
    ("attachment".to_string(), text.to_string())
}

#[test]
fn session_start_contexts_are_frozen_and_carried_once_as_attachments() {
    let r = Plan::new("session_start_context")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            context_item(PERSONA),
            context_item(MEMORY_INDEX),
            user("Good morning."),
            assistant("Morning! Take an umbrella."),
            user("What is the cat called?"),
            assistant("Mochi."),
        ]
    );
    assert!(r.flag("startup_frozen"));
    assert_eq!(r.count("startup_attachments"), 2);
    assert_eq!(
        r.string("startup_sha256"),
        sha256_hex(format!("{PERSONA}\n\n{MEMORY_INDEX}").as_bytes())
    );
    // The attachment objects are the source's, verbatim.
    let first = &r.candidate()[0];
    assert_eq!(first["attachment"]["toolUseID"], "SessionStart");
    assert_eq!(first["attachment"]["hookName"], "SessionStart");
    assert!(first["parentUuid"].is_null());
    // UserPromptSubmit contexts, hook output and a context recorded after
    // speech began stay residue.
    for residue in ["WEATHER", "PERSONA AGAIN", "hookSpecificOutput"] {
        assert_eq!(r.occurrences(residue), 0, "{residue}");
    }
}

#[test]
fn without_freeze_session_start_contexts_stay_residue() {
    let r = Plan::new("session_start_context")
        .config(NO_STAMPS)
        .config("freeze_startup_snapshot = false")
        .run_json();
    assert_eq!(r.carried().len(), 4);
    assert!(!r.flag("startup_frozen"));
    assert_eq!(r.occurrences("PERSONA"), 0);
}

#[test]
fn rebuilding_a_rebuilt_session_carries_its_session_start_contexts_once() {
    let first_jsonl = Plan::new("session_start_context").show_candidate();
    let first: Vec<Item> = parse_jsonl(&String::from_utf8_lossy(&first_jsonl))
        .iter()
        .map(line_item)
        .collect();
    assert_eq!(first[0], context_item(PERSONA));
    assert!(first[2].1.starts_with(STAMP_PREFIX), "{first:?}");
    let second = Plan::from_bytes(first_jsonl.clone()).run_json();
    assert_eq!(second.carried(), first);
    assert_eq!(second.occurrences(PERSONA), 1);
    assert_eq!(second.occurrences(STAMP_PREFIX), 2);
    assert_eq!(second.count("startup_attachments"), 2);
    let second_jsonl = Plan::from_bytes(first_jsonl).show_candidate();
    let third = Plan::from_bytes(second_jsonl).run_json();
    assert_eq!(third.carried(), first);
}

#[test]
fn an_older_meta_record_with_a_reminder_is_the_startup_snapshot() {
    let raw = "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\nAlways answer in English.\n</system-reminder>\n";
    let r = Plan::new("startup_meta_reminder")
        .config(NO_STAMPS)
        .run_json();
    assert_eq!(
        r.carried(),
        vec![
            user(&format!("[续窗启动快照 · 冻结于 {}]\n{raw}", ts(1))),
            user("Let's start."),
            assistant("Started."),
        ]
    );
    assert!(r.flag("startup_frozen"));
    assert_eq!(r.string("startup_sha256"), sha256_hex(raw.as_bytes()));
    assert_eq!(r.count("startup_attachments"), 0);
}
