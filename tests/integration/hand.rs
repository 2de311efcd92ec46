//! The hand target (SPEC §12, "By hand") through the real hooks and stages:
//! the stand-in claude runs in a pseudo-terminal outside tmux with no
//! target configured, so a verified rebuild is offered — the line
//! `/resume <candidate>` in the statusline, the Stop hook's output and
//! `ktr status` — and never switched by ktr; `ktr-ack`'s receipt from that
//! claude (or, once it exited, from any) makes it `activated`; a turn of
//! the source withdraws the offer (its candidate removed) and the next Stop
//! offers a new line; an offer nobody takes expires; a rollback is offered
//! (and withdrawn) the same way.

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::support::rig::{Kind, Rig};
use crate::support::{Sandbox, exe, wait_for};
use ktr_pipeline::operation::{Operation, Status};

use Status::*;

/// A hand rig whose rebuild was requested and offered; returns the
/// operation as offered and what the scheduling Stop said.
fn offered(rig: &Rig) -> (Operation, String) {
    let op = rig.request();
    let said = rig.stop_source();
    let op = rig.wait_until(&op.id, |op| op.status == Offered || op.status.is_terminal());
    assert_eq!(op.status, Offered, "{op:#?}");
    // The hooks read `active`, written right after the operation file
    // (the statusline lacked the line once, under load).
    let offered = Some((op.id.clone(), Offered));
    assert!(crate::support::wait_for(
        crate::support::rig::SETTLE,
        || rig.store().active() == offered
    ));
    (op, said)
}

fn candidate_of(op: &Operation) -> (String, std::path::PathBuf) {
    let c = op.candidate.as_ref().expect("an offer has its candidate");
    (c.session_id.to_string(), c.path.clone())
}

/// Claude Code's `SessionStart` (resume) of `session`.
fn resumed_input(session: &str) -> String {
    json!({"session_id": session, "source": "resume", "hook_event_name": "SessionStart"})
        .to_string()
}

/// `ktr-ack`'s receipt of `session`, run by the stand-in claude in the
/// terminal (Claude Code after `/resume <session>` typed into it).
fn receipt_from_the_terminal(rig: &Rig, session: &str) {
    let (_, code) = rig.hook_from_claude(&rig.src, exe("ktr-ack"), &resumed_input(session));
    assert_eq!(code, 0);
}

/// The same receipt from another process (the test itself).
fn receipt_from_elsewhere(rig: &Rig, session: &str) {
    let cmd = rig.program(exe("ktr-ack"));
    let (_, code) = Sandbox::run_hook(cmd, &resumed_input(session), &rig.hook_env());
    assert_eq!(code, 0);
}

/// What the statusline shows for the source session.
fn statusline(rig: &Rig) -> String {
    let input = json!({
        "session_id": rig.src,
        "transcript_path": rig.source,
        "context_window": {"context_window_size": 200_000, "current_usage": {"input_tokens": 50_000}},
    })
    .to_string();
    let cmd = rig.program(exe("ktr-statusline"));
    Sandbox::run_hook(cmd, &input, &rig.hook_env()).0
}

/// Append a turn the person began now to the source (what Claude Code
/// writes when they send a prompt).
fn speak(rig: &Rig, text: &str) {
    let now = ktr_base::time::now_rfc3339();
    let line = json!({
        "type": "user", "uuid": uuid(), "parentUuid": null, "sessionId": rig.src,
        "timestamp": now, "message": {"role": "user", "content": text},
    });
    let mut bytes = fs::read(&rig.source).unwrap();
    bytes.extend_from_slice(format!("{line}\n").as_bytes());
    fs::write(&rig.source, bytes).unwrap();
}

fn uuid() -> String {
    ktr_base::ids::SessionId::new_random().to_string()
}

fn path_of(op: &Operation) -> Vec<Status> {
    Rig::path_of(op)
}

