//! Independent verification of a candidate (SPEC §10, ktr-verify).
//!
//! Two checks. The *structural* check reads the candidate line by line as
//! plain JSON and compares it with the manifest and with a fresh,
//! deterministic rebuild from the frozen backup. The *conservation* check
//! is written independently of the selector: it reads the backup its own
//! simple way (`serde_json::Value`, naive tag removal) and demands that every
//! piece of real user/assistant text is found in the candidate, unless the
//! plan said it left that record out.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use regex::Regex;
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

/// What the conservation check counted.
#[derive(Debug)]
pub struct Conservation {
    pub checked: usize,
    pub left_out: usize,
    pub elided: usize,
}

/// The injected elements of SPEC §5 (data shared with the selector; the
/// removal logic below is this module's own).
const TAGS: &[&str] = crate::classify::INJECTED_TAGS;

/// One carried text and the source line its manifest entry names.
#[derive(Debug, Clone, Copy)]
pub struct Carried<'a> {
    pub source_line: usize,
    pub text: &'a str,
}

/// The carried texts in candidate order, each with the source line its
/// manifest entry names; read from the start as often as the check needs.
pub trait Texts {
    /// Call `f(source_line, text)` for each until it returns `false`.
    fn each_text(&self, f: &mut dyn FnMut(usize, &str) -> Result<bool>) -> Result<()>;
}

impl Texts for Vec<Carried<'_>> {
    fn each_text(&self, f: &mut dyn FnMut(usize, &str) -> Result<bool>) -> Result<()> {
        for c in self {
            if !f(c.source_line, c.text)? {
                break;
            }
        }
        Ok(())
    }
}

/// Every piece of real speech in the backup must be in one of the carried
/// texts, unless the plan left its record out.
///
/// Linear in the size of the backup and the candidate, and bounded in
/// memory. The backup's speech pieces are collected line by line and
/// matched, in one walk over the carried texts (in candidate order),
/// against the texts whose manifest entry names their own source line, in
/// order. A piece not found that way (a duplicated record, a candidate out
/// of source order, pieces in another order) is kept aside; at the end one
/// Aho-Corasick pass over every carried text must find each of them
/// somewhere. So a piece passes exactly when it occurs in some carried
/// text, as the check always demanded, without a search per piece.
pub fn conserve(
    backup: &Path,
    carried: &dyn Texts,
    expected: &Expected<'_>,
    reply_tool: &Regex,
) -> Result<Conservation> {
    let mut left_out = LineSet::default();
    expected.left_out.each_left_out(&mut |l| {
        left_out.insert(l.line);
        Ok(())
    })?;
    let left_out = left_out.sorted();
    let mut elided = LineSet::default();
    expected.manifest.each_item(&mut |m| {
        if m.elided_chars > 0 {
            elided.insert(m.source_line);
        }
        Ok(())
    })?;
    let elided = elided.sorted();
    let mut lines = lines_of(backup)?;
    let mut result = Conservation {
        checked: 0,
        left_out: 0,
        elided: 0,
    };
    let tags = Tags::new();
    // The backup's next line with pieces to find: (number, pieces).
    let mut next_pieces = || -> Result<Option<(usize, Vec<String>)>> {
        loop {
            let Some((at, bytes)) = lines
                .next_line()
                .map_err(|e| Error::io_at("read", backup, &e))?
            else {
                return Ok(None);
            };
            let number = at.number;
            let Some(Ok(v)) = bytes.map(serde_json::from_slice::<Value>) else {
                continue;
            };
            let pieces = speech_pieces(&v, reply_tool, &tags);
            if pieces.is_empty() {
                continue;
            }
            if left_out.contains(number) {
                result.left_out += 1;
                continue;
            }
            if elided.contains(number) {
                result.elided += 1;
                continue;
            }
            result.checked += pieces.len();
            return Ok(Some((number, pieces)));
        }
    };
    let mut aside: Vec<(usize, String)> = Vec::new();
    // The pieces of the backup line being matched, the next one first.
    let mut pending = next_pieces()?;
    // How many of the pending line's pieces its earlier texts held.
    let mut found_in: Option<usize> = None;
    carried.each_text(&mut |source_line, text| {
        // Pieces of lines before this text's line have no own text left.
        while let Some((number, pieces)) = pending.take() {
            if number >= source_line {
                pending = Some((number, pieces));
                break;
            }
            let from = found_in.take().unwrap_or(0);
            aside.extend(pieces.into_iter().skip(from).map(|p| (number, p)));
            pending = next_pieces()?;
        }
        let Some((number, pieces)) = &pending else {
            return Ok(false);
        };
        if *number != source_line {
            return Ok(true);
        }
        // Find the line's pieces in order in this text, resuming where the
        // previous text of the same line stopped.
        let mut i = found_in.take().unwrap_or(0);
        let mut offset = 0;
        while let Some(piece) = pieces.get(i) {
            match memchr::memmem::find(&text.as_bytes()[offset..], piece.as_bytes()) {
                Some(at) => {
                    offset += at + piece.len();
                    i += 1;
                }
                None => break,
            }
        }
        if i == pieces.len() {
            pending = next_pieces()?;
        } else {
            found_in = Some(i);
        }
        Ok(true)
    })?;
    // Whatever was not found in its own texts is looked for anywhere.
    while let Some((number, pieces)) = pending.take() {
        let from = found_in.take().unwrap_or(0);
        aside.extend(pieces.into_iter().skip(from).map(|p| (number, p)));
        pending = next_pieces()?;
    }
    if let Some((number, piece)) = missing_anywhere(carried, aside)? {
        let preview: String = crate::span::head(&piece).chars().take(80).collect();
        return Err(fail(
            Failed::Conservation,
            format!(
                "conservation: text of source line {number} is missing from the candidate: {preview:?}"
            ),
        ));
    }
    Ok(result)
}

