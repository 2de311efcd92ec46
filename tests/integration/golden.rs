//! Golden candidates: for every rule fixture and every corpus transcript,
//! under three configurations, the SHA-256 of the candidate `plan::build`
//! writes under a fixed session id (and of its manifest) must equal the one
//! recorded in `tests/golden/candidates.sha256`. It guards the engine's
//! streaming rewrite: candidate bytes are part of the contract
//! (determinism), so a change of carried bytes must be meant. A meant
//! change (a fidelity fix) is re-recorded with
//! `KTR_BLESS=1 cargo test --test integration golden -- --include-ignored`
//! and the diff of that file is reviewed with the change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support;
use crate::support::sid;

const SESSION: &str = "0a1b2c3d-0000-4000-8000-00000000901d";

/// The configurations every file is planned under: the defaults, a token
/// cap that drops old turns with elision and no stamps, and file order with
/// command expansions and no startup snapshot.
const CONFIGS: &[(&str, &str)] = &[
    ("default", ""),
    (
        "capped",
        "carry_max_tokens = 5000\ncarry_overflow = \"drop_oldest\"\nmax_event_chars = 500\nstamp_turns = false\n",
    ),
    (
        "file_order",
        "history = \"file\"\ncarry_command_expansions = true\nfreeze_startup_snapshot = false\ninclude_open_tail = false\n",
    ),
];

fn golden_file() -> PathBuf {
    support::repo_file("tests/golden/candidates.sha256")
}

fn jsonl_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

/// `group/config/name → digest of candidate + manifest` for each file
/// (blocked plans included: their candidate is what `ktr plan
/// --show-candidate` prints).
fn digests(group: &str, files: &[PathBuf]) -> BTreeMap<String, String> {
    let dir = files[0].parent().unwrap().display().to_string();
    let mut all = BTreeMap::new();
    for (name, extra) in CONFIGS {
        let config = ktr_base::config::Config::from_toml(&format!(
            "project_dir = {dir:?}\nstate_dir = \"/nonexistent/ktr-golden\"\n{extra}"
        ))
        .unwrap();
        for path in files {
            let plan = ktr_engine::plan::build(&config, path, Some(&sid(SESSION)))
                .unwrap_or_else(|e| panic!("plan of {} failed: {e}", path.display()));
            let manifest = serde_json::to_vec(&plan.candidate.manifest).unwrap();
            let digest = format!(
                "{}.{}",
                ktr_base::digest::sha256_hex(&plan.candidate.bytes()),
                &ktr_base::digest::sha256_hex(&manifest)[..16]
            );
            let file = path.file_name().unwrap().to_string_lossy();
            all.insert(format!("{group}/{name}/{file}"), digest);
        }
    }
    all
}

fn recorded() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(golden_file()).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once("  "))
        .map(|(d, n)| (n.to_string(), d.to_string()))
        .collect()
}

#[track_caller]
fn assert_golden(group: &str, now: &BTreeMap<String, String>) {
    let mut all = recorded();
    if std::env::var_os("KTR_BLESS").is_some() {
        all.retain(|name, _| !name.starts_with(&format!("{group}/")));
        all.extend(now.clone());
        let text: String = all.iter().map(|(n, d)| format!("{d}  {n}\n")).collect();
        std::fs::write(golden_file(), text).unwrap();
        return;
    }
    let wrong: Vec<String> = now
        .iter()
        .filter_map(|(name, digest)| match all.get(name) {
            Some(d) if d == digest => None,
            Some(d) => Some(format!("{name}: now {digest}, golden {d}")),
            None => Some(format!("{name}: not recorded (KTR_BLESS=1 to record)")),
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "candidate bytes changed ({} of {}):\n{}",
        wrong.len(),
        now.len(),
        wrong.join("\n")
    );
}

#[test]
fn rule_fixtures_keep_their_candidate_bytes() {
    let files = jsonl_in(&support::repo_file("tests/fixtures/rules"));
    assert_golden("rules", &digests("rules", &files));
}

#[test]
#[ignore = "needs the corpus (KTR_CORPUS, default ../shared/corpus)"]
fn corpus_transcripts_keep_their_candidate_bytes() {
    let files = jsonl_in(&support::corpus_dir());
    assert!(
        files.len() >= 20,
        "corpus has only {} transcripts",
        files.len()
    );
    assert_golden("corpus", &digests("corpus", &files));
}
