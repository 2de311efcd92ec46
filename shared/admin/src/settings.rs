//! Claude Code's `settings.json` and ktr's hooks in it (SPEC §13).
//!
//! [`merge`] puts the fragment of `hooks.json` (the Stop hook `ktr-stop`
//! and the `SessionStart`/`resume` hook `ktr-ack`) into a settings document;
//! [`unmerge`] takes exactly those out again. Both are pure functions on
//! text, so they are tested byte for byte:
//!
//! - idempotent: a hook whose program is named `ktr-stop`/`ktr-prompt`/`ktr-ack` is ours;
//!   it is updated in place (a stale path from an older install becomes the
//!   new one), never duplicated;
//! - foreign hooks and every other key keep their content and their order;
//! - a document of the wrong shape is refused with what to fix, and nothing
//!   is written.
//!
//! [`Edit`] applies either to a file: timestamped backup, atomic write,
//! mode preserved; a dry run only shows the diff.

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use ktr_base::config::home_dir;
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, write_atomic};
use ktr_base::open::{Links, cap, read_capped};

/// The hook fragment the installer merges (`hooks.json` at the repo root).
/// `{bin_dir}` is replaced by the install prefix and `{config_arg}` by
/// ` --config PATH` (or nothing), both shell-quoted: Claude Code runs hook
/// commands through a shell.
pub const FRAGMENT: &str = include_str!("../../../hooks.json");

/// The executables whose hooks are ours.
pub const OUR_PROGRAMS: [&str; 4] = ["ktr-stop", "ktr-prompt", "ktr-ack", "ktr-precompact"];

/// The statusline program ktr installs (only where no `statusLine` is set).
pub const STATUSLINE_PROGRAM: &str = "ktr-statusline";

/// `~/.claude/settings.json`, the user-scope settings Claude Code reads.
pub fn default_path() -> PathBuf {
    home_dir().join(".claude/settings.json")
}

