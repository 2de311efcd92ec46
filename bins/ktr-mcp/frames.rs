//! The line framing in front of rmcp: every message on stdin is one line of
//! JSON (MCP stdio transport). rmcp silently drops a line that is not JSON,
//! and answers a malformed request without its `id`; this layer answers
//! those itself, by JSON-RPC's rules, and caps the size of a message:
//!
//! | line | answer |
//! |---|---|
//! | not JSON | -32700 parse error, `id: null` |
//! | larger than [`MAX_MESSAGE`] | -32600, `id: null`; the rest of the line is skipped unread |
//! | a batch (array) | -32600 for each request in it, with its `id` (MCP has no batches) |
//! | a request whose `params` is not an object or array | -32602 with its `id` |
//! | a request whose `method` is not a string, or not an object at all | -32600 |
//!
//! Everything else goes to rmcp unchanged. The server keeps running.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// The largest message accepted (4 MiB; the largest real request is a few KiB).
pub const MAX_MESSAGE: usize = 4 << 20;

/// What to do with one line of input.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Hand it to rmcp.
    Forward,
    /// Answer these error lines instead (may be empty: a notification).
    Reply(Vec<String>),
}

/// A JSON-RPC error response.
fn error(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// Judge one complete line (without its newline).
pub fn judge(line: &[u8]) -> Verdict {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Reply(Vec::new());
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Verdict::Reply(vec![error(
                &Value::Null,
                -32700,
                &format!("Parse error: the line is not JSON ({e})"),
            )]);
        }
    };
    match value {
        Value::Array(items) if items.is_empty() => Verdict::Reply(vec![error(
            &Value::Null,
            -32600,
            "Invalid request: an empty batch",
        )]),
        Value::Array(items) => Verdict::Reply(
            items
                .iter()
                .filter_map(|m| m.get("id"))
                .map(|id| {
                    error(
                        id,
                        -32600,
                        "Invalid request: batches are not supported by MCP; send one message per line",
                    )
                })
                .collect(),
        ),
        Value::Object(ref message) => {
            let id = message.get("id");
            let reply = |code, why: &str| {
                Verdict::Reply(id.map(|id| error(id, code, why)).into_iter().collect())
            };
            match (message.get("method"), message.get("params")) {
                (Some(Value::String(_)), None | Some(Value::Object(_) | Value::Array(_))) => {
                    Verdict::Forward
                }
                (Some(Value::String(_)), Some(_)) => {
                    reply(-32602, "Invalid params: params must be an object")
                }
                (Some(_), _) => reply(-32600, "Invalid request: method must be a string"),
                // A response to one of our requests.
                (None, _) if id.is_some() => Verdict::Forward,
                (None, _) => Verdict::Reply(vec![error(
                    &Value::Null,
                    -32600,
                    "Invalid request: neither a request nor a response",
                )]),
            }
        }
        _ => Verdict::Reply(vec![error(
            &Value::Null,
            -32600,
            "Invalid request: a message must be a JSON object",
        )]),
    }
}

/// Put the framing between `input`/`output` and rmcp: returns the streams
/// rmcp reads from and writes to, and the task that writes `output` (await
/// it after rmcp stopped so every answer is flushed).
pub fn spawn<R, W>(input: R, output: W) -> (DuplexStream, DuplexStream, tokio::task::JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (rmcp_in, mut to_rmcp) = tokio::io::duplex(1 << 16);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 16);
    let (replies, answers) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(1 << 16, input);
        while let Some(line) = read_line(&mut reader).await {
            let verdict = match &line {
                Ok(bytes) => judge(bytes),
                Err(()) => Verdict::Reply(vec![error(
                    &Value::Null,
                    -32600,
                    &format!(
                        "Invalid request: a message larger than {MAX_MESSAGE} bytes was skipped"
                    ),
                )]),
            };
            match (verdict, line) {
                (Verdict::Forward, Ok(mut bytes)) => {
                    bytes.push(b'\n');
                    if to_rmcp.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                (Verdict::Reply(lines), _) => {
                    for l in lines {
                        let _ = replies.send(l);
                    }
                }
                (Verdict::Forward, Err(())) => {}
            }
        }
        // stdin closed: rmcp sees the end of its input and stops.
        let _ = to_rmcp.shutdown().await;
    });
    let writer = tokio::spawn(write_out(from_rmcp, answers, output));
    (rmcp_in, rmcp_out, writer)
}

