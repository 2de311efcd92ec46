//! Window-aware ktr through the real binaries, with transcripts
//! whose replies record the usage a test chooses: the Stop hook's advice,
//! the compaction guard `ktr-precompact`, and `ktr-statusline`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::stop_hook::message;
use crate::support::{Sandbox, example};
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::Status;
const QUIET: &str = "{\"suppressOutput\":true}\n";
const SESSION: &str = "11111111-2222-4333-8444-555555555555";
/// The guard's whole line when the target does not run the session.
const NOT_SWITCHED: &str =
    "ktr: this session is not the one ktr switches (see ktr status); Claude Code compacted it";

/// The uuid of the example transcript's last record.
const EXAMPLE_LAST: &str = "5a8cc3ba-a142-5c1e-8360-fb4063d51856";

/// The fields every main-chain record of the test's session carries.
fn record(kind: &str, uuid: &str, parent: &str) -> serde_json::Value {
    serde_json::json!({
        "parentUuid": parent, "isSidechain": false, "type": kind, "uuid": uuid,
        "timestamp": "2026-11-20T09:00:00.000Z", "sessionId": SESSION,
        "cwd": "/work", "version": "2.1.328", "userType": "external",
    })
}

/// A session in a sandbox: the example conversation, then turns whose
/// replies report the usage the test chooses.
struct Session {
    sandbox: Sandbox,
    transcript: PathBuf,
    parent: String,
}

impl Session {
    /// A session whose target runs it (a pointer naming it), so that the
    /// compaction guard may block for it.
    fn new(extra_config: &str) -> Session {
        let sandbox = Sandbox::new();
        let pointer = sandbox.root().join("pointer");
        fs::write(&pointer, format!("{SESSION}\n")).unwrap();
        Session::with_config(
            sandbox,
            &format!("activation = \"pointer\"\nresume_pointer_path = {pointer:?}\n{extra_config}"),
        )
    }

    /// A session the target does not run (a pointer naming another), with
    /// the standing approval.
    fn targeting_another() -> Session {
        let sandbox = Sandbox::new();
        let pointer = sandbox.root().join("pointer");
        fs::write(&pointer, "someone-else\n").unwrap();
        Session::with_config(
            sandbox,
            &format!(
                "activation = \"pointer\"\nresume_pointer_path = {pointer:?}\non_auto_compaction = \"rebuild\""
            ),
        )
    }

    /// A session with the sandbox's own target (a tmux pane on no server).
    fn with_config(sandbox: Sandbox, extra_config: &str) -> Session {
        sandbox.write_config(extra_config);
        let transcript = sandbox.add_transcript(SESSION, &fs::read(example()).unwrap());
        let s = Session {
            sandbox,
            transcript,
            parent: EXAMPLE_LAST.into(),
        };
        // The example conversation was compacted once: with a state dir
        // (the statusline makes it), the first Stop offers the turns before
        // that boundary back, once; taken here, so that each
        // test sees only what its own turns cause.
        s.sandbox.store();
        let first = s.stop("EXAMPLE");
        assert!(
            first == QUIET || message(&first).contains("from before Claude Code's last compaction"),
            "{first}"
        );
        s
    }

    /// The records of one turn: `SAY-<tag>` answered by `REPLY-<tag>`,
    /// the reply's usage reporting `tokens` input tokens.
    fn turn_lines(&mut self, tag: &str, tokens: u64) -> String {
        self.turn_said(tag, tokens, &format!("REPLY-{tag}"))
    }

