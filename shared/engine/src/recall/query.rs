//! What to look for: a literal (ASCII case-insensitive, every other script
//! exact) or, on request, a regex. Two matchers come out of one query: a
//! prefilter over a line's raw JSON bytes (the query as JSON writes it,
//! searched with aho-corasick), and the real match over decoded texts.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::{Regex, RegexBuilder};

use super::raw_regex::{RawRegex, escaped};
use ktr_base::{Error, Result};

/// The longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 1000;
/// The most memory a compiled regex may take.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A compiled query.
#[derive(Debug)]
pub struct Query {
    text: String,
    how: How,
}

/// The raw prefilter: aho-corasick when ASCII letters must fold, else a
/// plain SIMD substring search (a CJK query: 3.2× `grep -c -F` with
/// aho-corasick, see bench/README.md).
#[derive(Debug)]
enum Raw {
    Folded(AhoCorasick),
    Exact(Box<memchr::memmem::Finder<'static>>),
}

impl Raw {
    fn new(needle: &str, folded: AhoCorasick) -> Raw {
        if needle.bytes().any(|b| b.is_ascii_alphabetic()) {
            Raw::Folded(folded)
        } else {
            Raw::Exact(Box::new(
                memchr::memmem::Finder::new(needle.as_bytes()).into_owned(),
            ))
        }
    }

    fn find(&self, hay: &[u8]) -> Option<(usize, usize)> {
        match self {
            Raw::Folded(ac) => ac.find(hay).map(|m| (m.start(), m.len())),
            Raw::Exact(f) => f.find(hay).map(|at| (at, f.needle().len())),
        }
    }
}

#[derive(Debug)]
enum How {
    /// The decoded matcher and the prefilter over raw JSON bytes.
    Literal { decoded: AhoCorasick, raw: Raw },
    /// The regex, the same over raw JSON strings, and a prefilter over raw
    /// JSON bytes when every match must start with one of a few literals
    /// JSON writes as they are.
    Regex(Regex, Option<RawRegex>, Option<Prefixes>),
}

/// A regex's prefix literals, searched for in raw lines.
#[derive(Debug)]
struct Prefixes {
    ac: AhoCorasick,
    /// Whether one is not ASCII (a `\u` escape may hide it in a raw line).
    non_ascii: bool,
}

/// The most prefix literals a regex prefilter takes.
const PREFIXES_MAX: usize = 64;

impl Prefixes {
    /// The literals every match of `pattern` starts with, if they are few,
    /// none empty, and JSON writes each as it is (no quote, backslash or
    /// control character).
    fn of(pattern: &str) -> Option<Prefixes> {
        use regex_syntax::hir::literal::{ExtractKind, Extractor};
        let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
        let mut extractor = Extractor::new();
        extractor
            .kind(ExtractKind::Prefix)
            .limit_total(PREFIXES_MAX * 8);
        let seq = extractor.extract(&hir);
        let literals = seq.literals()?;
        let plain =
            |l: &[u8]| !l.is_empty() && !l.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20);
        if literals.is_empty()
            || literals.len() > PREFIXES_MAX
            || !literals.iter().all(|l| plain(l.as_bytes()))
        {
            return None;
        }
        let bytes: Vec<&[u8]> = literals
            .iter()
            .map(regex_syntax::hir::literal::Literal::as_bytes)
            .collect();
        Some(Prefixes {
            non_ascii: bytes.iter().any(|l| !l.is_ascii()),
            ac: AhoCorasick::new(&bytes).ok()?,
        })
    }
}