/// One line of at most [`MAX_MESSAGE`] bytes (`Err` for a longer one, whose
/// rest is skipped); `None` at the end of the input.
async fn read_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
) -> Option<std::result::Result<Vec<u8>, ()>> {
    let mut line = Vec::new();
    let mut oversized = false;
    loop {
        let Ok(buf) = reader.fill_buf().await else {
            return None;
        };
        if buf.is_empty() {
            return (!line.is_empty() || oversized).then_some(if oversized {
                Err(())
            } else {
                Ok(line)
            });
        }
        let (chunk, done) = match memchr_newline(buf) {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !oversized && line.len() + chunk.len() <= MAX_MESSAGE {
            line.extend_from_slice(chunk);
        } else {
            oversized = true;
            line = Vec::new();
        }
        let used = done.unwrap_or(buf.len());
        reader.consume(used);
        if done.is_some() {
            return Some(if oversized { Err(()) } else { Ok(line) });
        }
    }
}

fn memchr_newline(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

/// Write rmcp's lines and this layer's answers to `output`, whole lines
/// only. Ends when rmcp's output ends (after the answers already queued).
async fn write_out<W: AsyncWrite + Unpin>(
    from_rmcp: DuplexStream,
    mut answers: mpsc::UnboundedReceiver<String>,
    mut output: W,
) {
    let mut lines = BufReader::new(from_rmcp).lines();
    let mut answers_open = true;
    loop {
        let line = tokio::select! {
            l = lines.next_line() => match l {
                Ok(Some(l)) => l,
                _ => break,
            },
            a = answers.recv(), if answers_open => {
                let Some(a) = a else {
                    answers_open = false;
                    continue;
                };
                a
            }
        };
        if !write_line(&mut output, &line).await {
            return;
        }
    }
    while let Ok(a) = answers.try_recv() {
        if !write_line(&mut output, &a).await {
            return;
        }
    }
}

async fn write_line<W: AsyncWrite + Unpin>(output: &mut W, line: &str) -> bool {
    output
        .write_all(format!("{line}\n").as_bytes())
        .await
        .is_ok()
        && output.flush().await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replies(line: &str) -> Vec<Value> {
        match judge(line.as_bytes()) {
            Verdict::Reply(lines) => lines
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
            Verdict::Forward => panic!("forwarded: {line}"),
        }
    }

    #[test]
    fn every_malformed_request_is_answered_with_its_id() {
        let r = replies("not json");
        assert_eq!(
            (r[0]["id"].clone(), r[0]["error"]["code"].clone()),
            (Value::Null, json!(-32700))
        );
        let r = replies(r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":"garbage"}"#);
        assert_eq!(
            (r[0]["id"].clone(), r[0]["error"]["code"].clone()),
            (json!(7), json!(-32602))
        );
        let r = replies(
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"},{"id":"b","method":"ping"}]"#,
        );
        assert_eq!(
            r.iter().map(|m| m["id"].clone()).collect::<Vec<_>>(),
            [json!(1), json!("b")]
        );
        assert_eq!(
            replies(r#"{"jsonrpc":"2.0","id":3,"method":5}"#)[0]["error"]["code"],
            -32600
        );
        assert_eq!(replies("42")[0]["error"]["code"], -32600);
        assert!(
            replies(r#"{"jsonrpc":"2.0","method":"n","params":1}"#).is_empty(),
            "a notification gets no answer"
        );
        assert!(replies("   ").is_empty());
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Verdict::Forward
        );
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Verdict::Forward
        );
    }
}