    /// A turn answered by `reply`; its prompt's records carry
    /// `promptId = prompt-<tag>`, as Claude Code 2.1.x writes them.
    fn turn_said(&mut self, tag: &str, tokens: u64, reply_text: &str) -> String {
        let user = uuid::Uuid::new_v4().to_string();
        let reply = uuid::Uuid::new_v4().to_string();
        let mut u = record("user", &user, &self.parent);
        u["message"] = serde_json::json!({"role": "user", "content": format!("SAY-{tag}")});
        u["promptId"] = format!("prompt-{tag}").into();
        let mut a = record("assistant", &reply, &user);
        a["message"] = serde_json::json!({
            "id": format!("msg_{tag}"), "type": "message", "role": "assistant",
            "model": "claude-opus-5-5",
            "content": [{"type": "text", "text": reply_text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": tokens, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 10},
        });
        self.parent = reply;
        format!("{u}\n{a}\n")
    }

    /// Append a turn whose reply reports `tokens`.
    fn turn(&mut self, tag: &str, tokens: u64) {
        let lines = self.turn_lines(tag, tokens);
        self.append(&lines);
    }

    fn append(&self, lines: &str) {
        fs::OpenOptions::new()
            .append(true)
            .open(&self.transcript)
            .unwrap()
            .write_all(lines.as_bytes())
            .unwrap();
    }

    /// Append what Claude Code writes when it compacts: the boundary and
    /// the summary as a user record.
    fn compacted(&mut self, summary: &str) {
        let boundary = uuid::Uuid::new_v4().to_string();
        let user = uuid::Uuid::new_v4().to_string();
        let mut b = record("system", &boundary, "");
        b["parentUuid"] = serde_json::Value::Null;
        b["logicalParentUuid"] = self.parent.clone().into();
        b["subtype"] = "compact_boundary".into();
        b["content"] = "Conversation compacted".into();
        b["compactMetadata"] = serde_json::json!({"trigger": "auto", "preTokens": 130_000});
        let mut u = record("user", &user, &boundary);
        u["isCompactSummary"] = true.into();
        u["isVisibleInTranscriptOnly"] = true.into();
        u["message"] = serde_json::json!({"role": "user", "content": format!(
            "This session is being continued from a previous conversation that ran out of context. {summary}")});
        self.parent = user;
        self.append(&format!("{b}\n{u}\n"));
    }

    /// `ktr status` of a rebuild asked for this session, bound to its
    /// transcript (and scheduled) by the Stop hook after `REPLY-<tag>`.
    fn status_of_a_rebuild(&self, tag: &str) -> crate::support::plan::Outcome {
        self.sandbox
            .store()
            .request(
                "asked",
                "REBUILD",
                Some(&SessionId::parse(SESSION).unwrap()),
            )
            .unwrap();
        self.stop(tag);
        self.sandbox.run("status", None, &[])
    }

    /// `ktr <command> --json` on the session's transcript.
    fn json(&self, command: &str) -> serde_json::Value {
        let out = self
            .sandbox
            .run(command, Some(self.transcript.as_path()), &["--json"]);
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("ktr {command} --json: {e}\n{}{}", out.stdout, out.stderr))
    }

    /// The Stop hook's output after the reply `REPLY-<tag>`.
    fn stop(&self, tag: &str) -> String {
        let input = serde_json::json!({
            "session_id": SESSION, "transcript_path": self.transcript,
            "hook_event_name": "Stop", "stop_hook_active": false,
            "last_assistant_message": format!("REPLY-{tag}"),
        });
        let (out, code) = self
            .sandbox
            .hook(crate::support::exe("ktr-stop"), &input.to_string());
        assert_eq!(code, 0);
        out
    }

    fn precompact(&self, trigger: &str) -> serde_json::Value {
        let input = serde_json::json!({
            "session_id": SESSION, "transcript_path": self.transcript, "cwd": "/work",
            "prompt_id": "p1", "hook_event_name": "PreCompact", "trigger": trigger,
            "custom_instructions": null,
        });
        let (out, code) = self
            .sandbox
            .hook(crate::support::exe("ktr-precompact"), &input.to_string());
        assert_eq!(code, 0);
        if out.is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    }

    fn statusline(&self, args: &[&str], used: Option<u64>, env: &[(&str, &str)]) -> String {
        let input = serde_json::json!({
            "session_id": SESSION, "transcript_path": self.transcript, "cwd": "/work",
            "model": {"id": "claude-x-small", "display_name": "Opus 5.5"},
            "workspace": {"current_dir": "/home/u/work", "project_dir": "/home/u/work"},
            "context_window": {"context_window_size": 1_000_000,
                "current_usage": used.map(|u| serde_json::json!({"input_tokens": u,
                    "output_tokens": 10, "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0}))},
        });
        let mut cmd = self.sandbox.command(crate::support::exe("ktr-statusline"));
        cmd.args(args);
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let (out, code) = Sandbox::run_hook(cmd, &input.to_string(), &env);
        assert_eq!(code, 0);
        out.trim_end_matches('\n').to_string()
    }
}

#[test]
fn the_stop_hook_advises_once_per_band_and_never_requests() {
    let mut s = Session::new("");
    s.turn("60", 600_000);
    assert_eq!(
        s.stop("60"),
        QUIET,
        "62 % of the compaction point is below the first band"
    );
    s.turn("72", 720_000);
    let line = message(&s.stop("72"));
    assert!(
        line.starts_with(
            "ktr: ≈ 247k tokens until Claude Code compacts (720k of 967k); a lossless rebuild would bring it to ≈ "
        ) && line.ends_with("say REBUILD to ask for it"),
        "{line}"
    );
    assert_eq!(s.stop("72"), QUIET, "the same band twice");
    s.turn("73", 730_000);
    assert_eq!(
        s.stop("73"),
        QUIET,
        "75 % of the point is still the 70 band"
    );
    s.turn("81", 810_000);
    assert!(message(&s.stop("81")).contains("(810k of 967k)"));
    assert!(
        s.sandbox.store().latest().unwrap().is_none(),
        "advice must never request anything"
    );
    // The window shrank (Claude Code dropped context, here without a
    // boundary: said once): a refill advises again.
    s.turn("20", 200_000);
    assert!(
        message(&s.stop("20")).starts_with(
            "ktr: Claude Code dropped context without compacting (the window fell from 810k to 200k tokens between two replies)"
        )
    );
    s.turn("75", 750_000);
    assert!(message(&s.stop("75")).contains("(750k of 967k)"));
    // advise_at_percent = 0 turns it off.
    s.sandbox.write_config("advise_at_percent = 0");
    s.turn("95", 950_000);
    assert_eq!(s.stop("95"), QUIET);
}

#[test]
fn the_stop_hook_waits_for_claude_code_to_flush_the_reply() {
    let mut s = Session::new("");
    s.turn("50", 500_000);
    // Claude Code starts the Stop hook before the turn is in the file.
    let late = s.turn_lines("LATE", 780_000);
    let path = s.transcript.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(late.as_bytes()).unwrap();
    });
    let out = s.stop("LATE");
    writer.join().unwrap();
    assert!(message(&out).contains("(780k of 967k)"), "{out}");
}

#[test]
fn a_manual_compact_is_never_blocked() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    let op = s
        .sandbox
        .store()
        .request("full", "REBUILD", Some(&SessionId::parse(SESSION).unwrap()))
        .unwrap();
    assert_eq!(
        s.precompact("manual"),
        serde_json::Value::Null,
        "nothing printed on /compact (Claude Code shows even suppressOutput there)"
    );
    let op = s.sandbox.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::Pending, "a manual /compact started it");
    assert!(s.sandbox.records("ktr-prepare").is_empty());
}

#[test]
fn a_pending_rebuild_blocks_the_auto_compaction_and_starts_at_once() {
    let mut s = Session::new("");
    s.turn("FULL", 999_000);
    let op = s.sandbox.store().request("full", "REBUILD", None).unwrap();
    let out = s.precompact("auto");
    assert_eq!(out["decision"], "block", "{out}");
    let reason = out["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("operation {}", op.id)) && reason.contains("press ↑ then Enter"),
        "{reason}"
    );
    let op = s.sandbox.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::Scheduled);
    assert_eq!(op.session_id.as_deref(), Some(SESSION));
    let note = &op.history.last().unwrap().note;
    assert!(
        note.starts_with(&format!(
            "PreCompact hook of session {SESSION} started prepare"
        )) && note.ends_with("instead of Claude Code's auto-compaction"),
        "{note}"
    );
    let started = s.sandbox.wait_records("ktr-prepare", 1);
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(
        started[0].1.iter().any(|a| a == &op.id.to_string()),
        "{started:?}"
    );
}

