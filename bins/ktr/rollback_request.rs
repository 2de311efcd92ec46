//! `ktr rollback-request OP --confirm ROLLBACK`: switch an activated
//! operation back to the old session after the current reply.

use ktr_admin::report::StatusView;
use ktr_base::Error;

use crate::cli::ConfirmArgs;
use crate::{request, state};

pub fn run(args: &ConfirmArgs) -> Result<u8, Error> {
    let (_, store) = state::open(args.common.config.as_deref())?;
    let op = store.rollback_request(&args.operation, &args.confirm)?;
    request::show(&StatusView::of(&op), args.common.json);
    Ok(0)
}
