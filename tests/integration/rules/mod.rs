//! One hand-written fixture and one test per selection rule (SPEC §3–§8, §14),
//! driven through `ktr plan --json --show-candidate`.

mod candidate;
mod conversation;
mod fidelity;
mod limits;
mod more;
mod speech;
mod startup;

use crate::support::plan::*;

pub(super) const NO_STAMPS: &str = "stamp_turns = false";

/// The four items of the plain two-turn conversation most fixtures share.
pub(super) fn two_plain_turns() -> Vec<Item> {
    vec![
        user("First question."),
        assistant("First answer."),
        user("Second question."),
        assistant("Second answer."),
    ]
}

/// The source record timestamp of the n-th (1-based) record written by the
/// fixture generator: `2026-03-01T10:00:0n.000Z`.
pub(super) fn ts(n: u32) -> String {
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

/// The plan fell back to file order and said why.
#[track_caller]
pub(super) fn assert_file_order_fallback(r: &Report) {
    assert_eq!(r.string("history_mode"), "file");
    assert!(!r.string("history_fallback_reason").trim().is_empty());
}

/// The plan followed the chain across `n` compactions, each summary
/// dropped and none carried.
#[track_caller]
pub(super) fn assert_summaries_dropped(r: &Report, n: u64) {
    assert_eq!(r.string("history_mode"), "chain");
    assert_eq!(r.count("compact_summaries_dropped"), n);
    assert_eq!(r.count("compact_summaries_carried"), 0);
}
