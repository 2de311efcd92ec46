//! What Claude Code keeps in the transcript but never sends is not
//! counted in the window: a tool output it saved to a file (the model got
//! a 2 KB preview, `toolUseResult` holds the whole) and its own `system`
//! records. Counted, they made a window of such outputs look ten times
//! fuller than the API measured, the calibration fell out of its bounds,
//! and the guard let Claude Code compact a session a rebuild fitted.

use super::*;

/// What the fake count charges: four bytes a token, as the soak's API.
fn sent_tokens(bytes: usize) -> u64 {
    (bytes / 4) as u64
}

/// What turn `n` says and runs: prompt, tool call, the command's output
/// (40 KB, too large to send), the preview the model gets instead, reply.
struct Turn {
    prompt: String,
    call: serde_json::Value,
    output: String,
    preview: String,
    answer: String,
}

impl Turn {
    fn new(n: usize) -> Turn {
        let words =
            |tag: &str| format!("{tag}-{n:03} ") + &"plain words said in this turn ".repeat(20);
        let output: String = (0..800)
            .map(|i| format!("OUT-{n:03}-{i:05} lorem ipsum dolor sit amet consectetur\n"))
            .collect();
        let preview = format!(
            "<persisted-output>\nOutput too large ({} KB). Full output saved to: /work/tool-results/b{n}.txt\n\nPreview (first 2KB):\n{}\n...\n</persisted-output>",
            output.len() / 1024,
            &output[..2048]
        );
        Turn {
            prompt: words("SAY"),
            call: serde_json::json!({"type": "tool_use", "id": format!("toolu_{n}"),
                "name": "Bash", "input": {"command": format!("make report-{n}")}}),
            output,
            preview,
            answer: words("REPLY"),
        }
    }

    /// The tokens the model is sent for it, and of them its words.
    fn sent(&self) -> (u64, u64) {
        let words = self.prompt.len() + self.answer.len();
        let all = words + self.call.to_string().len() + self.preview.len();
        (sent_tokens(all), sent_tokens(words))
    }

    /// The records Claude Code 2.1.328 writes for it: prompt, tool call,
    /// the result (the preview sent, the whole output in `toolUseResult`),
    /// the reply reporting `used`, and the system records of the turn's end.
    fn records(&self, s: &mut Session, n: usize, used: u64) -> String {
        let ids: Vec<String> = (0..6).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let usage = serde_json::json!({"input_tokens": used, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, "output_tokens": 10});
        let mut user = record("user", &ids[0], &s.parent);
        user["message"] = serde_json::json!({"role": "user", "content": self.prompt});
        let mut call = record("assistant", &ids[1], &ids[0]);
        call["message"] = serde_json::json!({"id": format!("msg_call_{n}"), "role": "assistant",
            "model": "claude-opus-5-5", "content": [self.call], "stop_reason": "tool_use",
            "usage": usage});
        let mut result = record("user", &ids[2], &ids[1]);
        result["message"] = serde_json::json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": format!("toolu_{n}"), "content": self.preview}]});
        result["toolUseResult"] = serde_json::json!({"stdout": self.output, "stderr": "",
            "interrupted": false, "isImage": false});
        let mut reply = record("assistant", &ids[3], &ids[2]);
        reply["message"] = serde_json::json!({"id": format!("msg_{n}"), "role": "assistant",
            "model": "claude-opus-5-5", "content": [{"type": "text", "text": self.answer}],
            "stop_reason": "end_turn", "usage": usage});
        let mut summary = record("system", &ids[4], &ids[3]);
        summary["subtype"] = "stop_hook_summary".into();
        summary["hookInfos"] =
            serde_json::json!([{"command": "ktr-stop --plugin", "durationMs": 90}]);
        summary["hookErrors"] = serde_json::json!([]);
        let mut duration = record("system", &ids[5], &ids[4]);
        duration["subtype"] = "turn_duration".into();
        duration["durationMs"] = 5000.into();
        s.parent.clone_from(&ids[5]);
        format!("{user}\n{call}\n{result}\n{reply}\n{summary}\n{duration}\n")
    }
}

#[test]
fn outputs_claude_code_saved_to_files_are_not_counted_and_the_guard_rebuilds() {
    let mut s = Session::new("context_window_tokens = 100000\non_auto_compaction = \"rebuild\"");
    let overhead = s.json("plan")["window"]["overhead_tokens"]
        .as_u64()
        .unwrap();
    let (mut used, mut said) = (overhead, 0);
    for n in 0..60 {
        let turn = Turn::new(n);
        let (sent, words) = turn.sent();
        // A reply's usage is what its request was sent: all before it.
        used += sent;
        said += words;
        let lines = turn.records(&mut s, n, used);
        s.append(&lines);
    }
    let window = &s.json("plan")["window"];
    let carried = window["carried_tokens"].as_u64().unwrap();
    assert!(
        (said * 7 / 10..=said * 14 / 10).contains(&carried),
        "the conversation was sent as {said} tokens; ktr counts {carried}: {window:#}"
    );
    let out = s.precompact("auto");
    assert_eq!(out["decision"], "block", "{out}");
    assert!(
        out["reason"]
            .as_str()
            .unwrap()
            .starts_with("ktr is rebuilding this session losslessly instead of compacting it"),
        "{out}"
    );
}
