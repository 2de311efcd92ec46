//! ktr-verify's checks, run over the example, the corpus and tampered candidates.

use std::path::{Path, PathBuf};

use ktr_base::config::Config;
use ktr_engine::conserve::{self, Expected};
use ktr_engine::plan::{self, Plan};

use crate::support::ResultOrPanic;
use crate::support::sid;
use crate::support::{Sandbox, corpus_dir, example};

const SESSION: &str = "0b6f4c1e-2d3a-4b5c-8d9e-0f1a2b3c4d5e";

/// A candidate planned from a source and written beside the source's copy
/// (its "backup"), in a fresh sandbox.
struct Prepared {
    _sandbox: Sandbox,
    config: Config,
    backup: PathBuf,
    /// The backup's digest when it was planned (prepare records it).
    backup_sha256: String,
    candidate: PathBuf,
    plan: Plan,
}

/// Plan `source` with the sandbox config plus `extra` and write the candidate.
fn prepare(source: &Path, extra: &str) -> Prepared {
    let sandbox = Sandbox::new();
    sandbox.write_config(extra);
    let config = sandbox.load_config();
    let backup = sandbox.project.join("source.jsonl");
    std::fs::copy(source, &backup).unwrap();
    let plan = plan::build(&config, &backup, Some(&sid(SESSION))).unwrap();
    let candidate = sandbox.project.join(format!("{SESSION}.jsonl"));
    std::fs::write(&candidate, plan.candidate.bytes()).unwrap();
    Prepared {
        _sandbox: sandbox,
        config,
        backup_sha256: ktr_base::digest::sha256_file(&backup).unwrap(),
        backup,
        candidate,
        plan,
    }
}

impl Prepared {
    fn verify(&self) -> Result<conserve::ConservationCounts, ktr_base::Error> {
        let sha = ktr_base::digest::sha256_file(&self.candidate).unwrap();
        conserve::check(
            &self.config,
            &self.backup,
            &self.candidate,
            &Expected {
                session_id: &sid(SESSION),
                backup_sha256: &self.backup_sha256,
                candidate_sha256: &sha,
                manifest: &self.plan.candidate.manifest,
                left_out: &self.plan.report.left_out,
            },
            &ktr_engine::meter::Meter::default(),
        )
    }
}

#[test]
fn example_candidate_verifies() {
    let prepared = prepare(&example(), "");
    let report = prepared.verify().unwrap();
    assert_eq!(report.candidate_lines, prepared.plan.candidate.lines.len());
    assert!(report.source_pieces_checked >= 15, "{report:?}");
}

#[test]
#[ignore = "needs the corpus (KTR_CORPUS, default ../shared/corpus)"]
fn every_corpus_candidate_verifies() {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .or_panic(|e| format!("corpus {} missing: {e}", dir.display()))
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
        let report = prepare(&file, "on_malformed_line = \"skip\"")
            .verify()
            .or_panic(|e| format!("{}: {e}", file.display()));
        println!(
            "{:>4} lines {:>4} pieces {:>3} left out  {}",
            report.candidate_lines,
            report.source_pieces_checked,
            report.source_records_left_out,
            file.file_name().unwrap().to_string_lossy()
        );
    }
}

/// The message of the failed verification of a candidate edited by
/// `edit`, and the check that failed.
fn tamper(edit: impl Fn(&str) -> String) -> (String, Option<conserve::Failed>) {
    let prepared = prepare(&example(), "");
    let original = std::fs::read_to_string(&prepared.candidate).unwrap();
    std::fs::write(&prepared.candidate, edit(&original)).unwrap();
    let err = prepared.verify().unwrap_err();
    let failed = err.find::<conserve::Failed>().copied();
    (err.message, failed)
}

#[test]
fn a_dropped_line_fails() {
    let (msg, failed) = tamper(|s| s.lines().skip(1).map(|l| format!("{l}\n")).collect());
    assert!(msg.starts_with("verification failed"), "{msg}");
    assert_eq!(failed, Some(conserve::Failed::Structure), "{msg}");
}

#[test]
fn a_backup_changed_after_planning_fails() {
    let prepared = prepare(&example(), "");
    let mut backup = std::fs::read(&prepared.backup).unwrap();
    backup.extend_from_slice(b"\n");
    std::fs::write(&prepared.backup, backup).unwrap();
    let err = prepared.verify().unwrap_err();
    assert!(
        err.message.contains("no longer has the frozen digest"),
        "{err}"
    );
    assert_eq!(
        err.find::<conserve::Failed>(),
        Some(&conserve::Failed::Backup)
    );
}

#[test]
fn a_changed_word_fails() {
    let (msg, failed) = tamper(|s| s.replacen("喝水", "喝茶", 1));
    assert!(msg.contains("differs"), "{msg}");
    assert!(failed.is_some(), "{msg}");
}

#[test]
fn a_smuggled_tool_block_fails() {
    let (msg, failed) = tamper(|s| {
        s.replacen(
            "\"content\":[{\"type\":\"text\"",
            "\"content\":[{\"type\":\"tool_use\",\"name\":\"Bash\",\"input\":{}},{\"type\":\"text\"",
            1,
        )
    });
    assert!(msg.contains("verification failed"), "{msg}");
    assert!(failed.is_some(), "{msg}");
}

/// Each text with the source line of the manifest entry at its position.
fn carried<'a>(
    texts: &'a [String],
    manifest: &[ktr_engine::candidate::ManifestEntry],
) -> Vec<conserve::Carried<'a>> {
    texts
        .iter()
        .zip(manifest)
        .map(|(text, m)| conserve::Carried {
            source_line: m.source_line,
            text,
        })
        .collect()
}

#[test]
fn a_lost_turn_is_caught_by_conservation() {
    // Texts that lost a turn: only the independent reading of the source can notice.
    let prepared = prepare(&example(), "");
    let Prepared {
        config,
        backup,
        plan,
        ..
    } = &prepared;
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
        session_id: &sid(SESSION),
        backup_sha256: "",
        candidate_sha256: "",
        manifest: &plan.candidate.manifest,
        left_out: &plan.report.left_out,
    };
    let manifest = &plan.candidate.manifest;
    let whole = conserve::conserve(
        backup,
        &carried(&texts, manifest),
        &expected,
        &config.reply_tool_pattern,
    )
    .unwrap();
    assert!(whole.checked >= 15);
    let lost = texts.remove(texts.len() / 2);
    let err = conserve::conserve(
        backup,
        &carried(&texts, manifest),
        &expected,
        &config.reply_tool_pattern,
    )
    .unwrap_err();
    assert!(
        err.message.contains("conservation"),
        "{} (lost {lost:?})",
        err.message
    );
}