/// A JSON value that keeps object keys in their order (`serde_json`'s map
/// sorts them, which would reorder a user's settings).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parse JSON text.
    pub fn parse(text: &str) -> std::result::Result<Json, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The value at `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        match self {
            Json::Object(entries) => entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// Pretty text in the layout Claude Code writes (two-space indent).
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        self.write_pretty(&mut out, 0);
        out
    }

    fn write_pretty(&self, out: &mut String, depth: usize) {
        let pad = |out: &mut String, d: usize| out.extend(std::iter::repeat_n("  ", d));
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(&n.to_string()),
            Json::String(s) => out.push_str(&quote_json(s)),
            Json::Array(items) if items.is_empty() => out.push_str("[]"),
            Json::Object(entries) if entries.is_empty() => out.push_str("{}"),
            Json::Array(items) => {
                out.push_str("[\n");
                for (i, item) in items.iter().enumerate() {
                    pad(out, depth + 1);
                    item.write_pretty(out, depth + 1);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                pad(out, depth);
                out.push(']');
            }
            Json::Object(entries) => {
                out.push_str("{\n");
                for (i, (k, v)) in entries.iter().enumerate() {
                    pad(out, depth + 1);
                    out.push_str(&quote_json(k));
                    out.push_str(": ");
                    v.write_pretty(out, depth + 1);
                    out.push_str(if i + 1 < entries.len() { ",\n" } else { "\n" });
                }
                pad(out, depth);
                out.push('}');
            }
        }
    }
}

fn quote_json(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> std::result::Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, b: bool) -> std::result::Result<Json, E> {
        Ok(Json::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> std::result::Result<Json, E> {
        Ok(Json::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> std::result::Result<Json, E> {
        Ok(Json::Number(n.into()))
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> std::result::Result<Json, E> {
        serde_json::Number::from_f64(n)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }
    fn visit_str<E>(self, s: &str) -> std::result::Result<Json, E> {
        Ok(Json::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> std::result::Result<Json, E> {
        Ok(Json::String(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Json, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            entries.push((k, v));
        }
        Ok(Json::Object(entries))
    }
}

/// One hook ktr wants in settings: its event, matcher and hook object.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub event: String,
    pub matcher: Option<String>,
    /// The program this hook runs (`ktr-stop` or `ktr-ack`).
    pub program: &'static str,
    pub hook: Json,
}

/// The hooks of [`FRAGMENT`] for binaries installed in `bin_dir`, run with
/// `--config config` when one is given.
pub fn wanted(bin_dir: &Path, config: Option<&Path>) -> Result<Vec<Wanted>> {
    let bad = |why: &str| Error::io(format!("the built-in hooks.json fragment {why}"));
    let fragment = Json::parse(FRAGMENT).map_err(|e| bad(&format!("is not JSON: {e}")))?;
    let Some(Json::Object(events)) = fragment.get("hooks") else {
        return Err(bad("has no hooks object"));
    };
    let config_arg = match config {
        Some(c) => format!(" --config {}", sh_quote(&c.to_string_lossy())),
        None => String::new(),
    };
    let mut out = Vec::new();
    for entry in hook_entries(events) {
        let HookEntry {
            event,
            matcher,
            hook,
        } = entry.map_err(|shape| bad(shape.what()))?;
        let mut hook = hook.clone();
        let Some(Json::String(command)) = hook.get_mut("command") else {
            return Err(bad("has a hook without command"));
        };
        let program_template = command.replace("{config_arg}", "");
        let program_path = program_template.replace("{bin_dir}", &bin_dir.to_string_lossy());
        let program = OUR_PROGRAMS
            .into_iter()
            .find(|p| program_template.ends_with(&format!("/{p}")))
            .ok_or_else(|| bad("runs a program that is not ktr's"))?;
        *command = format!("{}{config_arg}", sh_quote(&program_path));
        out.push(Wanted {
            event: event.to_string(),
            matcher: matcher.map(String::from),
            program,
            hook,
        });
    }
    Ok(out)
}

/// The `statusLine` of [`FRAGMENT`] for binaries installed in `bin_dir`.
pub fn wanted_statusline(bin_dir: &Path, config: Option<&Path>) -> Result<Json> {
    let bad = |why: &str| Error::io(format!("the built-in hooks.json fragment {why}"));
    let fragment = Json::parse(FRAGMENT).map_err(|e| bad(&format!("is not JSON: {e}")))?;
    let mut line = fragment
        .get("statusLine")
        .cloned()
        .ok_or_else(|| bad("has no statusLine"))?;
    let config_arg = match config {
        Some(c) => format!(" --config {}", sh_quote(&c.to_string_lossy())),
        None => String::new(),
    };
    let Some(Json::String(command)) = line.get_mut("command") else {
        return Err(bad("has a statusLine without command"));
    };
    let path = bin_dir.join(STATUSLINE_PROGRAM);
    *command = format!("{}{config_arg}", sh_quote(&path.to_string_lossy()));
    Ok(line)
}

/// Whether a `statusLine` value runs ktr's statusline.
fn statusline_is_ours(line: &Json) -> bool {
    line.get("command")
        .and_then(Json::as_str)
        .and_then(|c| {
            let program = program_of(c);
            Path::new(&program)
                .file_name()
                .map(|n| n == STATUSLINE_PROGRAM)
        })
        .unwrap_or(false)
}

/// Set `statusLine` to `wanted` when none is set (or ours differs).
/// Returns the new text, and the command of a foreign statusline that was
/// left alone (the installer then says how to embed ktr's segment).
pub fn merge_statusline(text: &str, what: &str, wanted: &Json) -> Result<(String, Option<String>)> {
    let mut doc = parse_settings(Some(text), what, &[])?;
    let foreign = match doc.get("statusLine") {
        Some(line) if statusline_is_ours(line) && line == wanted => {
            return Ok((text.to_string(), None));
        }
        Some(line) if !statusline_is_ours(line) => {
            let command = line
                .get("command")
                .and_then(Json::as_str)
                .unwrap_or("(no command)");
            return Ok((text.to_string(), Some(command.to_string())));
        }
        _ => None,
    };
    if let Json::Object(root) = &mut doc {
        match root.iter_mut().find(|(k, _)| k == "statusLine") {
            Some((_, line)) => *line = wanted.clone(),
            None => root.push(("statusLine".into(), wanted.clone())),
        }
    }
    Ok((
        render(&doc, Some(text).filter(|t| !t.trim().is_empty())),
        foreign,
    ))
}

/// The command of a settings document's `statusLine`, if any (doctor).
pub fn statusline_command(text: &str) -> Option<String> {
    let doc = Json::parse(text).ok()?;
    doc.get("statusLine")?
        .get("command")?
        .as_str()
        .map(str::to_string)
}

/// Remove `statusLine` when it runs ktr's statusline; anything else stays.
pub fn unmerge_statusline(text: &str, what: &str) -> Result<String> {
    if text.trim().is_empty() {
        return Ok(text.to_string());
    }
    let mut doc = parse_settings(Some(text), what, &[])?;
    if !doc.get("statusLine").is_some_and(statusline_is_ours) {
        return Ok(text.to_string());
    }
    if let Json::Object(root) = &mut doc {
        root.retain(|(k, _)| k != "statusLine");
    }
    Ok(render(&doc, Some(text)))
}

/// How to show ktr's segment inside a statusline that is not ktr's.
pub fn embed_hint(foreign: &str, bin_dir: &Path, config: Option<&Path>) -> String {
    let mut ktr = sh_quote(&bin_dir.join(STATUSLINE_PROGRAM).to_string_lossy());
    if let Some(c) = config {
        ktr.push_str(&format!(" --config {}", sh_quote(&c.to_string_lossy())));
    }
    format!(
        "statusLine is already set ({foreign}); kept it. To show ktr's segment in it, make it a script that runs:\n  input=$(cat); printf '%s · %s\\n' \"$(printf %s \"$input\" | {foreign})\" \"$(printf %s \"$input\" | {ktr} --segment)\"\n"
    )
}

/// One hook of a `hooks` object, with the event and matcher it sits under.
struct HookEntry<'a> {
    event: &'a str,
    matcher: Option<&'a str>,
    hook: &'a Json,
}

/// A part of a `hooks` object that is not shaped as Claude Code expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Misshapen {
    EventNotAList,
    GroupWithoutHooks,
}

impl Misshapen {
    /// What is wrong, as the end of a sentence about the document.
    fn what(self) -> &'static str {
        match self {
            Misshapen::EventNotAList => "has an event that is not a list",
            Misshapen::GroupWithoutHooks => "has a group without hooks",
        }
    }
}

/// Every hook of a `hooks` object (`{event: [{matcher?, hooks: [hook…]}…]}`)
/// in document order; a misshapen event or group is one `Err` item in its
/// place, so a strict reader can stop there and a lenient one skip it.
fn hook_entries(
    events: &[(String, Json)],
) -> impl Iterator<Item = std::result::Result<HookEntry<'_>, Misshapen>> {
    type Entries<'a> = Box<dyn Iterator<Item = std::result::Result<HookEntry<'a>, Misshapen>> + 'a>;
    events.iter().flat_map(|(event, groups)| -> Entries<'_> {
        let Json::Array(groups) = groups else {
            return Box::new(std::iter::once(Err(Misshapen::EventNotAList)));
        };
        Box::new(groups.iter().flat_map(move |group| -> Entries<'_> {
            let matcher = group.get("matcher").and_then(Json::as_str);
            let Some(Json::Array(hooks)) = group.get("hooks") else {
                return Box::new(std::iter::once(Err(Misshapen::GroupWithoutHooks)));
            };
            Box::new(hooks.iter().map(move |hook| {
                Ok(HookEntry {
                    event,
                    matcher,
                    hook,
                })
            }))
        }))
    })
}

/// Quote a word for `sh` only when it needs it.
pub fn sh_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:@,%".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The first word of a shell command, unquoted (`'…'`, `"…"`, `\x`).
pub fn program_of(command: &str) -> String {
    let mut word = String::new();
    let mut chars = command.trim_start().chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => break,
            '\'' => word.extend(chars.by_ref().take_while(|&c| c != '\'')),
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => word.extend(chars.next()),
            c => word.push(c),
        }
    }
    word
}

/// Which of our programs a hook object runs, if any.
fn our_program(hook: &Json) -> Option<&'static str> {
    if hook.get("type").and_then(Json::as_str) != Some("command") {
        return None;
    }
    let command = hook.get("command")?.as_str()?;
    let program = program_of(command);
    let name = Path::new(&program).file_name()?.to_str()?;
    OUR_PROGRAMS.into_iter().find(|p| *p == name)
}

/// Parse a settings document (absent or blank = `{}`) and check the shape
/// of the parts ktr touches: the root, `hooks` and the events in `events`.
fn parse_settings(text: Option<&str>, what: &str, events: &[&str]) -> Result<Json> {
    let text = text.unwrap_or("");
    if text.trim().is_empty() {
        return Ok(Json::Object(Vec::new()));
    }
    let doc = Json::parse(text).map_err(|e| {
        Error::refused(format!(
            "{what} is not valid JSON ({e}); fix or remove it, then run again (nothing was changed)"
        ))
    })?;
    let shape = |why: String| {
        Error::refused(format!(
            "{what}: {why}; fix it by hand, then run again (nothing was changed)"
        ))
    };
    if !matches!(doc, Json::Object(_)) {
        return Err(shape("the top level must be an object".into()));
    }
    let Some(hooks) = doc.get("hooks") else {
        return Ok(doc);
    };
    if !matches!(hooks, Json::Object(_)) {
        return Err(shape("\"hooks\" must be an object of event names".into()));
    }
    for event in events {
        let Some(groups) = hooks.get(event) else {
            continue;
        };
        let Json::Array(groups) = groups else {
            return Err(shape(format!("\"hooks.{event}\" must be a list")));
        };
        for (i, group) in groups.iter().enumerate() {
            if !matches!(group, Json::Object(_)) {
                return Err(shape(format!("\"hooks.{event}[{i}]\" must be an object")));
            }
            match group.get("hooks") {
                Some(Json::Array(_)) => {}
                _ => {
                    return Err(shape(format!(
                        "\"hooks.{event}[{i}].hooks\" must be a list"
                    )));
                }
            }
            if let Some(m) = group.get("matcher")
                && !matches!(m, Json::String(_))
            {
                return Err(shape(format!(
                    "\"hooks.{event}[{i}].matcher\" must be a string"
                )));
            }
        }
    }
    Ok(doc)
}

/// Render a document the way it came: a trailing newline only if the
/// original had one (new files get one).
fn render(doc: &Json, original: Option<&str>) -> String {
    let mut text = doc.pretty();
    if original.is_none_or(|o| o.trim().is_empty() || o.ends_with('\n')) {
        text.push('\n');
    }
    text
}

fn events_of(wanted: &[Wanted]) -> Vec<&str> {
    let mut events: Vec<&str> = wanted.iter().map(|w| w.event.as_str()).collect();
    events.dedup();
    events
}

/// Merge `wanted` into a settings document (`None`: the file is absent).
/// Returns the new text; equal to the input when nothing had to change.
pub fn merge(text: Option<&str>, what: &str, wanted: &[Wanted]) -> Result<String> {
    let mut doc = parse_settings(text, what, &events_of(wanted))?;
    let mut changed = false;
    for w in wanted {
        changed |= merge_one(&mut doc, w);
    }
    Ok(match (changed, text) {
        (false, Some(original)) => original.to_string(),
        _ => render(&doc, text),
    })
}

/// Put one wanted hook in place; whether anything changed.
fn merge_one(doc: &mut Json, w: &Wanted) -> bool {
    let Json::Object(root) = doc else {
        return false;
    };
    if !root.iter().any(|(k, _)| k == "hooks") {
        root.push(("hooks".into(), Json::Object(Vec::new())));
    }
    let Some(Json::Object(events)) = doc.get_mut("hooks") else {
        return false;
    };
    if !events.iter().any(|(k, _)| *k == w.event) {
        events.push((w.event.clone(), Json::Array(Vec::new())));
    }
    let Some((_, Json::Array(groups))) = events.iter_mut().find(|(k, _)| *k == w.event) else {
        return false;
    };
    // Keep the first of our hooks that sits under the right matcher; drop
    // any other copy of it (older installs, hand edits).
    let mut kept = false;
    let mut changed = false;
    let mut emptied = vec![false; groups.len()];
    for (gi, group) in groups.iter_mut().enumerate() {
        let right_matcher = group.get("matcher").and_then(Json::as_str) == w.matcher.as_deref();
        let plain = was_ours(group);
        let Some(Json::Array(hooks)) = group.get_mut("hooks") else {
            continue;
        };
        let before = hooks.len();
        hooks.retain_mut(|hook| {
            if our_program(hook) != Some(w.program) {
                return true;
            }
            if right_matcher && !kept {
                kept = true;
                if *hook != w.hook {
                    *hook = w.hook.clone();
                    changed = true;
                }
                return true;
            }
            false
        });
        let removed = hooks.len() != before;
        changed |= removed;
        emptied[gi] = removed && hooks.is_empty() && plain;
    }
    drop_emptied(groups, &emptied);
    if !kept {
        let mut group = Vec::new();
        if let Some(m) = &w.matcher {
            group.push(("matcher".to_string(), Json::String(m.clone())));
        }
        group.push(("hooks".to_string(), Json::Array(vec![w.hook.clone()])));
        groups.push(Json::Object(group));
        changed = true;
    }
    changed
}

/// Remove the groups flagged in `emptied` (we took their last hook).
fn drop_emptied(groups: &mut Vec<Json>, emptied: &[bool]) {
    let mut i = 0;
    groups.retain(|_| {
        i += 1;
        !emptied[i - 1]
    });
}

/// A group we may remove once empty: it has nothing but `matcher`/`hooks`.
fn was_ours(group: &Json) -> bool {
    match group {
        Json::Object(entries) => entries.iter().all(|(k, _)| k == "matcher" || k == "hooks"),
        _ => false,
    }
}

/// Remove every hook of ours from `events`; drop groups, events and the
/// `hooks` object that this leaves empty. Returns the new text.
pub fn unmerge(text: Option<&str>, what: &str, events: &[&str]) -> Result<String> {
    let Some(original) = text else {
        return Ok(String::new());
    };
    let mut doc = parse_settings(Some(original), what, events)?;
    let mut changed = false;
    if let Some(Json::Object(hooks)) = doc.get_mut("hooks") {
        let mut emptied_events = Vec::new();
        for (event, groups) in hooks.iter_mut() {
            let Json::Array(groups) = groups else {
                continue;
            };
            if !events.contains(&event.as_str()) || groups.is_empty() {
                continue;
            }
            let mut emptied = vec![false; groups.len()];
            for (gi, group) in groups.iter_mut().enumerate() {
                let plain = was_ours(group);
                if let Some(Json::Array(list)) = group.get_mut("hooks") {
                    let n = list.len();
                    list.retain(|h| our_program(h).is_none());
                    let removed = list.len() != n;
                    changed |= removed;
                    emptied[gi] = removed && list.is_empty() && plain;
                }
            }
            drop_emptied(groups, &emptied);
            if groups.is_empty() {
                emptied_events.push(event.clone());
            }
        }
        hooks.retain(|(event, _)| !emptied_events.contains(event));
        if hooks.is_empty()
            && !emptied_events.is_empty()
            && let Json::Object(root) = &mut doc
        {
            root.retain(|(k, _)| k != "hooks");
        }
    }
    Ok(if changed {
        render(&doc, text)
    } else {
        original.to_string()
    })
}

/// A hook of ours found in a settings document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub event: String,
    pub matcher: Option<String>,
    pub program: &'static str,
    /// The executable path the command names (unquoted).
    pub path: String,
    /// The value of its `--config`, if it has one.
    pub config: Option<String>,
}

/// Our hooks in a settings document, for `doctor`.
pub fn find_ours(text: &str) -> Result<Vec<Found>> {
    let doc = Json::parse(text).map_err(|e| Error::refused(format!("not valid JSON: {e}")))?;
    let Some(Json::Object(events)) = doc.get("hooks") else {
        return Ok(Vec::new());
    };
    Ok(hook_entries(events)
        .flatten()
        .filter_map(|entry| {
            let program = our_program(entry.hook)?;
            let command = entry
                .hook
                .get("command")
                .and_then(Json::as_str)
                .unwrap_or("");
            let words = ktr_base::config::split_shell_words(command).unwrap_or_default();
            let config = words
                .iter()
                .skip_while(|w| *w != "--config")
                .nth(1)
                .cloned();
            Some(Found {
                event: entry.event.to_string(),
                matcher: entry.matcher.map(String::from),
                program,
                path: program_of(command),
                config,
            })
        })
        .collect())
}

/// Whether `~/.claude.json` text registers the MCP server `ktr` at user
/// scope running exactly `command args…` (what `claude mcp add --scope user
/// ktr -- command args…` writes).
pub fn mcp_registered(claude_json: &str, command: &str, args: &[String]) -> bool {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(claude_json) else {
        return false;
    };
    let Some(server) = doc.pointer("/mcpServers/ktr") else {
        return false;
    };
    let got_args: Vec<&str> = server
        .get("args")
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    server.get("command").and_then(|c| c.as_str()) == Some(command)
        && got_args == args.iter().map(String::as_str).collect::<Vec<_>>()
}

