//! What to look for: a literal (ASCII case-insensitive, every other script
//! exact) or, on request, a regex. Two matchers come out of one query: a
//! prefilter over a line's raw JSON bytes (the query as JSON writes it,
//! searched with aho-corasick), and the real match over decoded texts.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::{Regex, RegexBuilder};

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
    Literal {
        decoded: AhoCorasick,
        raw: Raw,
    },
    Regex(Regex),
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
            how: How::Regex(regex),
        })
    }

    /// The query as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the raw JSON line may hold a match (no false negatives for
    /// JSON as Claude Code writes it: `\uXXXX` escapes of non-ASCII text
    /// send the line to the decoded match). For a regex every line may.
    pub fn may_match(&self, raw: &[u8]) -> bool {
        match &self.how {
            How::Literal { raw: pre, .. } => {
                pre.find(raw).is_some()
                    || (!self.text.is_ascii() && memchr::memmem::find(raw, b"\\u").is_some())
            }
            How::Regex(_) => true,
        }
    }

    /// Where the raw prefilter first matches in `raw` (literal queries), and
    /// the length of what it matched.
    pub fn raw_find(&self, raw: &[u8]) -> Option<(usize, usize)> {
        match &self.how {
            How::Literal { raw: pre, .. } => pre.find(raw),
            How::Regex(re) => std::str::from_utf8(raw)
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
            How::Regex(_) => 64 << 10,
        }
    }

    /// The first match in a decoded text: byte range.
    pub fn find(&self, text: &str) -> Option<(usize, usize)> {
        match &self.how {
            How::Literal { decoded, .. } => decoded.find(text).map(|m| (m.start(), m.end())),
            How::Regex(re) => re
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
