//! `simulate` refuses flags it cannot honour at parse time, with clap's sentence naming the
//! flag and the reason, before it writes anything (a refusal after the parties' stores are
//! made would leave them behind).
use std::process::Command;

fn refused(args: &[&str], says: &str) {
    refused_with(args, says, 2);
}

/// [`refused`], with `code` (1 for a refusal of the job's plan rather than of a flag).
fn refused_with(args: &[&str], says: &str, code: i32) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let output = Command::new(env!("CARGO_BIN_EXE_coordinator"))
        .arg("simulate")
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(stderr.contains(says), "{args:?}: {stderr}");
    assert!(!out.exists(), "{args:?}: nothing is written");
}

#[test]
fn impossible_flags_are_refused_before_anything_is_written() {
    refused(
        &["--chains", "0"],
        "invalid value '0' for '--chains <CHAINS>'",
    );
    refused(
        &["--epsilon", "-1"],
        "invalid value '-1' for '--epsilon <EPSILON>': -1 is not a positive number",
    );
    refused(&["--epsilon", "inf"], "inf is not a positive number");
    refused(
        &["--rows", "10000000000"],
        "a simulation makes 1 to 100000000 rows, held in memory",
    );
    refused(&["--rows", "0"], "0 rows: a simulation makes 1 to");
    // A plan the variant cannot take, refused before the parties' directories are written
    // (the directory left behind once blocked the same --out).
    refused_with(
        &["--variant", "barker"],
        "the barker variant needs --iterations",
        1,
    );
    refused_with(
        &["--variant", "barker", "--tau", "0.1", "--iterations", "10"],
        "the barker variant's noise is its total variance C, not a tau (0.1)",
        1,
    );
}

/// A simulate config gives a full model as a `[model]` table, as a run config does (its
/// `--help` says so); a preset's name under `model` still works, and both a table and
/// `model_spec` is refused.
#[test]
fn a_simulate_config_takes_a_model_table() {
    let dir = tempfile::tempdir().unwrap();
    let simulate = |config: &str, out: &str| {
        let path = dir.path().join(format!("{out}.toml"));
        std::fs::write(&path, config).unwrap();
        Command::new(env!("CARGO_BIN_EXE_coordinator"))
            .args(["simulate", "--config"])
            .arg(&path)
            .arg("--out")
            .arg(dir.path().join(out))
            .output()
            .unwrap()
    };
    let table = r#"
iterations = 8
tau = 0.5
[model]
kind = "glm"
family = "logistic"
features = [{ name = "dose", bounds = [-1.0, 1.0] }]
label = { name = "y" }
prior_sd = [5.0]
true_theta = [0.5, 1.0]
"#;
    let output = simulate(table, "table");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let summary = std::fs::read_to_string(dir.path().join("table/summary.json")).unwrap();
    assert!(summary.contains("\"model\": \"glm\""), "{summary}");

    let output = simulate(
        "iterations = 8\ntau = 0.5\nmodel = \"logistic-glm\"\n",
        "preset",
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let both = format!("{table}\n[model_spec]\nkind = \"glm\"\n");
    let output = simulate(&both, "both");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("give the model as a [model] table or as model_spec, not both"),
        "{stderr}"
    );
}