/// A planned change to a settings file.
#[derive(Debug, Clone)]
pub struct Edit {
    /// Something the human should know (e.g. how to embed the statusline).
    pub note: Option<String>,
    pub path: PathBuf,
    /// The file's text now (`None`: absent).
    pub before: Option<String>,
    /// The file's text afterwards (`None`: the file is removed, because
    /// ktr created it and nothing but ktr's hooks was ever in it).
    pub after: Option<String>,
    /// The ktr backup whose exact bytes `after` restores (uninstall); it is
    /// removed once restored, so install + uninstall leave no file behind.
    pub restores: Option<PathBuf>,
}

/// What [`Edit::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub change: Change,
    /// The file actually written when the settings path is a symlink
    /// (dotfile managers): the link stays, its target is replaced atomically.
    pub through_link: Option<PathBuf>,
}

/// The change [`Edit::apply`] made to the settings file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The file already was as wanted.
    Unchanged,
    /// The file did not exist and was created.
    Created,
    /// The file was rewritten; the old text is in `backup`.
    Updated { backup: PathBuf },
    /// The file got the bytes of the backup it was made from (removed now).
    Restored { from: PathBuf },
    /// The file ktr created was removed: it is absent again, as before install.
    Removed,
}

impl Edit {
    /// Plan merging ktr's hooks (binaries in `bin_dir`) into `path`.
    pub fn merge(path: &Path, bin_dir: &Path, config: Option<&Path>) -> Result<Edit> {
        let before = read_optional(path)?;
        let wanted = wanted(bin_dir, config)?;
        let what = path.display().to_string();
        let after = merge(before.as_deref(), &what, &wanted)?;
        let (after, foreign) =
            merge_statusline(&after, &what, &wanted_statusline(bin_dir, config)?)?;
        Ok(Edit {
            note: foreign.map(|f| embed_hint(&f, bin_dir, config)),
            path: path.to_path_buf(),
            before,
            after: Some(after),
            restores: None,
        })
    }

