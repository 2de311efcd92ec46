//! The manifest artifact (`artifacts/<id>/manifest.jsonl`): the per-item
//! manifest (SPEC §7), the records left out and the full list of malformed
//! source lines, one JSON object per line, beside the backup. The operation
//! file keeps only a [`ManifestRef`] (digest, counts, size), so it stays
//! small whatever the transcript and every hook reads it cheaply.
//!
//! Written as a stream ([`ManifestWriter`]: hashed as it goes, atomic: a
//! temp file, `fsync`, rename, `fsync` the directory) and read as a stream
//! ([`for_each`]: never more than the recorded size, the digest checked at
//! the end). The path is derived from the store and the operation id, never
//! read from the operation file.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::Store;
use ktr_base::digest::Sha256;
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{AtomicFile, Existing};
use ktr_base::ids::OperationId;
use ktr_base::open::{Links, open_regular};
use ktr_engine::ManifestEntry;
use ktr_engine::conserve::{Items, LeftOuts};
use ktr_engine::plan::{LeftOut, PlanReport};
use ktr_engine::turns::LeftOutReason;

/// The artifact's file name inside `artifacts/<id>/`.
pub const FILE: &str = "manifest.jsonl";

/// How many entries of a list the operation's stats keep (the rest is
/// counted; the malformed line numbers are all in the artifact).
pub const KEPT: usize = 20;

/// How many characters of a name taken from the transcript (a version, an
/// unknown record type) the operation's stats keep.
const NAME_CHARS: usize = 80;

/// Bytes buffered before they are written to the artifact.
const FLUSH_AT: usize = 1 << 16;

/// One line of the artifact: `{"item": …}`, `{"left_out": …}` or
/// `{"malformed_line": N}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    /// One carried item, in candidate order.
    Item(ManifestEntry),
    /// A conversation record that was not carried.
    LeftOut(LeftOut),
    /// A source line that is not valid JSON (1-based).
    MalformedLine(usize),
}

/// What the operation records about its manifest artifact.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ManifestRef {
    /// SHA-256 of the artifact's bytes.
    pub sha256: Sha256,
    /// The artifact's size.
    pub bytes: u64,
    /// Carried items (manifest entries).
    pub items: usize,
    /// Conversation records left out.
    pub left_out: usize,
    /// The same, counted by reason (`local_command`, …).
    pub left_out_by_reason: BTreeMap<String, usize>,
    /// Malformed source lines listed.
    pub malformed_lines: usize,
}

/// The whole manifest, read back (tests, tools; the stages stream it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    pub items: Vec<ManifestEntry>,
    pub left_out: Vec<LeftOut>,
    pub malformed_line_numbers: Vec<usize>,
}

/// Where operation `id`'s manifest artifact is (the artifacts dir is
/// created and checked like for the backup).
pub fn path(store: &Store, id: &OperationId) -> Result<PathBuf> {
    Ok(store.artifacts_dir(id)?.join(FILE))
}

/// Writes the artifact line by line; nothing is in place until
/// [`ManifestWriter::finish`].
pub struct ManifestWriter {
    out: AtomicFile,
    path: PathBuf,
    pending: Vec<u8>,
    hasher: sha2::Sha256,
    summary: ManifestRef,
}

impl ManifestWriter {
    /// Start the artifact of operation `id`. One left by an earlier attempt
    /// is replaced at [`finish`](Self::finish); anything but a regular file
    /// at the path (a planted symlink) is refused.
    pub fn create(store: &Store, id: &OperationId) -> Result<ManifestWriter> {
        let path = path(store, id)?;
        if let Ok(meta) = path.symlink_metadata()
            && !meta.is_file()
        {
            return Err(Error::refused(format!(
                "{} is not a regular file (a symlink or a directory was put there); move it aside and request the rebuild again",
                path.display()
            )));
        }
        Ok(ManifestWriter {
            out: AtomicFile::create(&path, 0o600, Existing::Replace)?,
            path,
            pending: Vec::with_capacity(FLUSH_AT + 1024),
            hasher: sha2::Sha256::new(),
            summary: ManifestRef::default(),
        })
    }

