//! A conversation record the rebuild did not carry, and why: what the
//! plan reports and the candidate writer hands to its sink.

use serde::{Deserialize, Serialize};

use crate::inline_str::InlineStr;
use crate::turns::LeftOutReason;

/// A conversation record that was not carried, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LeftOut {
    pub line: usize,
    pub uuid: Option<InlineStr>,
    pub reason: LeftOutReason,
}
