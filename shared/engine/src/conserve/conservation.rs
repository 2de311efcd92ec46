//! The conservation check: every piece of real user/assistant text of the
//! backup, read its own simple way, is found in the candidate unless the
//! plan left its record out.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use regex::Regex;
use serde_json::Value;

use super::{Expected, Failed, fail};
use ktr_base::error::{Error, Result};

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
pub(super) fn lines_of(path: &Path) -> Result<crate::lines::Lines<BufReader<File>>> {
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
