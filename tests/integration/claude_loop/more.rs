//! The switch latency (a benchmark), a candidate Claude Code cannot load, another session asking
//! through MCP.

use super::*;
use crate::support::fake_api::all_strings;
use crate::support::fake_api::conversation;
use crate::support::{assert_in_order, claude, claude_bin};
use ktr_base::time::parse_rfc3339;
use ktr_pipeline::operation::Status;
use std::fs;
use std::path::Path;
use std::time::Instant;

/// The switch's latency as a benchmark, not a check of speed:
/// end of reply (the fake API sent the reply's `message_stop`) →
/// `activated`, then the same for a rollback (→ `rolled_back`), with every
/// timing key at its default, in
/// place and by respawn (`tmux_switch_in_place = false`) in the same run,
/// their order alternating, `KTR_BENCH_RUNS` times (default 1, so the suite
/// stays short), each on a fresh CLI: one `latency:` line per switch with
/// the breakdown from the operation's transitions and Claude Code's
/// receipt. `bench/latency.py` runs it and prints the medians; the figures
/// are in bench/README.md.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn switch_latency_with_the_defaults() {
    let bin = claude_bin();
    let _serial = serial();
    let runs: usize = std::env::var("KTR_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    for run in 1..=runs {
        let modes = if run % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        };
        for in_place in modes {
            measure_switch(&bin, run, runs, in_place);
        }
    }
}

