//! Independent verification of a candidate (SPEC §10, ktr-verify).
//!
//! Two checks. The *structural* check reads the candidate line by line as
//! plain JSON and compares it with the manifest and with a fresh,
//! deterministic rebuild from the frozen backup. The *conservation* check
//! is written independently of the selector: it reads the backup its own
//! simple way (`serde_json::Value`, naive tag removal) and demands that every
//! piece of real user/assistant text is found in the candidate, unless the
//! plan said it left that record out.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::candidate::{ITEM_NAMESPACE, ManifestEntry, Sink};
use crate::meter::Meter;
use crate::options::EngineOptions;
use crate::plan::{self, LeftOut};
use crate::transcript::is_timestamp;
use ktr_base::digest::{sha256_file, sha256_file_with};
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;

mod conservation;
use conservation::lines_of;
pub use conservation::{Carried, Conservation, Texts, conserve};

/// What the operation recorded at prepare time. The manifest is read as a
/// stream (a long session's manifest does not fit the memory budget).
pub struct Expected<'a> {
    pub session_id: &'a SessionId,
    /// The frozen backup's digest (the source's at the freeze).
    pub backup_sha256: &'a str,
    pub candidate_sha256: &'a str,
    pub manifest: &'a dyn Items,
    pub left_out: &'a dyn LeftOuts,
}

/// The manifest's entries of the carried items, in candidate order, read
/// from the start each time.
pub trait Items {
    fn each_item(&self, f: &mut dyn FnMut(&ManifestEntry) -> Result<()>) -> Result<()>;
}

/// The records the plan left out, read from the start each time.
pub trait LeftOuts {
    fn each_left_out(&self, f: &mut dyn FnMut(&LeftOut) -> Result<()>) -> Result<()>;
}

impl Items for Vec<ManifestEntry> {
    fn each_item(&self, f: &mut dyn FnMut(&ManifestEntry) -> Result<()>) -> Result<()> {
        self.iter().try_for_each(f)
    }
}

impl LeftOuts for Vec<LeftOut> {
    fn each_left_out(&self, f: &mut dyn FnMut(&LeftOut) -> Result<()>) -> Result<()> {
        self.iter().try_for_each(f)
    }
}

/// What verification checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ConservationCounts {
    pub candidate_lines: usize,
    pub source_pieces_checked: usize,
    pub source_records_left_out: usize,
    pub source_records_elided: usize,
}

/// Verify `candidate` against the frozen `backup`. First both must still
/// have the digests recorded at prepare. Every step streams: the
/// candidate is read line by line (three times), the rebuild goes into a
/// digest, and only the pieces of text that were not found where their
/// manifest entry says are held until the end. The rebuild's scan of the
/// backup adds to `meter`.
pub fn check<'o>(
    options: impl Into<EngineOptions<'o>>,
    backup: &Path,
    candidate: &Path,
    expected: &Expected<'_>,
    meter: &Meter,
) -> Result<ConservationCounts> {
    let options = &options.into();
    // The read that proves the backup unchanged also measures its longest
    // line (which decides below whether the two checks run side by side).
    let mut longest = LongestLine::default();
    if sha256_file_with(backup, |chunk| longest.feed(chunk))? != expected.backup_sha256 {
        return Err(fail(
            Failed::Backup,
            format!(
                "backup {} no longer has the frozen digest",
                backup.display()
            ),
        ));
    }
    let digest = sha256_file(candidate)?;
    if digest != expected.candidate_sha256 {
        return Err(fail(
            Failed::Digest,
            format!(
                "candidate digest {digest} differs from the recorded {}",
                expected.candidate_sha256
            ),
        ));
    }
    let file = CandidateFile {
        path: candidate,
        expected,
        lines: std::cell::Cell::new(0),
        structure_failed: std::cell::Cell::new(false),
    };
    let rebuild = || {
        let mut rebuilt = Digest::default();
        plan::build_frozen_into(
            options,
            backup,
            Some(expected.session_id),
            &mut rebuilt,
            meter,
        )
        .map(|_| rebuilt.sha256())
    };
    let read = || conserve(backup, &file, expected, options.reply_tool_pattern);
    // The rebuild and the reading of the candidate (its structure checked
    // while conservation walks it) are independent: one core each. Each
    // holds a few copies of the line it reads, so a backup with a huge
    // line is checked one after the other (memory, not time, is then
    // what counts).
    let (rebuilt, read) = if longest.longest() > ONE_AT_A_TIME {
        (rebuild(), read())
    } else {
        std::thread::scope(|s| {
            let rebuilt = s.spawn(rebuild);
            let read = read();
            let rebuilt = rebuilt
                .join()
                .unwrap_or_else(|_| Err(Error::io("the rebuild of the frozen backup failed")));
            (rebuilt, read)
        })
    };
    // Reported in the order of the checks: structure, rebuild, conservation.
    let conservation = match read {
        Err(e) if file.structure_failed.get() => return Err(e),
        read => read,
    };
    if rebuilt? != digest {
        return Err(fail(
            Failed::Rebuild,
            "candidate differs from a fresh rebuild of the frozen backup",
        ));
    }
    let conservation = conservation?;
    let lines = file.lines.get();
    Ok(ConservationCounts {
        candidate_lines: lines,
        source_pieces_checked: conservation.checked,
        source_records_left_out: conservation.left_out,
        source_records_elided: conservation.elided,
    })
}

