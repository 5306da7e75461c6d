//! The shipped example with real CSV data (`docs/examples/challenger/`) runs as its README
//! says: three agencies' `party serve` over mutual TLS and `coordinator run`, from its
//! script, and the posterior says what the data say (colder launches, more O-ring damage).
use std::process::Command;

use fedmcmc_system_tests::{bin, run};

#[test]
fn the_challenger_example_runs_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("challenger");
    let bins = bin("coordinator").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/challenger/run.sh");
    let (ok, stdout, stderr) = run(Command::new(&script).arg(&out).env("PATH", &path));
    assert!(ok, "{stderr}");
    assert!(stdout.contains("output directory:"), "{stdout}");

    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("draws/summary.json")).unwrap())
            .unwrap();
    let rows: Vec<u64> = summary["parties"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["rows"].as_u64().unwrap())
        .collect();
    assert_eq!(rows, [8, 8, 7]);
    for chain in summary["chains"].as_array().unwrap() {
        assert_eq!(chain["status"], "completed", "{chain}");
    }
    // The slope per °F: its posterior lies below zero (the pooled maximum-likelihood fit is
    // −0.232), whatever the parties' noise.
    let slope = &summary["parameters"][1];
    assert!(slope["q95"].as_f64().unwrap() < 0.0, "{slope}");

    // At ε = 1 the coordinator refuses before anything is spent.
    let (ok, _, stderr) = run(Command::new(&script)
        .arg(dir.path().join("strict"))
        .arg("1")
        .env("PATH", &path));
    assert!(
        !ok && stderr.contains("does not fit the privacy budget"),
        "{stderr}"
    );

    // An agency whose file has a bad row: its node refuses to start, and the script stops
    // with the node's reason instead of waiting for it.
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for k in 1..=3 {
        let name = format!("agency-{k}.csv");
        let text =
            std::fs::read_to_string(script.parent().unwrap().join("data").join(&name)).unwrap();
        // agency-2's second row's temp_minus_70 (third field) made unreadable.
        let text = if k == 2 {
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let mut fields: Vec<&str> = lines[2].split(',').collect();
            fields[2] = "abc";
            lines[2] = fields.join(",");
            lines.join("\n") + "\n"
        } else {
            text
        };
        std::fs::write(data.join(name), text).unwrap();
    }
    let (ok, _, stderr) = run(Command::new(&script)
        .arg(dir.path().join("bad-row"))
        .env("CHALLENGER_DATA", &data)
        .env("PATH", &path));
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("agency-2's party did not start")
            && stderr.contains("column temp_minus_70 holds \"abc\", not a number"),
        "{stderr}"
    );
}