    /// Plan removing ktr's hooks from `path`. When the result is the same
    /// document as a ktr backup of this file (the state before install),
    /// that backup's exact bytes are used, so an install followed by an
    /// uninstall leaves the file byte-for-byte as it was; when the result
    /// is an empty document and no backup holds one, install created the
    /// file, and it is removed.
    pub fn unmerge(path: &Path) -> Result<Edit> {
        let before = read_optional(path)?;
        let wanted = wanted(Path::new("/"), None)?;
        let Some(text) = before.as_deref() else {
            return Ok(Edit {
                note: None,
                path: path.to_path_buf(),
                before,
                after: None,
                restores: None,
            });
        };
        let what = path.display().to_string();
        let after = unmerge(Some(text), &what, &events_of(&wanted))?;
        let after = unmerge_statusline(&after, &what)?;
        let (after, restores) = if after == text {
            (Some(after), None)
        } else if let Some((bytes, backup)) = original_backup(path, &after) {
            (Some(bytes), Some(backup))
        } else if is_empty_document(&after) {
            (None, None)
        } else {
            (Some(after), None)
        };
        Ok(Edit {
            note: None,
            path: path.to_path_buf(),
            before,
            after,
            restores,
        })
    }

    /// Whether applying would change the file.
    pub fn changes(&self) -> bool {
        self.before != self.after
    }

