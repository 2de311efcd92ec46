//! `ktr cancel OP --confirm CANCEL`: cancel a pending operation.

use ktr_admin::report::StatusView;
use ktr_base::Error;

use crate::cli::ConfirmArgs;
use crate::{request, state};

pub fn run(args: &ConfirmArgs) -> Result<u8, Error> {
    let (_, store) = state::open(args.common.config.as_deref())?;
    let op = store.cancel(&args.operation, &args.confirm)?;
    request::show(&StatusView::of(&op), args.common.json);
    Ok(0)
}
