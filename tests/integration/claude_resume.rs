//! The strongest proof of a rebuild: the real Claude Code CLI loads the
//! candidate with `--resume`, and the request it then sends to the (fake)
//! Messages API carries every carried user and assistant text, in order,
//! and nothing of the source's tool traffic or thinking.
//!
//! Ignored by default: these need the real CLI (`KTR_CLAUDE_BIN`; `.ci/run`
//! installs it). The whole corpus is resumed by `claude_fidelity`, which
//! also runs this module's residue check ([`residue_sent`]).

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::support::OptionOrPanic;
use crate::support::claude::ClaudeEnv;
use crate::support::fake_api::{
    FakeApi, Logged, Rule, all_strings, message_texts, text, thinking, tool,
};
use crate::support::sid;
use crate::support::{claude, claude_bin, example};
use ktr_base::config::Config;
use ktr_engine::conserve::{self, Expected};
use ktr_engine::plan;
use serde_json::{Value, json};

/// Namespace for the fixed new session ids of these tests.
const TEST_NS: uuid::Uuid = uuid::Uuid::from_u128(0x6b74_7200_e2e0_4000_8000_0000_0000_0001);

/// One carried item of a candidate: role and text.
#[derive(Debug, Clone)]
struct Item {
    role: String,
    text: String,
}

/// The user and assistant items of a candidate (a carried `SessionStart`
/// context reaches the model as system text; `claude_fidelity` checks it).
fn candidate_items(lines: &[String]) -> Vec<Item> {
    lines
        .iter()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|v| v["type"] != "attachment")
        .map(|v| Item {
            role: v["type"].as_str().unwrap().to_string(),
            text: message_texts(&v["message"]).join(""),
        })
        .collect()
}

/// What the source holds that must never reach the model after a rebuild:
/// tool results, tool inputs (except channel replies, which are speech)
/// and thinking text — each piece long enough to be unambiguous and not
/// also part of the carried speech.
fn residue(source: &Path, config: &Config, carried: &[Item]) -> Vec<String> {
    let speech: String = carried
        .iter()
        .map(|i| i.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut add = |s: &str| {
        let s = s.trim();
        if s.chars().count() >= 24 && !speech.contains(s) {
            out.push(s.to_string());
        }
    };
    for line in fs::read_to_string(source).unwrap_or_default().lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        for block in v["message"]["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("tool_result") => match &block["content"] {
                    Value::String(s) => add(s),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .for_each(&mut add),
                    _ => {}
                },
                Some("tool_use") => {
                    let name = block["name"].as_str().unwrap_or("");
                    if !config.reply_tool_pattern.is_match(name) {
                        for value in block["input"].as_object().into_iter().flatten() {
                            if let Some(s) = value.1.as_str() {
                                add(s);
                            }
                        }
                    }
                }
                Some("thinking") => add(block["thinking"].as_str().unwrap_or("")),
                _ => {}
            }
        }
    }
    out
}

/// The source's residue (see [`residue`]) that reached the model in
/// `sent` (all text of the request), each piece cut to 120 chars; the
/// candidate's carried speech is no residue.
pub fn residue_sent(
    source: &Path,
    config: &Config,
    candidate_lines: &[String],
    sent: &str,
) -> Vec<String> {
    residue(source, config, &candidate_items(candidate_lines))
        .into_iter()
        .filter(|piece| sent.contains(&piece.chars().take(200).collect::<String>()))
        .map(|piece| piece.chars().take(120).collect())
        .collect()
}

/// The conversation of a request as (role, text) per text block, system
/// messages left aside.
fn request_blocks(request: &Logged) -> Vec<Item> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] != "system")
        .flat_map(|m| {
            let role = m["role"].as_str().unwrap_or("").to_string();
            message_texts(m).into_iter().map(move |text| Item {
                role: role.clone(),
                text,
            })
        })
        .collect()
}

/// Claude Code sends consecutive user lines as one message, one text
/// block each, ending every block but the last with a newline.
fn same_text(sent: &str, carried: &str) -> bool {
    sent == carried || sent.strip_suffix('\n') == Some(carried)
}

/// A row of the acceptance table.
struct Row {
    file: String,
    carried: usize,
    messages: usize,
    bytes: usize,
}

