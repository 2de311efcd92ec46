//! The executables under test. Each is a package of its own under `bins/`,
//! and cargo's `CARGO_BIN_EXE_*` names only a test's own package's, so the
//! tests find them where cargo puts every binary of the profile they were
//! built with: the directory holding `deps/`, where this test binary runs
//! from. The first look builds them all with the cargo that runs the tests
//! (`$CARGO build --bins`, same profile, target and target dir; a no-op when
//! they are current), once per run. `KTR_TEST_BIN_DIR` names a directory of
//! built binaries to use instead, without a build.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The path of executable `name` (e.g. `"ktr-stop"`), built if need be.
pub fn exe(name: &str) -> &'static str {
    static PATHS: Mutex<BTreeMap<String, &'static str>> = Mutex::new(BTreeMap::new());
    let mut paths = PATHS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    paths.entry(name.to_string()).or_insert_with(|| {
        let path = dir().join(name);
        assert!(path.is_file(), "{} was not built", path.display());
        Box::leak(path.display().to_string().into_boxed_str())
    })
}

/// The directory of the built executables.
pub fn dir() -> &'static Path {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match DIR.get_or_init(|| match std::env::var_os("KTR_TEST_BIN_DIR") {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => build(),
    }) {
        Ok(dir) => dir,
        Err(why) => panic!("{why}"),
    }
}

/// `$CARGO build --bins` for the profile directory this test binary runs in
/// (`<target dir>[/<triple>]/<profile>/deps/<test>`).
fn build() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let profile_dir = me
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("{} is not in <profile>/deps", me.display()))?;
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(other) => other,
        None => return Err(format!("no profile directory above {}", me.display())),
    };
    let above = profile_dir.parent().ok_or("no target dir")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .args(["--workspace", "--bins", "--profile", profile]);
    // `<target dir>/<triple>/<profile>` when the tests were built with
    // `--target`: the triple's folder holds no `CACHEDIR.TAG`.
    if above.join("CACHEDIR.TAG").exists() {
        cmd.arg("--target-dir").arg(above);
    } else {
        let triple = above
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or("no triple")?;
        let target_dir = above.parent().ok_or("no target dir")?;
        cmd.args(["--target", triple])
            .arg("--target-dir")
            .arg(target_dir);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("running cargo to build the executables: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo could not build the executables:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(profile_dir.to_path_buf())
}