/// A backup with a line longer than this is verified one check at a time.
const ONE_AT_A_TIME: u64 = 8 << 20;

/// The length of the longest line of bytes fed in chunks (nothing held).
#[derive(Default)]
struct LongestLine {
    longest: u64,
    current: u64,
}

impl LongestLine {
    fn feed(&mut self, chunk: &[u8]) {
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', chunk) {
            self.longest = self.longest.max(self.current + (end - start) as u64);
            self.current = 0;
            start = end + 1;
        }
        self.current += (chunk.len() - start) as u64;
    }

    fn longest(&self) -> u64 {
        self.longest.max(self.current)
    }
}

/// Which check found the candidate wrong: the value under every
/// verification error ([`Error::find`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// The frozen backup no longer has its digest.
    Backup,
    /// The candidate is not the file prepare wrote.
    Digest,
    /// A line breaks the candidate's form or differs from the manifest.
    Structure,
    /// The candidate is not what a fresh rebuild of the backup gives.
    Rebuild,
    /// Text of the source is missing from the candidate.
    Conservation,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let check = match self {
            Failed::Backup => "backup",
            Failed::Digest => "digest",
            Failed::Structure => "structure",
            Failed::Rebuild => "rebuild",
            Failed::Conservation => "conservation",
        };
        write!(f, "the {check} check failed")
    }
}

impl std::error::Error for Failed {}

fn fail(check: Failed, message: impl std::fmt::Display) -> Error {
    Error::refused(format!("verification failed: {message}")).because(check)
}

/// A rebuilt candidate, kept as its digest only.
#[derive(Default)]
struct Digest(sha2::Sha256);

impl Digest {
    fn sha256(self) -> String {
        ktr_base::digest::hex(&sha2::Digest::finalize(self.0))
    }
}

impl Sink for Digest {
    fn line(&mut self, json: &str, _: ManifestEntry) -> Result<()> {
        crate::span::expand_json(json, &mut |b| {
            sha2::Digest::update(&mut self.0, b);
            Ok(())
        })?;
        sha2::Digest::update(&mut self.0, b"\n");
        Ok(())
    }
    fn wants_manifest(&self) -> bool {
        false
    }
}

/// The candidate file on disk, read line by line with its manifest; each
/// read checks every line's structure.
struct CandidateFile<'a> {
    path: &'a Path,
    expected: &'a Expected<'a>,
    /// Lines of the last complete read.
    lines: std::cell::Cell<usize>,
    /// A line failed the structure check (not the conservation check).
    structure_failed: std::cell::Cell<bool>,
}

impl CandidateFile<'_> {
    /// Call `f(index, line, entry)` for every line with its manifest entry;
    /// returns the number of lines. A candidate longer or shorter than its
    /// manifest is an error.
    fn each(&self, mut f: impl FnMut(usize, &str, &ManifestEntry) -> Result<()>) -> Result<usize> {
        let mut lines = lines_of(self.path)?;
        let read = |e: std::io::Error| Error::io_at("read", self.path, &e);
        let mut i = 0;
        self.expected.manifest.each_item(&mut |entry| {
            // Read as prepare read the source: long texts as spans, lone
            // surrogates through their stand-ins (`lines`).
            let Some((_, bytes)) = lines.next_line().map_err(read)? else {
                return Err(fail(
                    Failed::Structure,
                    format!("candidate has {i} lines, fewer than the manifest's entries"),
                ));
            };
            // A line that is not valid JSON fails the structure check.
            let line = std::str::from_utf8(bytes.unwrap_or_default())
                .map_err(|_| fail(Failed::Structure, "candidate is not UTF-8"))?;
            f(i, line, entry)?;
            i += 1;
            Ok(())
        })?;
        if lines.next_line().map_err(read)?.is_some() {
            return Err(fail(
                Failed::Structure,
                format!("candidate has more lines than the manifest's {i} entries"),
            ));
        }
        Ok(i)
    }
}

impl Texts for CandidateFile<'_> {
    /// Every walk checks the structure of each line on the way (the first
    /// walk is the structure check; the others see the same lines).
    fn each_text(&self, f: &mut dyn FnMut(usize, &str) -> Result<bool>) -> Result<()> {
        let mut go_on = true;
        let mut previous: Option<String> = None;
        let lines = self.each(|i, line, entry| {
            let text = check_line(self.expected, i, line, entry, &mut previous)
                .inspect_err(|_| self.structure_failed.set(true))?;
            if go_on {
                go_on = f(entry.source_line, &crate::span::comparable(text))?;
            }
            Ok(())
        })?;
        self.lines.set(lines);
        Ok(())
    }
}