/// Place `candidate` as session `id` in the CLI's project folder, resume it
/// with `claude -p --resume ID PROBE`, and check the request the model got.
#[track_caller]
fn resume_and_check(
    env: &ClaudeEnv,
    api: &FakeApi,
    config: &Config,
    source: &Path,
    candidate: &plan::Plan,
    probe: &str,
) -> Row {
    let id = &candidate.candidate.session_id;
    fs::create_dir_all(&env.sandbox.project).unwrap();
    fs::write(env.transcript(id), candidate.candidate.bytes()).unwrap();
    let run = env.resume(id, probe);
    let name = source.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        run.status.success(),
        "{name}: claude --resume failed ({}): {} {}",
        run.status,
        run.stdout,
        run.stderr
    );
    let request = api
        .wait_turn(probe, Duration::from_secs(5))
        .or_panic(|| format!("{name}: no request carried {probe}"));
    let carried = candidate_items(&candidate.candidate.lines);
    let blocks = request_blocks(&request);

    // Every carried item, in order, as its own text block.
    let mut at = 0;
    for (n, item) in carried.iter().enumerate() {
        let found = blocks[at..]
            .iter()
            .position(|b| b.role == item.role && same_text(&b.text, &item.text));
        let Some(offset) = found else {
            for b in &blocks {
                eprintln!(
                    "  request {}: {:?}",
                    b.role,
                    b.text.chars().take(150).collect::<String>()
                );
            }
            let preview: String = item.text.chars().take(120).collect();
            panic!(
                "{name}: carried item {n} ({}) is not in the request after block {at}: {preview:?}",
                item.role
            );
        };
        at += offset + 1;
    }
    // … followed by the probe.
    assert!(
        blocks[at..]
            .iter()
            .any(|b| b.role == "user" && b.text.contains(probe)),
        "{name}: the probe does not follow the carried items"
    );
    // No tool traffic, no thinking.
    for message in request.messages() {
        for block in message["content"].as_array().into_iter().flatten() {
            let kind = block["type"].as_str().unwrap_or("");
            assert!(
                !matches!(
                    kind,
                    "tool_use" | "tool_result" | "thinking" | "redacted_thinking" | "image"
                ),
                "{name}: the resumed request holds a {kind} block"
            );
        }
    }
    let leaked = residue_sent(
        source,
        config,
        &candidate.candidate.lines,
        &sent_text(&request),
    );
    assert!(
        leaked.is_empty(),
        "{name}: source residue reached the model: {leaked:?}"
    );
    Row {
        file: name,
        carried: carried.len(),
        messages: request.messages().len(),
        bytes: request.messages_bytes(),
    }
}

fn print_table(title: &str, rows: &[Row]) {
    eprintln!("\n{title}");
    eprintln!(
        "{:<72} {:>7} {:>8} {:>9}",
        "file", "carried", "messages", "bytes"
    );
    for r in rows {
        let file: String = r
            .file
            .chars()
            .rev()
            .take(72)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        eprintln!(
            "{file:<72} {:>7} {:>8} {:>9}",
            r.carried, r.messages, r.bytes
        );
    }
}

fn fixed_id(name: &str) -> String {
    uuid::Uuid::new_v5(&TEST_NS, name.as_bytes()).to_string()
}

/// Carried items that come from before the file's first compaction
/// boundary (0 when it has none).
fn pre_compaction_items(source: &Path, plan: &plan::Plan) -> usize {
    let text = fs::read_to_string(source).unwrap_or_default();
    let boundary = text.lines().position(|l| {
        serde_json::from_str::<Value>(l)
            .is_ok_and(|v| v["type"] == "system" && v["subtype"] == "compact_boundary")
    });
    match boundary {
        None => 0,
        Some(b) => plan
            .candidate
            .manifest
            .iter()
            .filter(|m| m.source_line <= b)
            .count(),
    }
}

/// Plan `source` with a fixed new id; it must not be blocked.
#[track_caller]
fn plan_of(config: &Config, source: &Path, id: &str) -> plan::Plan {
    let plan = plan::build(config, source, Some(&sid(id))).unwrap();
    assert!(!plan.is_blocked(), "{:?}", plan.report.blocked_reason);
    plan
}

/// Everything of `request`'s conversation as one string.
fn sent_text(request: &Logged) -> String {
    let mut sent = String::new();
    all_strings(&request.body["messages"], &mut sent);
    sent
}

