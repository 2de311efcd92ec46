//! The whole loop and its rollback, a session rebuilt again in place, a Claude Code that does
//! not take `/resume` respawned.

use super::*;
use crate::support::claude::Tmux;
use crate::support::fake_api::conversation;
use crate::support::fake_api::{Rule, all_strings, text, tool};
use crate::support::{assert_in_order, claude, claude_bin};
use ktr_base::time::parse_rfc3339;
use ktr_pipeline::operation::Status;
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The whole rebuild through the interactive CLI, then a rollback through
/// it: Stop hook → prepare → verify → activate → `--resume <new>` with
/// Claude Code's own ack; the next request carries every turn and no
/// residue; then `ROLLBACK` → the pane resumes the old conversation, whose
/// next request carries the tool results again and, after them, the turns
/// said in the rebuilt session (a restore session).
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_whole_loop_and_its_rollback_through_the_interactive_cli() {
    let bin = claude_bin();
    let _serial = serial();
    let started = Instant::now();
    let lp = Loop::start(&bin, &[]);
    let pane_before = lp.tmux.pane_pid();
    let ended = lp.talk_until_the_request();

    // After the reply the Stop hook schedules; the stages run detached.
    let op = lp.wait_activated();
    let activated_after = ended.elapsed();
    let scheduled = op
        .history
        .iter()
        .find(|t| t.to == Status::Scheduled)
        .expect("the Stop hook scheduled it");
    assert!(
        scheduled
            .note
            .contains(&format!("Stop hook of session {}", lp.source_id)),
        "{}",
        scheduled.note
    );
    let candidate = op.candidate.clone().expect("a candidate");
    let new_id = candidate.session_id.clone();
    assert_ne!(new_id, lp.source_id);
    // Switched in place: the same Claude Code process now serves the
    // rebuilt session (its receipt says so), nothing was respawned.
    assert_eq!(
        lp.tmux.pane_pid(),
        pane_before,
        "the pane was respawned instead of switched in place\n{}",
        notes(&op)
    );
    lp.assert_pane_serves(&new_id);
    assert!(
        notes(&op).contains(&format!("in place: /resume {new_id}")),
        "{}",
        notes(&op)
    );
    assert_eq!(
        op.target_after.as_deref(),
        Some(lp.tmux.pane_pid().to_string().as_str())
    );
    // Claude Code itself reported loading the rebuilt session.
    let ack = op.ack.clone().expect("ktr-ack recorded the resume");
    assert_eq!(ack.session_id, new_id);
    let context_tokens = ack.context_tokens.expect("context_tokens");
    assert!(context_tokens > 0);
    let activated = op
        .history
        .iter()
        .rfind(|t| t.to == Status::Activated)
        .unwrap();
    assert!(
        activated.note.contains(&format!(
            "Claude Code reports {context_tokens} context tokens"
        )),
        "activated without Claude Code's receipt: {}",
        activated.note
    );
    let receipt = lp.store.artifacts_dir(&op.id).unwrap().join("ack.json");
    assert!(receipt.is_file(), "no {}", receipt.display());

    // The old transcript. ktr never writes it: what it froze is the source
    // as it was after the request turn (the backup has the recorded digest,
    // and ktr-activate checked that the source still had it right before
    // the switch). Leaving the old session, Claude Code itself appends
    // file-only records to it (2.1.328: `last-prompt`, `cost-state`), on
    // its own schedule, even after the rebuilt session's first request: the
    // source must *start with* the frozen bytes and nothing said after the
    // freeze may follow them (checked again after the probe below).
    let backup = op.backup.clone().expect("a frozen backup");
    assert_eq!(
        ktr_base::digest::Sha256::of_file(&backup).ok(),
        op.source_sha256
    );
    let frozen = fs::read(&backup).unwrap();
    assert!(
        String::from_utf8_lossy(&frozen).contains("ASSISTANT-L3"),
        "the freeze did not wait for the request turn to finish"
    );
    let appended_on_exit = assert_only_file_records_after(&lp.source(), &frozen);

    // The next message reaches the model with every turn and no residue.
    let after = lp.probe(
        "USER-L4 PROBE-AFTER 你还记得吗？",
        "PROBE-AFTER",
        "ASSISTANT-L4",
    );
    let sent = conversation(&after);
    let mut order: Vec<&str> = TALK
        .iter()
        .flat_map(|(line, marker)| [line.split(' ').next().unwrap(), *marker])
        .collect();
    order.push("PROBE-AFTER");
    assert_in_order(&sent, &order);
    let mut everything = String::new();
    all_strings(&after.body["messages"], &mut everything);
    for residue in RESIDUE {
        assert!(
            !everything.contains(residue),
            "{residue} reached the model after the rebuild"
        );
    }
    let types = block_types(&after);
    for kind in ["tool_use", "tool_result", "thinking", "redacted_thinking"] {
        assert!(
            !types.iter().any(|t| t == kind),
            "a {kind} block reached the model after the rebuild: {types:?}"
        );
    }
    let before = turn_before(&lp.api, &after);
    assert!(
        conversation(&before).contains("REBUILD-ASK"),
        "the request before the probe is not the rebuild turn"
    );
    let (before_bytes, after_bytes) = (before.messages_bytes(), after.messages_bytes());
    assert!(
        after_bytes < before_bytes,
        "the request after the rebuild ({after_bytes} B) is not smaller than before ({before_bytes} B)"
    );
    assert_only_file_records_after(&lp.source(), &frozen);

    let stop_to_activated = history_seconds(&op, Status::Scheduled, Status::Activated);
    let activating = op
        .history
        .iter()
        .find(|t| t.to == Status::Activating)
        .unwrap();
    let switch_to_ack = parse_rfc3339(&ack.at)
        .unwrap()
        .duration_since(parse_rfc3339(&activating.at).unwrap())
        .unwrap_or_default()
        .as_secs_f64();
    eprintln!(
        "loop: messages {before_bytes} B before the rebuild -> {after_bytes} B after ({:.1} %); \
         request body {} B -> {} B; context_tokens {context_tokens} (estimate {:?}); \
         reply end -> activated {:.1} s (Stop hook -> activated {stop_to_activated:.1} s, \
         switch -> ack {switch_to_ack:.1} s, healthcheck_seconds 5); \
         Claude Code appended {appended_on_exit} B to the old transcript on exit",
        100.0 * after_bytes as f64 / before_bytes as f64,
        before.bytes,
        after.bytes,
        op.estimated_tokens,
        activated_after.as_secs_f64(),
    );

    // Rollback, asked for in the rebuilt session.
    lp.api.add_rules(vec![Rule::new(
        "ROLLBACK-ASK",
        vec![
            vec![tool(
                "mcp__ktr__thread_rebuild_rollback_request",
                json!({"operation_id": op.id, "confirmation": "ROLLBACK"}),
            )],
            vec![text("ASSISTANT-L5 好的，回滚已请求；这条回复结束后切回。")],
        ],
    )]);
    let pane_new = lp.tmux.pane_pid();
    // The switch back follows the reply within milliseconds, so the reply
    // may never be seen on the screen: wait for the operation instead.
    lp.tmux
        .type_line("USER-L5 还是回到旧窗口吧 ROLLBACK-ASK，我确认。");
    let op = lp.wait_rolled_back();
    assert!(
        op.history.iter().any(|t| t.to == Status::RollbackScheduled
            && t.note.contains(&format!("Stop hook of session {new_id}"))),
        "{}",
        notes(&op)
    );
    assert_eq!(
        lp.tmux.pane_pid(),
        pane_new,
        "the pane was respawned instead of switched back in place\n{}",
        notes(&op)
    );
    // Two turns were said in the rebuilt session (the probe, the request):
    // they come along in a restore session of the old conversation.
    let restore = op.restore.clone().expect("a restore session");
    lp.assert_pane_serves(&restore.session_id);
    assert!(
        notes(&op).contains(&format!("session {} in place", restore.session_id)),
        "{}",
        notes(&op)
    );

    // The old conversation again: its history comes back, tool results
    // included, and after it what was said in the rebuilt session.
    let back = lp.probe(
        "USER-L6 PROBE-BACK 回来了吗？",
        "PROBE-BACK",
        "ASSISTANT-L6",
    );
    let sent = conversation(&back);
    assert_in_order(
        &sent,
        &[
            "USER-L1",
            "ASSISTANT-L1",
            "ASSISTANT-L3",
            "PROBE-AFTER",
            "ASSISTANT-L4",
            "USER-L5",
            "ASSISTANT-L5",
            "PROBE-BACK",
        ],
    );
    let mut everything = String::new();
    all_strings(&back.body["messages"], &mut everything);
    assert!(
        everything.contains("TOOL-OUTPUT-LINE") && everything.contains("READ-CONTENT-MARKER"),
        "the old session's tool results are missing after the rollback"
    );
    assert!(block_types(&back).iter().any(|t| t == "tool_result"));
    for said in ["USER-L1", "PROBE-AFTER", "ASSISTANT-L4", "USER-L5"] {
        assert_eq!(sent.matches(said).count(), 1, "{said} not once: {sent}");
    }
    eprintln!(
        "rollback: Stop hook -> rolled_back {:.1} s; messages after rollback {} B; test took {:.1} s",
        history_seconds(&op, Status::RollbackScheduled, Status::RolledBack),
        back.messages_bytes(),
        started.elapsed().as_secs_f64()
    );
}

