//! `ktr-mcp` over real stdio: the handshake, the tools SPEC §11 lists, errors the
//! model can read, and a clean exit when stdin closes. The fixture project
//! holds `examples/session.jsonl`; nothing reaches a real installation.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Sandbox, mcp_tools};
use ktr_base::ids::OperationId;
use ktr_pipeline::operation::Status;
use serde_json::{Map, Value, json};

const SESSION: &str = "5d1c9a8e-3b7f-4e2a-9c61-0f2b7d4e8a13";

/// A sandbox whose project holds the example session.
/// A sandbox whose target (a pointer file) runs `SESSION`, with its transcript.
fn fixture() -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    let pointer = sb.root().join("pointer");
    fs::write(&pointer, format!("{SESSION}\n")).unwrap();
    sb.write_config(&format!(
        "activation = \"pointer\"\nresume_pointer_path = {pointer:?}"
    ));
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/session.jsonl");
    let transcript = sb.project.join(format!("{SESSION}.jsonl"));
    fs::copy(example, &transcript).unwrap();
    (sb, transcript)
}

/// A running `ktr-mcp`, spoken to in JSON-RPC lines.
pub(crate) struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    /// Each tool's `outputSchema`, from `tools/list` at the first call.
    output_schemas: Option<Map<String, Value>>,
}

