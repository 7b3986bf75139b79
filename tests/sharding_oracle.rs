//! Runs every case of `shared/oracle/sharding_cases.json` through tessera-sharding, directly and
//! through the `tessera` program (`oracle sharding`, `sharding explain --json`).

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

fn tessera(args: &[&str]) -> std::process::Output {
    let bin = tessera_tests::tessera_bin();
    std::process::Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (build it with `cargo build -p tessera`)",
                bin.display()
            )
        })
}

#[test]
fn cli_oracle_sharding_reports_every_case_passed() {
    let path = tessera_tests::shared_dir()
        .join("oracle")
        .join("sharding_cases.json");
    let line = tessera_tests::tessera_last_line(&[
        "oracle".as_ref(),
        "sharding".as_ref(),
        path.as_os_str(),
    ]);
    assert_eq!(line, "600 passed, 0 failed");
}

#[test]
fn cli_sharding_explain_json_gives_the_texts_and_blocks() {
    let args = [
        "sharding",
        "explain",
        "--mesh",
        "x=2,y=4",
        "--spec",
        "P('x', None)",
    ];
    let out = tessera(&[&args[..], &["--shape", "8,16", "--json"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON: {e}"));
    assert_eq!(
        report["hlo_sharding"],
        "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"
    );
    assert_eq!(
        report["sdy_sharding"],
        "#sdy.sharding<mesh<[\"x\"=2, \"y\"=4]>, [{\"x\"}, {}]>"
    );
    assert_eq!(report["shard_shape"], serde_json::json!([4, 16]));
    assert_eq!(
        report["devices_indices"]["5"],
        serde_json::json!([[4, 8], [0, 16]])
    );
}