    /// A readable line diff of the change (empty when nothing changes).
    pub fn diff(&self) -> String {
        if !self.changes() {
            return String::new();
        }
        let path = self.path.display();
        let mut out = match (&self.before, &self.after) {
            (None, _) => format!("--- {path} (absent)\n+++ {path}\n"),
            (_, None) => format!("--- {path}\n+++ {path} (removed: install created it)\n"),
            _ => format!("--- {path}\n+++ {path}\n"),
        };
        out.push_str(&line_diff(
            self.before.as_deref().unwrap_or(""),
            self.after.as_deref().unwrap_or(""),
        ));
        out
    }

    /// Write the change. A merge first keeps a timestamped backup of the
    /// old file beside it, then writes the new text atomically with the old
    /// file's mode (0600 for a new file). An unmerge that restores a backup
    /// or the file's absence writes no backup of its own. Nothing is
    /// written when nothing changes.
    pub fn apply(&self) -> Result<Applied> {
        if !self.changes() {
            return Ok(Applied {
                change: Change::Unchanged,
                through_link: None,
            });
        }
        let target = link_target(&self.path)?;
        let written = target.as_deref().unwrap_or(&self.path);
        let Some(after) = &self.after else {
            // Install created the file (through the link, if any): remove
            // what it created; a link the user had stays as it was.
            fs::remove_file(written).map_err(|e| Error::io_at("remove", written, &e))?;
            return Ok(Applied {
                change: Change::Removed,
                through_link: target,
            });
        };
        let mode = match fs::metadata(&self.path) {
            Ok(m) => m.permissions().mode() & 0o7777,
            Err(_) => 0o600,
        };
        let change = match (&self.before, &self.restores) {
            (_, Some(from)) => Change::Restored { from: from.clone() },
            (Some(before), None) => {
                let backup = backup_path(&self.path);
                write_atomic(&backup, before.as_bytes(), mode, Existing::Refuse)?;
                Change::Updated { backup }
            }
            (None, None) => Change::Created,
        };
        if let Some(dir) = written.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| Error::io_at("create", dir, &e))?;
        }
        write_atomic(written, after.as_bytes(), mode, Existing::Replace)?;
        if let Change::Restored { from } = &change {
            fs::remove_file(from).map_err(|e| Error::io_at("remove", from, &e))?;
        }
        Ok(Applied {
            change,
            through_link: target,
        })
    }
}