impl Query {
    /// A literal query: ASCII letters match either case, everything else
    /// (CJK, accents, symbols) exactly.
    pub fn literal(text: &str) -> Result<Query> {
        check_text(text)?;
        let build = |needle: &str| {
            AhoCorasickBuilder::new()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::LeftmostFirst)
                .build([needle])
                .map_err(|e| Error::usage(format!("cannot search for {text:?}: {e}")))
        };
        Ok(Query {
            text: text.to_string(),
            how: How::Literal {
                decoded: build(text)?,
                raw: Raw::new(&json_escaped(text), build(&json_escaped(text))?),
            },
        })
    }

    /// A regex query (Rust `regex` syntax; `(?i)` for case-insensitive).
    pub fn regex(pattern: &str) -> Result<Query> {
        check_text(pattern)?;
        let regex = RegexBuilder::new(pattern)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| {
                let first = e.to_string();
                let first = first.lines().last().unwrap_or("").trim().to_string();
                Error::usage(format!(
                    "the regex {pattern:?} does not compile ({first}); fix it, or search for it literally without regex"
                ))
            })?;
        Ok(Query {
            text: pattern.to_string(),
            how: How::Regex(
                regex,
                RawRegex::new(pattern, REGEX_SIZE_LIMIT),
                Prefixes::of(pattern),
            ),
        })
    }

    /// Whether the query is a regex.
    pub(crate) fn is_regex(&self) -> bool {
        matches!(self.how, How::Regex(..))
    }

    /// The query as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the raw JSON line may hold a match (no false negatives for
    /// JSON as Claude Code writes it: `\uXXXX` escapes of non-ASCII text
    /// send the line to the decoded match). For a regex: a line holding one
    /// of the literals every match starts with, else every line.
    pub fn may_match(&self, raw: &[u8]) -> bool {
        let escaped_u = || memchr::memmem::find(raw, b"\\u").is_some();
        match &self.how {
            How::Literal { raw: pre, .. } => {
                pre.find(raw).is_some() || (!self.text.is_ascii() && escaped_u())
            }
            How::Regex(_, _, None) => true,
            How::Regex(_, _, Some(p)) => p.ac.is_match(raw) || (p.non_ascii && escaped_u()),
        }
    }

    /// Where the raw prefilter first matches in `raw` (literal queries), and
    /// the length of what it matched.
    pub fn raw_find(&self, raw: &[u8]) -> Option<(usize, usize)> {
        match &self.how {
            How::Literal { raw: pre, .. } => pre.find(raw),
            How::Regex(re, ..) => std::str::from_utf8(raw)
                .ok()
                .and_then(|s| re.find(s))
                .map(|m| (m.start(), m.len())),
        }
    }

    /// The longest match the raw prefilter can make, in bytes (the overlap a
    /// streaming search keeps between chunks).
    pub fn raw_overlap(&self) -> usize {
        match &self.how {
            How::Literal { .. } => json_escaped(&self.text).len(),
            How::Regex(..) => 64 << 10,
        }
    }

    /// Whether a JSON string's raw content (the bytes between its quotes)
    /// holds a match; `None` when only its decoded text can tell (a regex
    /// over escapes, a non-ASCII literal over `\u` escapes).
    pub(crate) fn raw_string_matches(&self, raw: &[u8]) -> Option<bool> {
        match &self.how {
            How::Literal { raw: pre, .. } => {
                if !self.text.is_ascii() && memchr::memmem::find(raw, b"\\u").is_some() {
                    return None;
                }
                let mut from = 0;
                while let Some((at, _)) = pre.find(&raw[from..]) {
                    let at = from + at;
                    if !escaped(raw, at) {
                        return Some(true);
                    }
                    from = at + 1;
                }
                Some(false)
            }
            How::Regex(_, raw_regex, pre) => {
                let escapes = memchr::memchr(b'\\', raw).is_some();
                if let Some(p) = pre
                    && !(p.non_ascii && escapes)
                    && !p.ac.is_match(raw)
                {
                    return Some(false);
                }
                let hit = raw_regex.as_ref()?.clean_match(raw);
                (hit || !escapes).then_some(hit)
            }
        }
    }

    /// The first match in a decoded text: byte range.
    pub fn find(&self, text: &str) -> Option<(usize, usize)> {
        match &self.how {
            How::Literal { decoded, .. } => decoded.find(text).map(|m| (m.start(), m.end())),
            How::Regex(re, ..) => re
                .find_iter(text)
                .find(|m| !m.is_empty())
                .map(|m| (m.start(), m.end())),
        }
    }
}