/// One fresh CLI: rebuild, then roll back, each timed from the end of the
/// reply that scheduled it; prints the `latency:` lines.
fn measure_switch(bin: &Path, run: usize, runs: usize, in_place: bool) {
    let lp = Loop::start(bin, &[]);
    // Every timing key at the default a new user gets (config_text sets
    // the waits' upper bounds for a loaded machine).
    let config = &lp.env.sandbox.config;
    let mut settings = fs::read_to_string(config).unwrap();
    for line in [
        "stable_file_timeout_seconds = 20\n",
        "healthcheck_seconds = 5\n",
    ] {
        assert!(settings.contains(line), "config_text no longer sets {line}");
        settings = settings.replace(line, "");
    }
    if !in_place {
        settings = settings.replacen(
            "\n[resume_env]",
            "tmux_switch_in_place = false\n\n[resume_env]",
            1,
        );
    }
    fs::write(config, settings).unwrap();
    let mode = if in_place { "in place" } else { "respawn" };
    lp.talk_until_the_request();
    let op = lp.wait_activated();
    let took = lp.since_last_reply(&op, Status::Activated);
    let at = |to: Status| {
        let t = op.history.iter().find(|t| t.to == to).unwrap();
        parse_rfc3339(&t.at).unwrap()
    };
    let ack = parse_rfc3339(&op.ack.as_ref().expect("ktr-ack's receipt").at).unwrap();
    let span = |from: std::time::SystemTime, to: std::time::SystemTime| {
        to.duration_since(from)
            .map_or_else(|e| -e.duration().as_secs_f64(), |d| d.as_secs_f64())
    };
    // activate's "checks passed; switching" step: the last look passed.
    let log = fs::read_to_string(lp.store.worker_log()).unwrap_or_default();
    let switched = log
        .lines()
        .find(|l| l.contains("checks passed; switching"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(parse_rfc3339)
        .expect("activate logged its switch");
    eprintln!(
        "latency: run {run}/{runs} {mode}: reply end -> activated {took:.2} s \
         (scheduled -> running {:.2}; prepare {:.2}; verify {:.2}; \
         activating -> switch {:.2}; switch -> receipt {:.2}; \
         receipt -> activated {:.2})",
        span(at(Status::Scheduled), at(Status::Running)),
        span(at(Status::Running), at(Status::Verifying)),
        span(at(Status::Verifying), at(Status::Activating)),
        span(at(Status::Activating), switched),
        span(switched, ack),
        span(ack, at(Status::Activated)),
    );
    lp.ask_rollback(&op);
    let op = lp.wait_status("the rollback to finish", |s| {
        matches!(s, Status::RolledBack | Status::Failed)
    });
    assert_eq!(op.status, Status::RolledBack, "{}", notes(&op));
    let took = lp.since_last_reply(&op, Status::RolledBack);
    eprintln!(
        "latency: run {run}/{runs} {mode} rollback: reply end -> rolled_back {took:.2} s \
         (Stop hook -> rolled_back {:.2})",
        history_seconds(&op, Status::RollbackScheduled, Status::RolledBack),
    );
}

/// A candidate Claude Code cannot load (every timestamp stripped by the
/// debug-only `KTR_TEST_CORRUPT_CANDIDATE` hook, after which the recorded
/// digests describe the corrupted bytes) is never switched to: ktr-verify
/// refuses it (the timestamp check), the operation fails, the candidate is
/// discarded, and the pane keeps running the old session, whose next
/// request carries the old history.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_candidate_claude_code_cannot_load_is_never_switched_to() {
    let bin = claude_bin();
    let _serial = serial();
    let started = Instant::now();
    let lp = Loop::start(&bin, &[("KTR_TEST_CORRUPT_CANDIDATE", "strip-timestamps")]);
    let pane_before = lp.tmux.pane_pid();
    let ended = lp.talk_until_the_request();
    let op = lp.wait_status("the rebuild to finish", Status::is_terminal);
    let refused_after = ended.elapsed();
    assert!(
        matches!(op.status, Status::Failed | Status::RolledBack),
        "a corrupted candidate ended {}\n{}",
        op.status,
        notes(&op)
    );
    // What really happens: verification catches it before any switch.
    assert_eq!(op.status, Status::Failed, "{}", notes(&op));
    let error = op.error.clone().unwrap_or_default();
    assert!(
        error.contains("timestamp missing or not ISO-8601"),
        "{error}"
    );
    assert_eq!(op.verification.as_ref().map(|v| v.ok), Some(false));
    assert!(
        !op.history.iter().any(|t| t.to == Status::Activating),
        "the target was touched: {}",
        notes(&op)
    );
    assert!(!op.needs_attention && !op.session_conflict);
    let log = fs::read_to_string(lp.store.worker_log()).unwrap_or_default();
    assert!(
        log.contains("stripped every timestamp"),
        "the test hook did not run:\n{log}"
    );
    let candidate = op.candidate.clone().expect("the candidate stays on record");
    assert!(
        !candidate.path.exists(),
        "the refused candidate {} was not discarded",
        candidate.path.display()
    );

    // The pane never moved: same process, still on the original session.
    assert_eq!(lp.tmux.pane_pid(), pane_before, "the pane was respawned");
    let argv = lp.tmux.pane_argv();
    assert!(argv.contains(&lp.source_id), "{argv:?}");

    let next = lp.probe("USER-P PROBE-OLD 还在吗？", "PROBE-OLD", "ASSISTANT-P");
    let sent = conversation(&next);
    assert_in_order(
        &sent,
        &[
            "USER-L1",
            "ASSISTANT-L1",
            "USER-L2",
            "ASSISTANT-L3",
            "PROBE-OLD",
        ],
    );
    let mut everything = String::new();
    all_strings(&next.body["messages"], &mut everything);
    assert!(everything.contains("TOOL-OUTPUT-LINE"));
    eprintln!(
        "refusal: reply end -> failed {:.1} s ({error}); test took {:.1} s",
        refused_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn another_session_of_the_project_asking_through_mcp_is_refused_with_the_reason() {
    let bin = claude_bin();
    let _serial = serial();
    let lp = Loop::start(&bin, &[]);
    let pane = lp.tmux.pane_pid();
    // A second live session in the same project, in another window: not
    // the pane ktr switches.
    let other = uuid::Uuid::new_v4().to_string();
    let work = lp.env.sandbox.work.display().to_string();
    let cli = lp.env.bin.display().to_string();
    lp.tmux.run(&[
        "new-window",
        "-d",
        "-t",
        "cc:",
        "-c",
        &work,
        "--",
        &cli,
        "--session-id",
        &other,
    ]);
    let window = "cc:1.0";
    lp.tmux.wait_idle_of(window, TURN);
    lp.tmux.type_line_to(window, TALK[2].0);
    lp.tmux
        .wait_screen_of(window, "the reply ASSISTANT-L3", TURN, |s| {
            s.contains("ASSISTANT-L3")
        });
    // The model got the refusal as the tool's result, naming both sessions.
    let needle = format!("not the Claude of session {other}");
    let refused = lp
        .api
        .turns()
        .into_iter()
        .find(|r| {
            r.messages().iter().any(|m| {
                m["content"].as_array().into_iter().flatten().any(|b| {
                    let mut text = String::new();
                    all_strings(&b["content"], &mut text);
                    b["type"] == "tool_result" && b["is_error"] == true && text.contains(&needle)
                })
            })
        })
        .unwrap_or_else(|| {
            let mut seen = String::new();
            for r in lp.api.turns() {
                for m in r.messages() {
                    if m["role"] != "system" {
                        let _ = std::fmt::Write::write_fmt(
                            &mut seen,
                            format_args!(
                                "{}\n",
                                &m.to_string().chars().take(600).collect::<String>()
                            ),
                        );
                    }
                }
                seen.push_str("----\n");
            }
            panic!(
                "the model never saw the refusal\nrequests:\n{seen}\n{}",
                lp.diagnosis()
            )
        });
    let mut said = String::new();
    all_strings(&refused.body["messages"], &mut said);
    assert!(
        said.contains(&format!("target tmux pane {}", claude::PANE))
            && said.contains(&format!("(session {}…)", &lp.source_id[..8])),
        "the refusal names the target and the session it runs: {said}"
    );
    assert!(
        lp.store.latest().unwrap().is_none(),
        "nothing was requested"
    );
    assert_eq!(lp.tmux.pane_pid(), pane, "the target pane was not touched");
}