#[test]
fn the_standing_approval_requests_and_blocks_and_advise_lets_it_compact() {
    // "rebuild": nothing pending, the guard requests and starts it.
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    let out = s.precompact("auto");
    assert_eq!(out["decision"], "block", "{out}");
    let op = s.sandbox.store().latest().unwrap().unwrap();
    assert_eq!(op.status, Status::Scheduled);
    assert!(op.reasons[0].contains("on_auto_compaction"), "{op:?}");

    // "advise" (the default): Claude Code compacts; the next Stop says so.
    let mut s = Session::new("");
    s.turn("FULL", 999_000);
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    assert!(s.sandbox.store().latest().unwrap().is_none());
    s.compacted("Summary.");
    s.turn("AFTER", 30_000);
    let line = message(&s.stop("AFTER"));
    assert!(
        line.starts_with("ktr: Claude Code compacted this window (lossy) before this reply; a lossless rebuild would have brought it to ≈ ")
            && line.contains("on_auto_compaction = \"rebuild\""),
        "{line}"
    );
    // Then, on its own line, the offer of the turns now in the summary.
    assert!(
        line.lines().nth(1).is_some_and(|l| l.starts_with("ktr: ")
            && l.contains(" turns from before Claude Code's last compaction are only in its summary now; a rebuild restores them word for word")),
        "{line}"
    );
    assert_eq!(s.stop("AFTER"), QUIET, "the notice is shown once");
}

#[test]
fn the_guard_never_blocks_when_a_rebuild_cannot_help() {
    // The rebuilt window would not fit: the plan is refused.
    let mut s = Session::new("context_window_tokens = 20000");
    s.turn("FULL", 19_000);
    let op = s.sandbox.store().request("full", "REBUILD", None).unwrap();
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    let line = out["systemMessage"].as_str().unwrap();
    assert!(
        line.starts_with("ktr: a rebuild cannot replace this compaction: ")
            && line.contains("carry_max_tokens")
            && line.ends_with("Claude Code compacted this window (lossy) instead"),
        "{line}"
    );
    assert_eq!(
        s.sandbox.store().load(&op.id).unwrap().status,
        Status::Pending
    );
    // Another operation is running.
    let mut s = Session::new("");
    s.turn("FULL", 999_000);
    let op = s.sandbox.store().request("full", "REBUILD", None).unwrap();
    s.sandbox
        .walk(&op.id, &[Status::Scheduled, Status::Running], |_| {});
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    assert!(
        out["systemMessage"]
            .as_str()
            .unwrap()
            .contains("a rebuild cannot start now"),
        "{out}"
    );
    assert!(s.sandbox.records("ktr-prepare").is_empty());
}

#[test]
fn the_statusline_shows_the_segment_and_remembers_the_window_size() {
    let mut s = Session::new("");
    s.turn("78", 780_000);
    assert_eq!(
        s.statusline(&[], None, &[]),
        "Opus 5.5 · work · ktr –",
        "before the first reply"
    );
    // (The example conversation's 6 turns before its compaction are only
    // in Claude Code's summary: a rebuild restores them.)
    let line = s.statusline(&[], Some(780_000), &[]);
    assert!(
        line.starts_with("Opus 5.5 · work · ktr 78% of 1M · 6 turns only in summary · rebuild→")
            && line.ends_with('%'),
        "{line}"
    );
    let segment = s.statusline(&["--segment"], Some(780_000), &[]);
    assert!(
        segment.starts_with("ktr 78% of 1M · 6 turns only in summary · rebuild→"),
        "{segment}"
    );
    let colored = s.statusline(&["--segment", "--color"], Some(780_000), &[]);
    assert!(colored.starts_with("\x1b[33mktr 78%"), "{colored:?}");
    let plain = s.statusline(
        &["--segment", "--color"],
        Some(780_000),
        &[("NO_COLOR", "1")],
    );
    assert_eq!(plain, segment);
    // The reported size is remembered: `ktr dirty` uses it although the
    // model id alone would say 200k.
    let remembered = s.sandbox.state.join(format!("window/{SESSION}.json"));
    let r: serde_json::Value = serde_json::from_slice(&fs::read(&remembered).unwrap()).unwrap();
    assert_eq!(r["context_window_size"], 1_000_000);
    // A pending rebuild shows instead of the estimate.
    s.sandbox.store().request("full", "REBUILD", None).unwrap();
    assert_eq!(
        s.statusline(&["--segment"], Some(780_000), &[]),
        "ktr 78% of 1M · rebuild pending"
    );
}

#[test]
fn dirty_uses_the_reported_size_and_reads_the_window_from_the_api_usage() {
    let mut s = Session::new("");
    s.turn("61", 612_000);
    let out = s
        .sandbox
        .run("dirty", Some(s.transcript.as_path()), &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", out.stdout, out.stderr));
    let w = &v["window"];
    assert_eq!(w["used_tokens"], 612_000, "{w}");
    assert_eq!(w["used_source"], "usage");
    assert_eq!(w["size_tokens"], 1_000_000, "claude-opus-5-5 has 1M: {w}");
    assert_eq!(w["advice"], "none", "61 % is below advise_at_percent: {w}");
    let human = s.sandbox.run("dirty", Some(s.transcript.as_path()), &[]);
    let first = human.stdout.lines().next().unwrap_or_default().to_string();
    assert!(
        first.starts_with("window 612k / 1M (61 %, measured by the API")
            && first.contains("a rebuild would start at ≈"),
        "{first}"
    );
    // The readable plan leads with the same line as its first row.
    let plan = s.sandbox.run("plan", Some(s.transcript.as_path()), &[]);
    let row = plan.stdout.lines().next().unwrap_or_default();
    assert_eq!(
        row.strip_prefix("window").map(str::trim_start),
        Some(first.as_str()),
        "{}",
        plan.stdout
    );
    let overhead = format!(
        "(formula; + overhead {} of a fresh window",
        w["overhead_tokens"]
    );
    assert!(
        plan.stdout.contains(&overhead),
        "{overhead}:\n{}",
        plan.stdout
    );
    check_statusline_size(&s);
}

/// After the statusline reported 1M for a model id that would say 200k,
/// `ktr dirty` uses the reported size.
#[track_caller]
fn check_statusline_size(s: &Session) {
    let path: &Path = &s.transcript;
    // A transcript whose model ktr does not know (200k by the model id).
    let text = fs::read_to_string(path)
        .unwrap()
        .replace("claude-opus-5-5", "claude-x-small");
    fs::write(path, text).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&s.sandbox.run("dirty", Some(path), &["--json"]).stdout).unwrap();
    assert_eq!(v["window"]["size_tokens"], 200_000, "{}", v["window"]);
    s.statusline(&[], Some(612_000), &[]);
    let v: serde_json::Value =
        serde_json::from_str(&s.sandbox.run("dirty", Some(path), &["--json"]).stdout).unwrap();
    assert_eq!(v["window"]["size_tokens"], 1_000_000, "{}", v["window"]);
}

