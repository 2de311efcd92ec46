//! Fidelity: broken timestamps, slash names, command expansions, startup context.

use ktr_base::digest::sha256_hex;

use super::{NO_STAMPS, ts};
use crate::support::plan::*;

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
