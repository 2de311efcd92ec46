//! Unit tests of the store and the state machine, one file per concept;
//! the helpers they share are here.

pub(super) use super::*;
use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::targets::Target;

use ktr_base::ids::{OperationId, SessionId};
use ktr_base::time::parse_rfc3339;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

pub(super) fn store() -> (tempfile::TempDir, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&tmp.path().join("state")).unwrap();
    (tmp, store)
}

pub(super) fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Two sessions, `sa` and `sb`.
pub(super) fn two_sessions() -> (SessionId, SessionId) {
    (
        SessionId::parse("sa").unwrap(),
        SessionId::parse("sb").unwrap(),
    )
}

/// A fresh pending operation in `store`.
pub(super) fn requested(store: &Store) -> Operation {
    store.request("x", "REBUILD", None).unwrap()
}

/// `result` is an error whose message contains `needle`.
pub(super) fn assert_refused<T: std::fmt::Debug>(result: ktr_base::Result<T>, needle: &str) {
    let err = result.unwrap_err();
    assert!(err.message.contains(needle), "{err}");
}

/// Drive `id` along `path` of statuses.
pub(super) fn walk(store: &Store, id: &OperationId, path: &[Status]) -> Operation {
    store
        .with_lock(|tx| {
            let mut op = tx.load(id)?;
            for to in path {
                tx.transition(&mut op, *to, "test")?;
            }
            Ok(op)
        })
        .unwrap()
}

pub(super) fn dead_worker(stage: Stage) -> Worker {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    Worker {
        pid,
        start_time: 1,
        stage,
    }
}

pub(super) fn set_worker(store: &Store, id: &OperationId, worker: Worker) {
    store
        .with_lock(|tx| {
            let mut op = tx.load(id)?;
            op.worker = Some(worker);
            tx.save(&mut op)
        })
        .unwrap();
}

mod files;
mod in_flight;
mod locks;
mod machine;
mod manifest_artifact;
mod recovery;
mod requests;