/// Nothing said since the rebuild is lost by a rollback. After
/// the rebuild two prompts are answered in the rebuilt session; then a
/// rollback is requested and, while it waits for the Stop, a third prompt
/// is sent and answered. The rollback builds a restore session — the old
/// transcript's records, then the three exchanges — and switches to it in
/// place: the next request to the model carries the old conversation
/// (tool results included) and all three exchanges, each exactly once;
/// ktr never writes the old transcript; one line says what happened.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_rollback_takes_the_turns_said_since_the_rebuild_along() {
    let bin = claude_bin();
    let _serial = serial();
    let lp = Loop::start(&bin, &[]);
    lp.talk_until_the_request();
    let op = lp.wait_activated();
    let new_id = op.candidate.clone().expect("a candidate").session_id;
    lp.assert_pane_serves(&new_id);
    // Claude Code may still append its own late records to the session it
    // left (under load, after the receipt): the switch only ever adds.
    let at_activation = fs::read(lp.source()).unwrap();
    lp.api.add_rules(vec![
        Rule::new("SINCE-ONE", vec![vec![text("ASSISTANT-S1 第一条新话。")]]),
        Rule::new("SINCE-TWO", vec![vec![text("ASSISTANT-S2 第二条新话。")]]),
        Rule::new("SINCE-THREE", vec![vec![text("ASSISTANT-S3 第三条新话。")]]),
        Rule::new("PROBE-RESTORED", vec![vec![text("ASSISTANT-R 都在。")]]),
    ]);
    lp.say("USER-S1 SINCE-ONE 新窗口的第一句", "ASSISTANT-S1");
    lp.say("USER-S2 SINCE-TWO 新窗口的第二句", "ASSISTANT-S2");
    let old_bytes = fs::read(lp.source()).unwrap();
    assert!(
        old_bytes.starts_with(&at_activation),
        "the old transcript was rewritten by the switch"
    );
    let op = lp.store.rollback_request(&op.id, "ROLLBACK").unwrap();
    assert_eq!(op.status, Status::RollbackPending);
    // Sent while the rollback waits for the next Stop.
    lp.tmux.type_line("USER-S3 SINCE-THREE 等回滚时的第三句");
    let op = lp.wait_rolled_back();
    let restore = op.restore.clone().expect("a restore session");
    assert_ne!(restore.session_id, lp.source_id);
    assert_eq!(restore.turns, 3, "{}", notes(&op));
    lp.assert_pane_serves(&restore.session_id);
    let line = format!(
        "rolled back to {}: the 3 turns said since the rebuild came along",
        lp.source_id
    );
    assert!(notes(&op).contains(&line), "{}", notes(&op));
    // The pane's border says it for a while.
    let border = lp.tmux.run(&[
        "show-options",
        "-p",
        "-v",
        "-t",
        claude::PANE,
        "pane-border-format",
    ]);
    assert!(border.contains(&line), "{border}");
    let status = lp.env.sandbox.run("status", None, &[]);
    assert!(status.stdout.contains(&line), "{}", status.stdout);

    let back = lp.probe(
        "USER-R PROBE-RESTORED 都还在吗？",
        "PROBE-RESTORED",
        "ASSISTANT-R",
    );
    let sent = conversation(&back);
    let order = [
        "USER-L1",
        "ASSISTANT-L1",
        "USER-L2",
        "ASSISTANT-L2",
        "USER-L3",
        "ASSISTANT-L3",
        "USER-S1",
        "ASSISTANT-S1",
        "USER-S2",
        "ASSISTANT-S2",
        "USER-S3",
        "ASSISTANT-S3",
        "PROBE-RESTORED",
    ];
    assert_in_order(&sent, &order);
    for said in order {
        assert_eq!(sent.matches(said).count(), 1, "{said} not once: {sent}");
    }
    let mut everything = String::new();
    all_strings(&back.body["messages"], &mut everything);
    assert!(
        everything.contains("TOOL-OUTPUT-LINE"),
        "the old session's tool results are missing after the rollback"
    );
    let now = fs::read(lp.source()).unwrap();
    assert!(
        now == old_bytes,
        "the rollback wrote the old transcript: {} bytes then, {} now; appended: {}",
        old_bytes.len(),
        now.len(),
        String::from_utf8_lossy(now.get(old_bytes.len()..).unwrap_or_default())
    );
    eprintln!(
        "rollback with 3 turns since the rebuild: Stop hook -> rolled_back {:.1} s; restore session {} old + {} new records",
        history_seconds(&op, Status::RollbackScheduled, Status::RolledBack),
        restore.old_records,
        restore.new_records
    );
}

