//! Turn numbers without decoding every line: a typed prompt is a `user`
//! record that is not meta, not a sidechain and carries no tool result —
//! told from the structural keys at the line's start and end (a text that
//! mentions them is escaped, `\"type\":…`, and never matches).

use memchr::memmem;

const EDGE: usize = 4 << 10;

/// Whether the line (its first and last bytes) is a typed prompt.
pub fn is_prompt(head: &[u8], tail: &[u8]) -> bool {
    let head = &head[..head.len().min(EDGE)];
    let tail = &tail[tail.len().saturating_sub(EDGE)..];
    let has = |hay: &[u8], n: &[u8]| memmem::find(hay, n).is_some();
    has(head, b"\"type\":\"user\"")
        && !has(head, b"\"tool_result\"")
        && !has(head, b"\"isSidechain\":true")
        && !has(head, b"\"isMeta\":true")
        && !has(tail, b"\"isMeta\":true")
}
