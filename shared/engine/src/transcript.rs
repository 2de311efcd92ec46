//! Streaming transcript reader (SPEC §3).
//!
//! A transcript is JSON Lines. Lines are read as bytes into one reused
//! buffer and parsed into borrowed *views*: small typed structs that keep
//! only what ktr looks at. Large values (tool results, tool inputs, thinking)
//! are captured as [`RawValue`] slices — their bytes are measured, never
//! decoded or copied. Every field is lenient: a wrong type reads as absent
//! instead of failing the line, because new Claude Code releases reshape
//! records every few weeks.

use std::borrow::Cow;
use std::fmt;
use std::io::BufRead;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::rawjson;

/// One line of a transcript as the reader saw it.
pub enum Line<'a> {
    /// Empty or whitespace only: ignored, not malformed.
    Blank,
    /// Not valid UTF-8, not JSON, or not a JSON object.
    Malformed(&'static str),
    /// A JSON object.
    Record(Box<Record<'a>>),
}

pub use crate::lines::LineAt;

/// Read `input` line by line, calling `f(line, parsed)`: each line as
/// [`crate::lines::Lines`] makes it ready (a long one as its skeleton,
/// every line surveyed for surrogate escapes, lone surrogates mapped:
/// [`crate::lone`]), read once by `serde_json` into its [`Record`].
///
/// A final line without `\n` is passed like any other (a parse failure
/// there is reported as malformed; the stability wait of prepare decides
/// whether it was still being written).
pub(crate) fn for_each_line<R: BufRead>(
    input: R,
    mut f: impl FnMut(LineAt, Line<'_>),
) -> std::io::Result<()> {
    let mut lines = crate::lines::Lines::new(input, None);
    while let Some((at, bytes)) = lines.next_line()? {
        match bytes {
            Some(bytes) => f(at, parse_line(bytes)),
            None => f(at, Line::Malformed("not valid JSON")),
        }
    }
    Ok(())
}

/// The `uuid` of the last record of the main conversation in `input` (not
/// a sidechain's), read the way every other pass reads a transcript: a
/// line at a time, a long one as its skeleton, so memory stays bounded
/// whatever the lines hold.
pub fn last_conversation_uuid<R: BufRead>(input: R) -> std::io::Result<Option<String>> {
    let mut last = None;
    for_each_line(input, |_, line| {
        if let Line::Record(r) = line
            && r.is_sidechain.get() != Some(&true)
            && let Some(uuid) = r.uuid.get()
        {
            last = Some(uuid.to_string());
        }
    })?;
    Ok(last)
}

/// `bytes` as text if they are UTF-8.
fn utf8(bytes: &[u8]) -> Option<&str> {
    simdutf8::basic::from_utf8(bytes).ok()
}

/// The text of a line that may hold a JSON object, or what the line is
/// instead (blank, not UTF-8, not an object).
fn object_text(bytes: &[u8]) -> Result<&str, Line<'_>> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Line::Blank);
    }
    let Some(text) = utf8(bytes) else {
        return Err(Line::Malformed("not valid UTF-8"));
    };
    if !text.trim_start().starts_with('{') {
        return Err(Line::Malformed("not a JSON object"));
    }
    Ok(text)
}

/// Parse one line (without its newline).
pub(crate) fn parse_line(bytes: &[u8]) -> Line<'_> {
    let text = match object_text(bytes) {
        Ok(text) => text,
        Err(line) => return line,
    };
    match serde_json::from_str::<Record<'_>>(text) {
        Ok(record) => Line::Record(Box::new(record)),
        Err(_) => Line::Malformed("not valid JSON"),
    }
}

/// A JSON value as it is written in the line (valid JSON), not decoded.
#[derive(Debug, Clone, Copy)]
pub struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// The value's JSON text.
    pub fn get(&self) -> &'a str {
        self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Raw(<&'de RawValue>::deserialize(d)?.get()))
    }
}

/// A string that borrows from the line when it can. Any non-string value
/// reads as absent (see [`Lenient`]).
pub(crate) type Str<'a> = Cow<'a, str>;

/// A field that tolerates any JSON type: the expected type gives `Some`,
/// anything else (including null) gives `None` without failing the line.
#[derive(Debug, Default, Clone)]
pub struct Lenient<T>(pub Option<T>);

impl<T> Lenient<T> {
    pub fn get(&self) -> Option<&T> {
        self.0.as_ref()
    }
}