/// Everything that ties the Claude Code process to a session follows an
/// in-place switch: after the first rebuild the same
/// process — whose command line and whose MCP server's
/// `CLAUDE_CODE_SESSION_ID` still name the first session — asks for a
/// second rebuild through MCP. The request binds to the rebuilt session
/// (not the one the environment names), its Stop hook schedules it, the
/// target is found to run it, and it switches in place again.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_session_switched_in_place_is_rebuilt_again_in_place() {
    let bin = claude_bin();
    let _serial = serial();
    let lp = Loop::start(&bin, &[]);
    let pane = lp.tmux.pane_pid();
    lp.talk_until_the_request();
    let first = lp.wait_activated();
    let second_source = first.candidate.clone().unwrap().session_id.to_string();
    lp.assert_pane_serves(&second_source);

    lp.api.add_rules(vec![Rule::new(
        "REBUILD-AGAIN",
        vec![
            vec![tool(
                "mcp__ktr__thread_rebuild_request",
                json!({"reason": "again", "confirmation": "REBUILD"}),
            )],
            vec![text("ASSISTANT-L7 好的，再重建一次。")],
        ],
    )]);
    lp.say("USER-L7 再重建一次 REBUILD-AGAIN，我同意。", "ASSISTANT-L7");
    let op = crate::support::wait_status(
        &lp.store,
        "the second rebuild to finish",
        PIPELINE,
        Status::is_terminal,
        || lp.diagnosis(),
    );
    let op = lp
        .store
        .latest()
        .unwrap()
        .filter(|o| o.id != first.id)
        .unwrap_or(op);
    assert_ne!(op.id, first.id, "no second operation\n{}", lp.diagnosis());
    assert_eq!(
        op.status,
        Status::Activated,
        "{}\n{}",
        notes(&op),
        lp.diagnosis()
    );
    assert_eq!(
        op.session_id.as_deref(),
        Some(second_source.as_str()),
        "the second request did not bind to the session the process serves now"
    );
    let third = op.candidate.clone().unwrap().session_id.to_string();
    assert_eq!(lp.tmux.pane_pid(), pane, "{}", notes(&op));
    lp.assert_pane_serves(&third);
    assert!(
        notes(&op).contains(&format!("in place: /resume {third}")),
        "{}",
        notes(&op)
    );
    // The rebuilt-twice session holds every turn of both.
    let after = lp.probe(
        "USER-L8 PROBE-AFTER 还记得吗？",
        "PROBE-AFTER",
        "ASSISTANT-L4",
    );
    assert_in_order(
        &conversation(&after),
        &[
            "USER-L1",
            "ASSISTANT-L1",
            "REBUILD-ASK",
            "USER-L7",
            "ASSISTANT-L7",
            "PROBE-AFTER",
        ],
    );
}