/// A conversation made by the real CLI itself — Chinese text, thinking
/// with a signature, Bash and Read calls with large outputs, several
/// `-p --resume` turns — rebuilt and resumed.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_session_recorded_by_the_cli_resumes_without_its_residue() {
    let bin = claude_bin();
    let api = FakeApi::start(Vec::new());
    let env = ClaudeEnv::new(&bin, &api);
    let notes = env.sandbox.work.join("notes.txt");
    let body: String = (0..4000)
        .map(|i| format!("第{i}行：NOTE-LINE-{i} 今天的日志很长很长。\n"))
        .collect();
    fs::write(&notes, body).unwrap();
    api.add_rules(vec![
        Rule::new(
            "USER-1",
            vec![
                vec![
                    thinking("THINK-SECRET-1 用户想数数，我先运行 seq。", "sig-think-1"),
                    tool(
                        "Bash",
                        json!({"command": "seq 100000 112000", "description": "数数"}),
                    ),
                ],
                vec![text("ASSISTANT-1：数完了，从十万数到十一万二千。")],
            ],
        ),
        Rule::new(
            "USER-2",
            vec![
                vec![tool("Read", json!({"file_path": notes}))],
                vec![
                    thinking("THINK-SECRET-2 文件很长。", "sig-think-2"),
                    text("ASSISTANT-2：笔记读完了，一共四千行。"),
                ],
            ],
        ),
        Rule::new(
            "USER-3",
            vec![vec![
                thinking("THINK-SECRET-3 最后总结。", "sig-think-3"),
                text("ASSISTANT-3：好的，林先生，今天就到这里。晚安 🌙"),
            ]],
        ),
    ]);
    let source_id = "5e55a0e0-0000-4000-8000-00000000e2e1";
    let turns = [
        "小满，早上好！USER-1 请帮我数数。",
        "USER-2 再读一下 notes.txt 好吗？",
        "USER-3 谢谢，今天辛苦了。",
    ];
    for (n, prompt) in turns.iter().enumerate() {
        let run = if n == 0 {
            env.run(
                &["-p", "--session-id", source_id, prompt],
                Duration::from_secs(120),
            )
        } else {
            env.resume(source_id, prompt)
        };
        assert!(
            run.status.success(),
            "turn {n}: {} {}",
            run.stdout,
            run.stderr
        );
    }
    let last = api.turns().last().unwrap().clone();
    let last_before = last.messages_bytes();
    let source = env.transcript(source_id);
    let original = fs::read(&source).unwrap();
    // The residue is really there before the rebuild: in the file and in
    // what the model was sent.
    let source_text = String::from_utf8_lossy(&original);
    for needle in ["NOTE-LINE-17 ", r"100017\n100018", "seq 100000"] {
        assert!(source_text.contains(needle), "{needle} not in the source");
    }
    let before = sent_text(&api.wait_turn("USER-2", Duration::from_secs(1)).unwrap());
    assert!(
        before.contains("\n100017\n"),
        "the Bash output was never sent"
    );
    let config = env.config("");
    let plan = plan_of(&config, &source, &fixed_id("recorded"));
    assert_eq!(plan.report.selected_turns, 3, "{:?}", plan.report);
    let row = resume_and_check(&env, &api, &config, &source, &plan, "PROBE-recorded");
    let after = api
        .wait_turn("PROBE-recorded", Duration::from_secs(1))
        .unwrap();
    let sent = sent_text(&after);
    for needle in turns.iter().copied().chain([
        "ASSISTANT-1：数完了",
        "ASSISTANT-2：笔记读完了",
        "ASSISTANT-3：好的，林先生",
    ]) {
        assert!(
            sent.contains(needle),
            "{needle} is missing after the rebuild"
        );
    }
    for residue in [
        "THINK-SECRET",
        "NOTE-LINE-17 ",
        "\n100017\n",
        "sig-think",
        "seq 100000",
    ] {
        assert!(!sent.contains(residue), "{residue} reached the model");
    }
    assert_eq!(fs::read(&source).unwrap(), original, "the source changed");
    print_table("recorded by the CLI", &[row]);
    eprintln!(
        "messages bytes: last request before the rebuild {last_before}, after {}",
        after.messages_bytes()
    );
    assert!(after.messages_bytes() < last_before);
}

/// One transcript line of the channel fixture.
struct Fixture {
    lines: Vec<Value>,
    parent: Option<String>,
    n: u32,
}