    /// Append one carried item.
    pub fn push_item(&mut self, entry: &ManifestEntry) -> Result<()> {
        self.summary.items += 1;
        self.push(&LineRef::Item(entry))
    }

    /// Append one record left out.
    pub(crate) fn push_left_out(&mut self, left_out: &LeftOut) -> Result<()> {
        self.summary.left_out += 1;
        *self
            .summary
            .left_out_by_reason
            .entry(reason_name(left_out.reason))
            .or_default() += 1;
        self.push(&LineRef::LeftOut(left_out))
    }

    /// Append one malformed source line number.
    pub(crate) fn push_malformed_line(&mut self, line: usize) -> Result<()> {
        self.summary.malformed_lines += 1;
        self.push(&LineRef::MalformedLine(line))
    }

    fn push(&mut self, line: &LineRef<'_>) -> Result<()> {
        let start = self.pending.len();
        serde_json::to_writer(&mut self.pending, line)
            .map_err(|e| Error::io(format!("cannot encode a manifest line: {e}")))?;
        self.pending.push(b'\n');
        self.hasher.update(&self.pending[start..]);
        if self.pending.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.out
            .file()
            .write_all(&self.pending)
            .map_err(|e| Error::io_at("write", &self.path, &e))?;
        self.summary.bytes += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Put the artifact in place (durably) and return what the operation
    /// records about it.
    pub fn finish(mut self) -> Result<ManifestRef> {
        self.flush()?;
        let mut summary = std::mem::take(&mut self.summary);
        summary.sha256 = Sha256::of_hasher(self.hasher.clone());
        self.out.commit()?;
        Ok(summary)
    }
}

/// [`Line`] borrowing its content, for writing.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum LineRef<'a> {
    Item(&'a ManifestEntry),
    LeftOut(&'a LeftOut),
    MalformedLine(usize),
}

/// Read operation `id`'s artifact line by line, in order, handing each line
/// to `each`. Never reads more than `recorded.bytes`; a missing, damaged,
/// longer, shorter or otherwise changed artifact (digest or counts differ
/// from `recorded`) is a one-line error, reported after the lines read so
/// far (a caller acting on lines must wait for `Ok`).
pub fn for_each(
    store: &Store,
    id: &OperationId,
    recorded: &ManifestRef,
    mut each: impl FnMut(Line) -> Result<()>,
) -> Result<()> {
    let path = path(store, id)?;
    let changed = |what: &str| {
        Error::refused(format!(
            "manifest artifact {} changed after prepare ({what}); the candidate cannot be checked against it, request the rebuild again",
            path.display()
        ))
    };
    let file = open_regular(&path, Links::Refuse).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::refused(format!(
                "manifest artifact {} is missing (prepare writes it beside the backup; it was removed); request the rebuild again",
                path.display()
            ))
        } else {
            Error::io_at("read the manifest artifact", &path, &e)
        }
    })?;
    let mut reader = BufReader::new(file.take(recorded.bytes + 1));
    let (mut hasher, mut bytes, mut seen) = (sha2::Sha256::new(), 0u64, ManifestRef::default());
    let mut line = Vec::new();
    for number in 1u64.. {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| Error::io_at("read the manifest artifact", &path, &e))?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        if bytes > recorded.bytes {
            return Err(changed(&format!(
                "it is longer than the {} bytes recorded",
                recorded.bytes
            )));
        }
        hasher.update(&line);
        let parsed: Line = serde_json::from_slice(&line)
            .map_err(|e| changed(&format!("line {number} is not a manifest line: {e}")))?;
        match &parsed {
            Line::Item(_) => seen.items += 1,
            Line::LeftOut(_) => seen.left_out += 1,
            Line::MalformedLine(_) => seen.malformed_lines += 1,
        }
        each(parsed)?;
    }
    let digest = Sha256::of_hasher(hasher);
    if digest != recorded.sha256 {
        return Err(changed(&format!(
            "sha256 {} recorded, {} on disk",
            recorded.sha256.short(),
            digest.short()
        )));
    }
    let counts = |r: &ManifestRef| (r.items, r.left_out, r.malformed_lines);
    if counts(&seen) != counts(recorded) {
        return Err(changed("its counts differ from the operation's"));
    }
    Ok(())
}