/// A model name or a folder name with terminal escape
/// sequences is printed with them made harmless.
#[test]
fn the_statusline_never_prints_escape_sequences_from_its_input() {
    let sandbox = Sandbox::new();
    let input = serde_json::json!({
        "session_id": "s1",
        "model": {"id": "x", "display_name": "Opus\u{1b}]0;pwned\u{7}\u{1b}[2J"},
        "workspace": {"current_dir": "/w/proj\u{1b}[31m\u{9b}1m"},
        "context_window": {"context_window_size": 200_000, "current_usage": null},
    });
    let (out, code) = sandbox.hook(crate::support::exe("ktr-statusline"), &input.to_string());
    assert_eq!(code, 0);
    assert_eq!(out, "Opus?]0;pwned??[2J · proj?[31m?1m · ktr –\n");
}

/// The guard blocks only when a rebuild can really
/// replace the compaction — the target runs this session, the rebuild it
/// started last time did not fail — else it lets Claude Code compact and
/// says why, and nothing is started (it used to block every prompt).
#[test]
fn the_guard_never_strands_a_session_the_target_does_not_run() {
    // The target is a tmux pane on no server (the sandbox's own config).
    let mut s = Session::with_config(Sandbox::new(), "");
    s.turn("FULL", 999_000);
    let op = s.sandbox.store().request("full", "REBUILD", None).unwrap();
    for _ in 0..2 {
        let out = s.precompact("auto");
        assert!(out.get("decision").is_none(), "{out}");
        assert_eq!(out["systemMessage"], NOT_SWITCHED, "{out}");
    }
    assert_eq!(
        s.sandbox.store().load(&op.id).unwrap().status,
        Status::Pending
    );
    assert!(s.sandbox.records("ktr-prepare").is_empty());

    // The target runs another session (the pointer names it).
    let mut s = Session::targeting_another();
    s.turn("FULL", 999_000);
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    assert!(
        s.sandbox.store().latest().unwrap().is_none(),
        "nothing requested"
    );
}

#[test]
fn the_guard_never_blocks_twice_for_the_same_failure() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    assert_eq!(s.precompact("auto")["decision"], "block");
    let op = s.sandbox.store().latest().unwrap().unwrap();
    // Its prepare failed (e.g. the target went away before the switch).
    s.sandbox
        .walk(&op.id, &[Status::Running, Status::Failed], |op| {
            op.error = Some("target went away".into());
        });
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    let line = out["systemMessage"].as_str().unwrap();
    assert!(
        line.contains(&format!(
            "the rebuild it started instead of the last compaction ({})",
            op.id
        )) && line.contains("target went away"),
        "{line}"
    );
    assert_eq!(s.sandbox.store().list().unwrap().len(), 1, "no new request");
}

/// A rebuild the guard started whose stage was killed (recovery failed it:
/// the worker died) failed by a moment's accident, not for this session:
/// the next compaction is blocked and rebuilt again; after a second such
/// failure in a row, the guard lets Claude Code compact (never a loop).
#[test]
fn the_guard_tries_once_more_after_a_killed_stage() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    let killed = |s: &Session| {
        let op = s.sandbox.store().latest().unwrap().unwrap();
        s.sandbox
            .walk(&op.id, &[Status::Running, Status::Failed], |op| {
                op.worker_died_in = Some(Status::Running);
            });
        op
    };
    assert_eq!(s.precompact("auto")["decision"], "block");
    killed(&s);
    let out = s.precompact("auto");
    assert_eq!(out["decision"], "block", "tried once more: {out}");
    let second = killed(&s);
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    let line = out["systemMessage"].as_str().unwrap();
    assert!(line.contains(&second.id.to_string()), "{line}");
    assert_eq!(
        s.sandbox.store().list().unwrap().len(),
        2,
        "no third request"
    );
}

/// A rebuild the guard started whose ktr-activate was killed a moment ago
/// (the operation still says `activating`, its worker is gone, the grace
/// not over) does nothing any more: the next compaction is not let through
/// as "an operation is running" — the dead operation is failed at once and
/// the rebuild started again.
#[test]
fn the_guard_fails_a_just_killed_switch_at_once_and_rebuilds_again() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    assert_eq!(s.precompact("auto")["decision"], "block");
    let op = s.sandbox.store().latest().unwrap().unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    s.sandbox.walk(
        &op.id,
        &[Status::Running, Status::Verifying, Status::Activating],
        |op| {
            op.worker = Some(ktr_pipeline::operation::Worker {
                pid,
                start_time: 1,
                stage: ktr_pipeline::operation::Stage::Activate,
            });
        },
    );
    let out = s.precompact("auto");
    assert_eq!(out["decision"], "block", "rebuilt again: {out}");
    let old = s.sandbox.store().load(&op.id).unwrap();
    assert_eq!(
        (old.status, old.worker_died_in),
        (Status::Failed, Some(Status::Activating))
    );
    assert_eq!(s.sandbox.store().list().unwrap().len(), 2, "a new rebuild");
}