/// Visitor methods for the lenient rule "a value of the wrong type reads as
/// absent": `scalars` (booleans, numbers, null), `seq` and `map` give
/// `Self::Value::default()`, skipping whatever they contain.
macro_rules! absent_otherwise {
    ($($kind:ident),+) => { $(absent_otherwise!(@ $kind);)+ };
    (@ scalars) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
    (@ seq) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
            while a.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
    (@ map) => {
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
            while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

impl<'de: 'a, 'a> Deserialize<'de> for Lenient<Str<'a>> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Taken raw and decoded here, not by serde_json (which would copy
        // it into its scratch buffer first). Lone surrogates were mapped
        // before the parse (`lone`); one left here fails the line.
        let raw = <&'de RawValue>::deserialize(d)?.get();
        Lenient::<Str<'a>>::from_raw(raw).ok_or_else(unpaired)
    }
}

impl<'a> Lenient<Str<'a>> {
    /// From a value's JSON text: a string decoded, anything else absent;
    /// `None` when the string holds an unpaired surrogate (then the line
    /// is not valid).
    fn from_raw(raw: &'a str) -> Option<Self> {
        if !raw.starts_with('"') {
            return Some(Lenient(None));
        }
        rawjson::text(raw).map(|t| Lenient(Some(t)))
    }
}

fn unpaired<E: serde::de::Error>() -> E {
    E::custom("unpaired surrogate in a string")
}

impl Lenient<bool> {
    /// From a value's JSON text: `true` or `false`, anything else absent.
    fn from_raw(raw: &str) -> Self {
        Lenient(match raw {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        })
    }
}

impl<'de> Deserialize<'de> for Lenient<bool> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&RawValue>::deserialize(d);
        // Borrowed RawValue works for serde_json input; fall back to absent.
        Ok(raw.map_or(Lenient(None), |r| Lenient::<bool>::from_raw(r.get())))
    }
}

/// `parentUuid` is meaningful in three ways: missing, null, or a value.
#[derive(Debug, Default, Clone)]
pub enum Parent<'a> {
    /// The record has no `parentUuid` field at all.
    #[default]
    Missing,
    /// `parentUuid: null` — a root.
    Null,
    /// A link to another record.
    Uuid(Str<'a>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Parent<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Lenient(value) = Lenient::<Str<'a>>::deserialize(d)?;
        Ok(match value {
            Some(s) => Parent::Uuid(s),
            None => Parent::Null,
        })
    }
}

/// The `origin` object of modern records (`{kind: "human"|"channel"|…}`).
#[derive(Debug, Default, Deserialize)]
pub struct Origin<'a> {
    #[serde(borrow, default)]
    pub kind: Lenient<Str<'a>>,
}

/// The view of one record: only the fields ktr reads.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub subtype: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub uuid: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub parent_uuid: Parent<'a>,
    #[serde(borrow, default)]
    pub logical_parent_uuid: Lenient<Str<'a>>,
    #[serde(default)]
    pub is_sidechain: Lenient<bool>,
    #[serde(default)]
    pub is_meta: Lenient<bool>,
    #[serde(default)]
    pub is_compact_summary: Lenient<bool>,
    /// `turnCompanion: true`: a record Claude Code sends with the user's
    /// message (a custom command's or skill's expansion).
    #[serde(default)]
    pub turn_companion: Lenient<bool>,
    #[serde(borrow, default)]
    pub timestamp: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub cwd: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub version: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub git_branch: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub user_type: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub entrypoint: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub prompt_source: Lenient<Str<'a>>,
    #[serde(borrow, default, deserialize_with = "lenient_origin")]
    pub origin: Option<Origin<'a>>,
    #[serde(borrow, default)]
    pub message: Message<'a>,
    #[serde(borrow, default)]
    pub attachment: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub tool_use_result: Option<Raw<'a>>,
}

fn lenient_origin<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Origin<'a>>, D::Error> {
    let raw = <&'de RawValue>::deserialize(d)?;
    Ok(origin_of(raw.get()))
}

/// `origin` read from its raw JSON: anything but an object of the right
/// shape reads as absent.
fn origin_of(raw: &str) -> Option<Origin<'_>> {
    serde_json::from_str(raw).ok()
}

