//! `ktr repair [--confirm REPAIR]`: set damaged operation files aside.
//! Without the word it lists what it would move; with it, each damaged file
//! in `operations/` moves to `state/damaged/` (never deleted) and `active`
//! is rebuilt from the operation files that remain.

use ktr_base::Error;
use ktr_pipeline::operation::set_damaged_aside;

use crate::cli::RepairArgs;
use crate::{out, state};

pub fn run(args: &RepairArgs) -> Result<u8, Error> {
    let (_, store) = state::open(args.common.config.as_deref())?;
    let moved = set_damaged_aside(&store, args.confirm.as_deref())?;
    if args.common.json {
        out::json(&serde_json::json!({
            "moved": args.confirm.is_some(),
            "files": moved.iter().map(|(from, to)| serde_json::json!({"from": from, "to": to})).collect::<Vec<_>>(),
        }));
        return Ok(0);
    }
    let mut text = String::new();
    for (from, to) in &moved {
        let verb = if args.confirm.is_some() {
            "moved"
        } else {
            "would move"
        };
        text.push_str(&format!("{verb} {} → {}\n", from.display(), to.display()));
    }
    text.push_str(match (moved.is_empty(), args.confirm.is_some()) {
        (true, _) => "no damaged operation files\n",
        (false, false) => "run again with --confirm REPAIR to move them (nothing is deleted)\n",
        (false, true) => "done; `ktr status` and `ktr ops` show the remaining operations\n",
    });
    out::print(&text);
    Ok(0)
}