/// Operation `id`'s artifact as verification reads it: streamed, once per
/// pass, each pass checking the digest and counts again.
pub(crate) struct Artifact<'a> {
    pub store: &'a Store,
    pub id: &'a OperationId,
    pub recorded: &'a ManifestRef,
}

impl Items for Artifact<'_> {
    fn each_item(&self, f: &mut dyn FnMut(&ManifestEntry) -> Result<()>) -> Result<()> {
        for_each(self.store, self.id, self.recorded, |line| match line {
            Line::Item(entry) => f(&entry),
            _ => Ok(()),
        })
    }
}

impl LeftOuts for Artifact<'_> {
    fn each_left_out(&self, f: &mut dyn FnMut(&LeftOut) -> Result<()>) -> Result<()> {
        for_each(self.store, self.id, self.recorded, |line| match line {
            Line::LeftOut(left_out) => f(&left_out),
            _ => Ok(()),
        })
    }
}

/// Read the whole artifact into memory (see [`for_each`]).
pub fn read(store: &Store, id: &OperationId, recorded: &ManifestRef) -> Result<Manifest> {
    let mut manifest = Manifest::default();
    for_each(store, id, recorded, |line| {
        match line {
            Line::Item(e) => manifest.items.push(e),
            Line::LeftOut(l) => manifest.left_out.push(l),
            Line::MalformedLine(n) => manifest.malformed_line_numbers.push(n),
        }
        Ok(())
    })?;
    Ok(manifest)
}

/// Remove operation `id`'s artifact, if any (a discarded attempt: it goes
/// with the backup). Never creates the artifacts dir.
pub fn remove(store: &Store, id: &OperationId) {
    store.remove_artifact(
        id,
        &store.dir().join("artifacts").join(id.as_str()).join(FILE),
    );
}

/// A reason's name as the JSON reports spell it (`local_command`, …).
pub(crate) fn reason_name(reason: LeftOutReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| format!("{reason:?}"))
}

/// The plan report as the operation keeps it: no `left_out` (in the
/// artifact), and every list or name that grows with the transcript cut to
/// [`KEPT`] entries of at most 80 characters (`malformed_lines` keeps the
/// count; the artifact has every number), so the operation file stays small
/// whatever the transcript.
pub(crate) fn bounded_stats(report: &PlanReport, source: &Path) -> PlanReport {
    let name = |s: &String| -> String { s.chars().take(NAME_CHARS).collect() };
    let bounded_map = |map: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for (i, (k, v)) in map.iter().enumerate() {
            let key = if i < KEPT {
                name(k)
            } else {
                "(other)".to_string()
            };
            *out.entry(key).or_default() += v;
        }
        out
    };
    PlanReport {
        source_path: source.display().to_string(),
        left_out: Vec::new(),
        malformed_line_numbers: report
            .malformed_line_numbers
            .iter()
            .take(KEPT)
            .copied()
            .collect(),
        versions_seen: report.versions_seen.iter().take(KEPT).map(name).collect(),
        // The newest are the ones a person asks about.
        compactions_undone: report.compactions_undone
            [report.compactions_undone.len().saturating_sub(KEPT)..]
            .to_vec(),
        unknown_record_types: bounded_map(&report.unknown_record_types),
        unknown_attachment_types: bounded_map(&report.unknown_attachment_types),
        ..report.clone()
    }
}

/// How many records were left out for each reason (`local_command`,
/// `compact_summary_dropped`, …), in name order.
pub fn left_out_by_reason(left_out: &[LeftOut]) -> BTreeMap<String, usize> {
    let mut by_reason = BTreeMap::new();
    for l in left_out {
        *by_reason.entry(reason_name(l.reason)).or_default() += 1;
    }
    by_reason
}

/// `2 records (1 compact_summary_dropped, 1 local_command)`, or `none`.
pub fn left_out_summary(by_reason: &BTreeMap<String, usize>) -> String {
    let total: usize = by_reason.values().sum();
    if total == 0 {
        return "none".into();
    }
    let parts: Vec<String> = by_reason.iter().map(|(r, n)| format!("{n} {r}")).collect();
    format!(
        "{total} record{} ({})",
        if total == 1 { "" } else { "s" },
        parts.join(", ")
    )
}