impl Record<'_> {
    /// The record's `type`, or "" when absent.
    pub fn kind(&self) -> &str {
        self.kind.get().map_or("", |s| s)
    }
    /// `isSidechain: true`.
    pub fn sidechain(&self) -> bool {
        self.is_sidechain.0 == Some(true)
    }
    /// `isMeta: true`.
    pub fn meta(&self) -> bool {
        self.is_meta.0 == Some(true)
    }
    /// `origin.kind`, if any.
    pub(crate) fn origin_kind(&self) -> Option<&str> {
        self.origin
            .as_ref()?
            .kind
            .get()
            .map(std::convert::AsRef::as_ref)
    }
}

/// `message`: missing, null, a bare string, or an object.
#[derive(Default)]
pub struct Message<'a> {
    pub role: Option<Str<'a>>,
    pub id: Option<Str<'a>>,
    pub model: Option<Str<'a>>,
    pub content: Content<'a>,
}

/// `message.content`: a string, a list of blocks, or nothing.
#[derive(Default)]
pub enum Content<'a> {
    #[default]
    None,
    Text(Str<'a>),
    /// The blocks, raw.
    Blocks(Vec<&'a str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Message<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Message<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut m = Message::default();
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    match key.as_ref() {
                        "role" => m.role = map.next_value::<Lenient<Str<'a>>>()?.0,
                        "id" => m.id = map.next_value::<Lenient<Str<'a>>>()?.0,
                        "model" => m.model = map.next_value::<Lenient<Str<'a>>>()?.0,
                        "content" => m.content = map.next_value::<Content<'a>>()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(m)
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Message {
                    content: Content::Text(Cow::Borrowed(v)),
                    ..Message::default()
                })
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Message {
                    content: Content::Text(Cow::Owned(v.to_string())),
                    ..Message::default()
                })
            }
            absent_otherwise!(scalars, seq);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // One pass: a list's blocks are taken raw as it is read; a string
        // is decoded where `serde_json` found it.
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message's content")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut blocks = Vec::with_capacity(a.size_hint().unwrap_or(4));
                while let Some(block) = a.next_element::<&'de RawValue>()? {
                    blocks.push(block.get());
                }
                Ok(Content::Blocks(blocks))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Owned(v.to_string())))
            }
            absent_otherwise!(scalars, map);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl Content<'_> {
    /// Raw bytes of the content (text length or the sum of block lengths;
    /// a long text counted whole, see [`crate::span`]).
    pub(crate) fn byte_len(&self) -> usize {
        match self {
            Content::None => 0,
            Content::Text(t) => usize::try_from(crate::span::bytes(t)).unwrap_or(usize::MAX),
            Content::Blocks(b) => b.iter().map(|r| crate::span::json_len(r)).sum(),
        }
    }
}

/// One content block, parsed from its raw bytes on demand.
#[derive(Default, Deserialize)]
pub struct Block<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub text: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub name: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub content: Option<&'a RawValue>,
    #[serde(default)]
    pub is_error: Lenient<bool>,
}

impl<'a> Block<'a> {
    /// Parse a block; a block that is not an object reads as an empty block.
    pub fn parse(raw: &'a str) -> Block<'a> {
        serde_json::from_str(raw).unwrap_or_default()
    }
    /// The block's `type`, or "" when absent.
    pub fn kind(&self) -> &str {
        self.kind.get().map_or("", |s| s)
    }
}

/// Text of a value that is either a string or a list of text blocks (tool
/// result content, queued prompts). Non-text blocks are skipped; texts are
/// joined by a blank line.
pub(crate) fn text_of(raw: &RawValue) -> String {
    text_of_str(raw.get())
}

/// [`text_of`] for raw JSON text.
pub(crate) fn text_of_str(t: &str) -> String {
    if t.starts_with('"') {
        return serde_json::from_str::<String>(t).unwrap_or_default();
    }
    let Ok(blocks) = serde_json::from_str::<Vec<&RawValue>>(t) else {
        return String::new();
    };
    let texts: Vec<String> = blocks
        .iter()
        .map(|b| Block::parse(b.get()))
        .filter(|b| b.kind() == "text")
        .filter_map(|b| b.text.0.map(Cow::into_owned))
        .collect();
    texts.join("\n\n")
}

/// The view of an `attachment` value.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub command_mode: Lenient<Str<'a>>,
    #[serde(borrow, default)]
    pub prompt: Option<&'a RawValue>,
    /// `hookEvent` of hook attachments (`SessionStart`, `UserPromptSubmit`…).
    #[serde(borrow, default)]
    pub hook_event: Lenient<Str<'a>>,
    /// `content` of hook context attachments: a string or a list of strings.
    #[serde(borrow, default)]
    pub content: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "lenient_origin")]
    pub origin: Option<Origin<'a>>,
}

