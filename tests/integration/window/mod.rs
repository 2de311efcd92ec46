//! Window-aware ktr through the real binaries, with transcripts
//! whose replies record the usage a test chooses: the Stop hook's advice,
//! the compaction guard `ktr-precompact`, and `ktr-statusline`.

mod after_compaction;
mod bands;
mod guard;
mod guard_failures;
mod statusline;
mod unsent;
mod what_it_says;

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::stop_hook::message;
use crate::support::{Sandbox, example};
use ktr_base::ids::SessionId;
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

/// `ktr status --json` of the sandbox (always an object), and the readable one.
fn status(s: &Session) -> (serde_json::Value, String) {
    let out = s.sandbox.run("status", None, &["--json"]);
    let v = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", out.stdout, out.stderr));
    (v, s.sandbox.run("status", None, &[]).stdout)
}