/// While this session's own rebuild is under way (its stage alive, e.g.
/// deferred by a draft and prepared again), the next auto-compaction is
/// blocked too: the switch replaces it. Claude Code compacted lossily in
/// that window before (the soak).
#[test]
fn the_guard_blocks_while_this_sessions_rebuild_is_under_way() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("FULL", 999_000);
    assert_eq!(s.precompact("auto")["decision"], "block");
    let op = s.sandbox.store().latest().unwrap().unwrap();
    s.sandbox.walk(&op.id, &[Status::Running], |op| {
        op.worker = Some(ktr_pipeline::operation::Worker::current(
            ktr_pipeline::operation::Stage::Prepare,
        ));
    });
    let out = s.precompact("auto");
    assert_eq!(out["decision"], "block", "{out}");
    let why = out["reason"].as_str().unwrap_or_default();
    assert!(why.contains(&op.id.to_string()), "{why}");
    assert_eq!(
        s.sandbox.store().list().unwrap().len(),
        1,
        "no second request"
    );
}

/// The advice is about the reply that just ended,
/// provably (its prompt's `promptId`), never an earlier one whose text
/// looks the same. Each Stop hook starts before its turn is in the file
/// (as Claude Code 2.1.328 does), every reply says "Noted.", and the usage
/// jumps, into a band and across several at once.
#[test]
fn every_advice_line_names_the_usage_of_the_reply_that_just_ended() {
    let mut s = Session::new("");
    // (usage in thousands of a 1M window, the band line it must bring)
    let turns: [(u64, Option<&str>); 10] = [
        (120, None),
        (400, None),
        (710, Some("(710k of 967k)")),
        (715, None),
        // A fall by more than half with no boundary: said.
        (
            120,
            Some("dropped context without compacting (the window fell from 715k to 120k tokens"),
        ),
        (
            990,
            Some("past the point where Claude Code compacts (990k of 967k)"),
        ),
        (990, None),
        (
            300,
            Some("dropped context without compacting (the window fell from 990k to 300k tokens"),
        ),
        (810, Some("(810k of 967k)")),
        (820, None),
    ];
    for (i, (thousands, expect)) in turns.into_iter().enumerate() {
        let tag = format!("T{i}");
        let lines = s.turn_said(&tag, thousands * 1000, "Noted.");
        let input = serde_json::json!({
            "session_id": SESSION, "transcript_path": s.transcript,
            "hook_event_name": "Stop", "stop_hook_active": false,
            "prompt_id": format!("prompt-{tag}"),
            "last_assistant_message": "Noted.",
        })
        .to_string();
        let out = std::thread::scope(|scope| {
            let hook = scope.spawn(|| s.sandbox.hook(crate::support::exe("ktr-stop"), &input));
            // The turn reaches the file while the hook already runs.
            std::thread::sleep(Duration::from_millis(300));
            fs::OpenOptions::new()
                .append(true)
                .open(&s.transcript)
                .unwrap()
                .write_all(lines.as_bytes())
                .unwrap();
            hook.join().unwrap()
        });
        assert_eq!(out.1, 0);
        match expect {
            Some(text) => {
                let line = message(&out.0);
                assert!(line.contains(text), "turn {i} ({thousands}k): {line}");
            }
            None => assert_eq!(out.0, QUIET, "turn {i} ({thousands}k)"),
        }
    }
}

/// On a 200k window Claude Code compacts at ≈ 167k, so
/// the bands are measured against that point and the last one leaves
/// room for one long reply; a model ktr does not know is taken as 200k,
/// and the line says so.
#[test]
fn the_bands_are_measured_against_the_compaction_point_of_a_200k_window() {
    let mut s = Session::new("");
    // claude-opus-5-5 (the turns' model) has 1M; this session says 200k.
    s.sandbox
        .write_config(&format!("{}\ncontext_window_tokens = 200000", {
            let pointer = s.sandbox.root().join("pointer");
            format!("activation = \"pointer\"\nresume_pointer_path = {pointer:?}")
        }));
    s.turn("A", 100_000);
    assert_eq!(s.stop("A"), QUIET, "60 % of 167k");
    s.turn("B", 120_000);
    let line = message(&s.stop("B"));
    assert!(
        line.starts_with("ktr: ≈ 47k tokens until Claude Code compacts (120k of 167k)"),
        "{line}"
    );
    s.turn("C", 140_000);
    assert!(message(&s.stop("C")).contains("(140k of 167k)"), "80 band");
    // The last band: 88 % of 167k, still 20k before the point.
    s.turn("D", 146_000);
    assert_eq!(s.stop("D"), QUIET, "87 %: still the 80 band");
    s.turn("E", 147_000);
    assert!(message(&s.stop("E")).contains("≈ 20k tokens until Claude Code compacts"));
}