/// The lines of `path`, read as the plan reads a transcript (long texts as
/// spans of this file).
fn lines_of(path: &Path) -> Result<crate::lines::Lines<BufReader<File>>> {
    // Never blocks in open(2), refuses a FIFO, a device or a final symlink.
    let file = ktr_base::open::open_regular(path, ktr_base::open::Links::Refuse)
        .map_err(|e| Error::io_at("open", path, &e))?;
    let again = file
        .try_clone()
        .map_err(|e| Error::io_at("open", path, &e))?;
    Ok(crate::lines::Lines::new(
        BufReader::with_capacity(1 << 16, file),
        Some(std::sync::Arc::new(again)),
    ))
}

/// A set of line numbers, sorted once: a capped plan of a long session
/// leaves out hundreds of thousands of records, and the backup walk asks
/// about every line. (A hash set of them is touched all over on every
/// line; a bitset would be as large as the largest
/// number an edited manifest names.)
#[derive(Default)]
struct LineSet(Vec<usize>);

impl LineSet {
    fn insert(&mut self, line: usize) {
        self.0.push(line);
    }

    /// Sort once all are in (the manifest lists them in any order).
    fn sorted(mut self) -> LineSet {
        self.0.sort_unstable();
        self
    }

    fn contains(&self, line: usize) -> bool {
        self.0.binary_search(&line).is_ok()
    }
}

/// The first (by source line) of `aside` that occurs in no carried text:
/// one overlapping Aho-Corasick pass over the texts for all of them.
fn missing_anywhere(
    carried: &dyn Texts,
    mut aside: Vec<(usize, String)>,
) -> Result<Option<(usize, String)>> {
    if aside.is_empty() {
        return Ok(None);
    }
    aside.sort_by(|a, b| a.1.cmp(&b.1));
    aside.dedup_by(|a, b| {
        a.1 == b.1 && {
            b.0 = b.0.min(a.0);
            true
        }
    });
    let automaton = aho_corasick::AhoCorasick::new(aside.iter().map(|(_, p)| p.as_str()))
        .expect("pieces are plain strings");
    let mut found = vec![false; aside.len()];
    let mut left = aside.len();
    carried.each_text(&mut |_, text| {
        for m in automaton.find_overlapping_iter(text) {
            let seen = &mut found[m.pattern().as_usize()];
            if !*seen {
                *seen = true;
                left -= 1;
            }
        }
        Ok(left > 0)
    })?;
    Ok(aside
        .into_iter()
        .zip(found)
        .filter(|(_, f)| !f)
        .map(|(a, _)| a)
        .min_by_key(|(line, _)| *line))
}

