//! `simulate` refuses flags it cannot honour at parse time, with clap's sentence naming the
//! flag and the reason, before it writes anything (a refusal after the parties' stores are
//! made would leave them behind).
use std::process::Command;

fn refused(args: &[&str], says: &str) {
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
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
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
}