impl Fixture {
    const SESSION: &str = "c4a77e10-0000-4000-8000-00000000c4a7";

    fn new() -> Fixture {
        Fixture {
            lines: Vec::new(),
            parent: None,
            n: 0,
        }
    }

    /// Append a record; fills uuid, parentUuid, timestamp and the rest.
    fn push(&mut self, mut record: Value) {
        self.n += 1;
        let uuid = format!("00000000-0000-4000-8000-{:012}", self.n);
        let fields = json!({
            "parentUuid": self.parent, "uuid": uuid, "sessionId": Self::SESSION,
            "timestamp": format!("2026-11-20T08:{:02}:{:02}.000Z", self.n / 60, self.n % 60),
            "cwd": "/home/lin/companion", "version": "2.1.328", "userType": "external",
            "isSidechain": false,
        });
        for (k, v) in fields.as_object().unwrap() {
            record[k] = v.clone();
        }
        self.parent = Some(uuid);
        self.lines.push(record);
    }

    fn user(&mut self, text: &str) {
        self.push(json!({"type": "user", "message": {"role": "user", "content": text}}));
    }

    fn channel(&mut self, source: &str, text: &str) {
        self.push(json!({
            "type": "user", "isMeta": true,
            "origin": {"kind": "channel", "server": source},
            "message": {"role": "user", "content": channel_envelope(source, text)},
        }));
    }

    fn queued_channel(&mut self, source: &str, text: &str) {
        self.push(json!({
            "type": "attachment",
            "attachment": {
                "type": "queued_command", "commandMode": "prompt",
                "prompt": channel_envelope(source, text),
                "origin": {"kind": "channel", "server": source},
            },
        }));
    }

    #[allow(clippy::needless_pass_by_value)] // built inline with json!()
    fn assistant(&mut self, id: &str, blocks: Value) {
        self.push(json!({
            "type": "assistant",
            "message": {"id": id, "type": "message", "role": "assistant",
                        "model": "claude-opus-5-5", "content": blocks},
        }));
    }

    fn tool_result(&mut self, id: &str, content: &str) {
        self.push(json!({
            "type": "user",
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": content}]},
            "toolUseResult": {"stdout": content},
        }));
    }

    fn write(&self, path: &Path) {
        let text: String = self.lines.iter().map(|l| format!("{l}\n")).collect();
        fs::write(path, text).unwrap();
    }
}

fn channel_envelope(source: &str, text: &str) -> String {
    format!(
        "<channel source=\"{source}\" chat_id=\"4242\" message_id=\"77\" user=\"lin\" ts=\"2026-11-20T08:00:00Z\">\n{text}\n</channel>"
    )
}