/// This reader's own idea of the speech in a record: pieces of text that
/// must survive a rebuild.
fn speech_pieces(v: &Value, reply_tool: &Regex, tags: &Tags) -> Vec<String> {
    if v["isSidechain"] == Value::Bool(true) {
        return Vec::new();
    }
    let message = &v["message"];
    let content = if message.is_object() {
        &message["content"]
    } else {
        message
    };
    match v["type"].as_str() {
        Some("assistant") => {
            if message["model"] == "<synthetic>" || v["isMeta"] == Value::Bool(true) {
                return Vec::new();
            }
            let mut out = Vec::new();
            for block in blocks(content) {
                match block["type"].as_str() {
                    Some("text") => out.extend(block["text"].as_str()),
                    Some("tool_use")
                        if block["name"]
                            .as_str()
                            .is_some_and(|n| reply_tool.is_match(n)) =>
                    {
                        out.extend(block["input"]["text"].as_str());
                    }
                    _ => {}
                }
            }
            out.extend(content.as_str());
            trimmed(out)
        }
        Some("user") => user_pieces(v, content, tags),
        Some("attachment") => {
            let a = &v["attachment"];
            let prompt = a["prompt"].as_str().unwrap_or("").trim();
            let mode = a["commandMode"].as_str().unwrap_or("prompt");
            if a["type"] != "queued_command" || mode != "prompt" || prompt.starts_with('/') {
                return Vec::new();
            }
            trimmed([prompt])
        }
        _ => Vec::new(),
    }
}

fn user_pieces(v: &Value, content: &Value, tags: &Tags) -> Vec<String> {
    if v["isCompactSummary"] == Value::Bool(true) {
        return Vec::new(); // machine text; carried or counted as dropped
    }
    let mut texts: Vec<&str> = Vec::new();
    for block in blocks(content) {
        match block["type"].as_str() {
            Some("tool_result") => {
                let result = match &block["content"] {
                    Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
                    other => std::borrow::Cow::Owned(
                        blocks(other)
                            .filter_map(|b| b["text"].as_str())
                            .collect::<Vec<_>>()
                            .join("\n"),
                    ),
                };
                return match result.split_once("the user said:\n") {
                    Some((_, words)) if block["is_error"] == Value::Bool(true) => trimmed([words]),
                    _ => Vec::new(),
                };
            }
            Some("text") => texts.extend(block["text"].as_str()),
            _ => {}
        }
    }
    texts.extend(content.as_str());
    // The texts joined by newlines start with what the first text that is
    // not blank starts with (the texts are borrowed, never joined: one may
    // be huge).
    let starts = |prefix: &str| {
        texts
            .iter()
            .map(|t| t.trim_start())
            .find(|t| !t.is_empty())
            .is_some_and(|t| t.starts_with(prefix))
    };
    let origin = v["origin"]["kind"].as_str();
    if matches!(origin, Some("task-notification" | "peer")) || starts("<teammate-message") {
        return Vec::new();
    }
    if v["isMeta"] == Value::Bool(true) {
        return if starts("<channel") {
            trimmed([texts.join("\n").as_str()])
        } else {
            Vec::new()
        };
    }
    // Naive removal, block by block: every known injected element, wherever it stands.
    let mut pieces = Vec::new();
    for text in &texts {
        let mut rest = *text;
        while let Some((before, tag, inner, after)) = tags.next_element(rest) {
            pieces.push(before);
            if tag == "command-args" || tag == "command-name" {
                pieces.push(inner.trim().trim_start_matches('/'));
            }
            rest = after;
        }
        pieces.push(rest);
    }
    trimmed(pieces)
}

/// The opening and closing strings of [`TAGS`].
struct Tags {
    opens: aho_corasick::AhoCorasick,
    closes: Vec<String>,
}

impl Tags {
    fn new() -> Tags {
        let opens = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostFirst)
            .build(TAGS.iter().map(|t| format!("<{t}>")))
            .expect("tag names are plain strings");
        Tags {
            opens,
            closes: TAGS.iter().map(|t| format!("</{t}>")).collect(),
        }
    }

    /// The first injected element of `s`: (before, tag, inner, after).
    /// One scan for the opening of any tag, one for its closing.
    fn next_element<'s>(&self, s: &'s str) -> Option<(&'s str, &'static str, &'s str, &'s str)> {
        let m = self.opens.find(s)?;
        let i = m.pattern().as_usize();
        let close = &self.closes[i];
        let end = memchr::memmem::find(&s.as_bytes()[m.end()..], close.as_bytes())? + m.end();
        Some((
            &s[..m.start()],
            TAGS[i],
            &s[m.end()..end],
            &s[end + close.len()..],
        ))
    }
}

fn blocks(content: &Value) -> impl Iterator<Item = &Value> {
    content.as_array().into_iter().flatten()
}

/// The pieces that are not blank, trimmed: the one copy made of them.
fn trimmed<'p>(pieces: impl IntoIterator<Item = &'p str>) -> Vec<String> {
    pieces
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
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
