#![allow(clippy::unwrap_used, missing_docs)]
#[test]
fn probe() {
    let path = std::env::var("ORACLE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/oracle/jaxpr_cases.json")
        });
    let report = tessera_ir::oracle::run_file(&path).unwrap();
    for (name, why) in &report.failures {
        println!("FAIL {name}: {why}");
    }
    println!("{} passed, {} failed", report.passed, report.failures.len());
    assert!(report.failures.is_empty());
}