/// Check candidate line `i` against its manifest entry and the line before
/// it (`previous` uuid, updated); return the carried text.
fn check_line(
    expected: &Expected<'_>,
    i: usize,
    line: &str,
    entry: &ManifestEntry,
    previous: &mut Option<String>,
) -> Result<String> {
    let at = |what: &str| fail(Failed::Structure, format!("line {}: {what}", i + 1));
    let mut v: Value = serde_json::from_str(line).map_err(|_| at("not JSON"))?;
    let kind = v["type"].as_str().unwrap_or("");
    if kind != entry.role.as_str() {
        return Err(at(&format!(
            "type {kind:?} does not match the manifest role {}",
            entry.role
        )));
    }
    let source = entry
        .source_uuid
        .clone()
        .unwrap_or_else(|| format!("line-{}", entry.source_line));
    let uuid = Uuid::new_v5(
        &ITEM_NAMESPACE,
        format!("{}:{i}:{source}", expected.session_id).as_bytes(),
    )
    .to_string();
    if v["uuid"].as_str() != Some(uuid.as_str()) || entry.uuid != uuid {
        return Err(at(
            "uuid is not the one derived from session, position and source",
        ));
    }
    if v["parentUuid"].as_str().map(str::to_string) != *previous {
        return Err(at("parentUuid does not point at the previous line"));
    }
    if v["sessionId"].as_str() != Some(expected.session_id) {
        return Err(at("sessionId is not the new session id"));
    }
    if !v["timestamp"].as_str().is_some_and(is_timestamp) {
        return Err(at("timestamp missing or not ISO-8601"));
    }
    let meta_ok = kind == "attachment" || v["isMeta"] == Value::Bool(false);
    if v["isSidechain"] != Value::Bool(false) || !meta_ok {
        return Err(at("isSidechain/isMeta must be false"));
    }
    let attachment = kind == "attachment";
    let carried = carried(&mut v, entry).ok_or_else(|| {
        at(if attachment {
            "an attachment line must be a SessionStart context carried as the startup snapshot"
        } else {
            "content is not plain text (tool, thinking or image block?)"
        })
    })?;
    if crate::span::sha256(&carried)? != entry.carried_sha256 {
        return Err(at("text differs from the manifest digest"));
    }
    *previous = Some(uuid);
    Ok(carried)
}

/// The carried text of a candidate line (a `SessionStart` context or one
/// plain text), or `None` when the line is neither. A plain text is taken
/// out of `v`, not copied.
fn carried(v: &mut Value, entry: &ManifestEntry) -> Option<String> {
    match v["type"].as_str() {
        Some("attachment") => startup_context_text(v, entry),
        _ => carried_text(v),
    }
}

/// The text of a carried `SessionStart` context, only for a startup snapshot
/// entry whose attachment is exactly such a context.
fn startup_context_text(v: &Value, entry: &ManifestEntry) -> Option<String> {
    let a = v.get("attachment")?;
    if entry.kind != crate::turns::ItemKind::StartupSnapshot
        || a["type"] != "hook_additional_context"
        || a["hookEvent"] != "SessionStart"
    {
        return None;
    }
    match &a["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.as_str().or_else(|| p["text"].as_str()))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// The text of a candidate line, only if the message is exactly one text.
fn carried_text(v: &mut Value) -> Option<String> {
    let user = v["type"].as_str()? == "user";
    let content = v.get_mut("message")?.as_object_mut()?.get_mut("content")?;
    let text = if user {
        content
    } else {
        match content.as_array_mut()?.as_mut_slice() {
            [only] if only["type"] == "text" && only.as_object()?.len() == 2 => {
                only.get_mut("text")?
            }
            _ => return None,
        }
    };
    match text.take() {
        Value::String(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::LongestLine;
    use ktr_base::digest::sha256_file_with;

    fn longest_line(path: &std::path::Path) -> u64 {
        let mut longest = LongestLine::default();
        sha256_file_with(path, |chunk| longest.feed(chunk)).unwrap();
        longest.longest()
    }

    #[test]
    fn the_longest_line_is_measured_across_read_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let long = "x".repeat(200_000); // longer than one 64 KiB read
        std::fs::write(&path, format!("ab\n{long}\n\nlast without newline")).unwrap();
        assert_eq!(longest_line(&path), 200_000);
        std::fs::write(&path, "").unwrap();
        assert_eq!(longest_line(&path), 0);
        std::fs::write(&path, "no newline at all").unwrap();
        assert_eq!(longest_line(&path), 17);
    }
}
