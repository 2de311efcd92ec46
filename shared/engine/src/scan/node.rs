//! The chain walk's view of a record: its links, packed.

use crate::symbols::Sym;

/// How a record points at its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// No `parentUuid` field.
    Missing,
    /// `parentUuid: null`.
    Root,
    /// `parentUuid: "<uuid>"`.
    To(Sym),
}

/// The role a record plays in the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordRole {
    User,
    Assistant,
    /// Attachments, system records, progress…: links only.
    Other,
}

/// The chain-relevant facts of one record, in 32 bytes (one per record
/// with a uuid: the biggest table of a long session's plan). The message
/// id is kept as its key (no table of message ids during the scan).
#[derive(Debug, Clone)]
pub struct Node {
    pub(super) message: u64,
    pub(super) line: u32,
    pub(super) uuid: u32,
    pub(super) parent: u32,
    pub(super) logical_parent: u32,
    pub(super) event: u32,
    pub(super) parent_kind: ParentKind,
    pub role: RecordRole,
    pub(super) bits: u8,
}

/// The bits of [`Node::bits`].
pub(super) const BOUNDARY: u8 = 1;
pub(super) const SIDECHAIN: u8 = 1 << 1;
pub(super) const HAS_MESSAGE: u8 = 1 << 2;

/// How [`Node::parent`] reads its `parent` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ParentKind {
    Missing,
    Root,
    To,
}

/// "None" in a node's `u32` fields.
pub(super) const NONE: u32 = u32::MAX;

fn opt(v: u32) -> Option<u32> {
    (v != NONE).then_some(v)
}

impl Node {
    /// The record's line number.
    pub fn line(&self) -> usize {
        self.line as usize
    }
    pub fn uuid(&self) -> Option<Sym> {
        opt(self.uuid)
    }
    pub fn parent(&self) -> Link {
        match self.parent_kind {
            ParentKind::Missing => Link::Missing,
            ParentKind::Root => Link::Root,
            ParentKind::To => Link::To(self.parent),
        }
    }
    pub(crate) fn logical_parent(&self) -> Option<Sym> {
        opt(self.logical_parent)
    }
    /// The key of the record's `message.id` (assistant records).
    pub fn message_id(&self) -> Option<u64> {
        (self.bits & HAS_MESSAGE != 0).then_some(self.message)
    }
    /// A `compact_boundary` system record.
    pub fn boundary(&self) -> bool {
        self.bits & BOUNDARY != 0
    }
    pub fn sidechain(&self) -> bool {
        self.bits & SIDECHAIN != 0
    }
    /// Index into [`super::Scan::events`] when the record holds speech.
    pub fn event(&self) -> Option<usize> {
        opt(self.event).map(|e| e as usize)
    }
}