/// The bands, the advice line, the statusline and
/// `ktr status` follow the setting Claude Code uses — the hooks see its
/// environment (`CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`) and its settings
/// (`autoCompactEnabled: false`), and each names it.
#[test]
fn the_advice_and_status_follow_claude_codes_compaction_setting() {
    const PCT: (&str, &str) = ("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", "60");
    let mut s = Session::new("");
    let stop = |s: &Session, tag: &str, env: &[(&str, &str)]| {
        let input = serde_json::json!({
            "session_id": SESSION, "transcript_path": s.transcript,
            "hook_event_name": "Stop", "stop_hook_active": false,
            "last_assistant_message": format!("REPLY-{tag}"),
        });
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let (out, code) =
            s.sandbox
                .hook_env(crate::support::exe("ktr-stop"), &input.to_string(), &env);
        assert_eq!(code, 0);
        out
    };
    s.turn("A", 500_000);
    assert_eq!(stop(&s, "A", &[]), QUIET, "52 % of the default 967k");
    // 60 % of (1M − 20k) = 588k: 500k is 85 % of it.
    let line = message(&stop(&s, "A", &[PCT]));
    assert!(
        line.starts_with(
            "ktr: ≈ 88k tokens until Claude Code compacts (500k of 588k, CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=60); "
        ),
        "{line}"
    );
    assert!(
        s.statusline(&[], Some(500_000), &[PCT])
            .contains("ktr 50% of 1M · compacts at 588k"),
        "{}",
        s.statusline(&[], Some(500_000), &[PCT])
    );
    // Auto-compaction off (settings.json): the hard limit, whatever the
    // override says.
    let settings = s.sandbox.home.join(".claude/settings.json");
    fs::create_dir_all(settings.parent().unwrap()).unwrap();
    fs::write(&settings, r#"{"autoCompactEnabled": false}"#).unwrap();
    assert!(
        s.statusline(&[], Some(500_000), &[PCT])
            .contains("ktr 50% of 1M · no auto-compact")
    );
    s.turn("B", 960_000);
    let line = message(&stop(&s, "B", &[PCT]));
    assert!(
        line.starts_with(&format!(
            "ktr: ≈ 17k tokens until the window's hard limit (960k of 977k; auto-compaction is off: autoCompactEnabled false in {}); ",
            settings.display()
        )),
        "{line}"
    );
    // ktr status names the point and its source.
    let op = s
        .sandbox
        .store()
        .request("x", "REBUILD", Some(&SessionId::parse(SESSION).unwrap()))
        .unwrap();
    let transcript = s.transcript.clone();
    s.sandbox.walk(&op.id, &[Status::Scheduled], |op| {
        op.transcript_path = Some(transcript);
    });
    let status = |env: &[(&str, &str)]| {
        let mut cmd = s.sandbox.command(crate::support::exe("ktr"));
        cmd.args(["status", "--json"]).envs(env.iter().copied());
        let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["window"].clone()
    };
    fs::write(&settings, "{}").unwrap();
    let w = status(&[]);
    assert_eq!(w["compaction_point_tokens"], 967_000, "{w:#}");
    let w = status(&[PCT]);
    assert_eq!(w["compaction_point_tokens"], 588_000, "{w:#}");
    assert!(
        w["compaction_point_source"]
            .as_str()
            .unwrap()
            .starts_with("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=60"),
        "{w:#}"
    );
    fs::write(&settings, r#"{"autoCompactEnabled": false}"#).unwrap();
    let w = status(&[PCT]);
    assert_eq!(w["compaction_point_tokens"], 977_000, "{w:#}");
    let source = w["compaction_point_source"].as_str().unwrap();
    assert!(
        source.starts_with("autoCompactEnabled false in ")
            && source.contains("no auto-compaction; the window's hard limit"),
        "{w:#}"
    );
}

/// After a compaction Claude Code 2.1.328 reports a
/// zeroed `current_usage` until the next reply (measured with the real
/// CLI: every field 0); the statusline then shows what `ktr dirty` shows,
/// not `ktr 0%`: the transcript's last usage, or after a compaction
/// boundary the estimate (marked `≈`).
#[test]
fn a_zeroed_report_reads_the_transcript_like_dirty() {
    let mut s = Session::new("");
    s.turn("13", 130_000);
    let dirty = |s: &Session| s.json("dirty");
    let v = dirty(&s);
    assert_eq!(v["window"]["used_tokens"], 130_000, "{v}");
    let segment = s.statusline(&["--segment"], Some(0), &[]);
    assert!(segment.starts_with("ktr 13% of 1M · "), "{segment}");
    // A real report is still taken as it is.
    let segment = s.statusline(&["--segment"], Some(250_000), &[]);
    assert!(segment.starts_with("ktr 25% of 1M · "), "{segment}");
    // Claude Code compacts: a boundary and the summary, no reply yet.
    s.compacted(&"the summary of everything so far. ".repeat(6000));
    let v = dirty(&s);
    assert_eq!(v["window"]["used_source"], "estimate", "{v}");
    let percent = v["window"]["used_percent"].as_f64().unwrap();
    let segment = s.statusline(&["--segment"], Some(0), &[]);
    assert!(
        segment.starts_with(&format!("ktr ≈{percent:.0}% of 1M · ")),
        "dirty says {percent} %: {segment}"
    );
    assert!(percent >= 1.0, "{v}");
}

/// After a compaction the next Stop hook offers the
/// turns Claude Code now has only in its summary — once per boundary —
/// and the statusline, `ktr dirty` and `ktr plan` say the same.
#[test]
fn after_a_compaction_the_turns_in_the_summary_are_offered_back_once() {
    let mut s = Session::new("");
    s.turn("ONE", 100_000);
    s.turn("TWO", 120_000);
    let plan = |s: &Session| s.json("plan");
    let dirty = |s: &Session| s.json("dirty");
    // The example conversation was compacted once already (its offer was
    // taken by the first Stop, `Session::new`): nothing new to offer.
    let p = plan(&s);
    let earlier = p["compactions_undone"][0]["turns_before"].as_u64().unwrap();
    assert!(earlier >= 1, "{p}");
    assert_eq!(s.stop("TWO"), QUIET, "offered once per boundary");
    let before = p["source_turns"].as_u64().unwrap();
    assert!(before > earlier, "{p}");
    s.compacted("Summary one.");
    s.turn("AFTER", 30_000);
    let line = message(&s.stop("AFTER"));
    assert!(
        line.starts_with(&format!(
            "ktr: {before} turns from before Claude Code's last compaction are only in its summary now; a rebuild restores them word for word at ≈ "
        )) && line.ends_with(" tokens — say REBUILD to ask for it"),
        "{line}"
    );
    assert_eq!(s.stop("AFTER"), QUIET, "offered once per boundary");
    s.turn("NEXT", 32_000);
    assert_eq!(s.stop("NEXT"), QUIET, "offered once per boundary");
    assert!(
        s.sandbox.store().latest().unwrap().is_none(),
        "the offer never requests anything"
    );
    let segment = s.statusline(&["--segment"], Some(32_000), &[]);
    assert!(
        segment.contains(&format!(" · {before} turns only in summary · rebuild→")),
        "{segment}"
    );
    let v = dirty(&s);
    assert_eq!(v["window"]["summarised_turns"], before, "{v}");
    assert_eq!(v["should_rebuild"], true, "{v}");
    assert!(
        v["reasons"].to_string().contains(&format!(
            "Claude Code compacted this window: {before} turns are only in its summary"
        )),
        "{v}"
    );
    let human = s.sandbox.run("dirty", Some(s.transcript.as_path()), &[]);
    assert!(
        human.stdout.contains(&format!("\ncompacted: {before} turns from before Claude Code's last compaction are only in its summary now; a rebuild restores them word for word at ≈ ")),
        "{}",
        human.stdout
    );
    // `ktr plan` names the compaction it undoes and the turns it restores.
    let p = plan(&s);
    let undone = &p["compactions_undone"];
    assert_eq!(undone.as_array().unwrap().len(), 2, "{p}");
    assert_eq!(undone[1]["turns_before"], before, "{p}");
    assert_eq!(undone[1]["turns_restored"], before, "{p}");
    assert_eq!(p["selected_turns"], before + 2, "{p}");
    // A second compaction is a new boundary: offered again, with the
    // turns since.
    s.compacted("Summary two.");
    s.turn("LATER", 30_000);
    let line = message(&s.stop("LATER"));
    assert!(
        line.starts_with(&format!("ktr: {} turns from before", before + 2)),
        "{line}"
    );
    assert_eq!(s.stop("LATER"), QUIET);
    // `ktr status` of a rebuild asked for this session says it too.
    let status = s.status_of_a_rebuild("LATER");
    assert!(
        status.stdout.contains(&format!(
            "\ncompacted         {} turns from before Claude Code's last compaction are only in its summary; a rebuild carries them word for word",
            before + 2
        )),
        "{}",
        status.stdout
    );
    let v: serde_json::Value =
        serde_json::from_str(&s.sandbox.run("status", None, &["--json"]).stdout).unwrap();
    assert_eq!(v["window"]["summarised_turns"], before + 2, "{v}");
}

/// When the turns would not fit back under the compaction point with
/// room, the offer points to `ktr recall` instead.
#[test]
fn after_a_compaction_that_a_rebuild_cannot_undo_recall_is_offered() {
    // Claude Code compacts a 34k window at 1k: no rebuild fits under it.
    let mut s = Session::new("context_window_tokens = 34000");
    s.turn("ONE", 500);
    s.compacted("Summary.");
    s.turn("AFTER", 300);
    let line = message(&s.stop("AFTER"));
    assert!(
        line.contains("only in its summary now; a rebuild carrying them would start at ≈ ")
            && line.contains("but `ktr recall` still finds them word for word"),
        "{line}"
    );
    assert_eq!(s.stop("AFTER"), QUIET);
    // (No rebuild figure: a rebuild would free nothing here.)
    let segment = s.statusline(&["--segment"], Some(300), &[]);
    assert!(segment.ends_with(" turns only in summary"), "{segment}");
}

/// Context Claude Code dropped without a compaction
/// boundary is said once, with what a rebuild would carry — a reply whose
/// usage fell by more than half since the previous one, a
/// microcompaction record.
#[test]
fn context_dropped_without_compacting_is_said_once() {
    let mut s = Session::new("");
    s.turn("BIG", 612_000);
    assert_eq!(s.stop("BIG"), QUIET);
    s.turn("SMALL", 275_000);
    let line = message(&s.stop("SMALL"));
    assert!(
        line.starts_with("ktr: Claude Code dropped context without compacting (the window fell from 612k to 275k tokens between two replies); a rebuild would carry all ")
            && line.ends_with(" tokens — say REBUILD to ask for it"),
        "{line}"
    );
    assert_eq!(s.stop("SMALL"), QUIET, "said once");
    // The statusline shows it for as long as this window lasts.
    let line = s.statusline(&["--segment"], Some(275_000), &[]);
    assert!(line.contains(" · context cleared"), "{line}");
    // `ktr dirty` says it too (what the hooks' running account saw).
    let v = s.json("dirty");
    assert_eq!(v["cleared"]["kind"], "usage_drop", "{v}");
    assert_eq!(
        (&v["cleared"]["from_tokens"], &v["cleared"]["to_tokens"]),
        (&serde_json::json!(612_000), &serde_json::json!(275_000))
    );
    let human = s.sandbox.run("dirty", Some(s.transcript.as_path()), &[]);
    assert!(
        human
            .stdout
            .contains("\ncleared: Claude Code dropped context without compacting (the window fell from 612k to 275k tokens between two replies); a rebuild would carry all "),
        "{}",
        human.stdout
    );
    // A microcompaction record.
    let mut mc = record("system", "0c0c0c0c-0000-4000-8000-000000000001", &s.parent);
    mc["subtype"] = "microcompact_boundary".into();
    mc["content"] = "Context microcompacted".into();
    s.append(&format!("{mc}\n"));
    s.turn("AFTER", 260_000);
    let line = message(&s.stop("AFTER"));
    assert!(
        line.starts_with(
            "ktr: Claude Code cleared old tool results from this window without compacting (microcompact); a rebuild would carry all "
        ),
        "{line}"
    );
    assert_eq!(s.stop("AFTER"), QUIET, "said once");
    // `ktr status` of a rebuild asked for this session names it.
    let status = s.status_of_a_rebuild("AFTER");
    assert!(
        status.stdout.contains(
            "\ncleared           Claude Code cleared old tool results from this window without compacting (microcompact); a rebuild carries the whole conversation word for word"
        ),
        "{}",
        status.stdout
    );
}

/// `ktr status --json` of the sandbox (always an object), and the readable one.
fn status(s: &Session) -> (serde_json::Value, String) {
    let out = s.sandbox.run("status", None, &["--json"]);
    let v = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", out.stdout, out.stderr));
    (v, s.sandbox.run("status", None, &[]).stdout)
}

/// The advice says what will happen: with the
/// standing approval ktr will rebuild by itself (nothing to ask for);
/// where the target does not run the session a rebuild could never switch
/// it (nothing offered), and the guard's refusal is one short sentence
/// whose details `ktr status` shows.
#[test]
fn the_advice_says_what_will_happen() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("72", 720_000);
    let line = message(&s.stop("72"));
    assert!(
        line.starts_with(
            "ktr: ≈ 247k tokens until Claude Code compacts (720k of 967k); ktr will rebuild instead (≈ "
        ) && line.ends_with("k)")
            && !line.contains("REBUILD"),
        "{line}"
    );
    // Without the approval: the offer.
    s.sandbox.write_config(&format!(
        "activation = \"pointer\"\nresume_pointer_path = {:?}",
        s.sandbox.root().join("pointer")
    ));
    s.turn("81", 810_000);
    assert!(
        message(&s.stop("81")).ends_with("— say REBUILD to ask for it"),
        "{}",
        message(&s.stop("81"))
    );

    // The target (a pointer) names another session.
    let mut s = Session::targeting_another();
    s.turn("72", 720_000);
    assert_eq!(
        message(&s.stop("72")),
        "ktr: ≈ 247k tokens until Claude Code compacts (720k of 967k); this session is not the one ktr switches (see ktr status)"
    );
    s.turn("FULL", 999_000);
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    assert_eq!(out["systemMessage"], NOT_SWITCHED, "{out}");
    let (v, human) = status(&s);
    let found = &v["not_switched"];
    assert_eq!(found["session_id"], SESSION, "{v:#}");
    let why = found["why"].as_str().unwrap();
    assert!(
        why.contains("names session someone-else, not session"),
        "{v:#}"
    );
    assert!(
        human.contains(&format!("not switched      session {SESSION} (")) && human.contains(why),
        "{human}"
    );
}

/// The statusline names the window's size, and
/// shows the rebuild figure only when a rebuild frees something (right
/// after one, it would not: `ktr 1% · rebuild→2%` said nothing useful).
#[test]
fn the_statusline_names_the_size_and_a_rebuild_only_when_it_frees_something() {
    let mut s = Session::new("");
    s.turn("78", 780_000);
    // (The example conversation's 6 turns before its compaction are only
    // in Claude Code's summary.)
    let full = s.statusline(&["--segment"], Some(780_000), &[]);
    assert!(
        full.starts_with("ktr 78% of 1M · 6 turns only in summary · rebuild→"),
        "{full}"
    );
    // Right after a rebuild: the window holds less than a rebuild would
    // start at (the overhead and the carried conversation). (In this one
    // transcript the fall from 780k is also context dropped without
    // compacting.)
    s.turn("FRESH", 1_000);
    assert_eq!(
        s.statusline(&["--segment"], Some(1_000), &[]),
        "ktr 0% of 1M · 6 turns only in summary · context cleared"
    );
    s.turn("MORE", 20_000);
    assert_eq!(
        s.statusline(&["--segment"], Some(20_000), &[]),
        "ktr 2% of 1M · 6 turns only in summary · context cleared · rebuild→0%"
    );
}

/// After a rollback two transcripts can have the
/// same mtime; the newest-mtime default then picks by name. `ktr dirty`
/// and `ktr status` take the session the Claude Code that runs them
/// serves (its binding, written by `ktr-ack`), else the newest.
#[test]
fn dirty_and_status_default_to_the_session_the_running_claude_serves() {
    let s = Session::new("");
    // SESSION ("1111…") and a later-named one, with the same mtime.
    let other = "99999999-2222-4333-8444-555555555555";
    let other_path = s
        .sandbox
        .add_transcript(other, &fs::read(example()).unwrap());
    let mtime = fs::metadata(&s.transcript).unwrap().modified().unwrap();
    fs::File::options()
        .write(true)
        .open(&other_path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let chosen = |s: &Session| {
        let out = s.sandbox.run("dirty", None, &[]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let line = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("transcript "))
            .unwrap_or_default()
            .to_string();
        let (v, _) = status(s);
        (
            line,
            v["window"]["session_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    let (dirty, status_session) = chosen(&s);
    assert!(dirty.ends_with(&format!("{other}.jsonl")), "{dirty}");
    assert_eq!(status_session, other);
    // This test process runs `ktr` as Claude Code runs its hooks: bound to
    // SESSION, as ktr-ack records it after a rollback's resume.
    let me = ktr_pipeline::process::ProcessId::of(std::process::id()).unwrap();
    let bound = ktr_pipeline::binding::Binding {
        claude: me,
        session_id: SESSION.into(),
        at: "2026-12-04T23:00:00.000Z".into(),
    };
    let dir = ktr_pipeline::binding::dir(&s.sandbox.state);
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join(format!("{}.json", me.pid)),
        serde_json::to_vec(&bound).unwrap(),
    )
    .unwrap();
    let (dirty, status_session) = chosen(&s);
    assert!(dirty.ends_with(&format!("{SESSION}.jsonl")), "{dirty}");
    assert_eq!(status_session, SESSION);
}

/// `ktr status` before any operation exists: an object
/// (never `null`) with the session's window, and the readable form says
/// it too.
#[test]
fn status_shows_the_window_before_any_operation() {
    let mut s = Session::new("");
    s.turn("61", 612_000);
    let (v, human) = status(&s);
    assert!(v.is_object(), "{v}");
    assert!(v["id"].is_null(), "{v:#}");
    let w = &v["window"];
    assert_eq!(w["session_id"], SESSION, "{v:#}");
    assert_eq!(w["used_tokens"], 612_000, "{v:#}");
    assert_eq!(w["compaction_point_tokens"], 967_000, "{v:#}");
    assert!(
        human.starts_with("no operations yet")
            && human.contains("window            612k of 1M (session 11111111:"),
        "{human}"
    );
}

/// Where the target does not run the session, a rebuild could never switch
/// it: after a compaction nothing is offered, `ktr recall` is named.
#[test]
fn after_a_compaction_in_a_session_ktr_does_not_switch_recall_is_named() {
    let mut s = Session::with_config(Sandbox::new(), "");
    s.turn("ONE", 100_000);
    s.compacted("Summary.");
    s.turn("AFTER", 30_000);
    let line = message(&s.stop("AFTER"));
    assert!(
        line.contains(" turns from before Claude Code's last compaction are only in its summary now; this session is not the one ktr switches (see ktr status), but `ktr recall` still finds them word for word")
            && !line.contains("REBUILD"),
        "{line}"
    );
    assert_eq!(s.stop("AFTER"), QUIET, "once per boundary");
}