/// A Telegram/companion channel conversation (CLAUDE-CODE.md): idle-time
/// `isMeta` `<channel>` records, a mid-turn `queued_command` from the
/// channel, replies sent through `…__reply` tools — all of it resumes.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_channel_conversation_resumes_with_every_message() {
    let bin = claude_bin();
    let telegram = "plugin:telegram:telegram";
    let inbound = [
        "IN-1 小满，早上好！今天杭州下雨吗？",
        "IN-2 帮我看看服务器的磁盘。",
        "IN-3 对了，晚上记得提醒我买牛奶。",
        "IN-4 (old build) are you there?",
    ];
    let outbound = [
        "OUT-1 早上好，林先生！今天杭州小雨，记得带伞 ☂️",
        "OUT-2 磁盘还有 42% 空间；牛奶的事我记下了，晚上七点提醒你。",
        "OUT-3 I am here.",
    ];
    let mut f = Fixture::new();
    f.user("开始今天的陪伴模式。TYPED-1");
    f.assistant(
        "msg_c1",
        json!([{"type": "text", "text": "好的，我在听。REPLY-TYPED-1"}]),
    );
    f.channel(telegram, inbound[0]);
    f.assistant(
        "msg_c2",
        json!([{"type": "thinking", "thinking": "THINK-CHANNEL 查天气", "signature": "sigc"}]),
    );
    f.assistant(
        "msg_c2",
        json!([{"type": "tool_use", "id": "tu1",
        "name": "mcp__plugin_telegram_telegram__reply",
        "input": {"chat_id": "4242", "text": outbound[0]}}]),
    );
    f.tool_result("tu1", "sent message 78 to chat 4242 TOOL-RESULT-SENT");
    f.channel(telegram, inbound[1]);
    f.assistant(
        "msg_c3",
        json!([{"type": "tool_use", "id": "tu2", "name": "Bash",
        "input": {"command": "df -h / TOOL-INPUT-DF"}}]),
    );
    f.queued_channel(telegram, inbound[2]);
    f.tool_result(
        "tu2",
        &"Filesystem Size Used Avail Use% DISK-OUTPUT\n".repeat(200),
    );
    f.assistant(
        "msg_c4",
        json!([{"type": "tool_use", "id": "tu3", "name": "mcp__companion__reply",
        "input": {"text": outbound[1]}}]),
    );
    f.tool_result("tu3", "delivered TOOL-RESULT-COMPANION");
    f.channel("telegram", inbound[3]);
    f.assistant(
        "msg_c5",
        json!([{"type": "tool_use", "id": "tu4", "name": "mcp__companion__reply",
        "input": {"text": outbound[2]}}]),
    );
    f.tool_result("tu4", "delivered TOOL-RESULT-LAST");

    let api = FakeApi::start(Vec::new());
    let env = ClaudeEnv::new(&bin, &api);
    fs::create_dir_all(&env.sandbox.project).unwrap();
    let source = env.transcript(Fixture::SESSION);
    f.write(&source);
    let config = env.config("");
    let plan = plan_of(&config, &source, &fixed_id("channel"));
    let row = resume_and_check(&env, &api, &config, &source, &plan, "PROBE-channel");
    let request = api
        .wait_turn("PROBE-channel", Duration::from_secs(1))
        .unwrap();
    let sent = sent_text(&request);
    for needle in inbound
        .iter()
        .chain(&outbound)
        .chain(&["TYPED-1", "REPLY-TYPED-1"])
    {
        assert!(
            sent.contains(needle),
            "{needle} is missing from the resumed request"
        );
    }
    // Inbound messages keep their envelope: who spoke, where, when.
    assert!(sent.contains("<channel source=\"plugin:telegram:telegram\" chat_id=\"4242\""));
    for residue in ["THINK-CHANNEL", "TOOL-RESULT", "TOOL-INPUT", "DISK-OUTPUT"] {
        assert!(!sent.contains(residue), "{residue} reached the model");
    }
    print_table("channel conversation", &[row]);
}

/// A candidate Claude Code would not load must be refused by ktr's own
/// verification before anything is switched.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_candidate_without_timestamps_is_refused_by_claude_and_by_verify() {
    let bin = claude_bin();
    let api = FakeApi::start(Vec::new());
    let env = ClaudeEnv::new(&bin, &api);
    fs::create_dir_all(&env.sandbox.project).unwrap();
    let config = env.config("");
    let backup = env.sandbox.root().join("backup.jsonl");
    fs::copy(example(), &backup).unwrap();

    // The control: the intact candidate loads.
    let good = plan_of(&config, &backup, &fixed_id("intact"));
    fs::write(
        env.transcript(&good.candidate.session_id),
        good.candidate.bytes(),
    )
    .unwrap();
    let run = env.resume(&good.candidate.session_id, "PROBE-intact");
    assert!(run.status.success(), "{}", run.stderr);

    // The same candidate with its timestamps stripped does not.
    let bad = plan_of(&config, &backup, &fixed_id("stripped"));
    let stripped: String = bad
        .candidate
        .lines
        .iter()
        .map(|line| {
            let mut v: Value = serde_json::from_str(line).unwrap();
            v.as_object_mut().unwrap().remove("timestamp");
            format!("{v}\n")
        })
        .collect();
    let path = env.transcript(&bad.candidate.session_id);
    fs::write(&path, &stripped).unwrap();
    let before = api.turns().len();
    let run = env.resume(&bad.candidate.session_id, "PROBE-stripped");
    assert_eq!(run.status.code(), Some(1), "{} {}", run.stdout, run.stderr);
    assert!(
        format!("{}{}", run.stdout, run.stderr).contains("No conversation found"),
        "{} {}",
        run.stdout,
        run.stderr
    );
    assert_eq!(
        api.turns().len(),
        before,
        "a refused resume reached the model"
    );

    // ktr's verification refuses it, even with its digest recorded as is.
    let digest = ktr_base::digest::sha256_file(&path).unwrap();
    let err = conserve::check(
        &config,
        &backup,
        &path,
        &Expected {
            session_id: &sid(&bad.candidate.session_id),
            backup_sha256: &ktr_base::digest::sha256_file(&backup).unwrap(),
            candidate_sha256: &digest,
            manifest: &bad.candidate.manifest,
            left_out: &bad.report.left_out,
        },
        &ktr_engine::meter::Meter::default(),
    )
    .unwrap_err();
    assert!(err.message.contains("timestamp"), "{err}");
}

