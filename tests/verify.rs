//! ktr-verify's checks, run over the example, the corpus and tampered candidates.

use std::path::{Path, PathBuf};

use ktr::config::Config;
use ktr::engine::conserve::{self, Expected};
use ktr::engine::plan::{self, Plan};

const SESSION: &str = "0b6f4c1e-2d3a-4b5c-8d9e-0f1a2b3c4d5e";

struct Sandbox {
    dir: PathBuf,
    config: Config,
}

impl Sandbox {
    fn new(extra: &str) -> Sandbox {
        let dir = std::env::temp_dir().join(format!("ktr-verify-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("proj")).unwrap();
        let config = Config::from_toml(&format!(
            "project_dir = \"{}\"\nstate_dir = \"{}\"\n{extra}",
            dir.join("proj").display(),
            dir.join("state").display()
        ))
        .unwrap();
        Sandbox { dir, config }
    }

    /// Plan `source`, write the candidate, and return both paths and the plan.
    fn prepare(&self, source: &Path) -> (PathBuf, PathBuf, Plan) {
        let backup = self.dir.join("proj").join("source.jsonl");
        std::fs::copy(source, &backup).unwrap();
        let plan = plan::build(&self.config, &backup, Some(SESSION)).unwrap();
        let candidate = self.dir.join("proj").join(format!("{SESSION}.jsonl"));
        std::fs::write(&candidate, plan.candidate.bytes()).unwrap();
        (backup, candidate, plan)
    }

    fn verify(
        &self,
        backup: &Path,
        candidate: &Path,
        plan: &Plan,
    ) -> Result<conserve::ConservationCounts, ktr::Error> {
        let sha = ktr::fsutil::sha256_file(candidate).unwrap();
        conserve::check(
            &self.config,
            backup,
            candidate,
            &Expected {
                session_id: SESSION,
                candidate_sha256: &sha,
                manifest: &plan.candidate.manifest,
                left_out: &plan.report.left_out,
            },
        )
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/session.jsonl")
}

fn corpus_dir() -> PathBuf {
    match std::env::var_os("KTR_CORPUS") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"),
    }
}

#[test]
fn example_candidate_verifies() {
    let sb = Sandbox::new("");
    let (backup, candidate, plan) = sb.prepare(&example());
    let report = sb.verify(&backup, &candidate, &plan).unwrap();
    assert_eq!(report.candidate_lines, plan.candidate.lines.len());
    assert!(report.source_pieces_checked >= 15, "{report:?}");
}

#[test]
fn every_corpus_candidate_verifies() {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {} missing: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "expected the corpus, found {} files",
        files.len()
    );
    for file in files {
        let sb = Sandbox::new("on_malformed_line = \"skip\"");
        let (backup, candidate, plan) = sb.prepare(&file);
        let report = sb
            .verify(&backup, &candidate, &plan)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        println!(
            "{:>4} lines {:>4} pieces {:>3} left out  {}",
            report.candidate_lines,
            report.source_pieces_checked,
            report.source_records_left_out,
            file.file_name().unwrap().to_string_lossy()
        );
    }
}

fn tamper(edit: impl Fn(&str) -> String) -> String {
    let sb = Sandbox::new("");
    let (backup, candidate, plan) = sb.prepare(&example());
    let original = std::fs::read_to_string(&candidate).unwrap();
    std::fs::write(&candidate, edit(&original)).unwrap();
    sb.verify(&backup, &candidate, &plan).unwrap_err().message
}

#[test]
fn a_dropped_line_fails() {
    let msg = tamper(|s| s.lines().skip(1).map(|l| format!("{l}\n")).collect());
    assert!(msg.starts_with("verification failed"), "{msg}");
}

#[test]
fn a_changed_word_fails() {
    let msg = tamper(|s| s.replacen("喝水", "喝茶", 1));
    assert!(msg.contains("differs"), "{msg}");
}

#[test]
fn a_smuggled_tool_block_fails() {
    let msg = tamper(|s| {
        s.replacen(
            "\"content\":[{\"type\":\"text\"",
            "\"content\":[{\"type\":\"tool_use\",\"name\":\"Bash\",\"input\":{}},{\"type\":\"text\"",
            1,
        )
    });
    assert!(msg.contains("verification failed"), "{msg}");
}

#[test]
fn a_lost_turn_is_caught_by_conservation() {
    // Texts that lost a turn: only the independent reading of the source can notice.
    let sb = Sandbox::new("");
    let (backup, _candidate, plan) = sb.prepare(&example());
    let mut texts: Vec<String> = plan
        .candidate
        .lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let c = &v["message"]["content"];
            c.as_str().map_or_else(
                || c[0]["text"].as_str().unwrap().to_string(),
                str::to_string,
            )
        })
        .collect();
    let expected = Expected {
        session_id: SESSION,
        candidate_sha256: "",
        manifest: &plan.candidate.manifest,
        left_out: &plan.report.left_out,
    };
    let whole =
        conserve::conserve(&backup, &texts, &expected, &sb.config.reply_tool_pattern).unwrap();
    assert!(whole.checked >= 15);
    let lost = texts.remove(texts.len() / 2);
    let err =
        conserve::conserve(&backup, &texts, &expected, &sb.config.reply_tool_pattern).unwrap_err();
    assert!(
        err.message.contains("conservation"),
        "{} (lost {lost:?})",
        err.message
    );
}