#[test]
fn outside_tmux_a_verified_rebuild_is_offered_and_the_receipt_from_the_same_claude_activates_it() {
    let rig = Rig::with(Kind::Hand, "", &[]);
    let before = rig.source_sha();
    let (op, scheduled) = offered(&rig);
    assert!(
        scheduled.contains("ktr shows the line to type"),
        "the Stop says what the person will do: {scheduled}"
    );
    let (cand, path) = candidate_of(&op);
    let line = format!("/resume {cand}");
    assert!(path.is_file(), "the offered candidate is in the project");
    let title = path.with_file_name(&cand).join("custom-title.json");
    let title: serde_json::Value = serde_json::from_slice(&fs::read(&title).unwrap()).unwrap();
    assert!(
        title["customTitle"]
            .as_str()
            .unwrap()
            .contains(" (rebuilt "),
        "the candidate has a title for /resume's picker: {title}"
    );
    // Nothing was switched: the claude in the terminal still runs the
    // source, which is untouched.
    assert_eq!(rig.resume_history(), vec![rig.src.clone()]);
    assert_eq!(rig.source_sha(), before);
    // The line is offered everywhere the person looks.
    assert!(statusline(&rig).contains(&line), "{}", statusline(&rig));
    let status = rig.ktr(&["status"]);
    assert!(
        status.contains(&line) && status.contains("stays as it is"),
        "{status}"
    );
    let again = rig.stop_source();
    assert!(
        again.contains(&line),
        "a Stop with no turn since repeats the offer: {again}"
    );
    // A resume of the candidate by another Claude Code while the one the
    // line was offered to runs does not take it.
    receipt_from_elsewhere(&rig, &cand);
    assert_eq!(rig.store().load(&op.id).unwrap().status, Offered);
    receipt_from_the_terminal(&rig, &cand);
    let op = rig.store().load(&op.id).unwrap();
    assert_eq!(op.status, Activated, "{op:#?}");
    assert_eq!(
        &path_of(&op)[..],
        &[Pending, Scheduled, Running, Verifying, Offered, Activated]
    );
    assert!(op.ack.is_some(), "the receipt is recorded");
    assert_eq!(
        rig.source_sha(),
        before,
        "the old transcript is never written"
    );
}

#[test]
fn a_turn_after_the_offer_withdraws_it_with_its_candidate_and_the_next_stop_offers_a_new_line() {
    let rig = Rig::with(Kind::Hand, "", &[]);
    let (op, _) = offered(&rig);
    let (first, first_path) = candidate_of(&op);
    // The person sends a prompt instead of the line: withdrawn at once.
    let prompt = json!({"session_id": rig.src, "transcript_path": rig.source,
        "hook_event_name": "UserPromptSubmit", "prompt": "one more thing"})
    .to_string();
    let (said, code) = rig.hook_from_claude(&rig.src, exe("ktr-prompt"), &prompt);
    assert_eq!(code, 0);
    assert!(said.contains("withdrawn"), "{said}");
    let withdrawn = rig.store().load(&op.id).unwrap();
    assert_eq!(withdrawn.status, Pending, "{withdrawn:#?}");
    assert!(!first_path.exists(), "the never-run candidate is removed");
    assert!(!first_path.with_file_name(&first).exists(), "and its title");
    // The turn ends: its Stop prepares again, and a new line is offered.
    speak(&rig, "one more thing");
    rig.stop_source();
    let op = rig.wait_until(&op.id, |o| o.status == Offered && o.candidate.is_some());
    let (second, second_path) = candidate_of(&op);
    assert_ne!(second, first, "a new line");
    // A late `/resume <first>` finds nothing and takes nothing.
    receipt_from_the_terminal(&rig, &first);
    assert_eq!(rig.store().load(&op.id).unwrap().status, Offered);
    // Without ktr-prompt, the Stop after a turn withdraws the offer there
    // and prepares again in the same breath.
    speak(&rig, "and another");
    let said = rig.stop_source();
    assert!(
        said.contains("withdrawn") && said.contains("scheduled again"),
        "{said}"
    );
    assert!(!second_path.exists());
    let op = rig.wait_until(&op.id, |o| {
        o.status == Offered && o.candidate.as_ref().is_some_and(|c| c.session_id != second)
    });
    assert_eq!(op.attempts, 3, "{op:#?}");
}