/// Driven through the interactive CLI in a private tmux server: a line
/// typed while a turn runs (queued, absorbed mid-turn as a
/// `queued_command`), then `/compact`, then one more turn. The rebuild
/// carries the turns from before the compaction and the queued line once.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn an_interactive_session_with_a_queued_line_and_compact_resumes_whole() {
    let bin = claude_bin();
    let api = FakeApi::start(vec![
        Rule::new(
            "Q-START",
            vec![
                vec![tool(
                    "Bash",
                    json!({"command": "sleep 4", "description": "wait"}),
                )],
                vec![text("ASSISTANT-Q1 等好了，也看到你的补充了。")],
            ],
        ),
        Rule::new(
            "an <analysis> block followed by a <summary> block",
            vec![vec![text(
                "<analysis>short</analysis>\n<summary>COMPACT-SUMMARY-TEXT of the talk</summary>",
            )]],
        ),
        Rule::new(
            "USER-I3",
            vec![vec![text("ASSISTANT-I3 压缩之后我还记得。")]],
        ),
    ]);
    let env = ClaudeEnv::new(&bin, &api);
    env.prepare_interactive(&["Bash"]);
    let source_id = "5e55a0e0-0000-4000-8000-00000000e2e3";
    let source = env.transcript(source_id);
    let tmux = claude::Tmux::start(&env, &["--session-id", source_id]);
    let minute = Duration::from_secs(60);
    tmux.wait_idle(minute);
    tmux.type_line("USER-I1 你好，Q-START 请等一会儿。");
    tmux.wait_screen("a running turn", minute, |s| s.contains("esc to interrupt"));
    tmux.type_line("QUEUED-1 顺便说一句：我在排队。");
    tmux.wait_screen("the reply", minute, |s| s.contains("ASSISTANT-Q1"));
    tmux.wait_idle(minute);
    tmux.type_line("/compact");
    tmux.wait_screen("the compaction", minute, |s| s.contains("Compacted"));
    tmux.wait_idle(minute);
    tmux.type_line("USER-I3 压缩之后的问题");
    tmux.wait_screen("the reply", minute, |s| s.contains("ASSISTANT-I3"));
    tmux.wait_idle(minute);
    drop(tmux);

    let recorded = fs::read_to_string(&source).unwrap();
    assert!(
        recorded.contains("\"queued_command\""),
        "no queued_command recorded"
    );
    assert!(
        recorded.contains("\"compact_boundary\""),
        "no compaction recorded"
    );
    let config = env.config("");
    let plan = plan_of(&config, &source, &fixed_id("interactive"));
    assert!(
        pre_compaction_items(&source, &plan) >= 3,
        "{:?}",
        plan.report
    );
    assert_eq!(plan.report.compact_summaries_dropped, 1);
    let queued = candidate_items(&plan.candidate.lines)
        .iter()
        .filter(|i| i.text.contains("QUEUED-1"))
        .count();
    assert_eq!(queued, 1, "the queued line must be carried exactly once");
    let row = resume_and_check(&env, &api, &config, &source, &plan, "PROBE-interactive");
    let sent = sent_text(&api.wait_turn("PROBE-interactive", minute).unwrap());
    for needle in [
        "USER-I1",
        "QUEUED-1",
        "ASSISTANT-Q1",
        "USER-I3",
        "ASSISTANT-I3",
    ] {
        assert!(
            sent.contains(needle),
            "{needle} is missing after the rebuild"
        );
    }
    assert!(
        !sent.contains("COMPACT-SUMMARY-TEXT"),
        "the dropped summary came back"
    );
    print_table("interactive, queued line, /compact", &[row]);

    // For comparison: the CLI itself resumes the source from the boundary.
    let run = env.resume(source_id, "PROBE-original");
    assert!(run.status.success());
    let original = sent_text(&api.wait_turn("PROBE-original", minute).unwrap());
    eprintln!(
        "claude --resume of the source itself carries the pre-compaction turn: {}",
        original.contains("USER-I1")
    );
}
