//! `ktr prune --older-than DAYS [--yes]`: forget old finished operations.
//! Without `--yes` it only shows what it would delete. What is safe to
//! delete is decided in the library ([`ktr_admin::prune`]).

use std::time::SystemTime;

use ktr_admin::prune::{Outcome, prune};
use ktr_base::Error;

use crate::cli::PruneArgs;
use crate::{out, state};

pub fn run(args: &PruneArgs) -> Result<u8, Error> {
    let (config, store) = state::open(args.common.config.as_deref())?;
    let outcome = prune(
        &store,
        &config,
        args.older_than_days,
        SystemTime::now(),
        args.yes,
        args.forget,
    )?;
    if args.common.json {
        out::json(&outcome);
    } else {
        out::print(&human(&outcome));
    }
    Ok(0)
}

fn human(o: &Outcome) -> String {
    let verb = if o.deleted { "deleted" } else { "would delete" };
    let mut s = String::new();
    for p in &o.pruned {
        s.push_str(&format!(
            "{verb} operation {} ({}, updated {})\n",
            p.id, p.status, p.updated_at
        ));
        for f in &p.files {
            s.push_str(&format!(
                "  {:<10} {:>10}  {}\n",
                f.what,
                out::bytes(f.bytes),
                f.path.display()
            ));
        }
    }
    for f in &o.prompts {
        s.push_str(&format!(
            "{verb} kept prompt {:>10}  {}\n",
            out::bytes(f.bytes),
            f.path.display()
        ));
    }
    for session in &o.forgotten {
        s.push_str(&format!(
            "{verb} the last copy of session {session}'s history (confirmed with FORGET)\n"
        ));
    }
    for k in &o.kept {
        let what = k
            .path
            .as_ref()
            .map_or(String::new(), |p| format!(" {}", p.display()));
        s.push_str(&format!("kept {} ({}){what}: {}\n", k.id, k.status, k.why));
    }
    let what = match o.prompts.len() {
        0 => format!("{} operations", o.pruned.len()),
        n => format!("{} operations and {n} kept prompts", o.pruned.len()),
    };
    s.push_str(&match (o.pruned.len() + o.prompts.len(), o.deleted) {
        (0, _) => format!("nothing older than {} days to prune\n", o.older_than_days),
        (_, true) => format!("{verb} {what}, {}\n", out::bytes(o.bytes)),
        (_, false) => format!(
            "{verb} {what}, {}; nothing deleted: run again with --yes\n",
            out::bytes(o.bytes)
        ),
    });
    s
}
