//! ktr's hooks in a settings document: what is wanted, merging, taking out, finding.

use std::path::Path;

use ktr_base::error::{Error, Result};

use super::json::Json;
use super::shell::{program_of, sh_quote};
use super::{FRAGMENT, OUR_PROGRAMS};

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

/// One hook of a `hooks` object, with the event and matcher it sits under.
pub(super) struct HookEntry<'a> {
    pub(super) event: &'a str,
    pub(super) matcher: Option<&'a str>,
    pub(super) hook: &'a Json,
}

/// A part of a `hooks` object that is not shaped as Claude Code expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Misshapen {
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
pub(super) fn hook_entries(
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

/// Which of our programs a hook object runs, if any.
pub(super) fn our_program(hook: &Json) -> Option<&'static str> {
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
pub(super) fn parse_settings(text: Option<&str>, what: &str, events: &[&str]) -> Result<Json> {
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
pub(super) fn render(doc: &Json, original: Option<&str>) -> String {
    let mut text = doc.pretty();
    if original.is_none_or(|o| o.trim().is_empty() || o.ends_with('\n')) {
        text.push('\n');
    }
    text
}

pub(super) fn events_of(wanted: &[Wanted]) -> Vec<&str> {
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
