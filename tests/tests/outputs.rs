//! What `simulate` and `run` leave for the analyst: the output directory named on stdout,
//! trace and pair plots as PNG and SVG, and per-chain CSVs that cmdstanpy and ArviZ read.
use std::path::Path;
use std::process::Command;

use fedmcmc_system_tests::{
    bin, run, simulate, simulated_federation, stan_python, write_run_config,
};

/// A small, fast simulation (2 chains of 200 iterations over 6000 rows); its stdout.
fn small_simulation(out: &Path) -> String {
    let (ok, stdout, stderr) = simulate(out, &["--iterations", "200", "--epsilon", "50"]);
    assert!(ok, "simulate failed: {stderr}");
    stdout
}

/// `stdout` ends naming `out`, which holds trace and pair plots as PNG and SVG, with the
/// exact posterior overlaid iff `exact`.
fn assert_named_and_plotted(stdout: &str, out: &Path, exact: bool) {
    let last = stdout.lines().last().unwrap_or_default();
    assert_eq!(last, format!("output directory: {}", out.display()));
    for stem in ["trace", "pair"] {
        let png = std::fs::read(out.join(format!("{stem}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{stem}.png is a PNG");
        let (width, height) = (
            u32::from_be_bytes(png[16..20].try_into().unwrap()),
            u32::from_be_bytes(png[20..24].try_into().unwrap()),
        );
        assert!(
            width >= 400 && height >= 400,
            "{stem}.png is {width}×{height}"
        );
        let svg = std::fs::read_to_string(out.join(format!("{stem}.svg"))).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("theta.2"),
            "{stem}.svg"
        );
        assert!(svg.contains("chain 2"), "{stem}.svg keys every chain");
    }
    let pair = std::fs::read_to_string(out.join("pair.svg")).unwrap();
    assert_eq!(
        pair.contains("exact posterior"),
        exact,
        "exact posterior overlay"
    );
}

#[test]
fn simulate_names_its_output_directory_and_plots_the_draws_with_the_exact_posterior() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    let stdout = small_simulation(&out);
    assert_named_and_plotted(&stdout, &out, true);
}

#[test]
fn run_names_its_output_directory_and_plots_the_draws() {
    let dir = tempfile::tempdir().unwrap();
    let (sim, parties, _) = simulated_federation(dir.path(), "20");
    let config = write_run_config(dir.path(), &sim, &parties, 200, None);
    let out = dir.path().join("run");
    let (ok, stdout, stderr) = run(Command::new(bin("coordinator"))
        .args(["run", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&out));
    assert!(ok, "run failed: {stderr}");
    assert_named_and_plotted(&stdout, &out, false);
}

#[test]
fn cmdstanpy_and_arviz_read_the_draws() {
    let Some(python) = stan_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    small_simulation(&out);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stan_readers.py");
    let (ok, stdout, stderr) = run(Command::new(&python).arg(&script).arg(&out));
    assert!(ok, "{python} {}: {stdout}{stderr}", script.display());
    println!("{}", stdout.trim_end());
}

