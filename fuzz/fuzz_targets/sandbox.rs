//! The sandbox every hook fuzz target runs in.

use std::path::PathBuf;
use std::sync::OnceLock;

use ktr_base::ids::{OperationId, SessionId};
use ktr_pipeline::operation::Store;

/// A sandbox (temp dir kept for the run) with a config and one pending
/// operation bound to a session the fuzzed hooks are not in.
pub fn sandbox() -> &'static (PathBuf, PathBuf, OperationId) {
    static SANDBOX: OnceLock<(PathBuf, PathBuf, OperationId)> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("ktr-fuzz-hooks-{}", std::process::id()));
        let (project, state) = (root.join("project"), root.join("state"));
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join("s.jsonl"), "{}\n").unwrap();
        let config = root.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "project_dir = {:?}\nstate_dir = {:?}\nactivation = \"pointer\"\nresume_pointer_path = {:?}\n",
                project.display().to_string(),
                state.display().to_string(),
                root.join("pointer").display().to_string()
            ),
        )
        .unwrap();
        // SAFETY: set once, before any hook runs, on the fuzzer's only thread.
        unsafe { std::env::set_var("KTR_BIN_DIR", root.join("no-stages")) };
        let store = Store::open(&state).unwrap();
        let op = store
            .request("fuzz", "REBUILD", Some(&SessionId::new_random()))
            .unwrap();
        (config, state, op.id)
    })
}
