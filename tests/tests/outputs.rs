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

#[test]
fn summarise_rebuilds_the_summary_and_plots_from_the_draws_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    small_simulation(&out);
    let summarise = |d: &Path| run(Command::new(bin("coordinator")).arg("summarise").arg(d));
    let read = |d: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(d.join("summary.json")).unwrap()).unwrap()
    };

    // Over the job's own summary: the same statistics, the rest kept, the rebuild named.
    let before = read(&out);
    let (ok, stdout, stderr) = summarise(&out);
    assert!(ok, "summarise failed: {stderr}");
    assert!(
        stdout
            .trim_end()
            .ends_with(&format!("output directory: {}", out.display()))
    );
    let after = read(&out);
    for key in [
        "parameters",
        "chains",
        "parties",
        "draws_per_chain",
        "mmd_to_exact",
    ] {
        assert_eq!(after[key], before[key], "{key}");
    }
    assert!(
        after["rebuilt"]
            .as_str()
            .unwrap()
            .contains("from the draws of 2 chains")
    );

    // A job killed before its summary: no summary.json, no plots, chain 2 cut mid-line.
    for f in [
        "summary.json",
        "trace.png",
        "trace.svg",
        "pair.png",
        "pair.svg",
    ] {
        std::fs::remove_file(out.join(f)).unwrap();
    }
    let chain2 = out.join("chain-2.csv");
    let text = std::fs::read_to_string(&chain2).unwrap();
    let draws: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let cut = text.find(draws[60]).unwrap() + 5;
    std::fs::write(&chain2, &text[..cut]).unwrap();
    let (ok, stdout, stderr) = summarise(&out);
    assert!(ok, "summarise failed: {stderr}");
    assert!(stdout.contains("\"partial\": true"), "{stdout}");
    let rebuilt = read(&out);
    assert_eq!(rebuilt["partial"], true);
    assert_eq!(
        rebuilt["draws_per_chain"], 59,
        "the header row is not a draw"
    );
    assert_eq!(rebuilt["chains"][0]["status"], "completed");
    assert!(
        rebuilt["chains"][1]["status"]
            .as_str()
            .unwrap()
            .starts_with("cut short after 59 of")
    );
    assert_eq!(rebuilt["model"], before["model"]);
    assert_eq!(rebuilt["seed"], before["seed"]);
    let parties = rebuilt["parties"].as_array().unwrap();
    assert_eq!(parties.len(), 3);
    for (p, b) in parties.iter().zip(before["parties"].as_array().unwrap()) {
        assert_eq!((&p["name"], &p["rows"]), (&b["name"], &b["rows"]));
        assert_eq!(p["noise_multiplier"], b["noise_multiplier"]);
    }
    assert!(
        rebuilt["privacy"]
            .as_str()
            .unwrap()
            .contains("party status")
    );
    assert!(out.join("trace.png").is_file() && out.join("pair.svg").is_file());

    // Nothing to summarise: one sentence, and a failure.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (ok, _, stderr) = summarise(&empty);
    assert!(!ok);
    assert!(stderr.contains("holds no chain-<c>.csv"), "{stderr}");
}