impl<'a> Attachment<'a> {
    /// Parse an attachment; anything unexpected reads as an empty attachment.
    pub fn parse(raw: Raw<'a>) -> Attachment<'a> {
        serde_json::from_str(raw.get()).unwrap_or_default()
    }
    /// The attachment's `type`, or "" when absent.
    pub fn kind(&self) -> &str {
        self.kind.get().map_or("", |s| s)
    }
}

/// Whether `ts` looks like an ISO-8601 date-time Claude Code can parse
/// (`YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)`).
pub fn is_timestamp(ts: &str) -> bool {
    let b = ts.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    if b.len() < 20
        || !digits(0..4)
        || b[4] != b'-'
        || !digits(5..7)
        || b[7] != b'-'
        || !digits(8..10)
        || b[10] != b'T'
        || !digits(11..13)
        || b[13] != b':'
        || !digits(14..16)
        || b[16] != b':'
        || !digits(17..19)
    {
        return false;
    }
    let mut rest = &ts[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    match rest.as_bytes() {
        [b'Z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(line: &str) -> Box<Record<'_>> {
        match parse_line(line.as_bytes()) {
            Line::Record(r) => r,
            _ => panic!("not a record: {line}"),
        }
    }

    #[test]
    fn malformed_lines_are_classified() {
        assert!(matches!(parse_line(b"   "), Line::Blank));
        assert!(matches!(
            parse_line(b"[1,2]"),
            Line::Malformed("not a JSON object")
        ));
        assert!(matches!(
            parse_line(b"{\"a\":"),
            Line::Malformed("not valid JSON")
        ));
        assert!(matches!(
            parse_line(b"{\"a\":\"\xff\"}"),
            Line::Malformed("not valid UTF-8")
        ));
    }

    #[test]
    fn message_shapes_never_fail() {
        for line in [
            r#"{"type":"user","message":null}"#,
            r#"{"type":"user","message":"hello"}"#,
            r#"{"type":"user","message":{"content":null}}"#,
            r#"{"type":"user","message":{"content":7}}"#,
            r#"{"type":"user","message":[1]}"#,
            r#"{"type":7,"uuid":{"x":1},"isMeta":"yes","origin":"human"}"#,
        ] {
            let r = record(line);
            assert!(r.message.role.is_none());
        }
        let r = record(r#"{"type":"user","message":"hello"}"#);
        assert!(matches!(&r.message.content, Content::Text(t) if t == "hello"));
    }

    #[test]
    fn parent_uuid_distinguishes_missing_null_and_value() {
        assert!(matches!(
            record(r#"{"type":"user"}"#).parent_uuid,
            Parent::Missing
        ));
        assert!(matches!(
            record(r#"{"parentUuid":null}"#).parent_uuid,
            Parent::Null
        ));
        assert!(
            matches!(record(r#"{"parentUuid":"a"}"#).parent_uuid, Parent::Uuid(ref s) if s == "a")
        );
    }

    #[test]
    fn blocks_keep_raw_bytes_and_decode_escapes() {
        let r = record(
            r#"{"message":{"role":"user","content":[{"type":"text","text":"a\nb"},{"type":"tool_result","content":"x"}]}}"#,
        );
        let Content::Blocks(blocks) = &r.message.content else {
            panic!()
        };
        assert_eq!(blocks.len(), 2);
        assert_eq!(Block::parse(blocks[0]).text.get().unwrap(), "a\nb");
        assert_eq!(blocks[1], r#"{"type":"tool_result","content":"x"}"#);
    }

    #[test]
    fn timestamps() {
        assert!(is_timestamp("2026-11-29T12:53:57.817Z"));
        assert!(is_timestamp("2026-11-29T12:53:57Z"));
        assert!(is_timestamp("2026-11-29T12:53:57+08:00"));
        assert!(!is_timestamp("2026-11-29 12:53:57"));
        assert!(!is_timestamp(""));
        assert!(!is_timestamp("yesterday"));
    }
}
