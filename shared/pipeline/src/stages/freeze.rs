//! The freeze: wait until the source holds the finished turn and stands
//! still, then copy it to the backup and check the copy's digest.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use super::{Steps, seconds};
use crate::operation::Store;
use ktr_base::config::Config;
use ktr_base::digest::Sha256;
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, copy_atomic};
use ktr_base::ids::OperationId;
use ktr_base::open::{Links, open_regular};
use ktr_engine::window::usage::read_tail_seeking;

/// How long prepare waits for the reply of the scheduling Stop to reach the
/// transcript (Claude Code 2.1.328 flushes a turn up to ~1 s after its Stop
/// hook starts) before it falls back to the plain stable window.
const REPLY_WAIT: Duration = Duration::from_secs(3);
/// How often the transcript's tail is read meanwhile.
const REPLY_POLL: Duration = Duration::from_millis(25);
/// Once that reply is in, the file must stay unchanged this long (or
/// `stable_file_seconds`, when shorter) — unless the turn's closing record
/// shows up first ([`turn_closed`]). Records Claude Code appends later
/// without anyone speaking (`turn_duration`, …) are not a change at
/// activation.
const SETTLE: Duration = Duration::from_millis(200);
/// How much of the transcript's end [`turn_closed`] reads.
const CLOSE_TAIL: u64 = 256 * 1024;

/// A stable, verified copy of the source.
pub(super) struct Frozen {
    pub backup: PathBuf,
    pub sha256: Sha256,
    /// When the stable window began: transcripts modified later compete.
    pub at: SystemTime,
}

/// Wait until the transcript holds the reply whose Stop hook scheduled this
/// attempt (`reply`, its end; at most [`REPLY_WAIT`]), then until two
/// digests [`SETTLE`] apart are equal or, sooner, the turn's closing
/// `stop_hook_summary` follows that reply ([`turn_closed`]: Claude Code
/// writes it once the Stop hooks are done, after everything said in the
/// turn) — or, when no reply is known or it never came, until two digests
/// `stable_file_seconds` apart are equal (within
/// `stable_file_timeout_seconds`); copy the file to the backup and check
/// that the copy has that digest; if the file moved on meanwhile, wait
/// again.
pub(super) fn freeze(
    config: &Config,
    store: &Store,
    id: &OperationId,
    source: &Path,
    reply: Option<&str>,
    steps: &mut Steps,
) -> Result<Frozen> {
    let name = source
        .file_name()
        .ok_or_else(|| Error::refused(format!("{} has no file name", source.display())))?;
    let backup = store.artifacts_dir(id)?.join(name);
    let waited = Instant::now();
    let (interval, end) = match reply.filter(|end| reply_arrived(source, end)) {
        Some(end) => {
            steps.say(format!(
                "the reply of the scheduling Stop is in the transcript after {:.2} s",
                waited.elapsed().as_secs_f64()
            ));
            (SETTLE.min(seconds(config.stable_file_seconds)), Some(end))
        }
        None => (seconds(config.stable_file_seconds), None),
    };
    let timeout = seconds(config.stable_file_timeout_seconds);
    let started = Instant::now();
    let mut at = SystemTime::now();
    let mut previous = Sha256::of_file(source)?;
    let mut said_closed = false;
    loop {
        if started.elapsed() >= timeout {
            return Err(Error::refused(format!(
                "transcript {} kept changing for {} s (stable_file_timeout_seconds); the session is busy, request again later",
                source.display(),
                config.stable_file_timeout_seconds
            )));
        }
        let closed = if let Some(end) = end {
            wait_for_close(source, end, interval)
        } else {
            thread::sleep(interval);
            false
        };
        if closed && !said_closed {
            said_closed = true;
            steps.say(format!(
                "the turn's stop_hook_summary is in after {:.2} s",
                waited.elapsed().as_secs_f64()
            ));
        }
        let (now, digest) = (SystemTime::now(), Sha256::of_file(source)?);
        if digest != previous {
            (at, previous) = (now, digest.clone());
            if !closed {
                continue;
            }
        }
        // A backup left by an earlier attempt of this operation is replaced.
        let copied = copy_atomic(source, &backup, 0o600, Existing::Replace)?;
        let on_disk = Sha256::of_file(&backup)?;
        if copied == digest && on_disk == digest {
            steps.say(format!(
                "source stable (sha256 {}); frozen to {}",
                digest.short(),
                backup.display()
            ));
            return Ok(Frozen {
                backup,
                sha256: digest,
                at,
            });
        }
        steps.say("source changed while it was copied; waiting again");
        (at, previous) = (now, copied);
    }
}