/// A Claude Code that does not take `/resume` (here: hung, stopped with
/// SIGSTOP right before the switch) is switched by the fallback: after
/// `healthcheck_seconds` without its receipt the pane is respawned with
/// `resume_command` on the rebuilt session, which then answers.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_claude_code_that_does_not_take_resume_is_respawned() {
    let bin = claude_bin();
    let _serial = serial();
    let pause = std::env::temp_dir().join(format!("ktr-switch-pause-{}", std::process::id()));
    let pause_file = pause.display().to_string();
    let lp = Loop::start_as(
        &bin,
        &[
            ("KTR_TEST_PAUSE_AT", "activate:checked"),
            ("KTR_TEST_PAUSE_FILE", pause_file.as_str()),
        ],
        Tmux::start_under_shell,
    );
    let pane = lp.tmux.pane_pid();
    let hung = ktr_pipeline::process::with_descendants(pane)
        .into_iter()
        .find(|pid| {
            ktr_pipeline::process::cmdline(*pid)
                .is_some_and(|argv| argv.first() == Some(&lp.env.bin.display().to_string()))
        })
        .expect("the CLI under the pane's shell");
    lp.talk_until_the_request();
    assert!(
        crate::support::wait_for(PIPELINE, || pause.exists()),
        "activation never reached its pause\n{}",
        lp.diagnosis()
    );
    signal(hung, "-STOP");
    assert!(
        crate::support::wait_for(Duration::from_secs(5), || {
            fs::read_to_string(format!("/proc/{hung}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('T')
            })
        }),
        "the CLI did not stop"
    );
    fs::remove_file(&pause).unwrap();
    let op = lp.wait_activated();
    let new_id = op.candidate.clone().unwrap().session_id.to_string();
    // Respawning the pane usually ends it (its process group is orphaned
    // while stopped: the kernel sends it SIGHUP and SIGCONT); if not, here.
    if ktr_pipeline::process::pid_alive(hung) {
        let _ = Command::new("kill")
            .args(["-KILL", &hung.to_string()])
            .status();
    }
    assert_ne!(lp.tmux.pane_pid(), pane, "{}", notes(&op));
    assert!(
        notes(&op).contains("pane respawned")
            && notes(&op).contains("did not report SessionStart (resume)"),
        "{}",
        notes(&op)
    );
    let argv = lp.tmux.pane_argv();
    assert!(argv.contains(&new_id), "{argv:?}");
    let after = lp.probe(
        "USER-L4 PROBE-AFTER 你还记得吗？",
        "PROBE-AFTER",
        "ASSISTANT-L4",
    );
    assert_in_order(
        &conversation(&after),
        &["USER-L1", "ASSISTANT-L3", "PROBE-AFTER"],
    );
}

/// The old transcript still starts with the `frozen` bytes and whatever
/// follows them is file-only: no user or assistant record, so nothing said
/// after the freeze was left behind there. Returns how many bytes follow.
fn assert_only_file_records_after(source: &Path, frozen: &[u8]) -> usize {
    let now = fs::read(source).unwrap();
    assert!(
        now.starts_with(frozen),
        "the old transcript no longer starts with what was frozen"
    );
    for line in String::from_utf8_lossy(&now[frozen.len()..]).lines() {
        let record: Value = serde_json::from_str(line).unwrap_or_default();
        assert!(
            !matches!(record["type"].as_str(), Some("user" | "assistant")),
            "a conversation record reached the old transcript after the freeze: {line}"
        );
    }
    now.len() - frozen.len()
}
