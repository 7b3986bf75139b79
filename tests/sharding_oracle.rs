//! Runs every case of `shared/oracle/sharding_cases.json` through tessera-sharding.

use tessera_sharding::oracle;

#[test]
fn sharding_oracle_file_passes_every_case() {
    let path = tessera_tests::shared_dir()
        .join("oracle")
        .join("sharding_cases.json");
    let report = oracle::run_file(&path).unwrap_or_else(|e| panic!("{e}"));
    for line in &report.failures {
        eprintln!("{line}");
    }
    assert_eq!(
        report.passed + report.failed,
        600,
        "the file holds 600 cases"
    );
    assert_eq!(
        report.failed,
        0,
        "{} cases failed; first: {:?}",
        report.failed,
        report.failures.first()
    );
}
