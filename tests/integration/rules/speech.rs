//! Channels, queued input, slash commands, rejections, synthetic replies.

use super::NO_STAMPS;
use crate::support::plan::*;

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
