//! `ktr purge [--confirm PURGE]`: what uninstalling ktr leaves on disk, and
//! removing it. Without the word it only lists. What is safe to remove is
//! decided in the library ([`ktr_admin::purge`]).

use ktr_admin::purge::{Purge, purge};
use ktr_base::Error;
use ktr_pipeline::operation::confirm;

use crate::cli::RepairArgs;
use crate::{out, state};

pub fn run(args: &RepairArgs) -> Result<u8, Error> {
    if let Some(word) = &args.confirm {
        confirm(word, "PURGE")?;
    }
    let config = ktr_base::config::Config::here(args.common.config.as_deref())?;
    if !config.state_dir.exists() {
        // Opening the store would create it: there is nothing to purge.
        out::print(&format!(
            "nothing of ktr's is left on disk ({} does not exist)\n",
            config.state_dir.display()
        ));
        return Ok(0);
    }
    let (config, store) = state::open(args.common.config.as_deref())?;
    let outcome = purge(&store, &config, args.confirm.is_some())?;
    if args.common.json {
        out::json(&outcome);
    } else {
        out::print(&human(&outcome));
    }
    Ok(0)
}

fn human(p: &Purge) -> String {
    let verb = if p.deleted { "removed" } else { "would remove" };
    let mut s = String::new();
    for f in &p.files {
        s.push_str(&format!(
            "{verb} {:<9} {:>10}  {}\n",
            f.what,
            out::bytes(f.bytes),
            f.path.display()
        ));
    }
    for (path, why) in &p.kept {
        s.push_str(&format!("kept {}: {why}\n", path.display()));
    }
    s.push_str(&if p.deleted {
        format!(
            "{verb} {}: ktr's copies of the conversation are gone\n",
            out::bytes(p.bytes)
        )
    } else if p.files.is_empty() {
        "nothing of ktr's is left on disk\n".to_string()
    } else {
        format!(
            "{verb} {} (ktr's copies of the conversation: frozen backups, operation files, logs, \
             never-activated candidates); nothing removed: `ktr purge --confirm PURGE` removes them\n",
            out::bytes(p.bytes)
        )
    });
    s
}
