//! `ktr hooks merge|statusline|unmerge|registered` — the installer's edits of Claude
//! Code's files (hidden from `--help`; `install` calls it). Merge puts the
//! Stop and `SessionStart` hooks of `hooks.json` into Claude Code's settings,
//! pointing at the binaries in `--prefix`; unmerge takes exactly those out
//! again; statusline sets only ktr's `statusLine` (`ktr-statusline
//! --plugin`, for the Claude Code plugin, which cannot set one); registered exits 0 when `~/.claude.json` already registers
//! `<prefix>/ktr-mcp --config C` as the MCP server `ktr`, 1 otherwise.

use std::path::{Path, PathBuf};

use ktr_admin::settings::{self, Change, Edit};
use ktr_base::Error;

use crate::cli::HooksArgs;
use crate::out;

pub fn run(args: &HooksArgs) -> Result<u8, Error> {
    let path = args.settings.clone().unwrap_or_else(settings::default_path);
    let edit = match args.action.as_str() {
        "merge" => {
            let prefix = args.prefix.as_deref().ok_or_else(|| {
                Error::usage(
                    "ktr hooks merge needs --prefix DIR (where ktr-stop and ktr-ack are installed)",
                )
            })?;
            let config = args.common.config.as_deref().map(absolute).transpose()?;
            Edit::merge(&path, &absolute(prefix)?, config.as_deref())?
        }
        "statusline" => {
            let prefix = args.prefix.as_deref().ok_or_else(|| {
                Error::usage(
                    "ktr hooks statusline needs --prefix DIR (where ktr-statusline is installed)",
                )
            })?;
            Edit::merge_plugin_statusline(&path, &absolute(prefix)?)?
        }
        "registered" => return registered(args),
        "unmerge" if args.prefix.is_none() => Edit::unmerge(&path)?,
        "unmerge" => return Err(Error::usage("--prefix does not apply to ktr hooks unmerge")),
        other => {
            return Err(Error::usage(format!(
                "ktr hooks needs merge, statusline, unmerge or registered, not {other:?}"
            )));
        }
    };
    if let Some(note) = &edit.note {
        out::print(note);
    }
    if args.dry_run {
        out::print(&if edit.changes() {
            edit.diff()
        } else {
            format!("{} already up to date; nothing to change\n", path.display())
        });
        return Ok(0);
    }
    let applied = edit.apply()?;
    let path = path.display();
    let through = applied
        .through_link
        .as_ref()
        .map(|t| {
            format!(
                " (a symlink: wrote its target {}, the link is kept)",
                t.display()
            )
        })
        .unwrap_or_default();
    out::print(&match applied.change {
        Change::Unchanged => format!("{path} already up to date\n"),
        Change::Created => format!("created {path}{through}\n"),
        Change::Updated { backup } => {
            format!("updated {path}{through} (backup: {})\n", backup.display())
        }
        Change::Restored { from } => format!(
            "restored {path}{through} to its bytes before install (from {}, now removed)\n",
            from.display()
        ),
        Change::Removed => format!("removed {path}{through}: install had created it\n"),
    });
    Ok(0)
}

fn registered(args: &HooksArgs) -> Result<u8, Error> {
    let prefix = args
        .prefix
        .as_deref()
        .ok_or_else(|| Error::usage("ktr hooks registered needs --prefix DIR"))?;
    let command = absolute(prefix)?.join("ktr-mcp");
    let config = ktr_base::config::Config::locate(args.common.config.as_deref());
    let wanted = vec![
        "--config".to_string(),
        absolute(&config)?.display().to_string(),
    ];
    let text = std::fs::read_to_string(ktr_base::config::home_dir().join(".claude.json"))
        .unwrap_or_default();
    let yes = settings::mcp_registered(&text, &command.display().to_string(), &wanted);
    Ok(u8::from(!yes))
}

fn absolute(p: &Path) -> Result<PathBuf, Error> {
    std::path::absolute(p)
        .map_err(|e| Error::usage(format!("cannot make {} absolute: {e}", p.display())))
}
