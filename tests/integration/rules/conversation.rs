//! Which conversation: compaction, forks, chain order, fallback.

use super::assert_summaries_dropped;
use super::{NO_STAMPS, two_plain_turns};
use crate::support::plan::*;

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
    assert_summaries_dropped(&r, 1);
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