/// Whether a settings text is an object with nothing in it.
fn is_empty_document(text: &str) -> bool {
    matches!(Json::parse(text), Ok(Json::Object(entries)) if entries.is_empty())
}

/// Where a write to `path` must go: `None` when `path` is not a symlink;
/// else the file the link (chain) names, so that the link itself is kept
/// (a dangling link names the file to create).
fn link_target(path: &Path) -> Result<Option<PathBuf>> {
    let is_link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return Ok(None);
    }
    if let Ok(real) = fs::canonicalize(path) {
        return Ok(Some(real));
    }
    let mut at = path.to_path_buf();
    for _ in 0..40 {
        let next = fs::read_link(&at).map_err(|e| Error::io_at("read link", &at, &e))?;
        at = match at.parent() {
            Some(dir) => dir.join(next),
            None => next,
        };
        if !fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Ok(Some(at));
        }
    }
    Err(Error::refused(format!(
        "{} is a loop of symlinks; fix it by hand (nothing was changed)",
        path.display()
    )))
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    let bytes = read_capped(path, cap::SETTINGS, Links::Follow)
        .map_err(|e| Error::refused(format!("{}; nothing was changed", e.message)))?;
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|_| {
                Error::refused(format!(
                    "{} is not UTF-8 text; fix it by hand, then run again (nothing was changed)",
                    path.display()
                ))
            })
        })
        .transpose()
}