/// Wait (at most [`REPLY_WAIT`]) until the transcript's tail holds the
/// reply ending in `end`, as JSON writes it; whether it came.
fn reply_arrived(source: &Path, end: &str) -> bool {
    let needles = super::advice::reply_needles(end);
    let needles: Vec<&[u8]> = needles.iter().map(String::as_bytes).collect();
    if needles.is_empty() {
        return false;
    }
    let deadline = Instant::now() + REPLY_WAIT;
    loop {
        if read_tail_seeking(source, &needles).is_ok_and(|(_, found)| found) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(REPLY_POLL);
    }
}

/// Sleep `interval`, or less when the turn ending in `end` is closed
/// ([`turn_closed`], read every [`REPLY_POLL`]); whether it is.
fn wait_for_close(source: &Path, end: &str, interval: Duration) -> bool {
    let deadline = Instant::now() + interval;
    loop {
        if turn_closed(source, end) {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        thread::sleep(REPLY_POLL.min(left));
    }
}

/// Whether the last [`CLOSE_TAIL`] bytes of `source` hold the reply ending
/// in `end` followed by a whole `system`/`stop_hook_summary` record, and
/// end with a newline (no record half written). Claude Code 2.1.328 writes
/// the turn's hook attachments and then that summary once its Stop hooks
/// are done; nothing said in the turn comes after it.
fn turn_closed(source: &Path, end: &str) -> bool {
    use std::os::unix::fs::FileExt as _;
    let Ok(file) = open_regular(source, Links::Refuse) else {
        return false;
    };
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return false;
    };
    let start = len.saturating_sub(CLOSE_TAIL);
    let mut tail = vec![0; usize::try_from(len - start).unwrap_or(0)];
    if file.read_exact_at(&mut tail, start).is_err() || !tail.ends_with(b"\n") {
        return false;
    }
    let reply = super::advice::reply_needles(end)
        .iter()
        .filter_map(|n| memchr::memmem::rfind(&tail, n.as_bytes()))
        .max();
    let Some(reply) = reply else {
        return false;
    };
    let after = memchr::memchr(b'\n', &tail[reply..]).map_or(tail.len(), |i| reply + i + 1);
    tail[after..]
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .any(|line| {
            serde_json::from_slice::<serde_json::Value>(line)
                .is_ok_and(|v| v["type"] == "system" && v["subtype"] == "stop_hook_summary")
        })
}

#[cfg(test)]
mod tests {
    use super::turn_closed;

    const REPLY: &str =
        r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Done — rebuilt."}]}}"#;
    const HOOKS: &str = r#"{"type":"attachment","attachment":{"type":"hook_success"}}"#;
    const SUMMARY: &str = r#"{"type":"system","subtype":"stop_hook_summary","hookCount":1}"#;
    const DURATION: &str = r#"{"type":"system","subtype":"turn_duration","durationMs":5}"#;

    fn closed(lines: &[&str], tail: &str) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, lines.join("\n") + tail).unwrap();
        turn_closed(&path, "Done — rebuilt.")
    }

    #[test]
    fn a_turn_is_closed_by_the_stop_hook_summary_after_its_reply() {
        assert!(closed(&[REPLY, HOOKS, SUMMARY], "\n"));
        assert!(closed(&[REPLY, HOOKS, SUMMARY, DURATION], "\n"));
        // The reply is in but the Stop hooks are not done.
        assert!(!closed(&[REPLY, HOOKS], "\n"));
        assert!(!closed(&[REPLY, DURATION], "\n"));
        // A summary of an earlier turn does not close this one.
        assert!(!closed(&[SUMMARY, REPLY, HOOKS], "\n"));
        // A record still being written.
        assert!(!closed(&[REPLY, HOOKS, SUMMARY], ""));
        assert!(!closed(&[REPLY, HOOKS, SUMMARY, r#"{"type":"sys"#], ""));
        // Another reply.
        let other = REPLY.replace("rebuilt", "built");
        assert!(!closed(&[&other, HOOKS, SUMMARY], "\n"));
    }
}
