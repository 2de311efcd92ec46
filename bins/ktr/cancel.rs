//! `ktr cancel OP --confirm CANCEL`: cancel a pending operation.

use ktr::Error;
use ktr::admin::report::StatusView;

use crate::cli::ConfirmArgs;
use crate::{request, state};

pub fn run(args: &ConfirmArgs) -> Result<u8, Error> {
    let (_, store) = state::open(args.common.config.as_deref())?;
    let op = store.cancel(&args.operation, &args.confirm)?;
    request::show(&StatusView::of(&op), args.common.json);
    Ok(0)
}