fn check_text(text: &str) -> Result<()> {
    if text.is_empty() {
        return Err(Error::usage(
            "the query is empty; give the words to look for",
        ));
    }
    if text.len() > MAX_QUERY_BYTES {
        return Err(Error::usage(format!(
            "the query is {} bytes long; at most {MAX_QUERY_BYTES} are accepted — search for a shorter, distinctive part",
            text.len()
        )));
    }
    Ok(())
}

/// `text` as a JSON string holds it (without the quotes), as
/// `JSON.stringify` writes it: `"`, `\` and control characters escaped,
/// everything else as it is.
pub fn json_escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted[1..quoted.len() - 1].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_literal_ignores_ascii_case_and_matches_other_scripts_exactly() {
        let q = Query::literal("Hello 世界").unwrap();
        assert_eq!(q.find("say hELLO 世界!"), Some((4, 16)));
        assert_eq!(q.find("hello 世 界"), None);
        let accents = Query::literal("é").unwrap();
        assert_eq!(accents.find("É"), None, "only ASCII folds");
    }

    #[test]
    fn the_prefilter_looks_for_the_query_as_json_writes_it() {
        let q = Query::literal("say \"hi\"\nnow").unwrap();
        assert!(q.may_match(br#"{"t":"we SAY \"hi\"\nnow"}"#));
        assert!(!q.may_match(br#"{"t":"we say hi now"}"#));
        let cjk = Query::literal("中文").unwrap();
        assert!(cjk.may_match("{\"t\":\"说中文\"}".as_bytes()));
        assert!(!cjk.may_match(br#"{"t":"english"}"#));
        assert!(
            cjk.may_match(br#"{"t":"\u4e2d\u6587"}"#),
            "escaped text is decoded"
        );
    }

    #[test]
    fn a_regex_skips_lines_without_the_literals_its_matches_start_with() {
        let q = Query::regex("timeout (retry|queue)").unwrap();
        assert!(q.may_match(br#"{"t":"a timeout retry"}"#));
        assert!(!q.may_match(br#"{"t":"a timeout\nretry"}"#));
        assert!(!q.may_match(br#"{"t":"nothing"}"#));
        // A literal JSON escapes, or none at all: every line may match.
        assert!(Query::regex(r#"a"b"#).unwrap().may_match(b"{}"));
        assert!(Query::regex(r"\w+").unwrap().may_match(b"{}"));
        let cjk = Query::regex("日志(轮转)?").unwrap();
        assert!(cjk.may_match(br#"{"t":"\u65e5\u5fd7"}"#));
    }

    #[test]
    fn a_regex_match_beside_an_escape_is_told_from_the_raw_string() {
        let q = Query::regex("timeout (retry|queue)").unwrap();
        assert_eq!(q.raw_string_matches(br"a\ntimeout retry\n"), Some(true));
        assert_eq!(q.raw_string_matches(br"\u65e5timeout queue"), Some(true));
        assert_eq!(
            q.raw_string_matches(br"a\nb"),
            Some(false),
            "no literal a match starts with"
        );
        let spaced = Query::regex(r"timeout\s+retry").unwrap();
        assert_eq!(
            spaced.raw_string_matches(br"timeout\nretry"),
            None,
            "only the decoded text can tell"
        );
    }

    #[test]
    fn hostile_queries_get_one_clear_error() {
        for (q, said) in [
            (Query::literal(""), "empty"),
            (Query::literal(&"x".repeat(5000)), "at most 1000"),
            (Query::regex("(unclosed"), "does not compile"),
            (Query::regex("\\w{1000}\\w{1000}"), "does not compile"),
        ] {
            let e = q.unwrap_err();
            assert!(e.message.contains(said), "{e}");
            assert!(!e.message.contains('\n'));
        }
    }
}
