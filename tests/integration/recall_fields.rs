//! Recall searches what only a tool result's `toolUseResult` holds — the
//! file an edit changed, its patch, the to-do lists, an error — as the
//! tool result it belongs to (one hit per result), cited by its call.

use serde_json::{Value, json};

use crate::recall::{D, call, hits, line, recall};
use crate::support::Sandbox;

#[test]
fn what_only_tool_use_result_holds_is_searched_as_its_tool_result() {
    let sb = Sandbox::new();
    let at = "2026-01-01T10:00:00Z";
    let edited = |id: &str, content: &str, extra: Value| {
        line(&json!({"type": "user", "timestamp": at,
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": content}]},
            "toolUseResult": extra}))
    };
    let text = [
        call(
            "toolu_e",
            "Edit",
            &json!({"file_path": "/src/lib.rs", "old_string": "a", "new_string": "b"}),
            at,
        ),
        edited(
            "toolu_e",
            "The file /src/lib.rs has been updated.",
            json!({"filePath": "/src/lib.rs", "originalFile": "fn old() { ONLY-IN-ORIGINAL }",
                "structuredPatch": [{"lines": ["-a", "+b"]}]}),
        ),
        call("toolu_t", "TodoWrite", &json!({"todos": []}), at),
        edited(
            "toolu_t",
            "Todos have been modified successfully.",
            json!({"oldTodos": [], "newTodos": [{"content": "ship the TODO-ONLY-HERE fix",
                "status": "pending", "activeForm": "Shipping"}]}),
        ),
        call("toolu_x", "Bash", &json!({"command": "true"}), at),
        edited("toolu_x", "ERROR-TWICE: gone", json!("ERROR-TWICE: gone")),
    ]
    .concat();
    sb.add_transcript(D, text.as_bytes());
    for (term, tool) in [
        ("ONLY-IN-ORIGINAL", "Edit"),
        ("TODO-ONLY-HERE", "TodoWrite"),
    ] {
        let v = recall(&sb, &[term]);
        assert_eq!(hits(&v).len(), 1, "{v}");
        assert_eq!(hits(&v)[0]["kind"], "tool_result");
        assert_eq!(hits(&v)[0]["tool"], tool);
        let count = recall(&sb, &[term, "--count"]);
        assert_eq!(count["total"], 1, "{count}");
    }
    // An output toolUseResult repeats is one match, not two.
    let v = recall(&sb, &["ERROR-TWICE", "--count"]);
    assert_eq!(v["total"], 1, "{v}");
    assert_eq!(hits(&v).len(), 1, "{v}");
}