/// The prefix of backup file names: `<name>.ktr-backup-<UTC timestamp>`.
const BACKUP_MARK: &str = ".ktr-backup-";

fn backup_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stamp: String = ktr_base::time::now_rfc3339()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let base = path.with_file_name(format!("{name}{BACKUP_MARK}{stamp}"));
    let mut candidate = base.clone();
    let mut n = 1;
    while candidate.symlink_metadata().is_ok() {
        candidate = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    candidate
}

/// The newest ktr backup of `path` that is the same document as `text`:
/// its exact bytes and its path.
fn original_backup(path: &Path, text: &str) -> Option<(String, PathBuf)> {
    let doc = Json::parse(text).ok();
    let name = path.file_name()?.to_string_lossy().into_owned();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let prefix = format!("{name}{BACKUP_MARK}");
    let mut backups: Vec<PathBuf> = fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    backups.sort();
    backups.into_iter().rev().find_map(|b| {
        let bytes = fs::read_to_string(&b).ok()?;
        let same = match &doc {
            Some(doc) => Json::parse(&bytes).ok().as_ref() == Some(doc),
            None => bytes.trim().is_empty() && text.trim().is_empty(),
        };
        same.then_some((bytes, b))
    })
}

/// A small line diff (longest common subsequence; settings files are small):
/// changed lines with `-`/`+`, two lines of context around them.
pub fn line_diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    let near_change = |k: usize| {
        let lo = k.saturating_sub(2);
        let hi = (k + 2).min(ops.len() - 1);
        ops[lo..=hi].iter().any(|(c, _)| *c != ' ')
    };
    let mut out = String::new();
    let mut skipped = false;
    for (k, (c, line)) in ops.iter().enumerate() {
        if near_change(k) {
            if skipped {
                out.push_str("@@\n");
                skipped = false;
            }
            let _ = writeln!(out, "{c} {line}");
        } else {
            skipped = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statusline_is_set_only_where_none_is_and_removed_only_when_ours() {
        let ours = wanted_statusline(Path::new("/opt/k bin"), Some(Path::new("/c.toml"))).unwrap();
        assert_eq!(
            ours.get("command").and_then(Json::as_str),
            Some("'/opt/k bin/ktr-statusline' --config /c.toml")
        );
        let (set, foreign) = merge_statusline("{}\n", "s", &ours).unwrap();
        assert_eq!(foreign, None);
        assert!(set.contains("ktr-statusline"), "{set}");
        assert_eq!(
            merge_statusline(&set, "s", &ours).unwrap(),
            (set.clone(), None)
        );
        assert_eq!(unmerge_statusline(&set, "s").unwrap(), "{}\n");
        let theirs = "{\"statusLine\": {\"type\": \"command\", \"command\": \"my-line\"}}\n";
        let (kept, foreign) = merge_statusline(theirs, "s", &ours).unwrap();
        assert_eq!(
            (kept.as_str(), foreign.as_deref()),
            (theirs, Some("my-line"))
        );
        assert_eq!(unmerge_statusline(theirs, "s").unwrap(), theirs);
        let hint = embed_hint("my-line", Path::new("/b"), None);
        assert!(hint.contains("/b/ktr-statusline --segment"), "{hint}");
    }

    #[test]
    fn program_of_unquotes_the_first_word() {
        assert_eq!(program_of("/a/ktr-stop --config x"), "/a/ktr-stop");
        assert_eq!(
            program_of("'/my dir/ktr-ack' --config 'c'"),
            "/my dir/ktr-ack"
        );
        assert_eq!(program_of("\"/q\\\"d/ktr-ack\""), "/q\"d/ktr-ack");
        assert_eq!(program_of("/my\\ dir/x y"), "/my dir/x");
    }

    #[test]
    fn sh_quote_round_trips_through_program_of() {
        for p in [
            "/usr/local/bin/ktr-stop",
            "/home/a b/it's/ktr-stop",
            "/x/中文/ktr-ack",
        ] {
            assert_eq!(program_of(&format!("{} --config y", sh_quote(p))), p);
        }
    }

    #[test]
    fn pretty_matches_two_space_json() {
        let text =
            "{\n  \"a\": [],\n  \"b\": {},\n  \"z\": [\n    1,\n    \"中\"\n  ],\n  \"c\": null\n}";
        assert_eq!(Json::parse(text).unwrap().pretty(), text);
    }

    #[test]
    fn hook_entries_walk_in_order_and_mark_misshapen_parts() {
        let doc = Json::parse(
            r#"{"hooks": {
                "Stop": [{"hooks": [{"type": "command", "command": "/b/ktr-stop"}]}, {"matcher": "x"}],
                "Odd": "not a list",
                "SessionStart": [{"matcher": "resume", "hooks": [
                    {"type": "command", "command": "/other"},
                    {"type": "command", "command": "'/b b/ktr-ack' --config c"}]}]
            }}"#,
        )
        .unwrap();
        let Some(Json::Object(events)) = doc.get("hooks") else {
            panic!("no hooks");
        };
        let walked: Vec<_> = hook_entries(events)
            .map(|e| e.map(|e| (e.event, e.matcher, e.hook.get("command").unwrap().clone())))
            .collect();
        assert_eq!(walked.len(), 5);
        assert_eq!(
            walked[0],
            Ok(("Stop", None, Json::String("/b/ktr-stop".into())))
        );
        assert_eq!(walked[1], Err(Misshapen::GroupWithoutHooks));
        assert_eq!(walked[2], Err(Misshapen::EventNotAList));
        assert_eq!(
            walked[3],
            Ok((
                "SessionStart",
                Some("resume"),
                Json::String("/other".into())
            ))
        );
        // The lenient reader skips what is misshapen and finds ours.
        let found = find_ours(&doc.pretty()).unwrap();
        assert_eq!(
            found
                .iter()
                .map(|f| (f.event.as_str(), f.program, f.path.as_str()))
                .collect::<Vec<_>>(),
            [
                ("Stop", "ktr-stop", "/b/ktr-stop"),
                ("SessionStart", "ktr-ack", "/b b/ktr-ack")
            ]
        );
    }

    #[test]
    fn the_fragment_names_all_four_hooks() {
        let w = wanted(Path::new("/opt/k bin"), Some(Path::new("/c.toml"))).unwrap();
        assert_eq!(w.len(), 4);
        assert_eq!(w[3].event, "PreCompact");
        assert_eq!(w[0].event, "Stop");
        assert_eq!(w[0].matcher, None);
        assert_eq!(
            w[0].hook.get("command").unwrap(),
            &Json::String("'/opt/k bin/ktr-stop' --config /c.toml".into())
        );
        assert_eq!(w[0].hook.get("timeout").unwrap(), &Json::Number(10.into()));
        assert_eq!(w[1].event, "UserPromptSubmit");
        assert_eq!(w[1].matcher, None);
        assert_eq!(w[1].program, "ktr-prompt");
        assert_eq!(w[2].event, "SessionStart");
        assert_eq!(w[2].matcher.as_deref(), Some("resume"));
        assert_eq!(w[2].program, "ktr-ack");
    }
}
