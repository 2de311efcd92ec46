//! Turn numbers without decoding every line: a typed prompt is a `user`
//! record that is not meta, not a sidechain and carries no tool result —
//! told from the structural keys at the line's start and end (a text that
//! mentions them is escaped, `\"type\":…`, and never matches). Both the
//! compact JSON Claude Code writes and the spaced form (`"type": "user"`)
//! of other writers are recognised.

use memchr::memmem;

const EDGE: usize = 4 << 10;

/// `"key":value` and `"key": value`, as raw bytes.
pub fn pair(key: &str, value: &str) -> [String; 2] {
    [format!("\"{key}\":{value}"), format!("\"{key}\": {value}")]
}

fn has(hay: &[u8], key: &str, value: &str) -> bool {
    pair(key, value)
        .iter()
        .any(|n| memmem::find(hay, n.as_bytes()).is_some())
}

/// Whether the line (its first and last bytes) is a typed prompt.
pub fn is_prompt(head: &[u8], tail: &[u8]) -> bool {
    let head = &head[..head.len().min(EDGE)];
    let tail = &tail[tail.len().saturating_sub(EDGE)..];
    has(head, "type", "\"user\"")
        && !has(head, "type", "\"tool_result\"")
        && !has(head, "isSidechain", "true")
        && !has(head, "isMeta", "true")
        && !has(tail, "isMeta", "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_told_in_compact_and_spaced_json() {
        for line in [
            r#"{"type":"user","message":{"content":"hi"}}"#,
            r#"{"type": "user", "message": {"content": "hi"}}"#,
        ] {
            assert!(is_prompt(line.as_bytes(), line.as_bytes()), "{line}");
        }
        for line in [
            r#"{"type":"user","message":{"content":[{"type":"tool_result"}]}}"#,
            r#"{"type": "user", "isMeta": true}"#,
            r#"{"type":"assistant","message":{"content":"say \"type\":\"user\""}}"#,
        ] {
            assert!(!is_prompt(line.as_bytes(), line.as_bytes()), "{line}");
        }
    }
}