impl Client {
    /// Start the server for `sb`, serving `session` (as Claude Code does
    /// through `CLAUDE_CODE_SESSION_ID`), without initializing.
    fn spawn(sb: &Sandbox, session: Option<&str>) -> Client {
        let mut cmd = Command::new(crate::support::exe("ktr-mcp"));
        cmd.env_clear()
            .env("HOME", &sb.home)
            .env("PATH", "/usr/bin:/bin")
            .env("KTR_TMUX_SOCKET", "ktr-test-mcp-nowhere")
            .arg("--config")
            .arg(&sb.config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(s) = session {
            cmd.env("CLAUDE_CODE_SESSION_ID", s);
        }
        let mut child = cmd.spawn().unwrap();
        Client {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
            next_id: 1,
            output_schemas: None,
        }
    }

    /// Start and complete the handshake; returns the initialize result.
    pub(crate) fn start(sb: &Sandbox, session: Option<&str>) -> (Client, Value) {
        let mut c = Client::spawn(sb, session);
        let init = c.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "ktr-test", "version": "0"}}),
        );
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        (c, init)
    }

    fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// Send a request and return its `result` (panics on a protocol error).
    #[track_caller]
    #[allow(clippy::needless_pass_by_value)] // built inline with json!()
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed stdout"
            );
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == json!(id) {
                assert!(msg.get("error").is_none(), "protocol error: {msg}");
                return msg["result"].clone();
            }
        }
    }

    /// Call a tool; returns (isError, structured content or text). A
    /// success must carry structured content that its tool's
    /// `outputSchema` describes, and the same JSON as its text.
    #[track_caller]
    #[allow(clippy::needless_pass_by_value)] // built inline with json!()
    pub(crate) fn call(&mut self, tool: &str, args: Value) -> (bool, Value) {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        let is_error = r["isError"].as_bool().unwrap_or(false);
        let text = r["content"][0]["text"].as_str().unwrap_or("").to_string();
        match r.get("structuredContent") {
            Some(v) if !is_error => {
                let schema = self.output_schema(tool);
                assert_conforms(&schema, v, tool);
                assert_eq!(
                    serde_json::from_str::<Value>(&text).ok().as_ref(),
                    Some(v),
                    "{tool}: the text block is not the structured content"
                );
                (false, v.clone())
            }
            _ => (is_error, Value::String(text)),
        }
    }

    /// `tool`'s `outputSchema` as `tools/list` advertises it.
    #[track_caller]
    fn output_schema(&mut self, tool: &str) -> Value {
        if self.output_schemas.is_none() {
            let listed = self.request("tools/list", json!({}));
            let schemas = listed["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    (
                        t["name"].as_str().unwrap().to_string(),
                        t["outputSchema"].clone(),
                    )
                })
                .collect();
            self.output_schemas = Some(schemas);
        }
        self.output_schemas.as_ref().unwrap()[tool].clone()
    }

    /// Close stdin and wait (at most 5 s) for the exit code.
    #[track_caller]
    pub(crate) fn close(mut self) -> i32 {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("ktr-mcp did not exit after stdin closed");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// `value` is what `schema` (an MCP `outputSchema`) describes: an object
/// with every required key, each known key of its declared JSON type, and
/// no key the schema does not name unless it allows more.
#[track_caller]
fn assert_conforms(schema: &Value, value: &Value, tool: &str) {
    assert_eq!(schema["type"], "object", "{tool}: outputSchema {schema}");
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("{tool}: {value} is not an object"));
    for key in schema["required"].as_array().into_iter().flatten() {
        let key = key.as_str().unwrap();
        assert!(object.contains_key(key), "{tool}: no {key:?} in {value}");
    }
    let properties = schema["properties"].as_object().unwrap();
    for (key, field) in object {
        let Some(declared) = properties.get(key) else {
            assert_eq!(
                schema["additionalProperties"], true,
                "{tool}: {key:?} is not in the outputSchema"
            );
            continue;
        };
        let types: Vec<&str> = match &declared["type"] {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => continue,
        };
        let actual = match field {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_f64() => "number",
            Value::Number(_) => "integer",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        assert!(
            types.contains(&actual) || (actual == "integer" && types.contains(&"number")),
            "{tool}: {key:?} is {actual}, the outputSchema says {types:?}"
        );
    }
}

fn ktr_plan_json(sb: &Sandbox, transcript: &Path) -> Value {
    let out = Command::new(crate::support::exe("ktr"))
        .env("HOME", &sb.home)
        .arg("--config")
        .arg(&sb.config)
        .args(["plan", "--json", "--transcript"])
        .arg(transcript)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn handshake_names_the_server_and_lists_exactly_the_tools_spec_section_11_names() {
    let (sb, _) = fixture();
    let (mut c, init) = Client::start(&sb, None);
    assert_eq!(init["serverInfo"]["name"], "ktr");
    let instructions = init["instructions"].as_str().unwrap();
    for needle in [
        "thread_rebuild_dirty",
        "thread_rebuild_plan",
        "explicitly agreed",
        "REBUILD",
        "Stop hook",
        "finish your reply normally",
    ] {
        assert!(
            instructions.contains(needle),
            "instructions lack {needle:?}: {instructions}"
        );
    }
    let tools = c.request("tools/list", json!({}))["tools"].clone();
    let mut names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    let mut want = mcp_tools("docs/SPEC.md");
    want.sort_unstable();
    assert_eq!(names, want);
    for readme in ["README.md", "README.zh-CN.md"] {
        assert_eq!(
            mcp_tools(readme),
            mcp_tools("docs/SPEC.md"),
            "{readme}'s tool table is not SPEC §11's"
        );
    }
    for tool in tools.as_array().unwrap() {
        let schema = &tool["inputSchema"];
        assert_eq!(schema["type"], "object", "{tool}");
        assert!(!tool["description"].as_str().unwrap().is_empty());
        let output = &tool["outputSchema"];
        assert_eq!(
            output["type"], "object",
            "{tool} advertises no outputSchema"
        );
        assert!(
            output["required"].as_array().is_some_and(|r| !r.is_empty()),
            "{tool}: its outputSchema requires nothing"
        );
        for (name, prop) in schema["properties"].as_object().unwrap() {
            assert!(
                prop["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{name} of {tool} lacks a description"
            );
        }
    }
    let find = |n: &str| {
        tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(
        find("thread_rebuild_request")["inputSchema"]["required"],
        json!(["reason", "confirmation"])
    );
    assert_eq!(
        find("thread_rebuild_cancel")["inputSchema"]["required"],
        json!(["operation_id", "confirmation"])
    );
    assert_eq!(
        find("thread_rebuild_rollback_request")["inputSchema"]["required"],
        json!(["operation_id", "confirmation"])
    );
    assert!(
        find("thread_rebuild_plan")["inputSchema"]["properties"]
            .get("transcript_path")
            .is_some()
    );
    assert!(
        find("thread_rebuild_status")["inputSchema"]
            .get("required")
            .is_none()
    );
    assert_eq!(
        find("thread_rebuild_doctor")["annotations"]["readOnlyHint"],
        true
    );
    assert_eq!(c.close(), 0);
}

#[test]
fn read_only_tools_report_what_the_cli_reports_and_write_nothing() {
    let (sb, transcript) = fixture();
    let before = fs::read(&transcript).unwrap();
    let (mut c, _) = Client::start(&sb, Some(SESSION));

    let (err, doctor) = c.call("thread_rebuild_doctor", json!({}));
    assert!(!err, "{doctor}");
    let names: Vec<&str> = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for n in [
        "config",
        "project dir",
        "target",
        "hooks",
        "mcp",
        "operations",
    ] {
        assert!(names.contains(&n), "doctor lacks {n}: {names:?}");
    }
    // The sandbox has no hooks installed: doctor says so and how to fix it.
    let hooks = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "hooks")
        .unwrap();
    assert_eq!(hooks["ok"], false);
    assert!(hooks["fix"].as_str().unwrap().contains("install"));

    let cli = ktr_plan_json(&sb, &transcript);
    let (err, dirty) = c.call("thread_rebuild_dirty", json!({}));
    assert!(!err, "{dirty}");
    assert_eq!(dirty["ledger"], cli["ledger"]);
    assert!(dirty["ledger"]["total_bytes"].as_u64().unwrap() > 0);
    assert!(
        dirty["transcript_choice"]
            .as_str()
            .unwrap()
            .contains(SESSION)
    );

    let (err, plan) = c.call("thread_rebuild_plan", json!({}));
    assert!(!err, "{plan}");
    for key in [
        "source_turns",
        "selected_turns",
        "carried_items",
        "estimated_tokens",
        "blocked_reason",
        "source_sha256",
        "first_carried",
        "last_carried",
    ] {
        assert_eq!(plan[key], cli[key], "{key}");
    }
    assert!(plan["selected_turns"].as_u64().unwrap() > 0);
    assert!(
        plan.get("left_out").is_none(),
        "the per-record list is summarised"
    );
    let summarised: u64 = plan["left_out_by_reason"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(
        summarised as usize,
        cli["left_out"].as_array().unwrap().len()
    );

    let (err, status) = c.call("thread_rebuild_status", json!({}));
    assert!(!err, "{status}");
    assert_eq!(status["operation"], Value::Null);
    assert_eq!(c.close(), 0);

    assert_eq!(
        fs::read(&transcript).unwrap(),
        before,
        "the source was not touched"
    );
    assert_eq!(
        fs::read_dir(&sb.project).unwrap().count(),
        1,
        "no file was written in the project"
    );
    assert!(
        !sb.state.join("operations").exists(),
        "read-only tools created no operation"
    );
}

#[test]
fn the_served_session_is_read_not_the_newest_file() {
    let (sb, _) = fixture();
    // The served session was last written an hour ago; a newer, tiny
    // transcript of another session sits in the same project.
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(sb.project.join(format!("{SESSION}.jsonl")))
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    let other = sb
        .project
        .join("0f0f0f0f-1111-4222-8333-444444444444.jsonl");
    fs::write(&other, "{\"type\":\"user\",\"uuid\":\"u1\",\"parentUuid\":null,\"timestamp\":\"2026-11-29T10:00:00Z\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n").unwrap();

    let (mut c, _) = Client::start(&sb, Some(SESSION));
    let (_, plan) = c.call("thread_rebuild_plan", json!({}));
    assert!(
        plan["source_path"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{SESSION}.jsonl"))
    );
    let (_, given) = c.call("thread_rebuild_plan", json!({"transcript_path": other}));
    assert!(
        given["source_path"]
            .as_str()
            .unwrap()
            .ends_with("0f0f0f0f-1111-4222-8333-444444444444.jsonl")
    );
    assert_eq!(c.close(), 0);

    let (mut c, _) = Client::start(&sb, None);
    let (_, plan) = c.call("thread_rebuild_plan", json!({}));
    assert!(
        plan["source_path"]
            .as_str()
            .unwrap()
            .ends_with("0f0f0f0f-1111-4222-8333-444444444444.jsonl"),
        "unknown session: the newest transcript: {plan}"
    );
    assert!(
        plan["transcript_choice"]
            .as_str()
            .unwrap()
            .contains("newest")
    );
    assert_eq!(c.close(), 0);
}

#[test]
fn errors_reach_the_model_as_tool_results_with_the_real_message() {
    let (sb, _) = fixture();
    let outside = sb.work.join("elsewhere.jsonl");
    fs::write(&outside, "{}\n").unwrap();
    let (mut c, _) = Client::start(&sb, Some(SESSION));

    let (err, msg) = c.call("thread_rebuild_plan", json!({"transcript_path": outside}));
    assert!(err);
    assert!(msg.as_str().unwrap().contains("is not inside"), "{msg}");

    let (err, msg) = c.call(
        "thread_rebuild_request",
        json!({"reason": "window full", "confirmation": "rebuild"}),
    );
    assert!(err);
    assert_eq!(msg, "confirmation must be exactly REBUILD");
    assert!(
        sb.store().list().unwrap().is_empty(),
        "a refused request records nothing"
    );

    let (err, msg) = c.call(
        "thread_rebuild_status",
        json!({"operation_id": "../../etc/passwd"}),
    );
    assert!(err);
    assert!(
        msg.as_str().unwrap().contains("invalid operation id"),
        "{msg}"
    );
    assert_eq!(c.close(), 0);
}

#[test]
fn request_status_cancel_and_rollback_act_on_the_operation_store() {
    let (sb, _) = fixture();
    let (mut c, _) = Client::start(&sb, Some(SESSION));

    let (err, req) = c.call(
        "thread_rebuild_request",
        json!({"reason": "window 90 % noise", "confirmation": "REBUILD"}),
    );
    assert!(!err, "{req}");
    let id = OperationId::parse(req["operation"]["id"].as_str().unwrap()).unwrap();
    assert_eq!(req["operation"]["status"], "pending");
    assert!(
        req["next"]
            .as_str()
            .unwrap()
            .contains("Finish your reply normally")
    );
    // On disk: pending, bound to the session being served, the reason kept.
    let op = sb.store().load(&id).unwrap();
    assert_eq!(op.status, Status::Pending);
    assert_eq!(op.session_id.as_deref(), Some(SESSION));
    assert_eq!(op.reasons, vec!["window 90 % noise".to_string()]);
    assert_eq!(sb.store().active().unwrap().0, id);

    let (err, status) = c.call("thread_rebuild_status", json!({}));
    assert!(!err);
    assert_eq!(status["operation"]["id"], id.as_str());
    assert_eq!(status["operation"]["status"], "pending");
    assert!(status["operation"].get("manifest").is_none());

    let (err, msg) = c.call(
        "thread_rebuild_rollback_request",
        json!({"operation_id": id, "confirmation": "ROLLBACK"}),
    );
    assert!(err);
    assert!(
        msg.as_str()
            .unwrap()
            .contains("only an activated operation can be rolled back"),
        "{msg}"
    );

    let (err, msg) = c.call(
        "thread_rebuild_cancel",
        json!({"operation_id": id, "confirmation": "cancel"}),
    );
    assert!(err);
    assert_eq!(msg, "confirmation must be exactly CANCEL");
    assert_eq!(sb.store().load(&id).unwrap().status, Status::Pending);

    let (err, cancelled) = c.call(
        "thread_rebuild_cancel",
        json!({"operation_id": id, "confirmation": "CANCEL"}),
    );
    assert!(!err, "{cancelled}");
    assert_eq!(cancelled["operation"]["status"], "cancelled");
    assert_eq!(sb.store().load(&id).unwrap().status, Status::Cancelled);
    assert!(
        sb.store().active().is_none(),
        "nothing blocks the next request"
    );

    let (_, status) = c.call("thread_rebuild_status", json!({"operation_id": id}));
    assert_eq!(status["operation"]["status"], "cancelled");
    assert_eq!(c.close(), 0);
}

#[test]
fn a_session_the_target_does_not_run_cannot_request_a_rebuild() {
    let (sb, transcript) = fixture();
    let other = "99999999-8888-4777-8666-555555555555";
    fs::copy(&transcript, sb.project.join(format!("{other}.jsonl"))).unwrap();
    let (mut c, _) = Client::start(&sb, Some(other));
    let (err, msg) = c.call(
        "thread_rebuild_request",
        json!({"reason": "x", "confirmation": "REBUILD"}),
    );
    assert!(err);
    let msg = msg.as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "names session {SESSION}, not session {other}; not switching"
        )),
        "{msg}"
    );
    assert!(
        sb.store().list().unwrap().is_empty(),
        "nothing was recorded"
    );
    // The session the pointer names may, and is told which target switches.
    let (mut c2, _) = Client::start(&sb, Some(SESSION));
    let (err, ok) = c2.call(
        "thread_rebuild_request",
        json!({"reason": "x", "confirmation": "REBUILD"}),
    );
    assert!(!err, "{ok}");
    assert!(
        ok["target"].as_str().unwrap().starts_with("pointer file"),
        "{ok}"
    );
    assert_eq!(c.close(), 0);
    assert_eq!(c2.close(), 0);
}

#[test]
fn a_session_outside_project_dir_cannot_request_a_rebuild_of_another() {
    let (sb, _) = fixture();
    let (mut c, _) = Client::start(&sb, Some("99999999-8888-4777-8666-555555555555"));
    let (err, msg) = c.call(
        "thread_rebuild_request",
        json!({"reason": "x", "confirmation": "REBUILD"}),
    );
    assert!(err);
    assert!(
        msg.as_str()
            .unwrap()
            .contains("has no transcript in project_dir"),
        "{msg}"
    );
    assert!(sb.store().list().unwrap().is_empty());
    assert_eq!(c.close(), 0);
}

#[test]
fn closed_stdin_exits_cleanly_before_and_after_initialize() {
    let (sb, _) = fixture();
    assert_eq!(Client::spawn(&sb, None).close(), 0, "before initialize");
    let (c, _) = Client::start(&sb, None);
    assert_eq!(c.close(), 0, "after initialize");
}

#[test]
fn bad_arguments_are_a_usage_error() {
    let out = crate::support::isolated(&mut Command::new(crate::support::exe("ktr-mcp")))
        .args(["--session", "../x"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid session id") && err.lines().count() == 1,
        "{err}"
    );
}

/// The recall tools over stdio — a hit cites its tool and turn,
/// `get` reads it whole, a limit past the MCP cap is one clear error.
#[test]
fn recall_finds_a_tool_result_verbatim_and_get_reads_it() {
    let (sb, _) = fixture();
    let (mut c, _) = Client::start(&sb, Some(SESSION));
    let (err, found) = c.call(
        "thread_rebuild_recall",
        json!({"query": "worker0_timeout", "kinds": ["tool_result"]}),
    );
    assert!(!err, "{found}");
    let hit = &found["hits"][0];
    assert_eq!(found["hits"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(hit["line"], 23);
    assert_eq!(hit["session_short"], &SESSION[..8]);
    assert!(
        hit["tool"].is_string(),
        "the call it answers is cited: {hit}"
    );
    assert!(hit["turn"].as_u64().unwrap() >= 1, "{hit}");
    assert!(
        hit["snippet"]
            .as_str()
            .unwrap()
            .contains("⟦WORKER0_TIMEOUT⟧"),
        "{hit}"
    );
    let (err, got) = c.call("thread_rebuild_recall_get", json!({"id": hit["id"]}));
    assert!(!err, "{got}");
    assert!(
        got["page"]["text"]
            .as_str()
            .unwrap()
            .contains("先别改配置，改成环境变量 WORKER0_TIMEOUT"),
        "{got}"
    );
    assert_eq!(got["next"], "this is the last page");
    let (err, msg) = c.call(
        "thread_rebuild_recall",
        json!({"query": "x", "limit": 1000}),
    );
    assert!(
        err && msg.as_str().unwrap().contains("give 1 to 30"),
        "{msg}"
    );
    let (err, msg) = c.call(
        "thread_rebuild_recall_get",
        json!({"id": "live:../../etc/passwd@0"}),
    );
    assert!(
        err && msg.as_str().unwrap().contains("not a recall hit id"),
        "{msg}"
    );
}
