//! What reading a transcript costs with the engine's reader and with
//! `serde_json` readers alone (serde_json replaced the hand-written layer). `json-layer MODE FILE` reads FILE once and
//! prints `MODE lines=… bytes=… check=… vm_hwm_kib=…` (`VmHWM` of this process
//! at the end, as `tests/integration/memory.rs` reads it).
//!
//! Modes:
//! - `lines`: the lines only (`BufRead::read_until`, 64 KiB buffer): the floor.
//! - `ignored`: each line through `serde_json::from_slice::<IgnoredAny>`.
//! - `serde`: each line into [`View`], a borrowed struct of the fields the
//!   engine reads (`&RawValue` for the large values, as the engine
//!   takes them), then each content block of `message.content` into
//!   [`Block`] (the plan reads the blocks' type, ids, `is_error` and the
//!   size of their text): what ktr's reader would be with `serde_json` only.
//! - `serde1`: the same fields in one pass: `message.content` read straight
//!   into its blocks (a custom visitor, as the engine's `Message` has), not
//!   taken raw and parsed again.
//! - `record`: each line into the engine's own `Record` through `serde_json`
//!   (its reader without the line reader and the surrogate survey).
//! - `engine`: the engine's reader over the whole file
//!   (`transcript::last_conversation_uuid`: line reader with long texts
//!   streamed by span, surrogate survey, `Record`). Before the replacement this was
//!   the record walk (`walk`), the hand-written layer.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader};

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

/// The fields of one record the engine reads, borrowed where
/// `serde_json` can borrow; large values kept raw.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct View<'a, M> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    subtype: Option<Cow<'a, str>>,
    #[serde(borrow)]
    uuid: Option<Cow<'a, str>>,
    #[serde(borrow)]
    parent_uuid: Option<Cow<'a, str>>,
    #[serde(borrow)]
    logical_parent_uuid: Option<Cow<'a, str>>,
    is_sidechain: Option<bool>,
    is_meta: Option<bool>,
    is_compact_summary: Option<bool>,
    turn_companion: Option<bool>,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cwd: Option<Cow<'a, str>>,
    #[serde(borrow)]
    version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    git_branch: Option<Cow<'a, str>>,
    #[serde(borrow)]
    user_type: Option<Cow<'a, str>>,
    #[serde(borrow)]
    entrypoint: Option<Cow<'a, str>>,
    #[serde(borrow)]
    prompt_source: Option<Cow<'a, str>>,
    #[serde(borrow)]
    origin: Option<&'a RawValue>,
    message: Option<M>,
    #[serde(borrow)]
    attachment: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_use_result: Option<&'a RawValue>,
}

/// `message`, its content `C`: taken raw (`serde`) or read into its blocks (`serde1`).
#[derive(Deserialize)]
struct Message<'a, C> {
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    content: C,
}

/// One block of `message.content`, as the plan reads it.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    tool_use_id: Option<Cow<'a, str>>,
    is_error: Option<bool>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
}

