//! The `statusLine` ktr installs: set only where none is, removed only when ours.

use std::path::Path;

use ktr_base::error::{Error, Result};

use super::hooks::{parse_settings, render};
use super::json::Json;
use super::shell::{program_of, sh_quote};
use super::{FRAGMENT, STATUSLINE_PROGRAM};

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
pub(super) fn statusline_is_ours(line: &Json) -> bool {
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
