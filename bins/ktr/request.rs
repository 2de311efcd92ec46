//! `ktr request --confirm REBUILD`: ask for a rebuild. Nothing happens
//! until the current reply has finished (the Stop hook schedules it).

use ktr_admin::report::StatusView;
use ktr_base::Error;

use crate::cli::RequestArgs;
use crate::{out, state, status};

pub fn run(args: &RequestArgs) -> Result<u8, Error> {
    let (_, store) = state::open(args.common.config.as_deref())?;
    let op = store.request(&args.reason, &args.confirm, args.session.as_ref())?;
    show(&StatusView::of(&op), args.common.json);
    Ok(0)
}

/// Print an operation after a change: JSON, or the status report.
pub fn show(view: &StatusView, json: bool) {
    if json {
        out::json(view);
    } else {
        out::print(&status::human(view));
    }
}