#[test]
fn an_offer_nobody_takes_expires_with_one_line_in_ktr_status_and_its_candidate_removed() {
    let rig = Rig::with(Kind::Hand, "", &[]);
    let (op, _) = offered(&rig);
    let (_, path) = candidate_of(&op);
    rig.write_config("request_ttl_hours = 0.0001");
    std::thread::sleep(Duration::from_millis(600));
    let out = rig
        .program(exe("ktr"))
        .envs(rig.hook_env())
        .arg("status")
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let expired: Vec<&str> = said.lines().filter(|l| l.contains("expired")).collect();
    assert!(
        expired
            .iter()
            .any(|l| l.contains(&op.id.to_string()) && l.contains("nobody typed")),
        "{said}"
    );
    let op = rig.store().load(&op.id).unwrap();
    assert_eq!(op.status, Expired, "{op:#?}");
    assert!(!path.exists(), "the expired offer's candidate is removed");
}

/// The model asking for the status sees the same: the offer expired.
#[test]
fn an_offer_nobody_takes_expires_in_the_mcp_status_too() {
    let rig = Rig::with(Kind::Hand, "", &[]);
    let (op, _) = offered(&rig);
    rig.write_config("request_ttl_hours = 0.0001");
    std::thread::sleep(Duration::from_millis(600));
    let (mut mcp, _) = crate::mcp::Client::start(&rig.sandbox, Some(&rig.src));
    let (err, status) = mcp.call(
        "thread_rebuild_status",
        json!({"operation_id": op.id.to_string()}),
    );
    mcp.close();
    assert!(!err, "{status}");
    assert_eq!(status["operation"]["status"], "expired", "{status}");
    assert_eq!(rig.store().load(&op.id).unwrap().status, Expired);
}

#[test]
fn once_the_claude_of_the_offer_has_exited_a_resume_from_any_claude_activates() {
    let rig = Rig::with(Kind::Hand, "", &[]);
    let (op, _) = offered(&rig);
    let (cand, _) = candidate_of(&op);
    let pid = rig.claude_of(&rig.src).expect("the stand-in claude runs");
    std::process::Command::new("kill")
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        !ktr_pipeline::process::pid_alive(pid)
    }));
    // The person quit and ran `claude --resume <candidate>`.
    receipt_from_elsewhere(&rig, &cand);
    let op = rig.store().load(&op.id).unwrap();
    assert_eq!(op.status, Activated, "{op:#?}");
    assert!(
        op.history
            .last()
            .unwrap()
            .note
            .contains("after the first one exited")
    );
}

#[test]
fn a_rollback_by_hand_is_offered_and_the_receipt_of_the_old_session_rolls_back() {
    let rig = Rig::with(Kind::Hand, "", &[]);
    let (op, _) = offered(&rig);
    let (cand, path) = candidate_of(&op);
    receipt_from_the_terminal(&rig, &cand);
    rig.store().rollback_request(&op.id, "ROLLBACK").unwrap();
    // The rebuilt session's Stop, from the same Claude Code.
    let stop = rig.sandbox.stop_input(&cand, &path);
    let (said, _) = rig.hook_from_claude(&rig.src, exe("ktr-stop"), &stop);
    assert!(said.contains("rollback scheduled"), "{said}");
    let op = rig.wait_until(&op.id, |o| {
        o.status == RollbackOffered || o.status.is_terminal()
    });
    assert_eq!(op.status, RollbackOffered, "{op:#?}");
    let line = format!("/resume {}", rig.src);
    assert!(rig.ktr(&["status"]).contains(&line));
    // The rebuilt session spoke first: withdrawn, offered again after
    // that turn's Stop.
    let prompt = json!({"session_id": cand, "transcript_path": path,
        "hook_event_name": "UserPromptSubmit", "prompt": "wait"})
    .to_string();
    let (said, _) = rig.hook_from_claude(&rig.src, exe("ktr-prompt"), &prompt);
    assert!(said.contains("withdrawn"), "{said}");
    assert_eq!(rig.store().load(&op.id).unwrap().status, RollbackPending);
    rig.hook_from_claude(&rig.src, exe("ktr-stop"), &stop);
    let op = rig.wait_until(&op.id, |o| {
        o.status == RollbackOffered || o.status.is_terminal()
    });
    assert_eq!(op.status, RollbackOffered, "{op:#?}");
    receipt_from_the_terminal(&rig, &rig.src);
    let op = rig.store().load(&op.id).unwrap();
    assert_eq!(op.status, RolledBack, "{op:#?}");
    assert!(Path::new(&rig.source).is_file());
}