/// `message.content`: a string, its blocks, or anything else (absent).
#[derive(Default)]
enum Content<'a> {
    #[default]
    None,
    Text(Cow<'a, str>),
    Blocks(Vec<Block<'a>>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("message content")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                let mut blocks = Vec::new();
                while let Some(b) = a.next_element()? {
                    blocks.push(b);
                }
                Ok(Content::Blocks(blocks))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

fn block_sum(b: &Block<'_>) -> u64 {
    len(&b.kind)
        + len(&b.id)
        + len(&b.tool_use_id)
        + u64::from(b.is_error == Some(true))
        + raw_len(b.text)
        + raw_len(b.thinking)
        + raw_len(b.content)
        + raw_len(b.input)
}

fn len(s: &Option<Cow<'_, str>>) -> u64 {
    s.as_ref().map_or(0, |s| s.len() as u64)
}

fn raw_len(r: Option<&RawValue>) -> u64 {
    r.map_or(0, |r| r.get().len() as u64)
}

/// A number that depends on every field of `v` but `message`.
fn head_sum<M>(v: &View<'_, M>) -> u64 {
    let flags = [
        v.is_sidechain,
        v.is_meta,
        v.is_compact_summary,
        v.turn_companion,
    ];
    [
        &v.kind,
        &v.subtype,
        &v.uuid,
        &v.parent_uuid,
        &v.logical_parent_uuid,
        &v.timestamp,
        &v.cwd,
        &v.version,
        &v.git_branch,
        &v.user_type,
        &v.entrypoint,
        &v.prompt_source,
    ]
    .iter()
    .map(|s| len(s))
    .sum::<u64>()
        + flags.iter().flatten().filter(|b| **b).count() as u64
        + raw_len(v.origin)
        + raw_len(v.attachment)
        + raw_len(v.tool_use_result)
}

/// A number that depends on everything `serde` read from one line.
fn serde_line(line: &[u8]) -> u64 {
    let Ok(v) = serde_json::from_slice::<View<'_, Message<'_, Option<&RawValue>>>>(line) else {
        return 1;
    };
    let mut sum = head_sum(&v);
    if let Some(m) = v.message {
        sum += len(&m.role) + len(&m.id) + len(&m.model);
        if let Some(content) = m.content {
            let text = content.get();
            if text.starts_with('[') {
                let blocks: Vec<&RawValue> = serde_json::from_str(text).unwrap_or_default();
                for block in blocks {
                    if let Ok(b) = serde_json::from_str::<Block<'_>>(block.get()) {
                        sum += block_sum(&b);
                    }
                }
            } else if let Ok(s) = serde_json::from_str::<Cow<'_, str>>(text) {
                sum += s.len() as u64;
            }
        }
    }
    sum
}

/// [`serde_line`] in one pass over the line.
fn serde1_line(line: &[u8]) -> u64 {
    let Ok(v) = serde_json::from_slice::<View<'_, Message<'_, Content<'_>>>>(line) else {
        return 1;
    };
    let mut sum = head_sum(&v);
    if let Some(m) = v.message {
        sum += len(&m.role) + len(&m.id) + len(&m.model);
        sum += match &m.content {
            Content::None => 0,
            Content::Text(t) => t.len() as u64,
            Content::Blocks(blocks) => blocks.iter().map(block_sum).sum(),
        };
    }
    sum
}

fn record_line(line: &[u8]) -> u64 {
    let Ok(text) = std::str::from_utf8(line) else {
        return 1;
    };
    match serde_json::from_str::<ktr_engine::transcript::Record<'_>>(text) {
        Ok(r) => r.kind().len() as u64 + r.uuid.get().map_or(0, |u| u.len() as u64),
        Err(_) => 1,
    }
}

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, path] = args.as_slice() else {
        eprintln!("usage: json-layer lines|ignored|serde|serde1|record|engine FILE");
        std::process::exit(2);
    };
    let file = File::open(path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(1);
    });
    let mut input = BufReader::with_capacity(64 * 1024, file);
    let (mut lines, mut bytes, mut check) = (0u64, 0u64, 0u64);
    if mode == "engine" {
        let last = ktr_engine::transcript::last_conversation_uuid(input).unwrap_or_else(|e| {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        });
        check = last.map_or(0, |u| u.len() as u64);
    } else {
        let per_line: fn(&[u8]) -> u64 = match mode.as_str() {
            "lines" => |l| l.len() as u64,
            "ignored" => |l| u64::from(serde_json::from_slice::<IgnoredAny>(l).is_err()),
            "serde" => serde_line,
            "serde1" => serde1_line,
            "record" => record_line,
            _ => {
                eprintln!("unknown mode {mode}");
                std::process::exit(2);
            }
        };
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = input.read_until(b'\n', &mut buf).unwrap_or_else(|e| {
                eprintln!("{path}: {e}");
                std::process::exit(1);
            });
            if n == 0 {
                break;
            }
            lines += 1;
            bytes += n as u64;
            let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
            check = check.wrapping_add(per_line(line));
        }
    }
    println!(
        "{mode} lines={lines} bytes={bytes} check={check} vm_hwm_kib={}",
        vm_hwm_kib()
    );
}
