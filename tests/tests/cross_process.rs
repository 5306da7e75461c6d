//! The product as a user runs it: separate processes, real gRPC, files on disk.
use std::process::Command;

use fedmcmc_common::noise_aware::rounds::{DEFAULT_RELEASES, EXACT_RELEASES};
use fedmcmc_system_tests::{
    PartyProcess, bin, run, simulate, simulated_federation, write_run_config,
};

#[test]
fn simulate_writes_draws_summary_and_party_stores() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    let (ok, stdout, stderr) = simulate(&out, &["--iterations", "300", "--epsilon", "50"]);
    assert!(ok, "simulate failed: {stderr}");
    assert!(
        stdout.contains("theta.1") && stdout.contains("party-3"),
        "{stdout}"
    );
    for c in 1..=2 {
        let csv = std::fs::read_to_string(out.join(format!("chain-{c}.csv"))).unwrap();
        let rows: Vec<&str> = csv.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(rows[0].starts_with("lp__,accept_stat__,") && rows[0].ends_with("theta.1,theta.2"));
        assert_eq!(rows.len(), 1 + 150, "header plus the post-warm-up draws");
        assert!(csv.contains("# seed = 3") && csv.contains("# init = private initialiser"));
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for key in [
        "name", "mean", "sd", "q5", "q50", "q95", "ess_bulk", "ess_tail", "r_hat",
    ] {
        assert!(
            summary["parameters"][0].get(key).is_some(),
            "parameters lack {key}"
        );
    }
    for key in ["acceptance_rate", "iterations"] {
        assert!(summary["chains"][1].get(key).is_some(), "chains lack {key}");
    }
    // The private initialiser started the chains, and each party's summary names its cost.
    assert_eq!(summary["initialiser"]["point"].as_array().unwrap().len(), 2);
    let parties = summary["parties"].as_array().unwrap();
    assert_eq!(parties.len(), 3);
    for p in parties {
        assert!(p["initialiser_epsilon_spent"].as_f64().unwrap() > 0.0);
    }
    for p in parties {
        assert_eq!(
            p["releases"], 600,
            "2 chains × 300 iterations, one release each"
        );
        let spent = p["epsilon_spent"].as_f64().unwrap();
        assert!(
            spent > 0.0 && spent <= 50.0 + 1e-9,
            "calibrated to the budget: {spent}"
        );
        assert_eq!(p["rows"], 2000);
    }
    assert!(summary["mmd_to_exact"].is_number() && summary["mmd_baseline"].is_number());
    for i in 1..=3 {
        assert!(out.join(format!("parties/party-{i}/rows.sqlite")).exists());
        assert!(
            out.join(format!("parties/party-{i}/ledger.sqlite"))
                .exists()
        );
    }
    // The same output directory is not overwritten.
    let (ok, _, stderr) = simulate(&out, &["--iterations", "10"]);
    assert!(!ok && stderr.contains("already"), "{stderr}");
    // Both τ and iterations, more than the budget allows: a clear budget error.
    let (ok, stdout, stderr) = simulate(
        &dir.path().join("over"),
        &["--tau", "0.1", "--iterations", "100000", "--epsilon", "1"],
    );
    assert!(!ok && stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("budget"), "{stderr}");
}

#[test]
fn parties_and_coordinator_as_separate_processes_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    // Make the party directories (and spend a little) with a simulation.
    let (sim, mut parties, configs) = simulated_federation(dir.path(), "20");
    let run_config = write_run_config(dir.path(), &sim, &parties, 200, None);
    // A dry run first: the plan per party, nothing opened, released or written.
    let (ok, plan, stderr) = run(Command::new(bin("coordinator"))
        .args(["run", "--dry-run", "--config"])
        .arg(&run_config));
    assert!(ok, "dry run failed: {stderr}");
    assert!(
        plan.contains("dry run: nothing was opened or released"),
        "{plan}"
    );
    let planned_after: Vec<f64> = (1..=3)
        .map(|i| {
            let line = plan
                .lines()
                .find(|l| l.starts_with(&format!("party-{i} ")))
                .unwrap_or_else(|| panic!("no line for party-{i}: {plan}"));
            let cells: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cells[4], "400", "2 chains × 200 steps: {line}");
            cells[6].parse().unwrap()
        })
        .collect();
    let (ok, plan_again, _) = run(Command::new(bin("coordinator"))
        .args(["run", "--dry-run", "--config"])
        .arg(&run_config));
    assert!(
        ok && plan_again == plan,
        "a dry run spends nothing: {plan_again}"
    );
    let (ok, stdout, stderr) = run(Command::new(bin("coordinator"))
        .args(["run", "--config"])
        .arg(&run_config)
        .arg("--out")
        .arg(dir.path().join("run-1")));
    assert!(ok, "run failed: {stderr}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("run-1/summary.json")).unwrap(),
    )
    .unwrap();
    for (i, planned) in planned_after.iter().enumerate() {
        let committed = summary["parties"][i]["epsilon_committed"].as_f64().unwrap();
        assert!(
            (committed - planned).abs() <= 1e-3 * committed,
            "party-{}: the dry run said ε {planned} after, the run committed {committed}",
            i + 1
        );
    }
    assert!(stdout.contains("theta.2"), "{stdout}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("run-1/summary.json")).unwrap(),
    )
    .unwrap();
    let committed = summary["parties"][0]["epsilon_committed"].as_f64().unwrap();
    assert_eq!(summary["parties"][0]["releases"], 400);
    assert!(
        summary.get("mmd_to_exact").is_none(),
        "no exact posterior for a real run"
    );

    // Crash party 1 (SIGKILL) and restart it from its files.
    parties.remove(0).kill();
    parties.insert(0, PartyProcess::start(&configs[0]));
    // Whatever it already spent still counts: a plan that needs more than is left is
    // refused, naming the budget.
    let run_config = write_run_config(dir.path(), &sim, &parties, 1_000_000, None);
    let (ok, stdout, stderr) = run(Command::new(bin("coordinator"))
        .args(["run", "--config"])
        .arg(&run_config)
        .arg("--out")
        .arg(dir.path().join("run-2")));
    assert!(!ok && stdout.is_empty());
    assert!(
        stderr.contains("budget") && stderr.contains("party-1"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{committed:.4}")),
        "the restarted party reports the ε it had committed ({committed:.4}): {stderr}"
    );
}

/// A row that is not a number, or (for a GLM over named columns) lies outside a column's
/// public bounds, stops the party at start, naming the file, the row and the column.
#[test]
fn a_party_with_a_bad_row_refuses_to_start_and_says_where() {
    let banana = "kind = \"banana\"\na = 20.0\nlik_var = [20.0, 2.5]\nprior_var = 1000.0\n";
    let glm = "kind = \"glm\"\nfamily = \"poisson\"\nprior_sd = [10.0]\n\
               features = [{ name = \"age\", bounds = [18.0, 90.0] }]\n\
               label = { name = \"visits\", bounds = [0.0, 20.0] }\n";
    for (rows, model, expected) in [
        ("x1,x2\n0.1,3.0\n0.2,oops\n", banana, &["row 2", "oops"][..]),
        (
            "id,visits,age\n1,3,40\n2,0,18\n3,2,95\n",
            glm,
            &["row 3: column age is 95, outside its public bounds [18, 90]"][..],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rows.csv"), rows).unwrap();
        std::fs::write(dir.path().join("token"), "a-token-of-enough-length\n").unwrap();
        std::fs::write(
            dir.path().join("party.toml"),
            format!(
                "name = \"p\"\nlisten = \"127.0.0.1:0\"\nledger = \"ledger.sqlite\"\nauth_token_file = \"token\"\ninsecure = true\n\
                 [budget]\nepsilon = 1.0\ndelta = 1e-6\n\
                 [data]\nformat = \"csv\"\npath = \"rows.csv\"\n\
                 [model]\n{model}"
            ),
        )
        .unwrap();
        let (ok, _, stderr) = run(Command::new(bin("party"))
            .args(["serve", "--config"])
            .arg(dir.path().join("party.toml")));
        assert!(!ok);
        assert!(
            stderr.contains("rows.csv") && expected.iter().all(|e| stderr.contains(e)),
            "{stderr}"
        );
    }
}

/// `simulate --model logistic-glm` (6000 rows): each party's SQLite holds the named columns,
/// the run samples over them, and the summary has no exact reference (the model has none);
/// `--model gaussian-glm --variant sufficient-statistics` samples over gRPC too.
#[test]
fn simulate_runs_a_glm_over_named_columns() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    let (ok, stdout, stderr) = simulate(
        &out,
        &[
            "--model",
            "logistic-glm",
            "--iterations",
            "200",
            "--epsilon",
            "50",
            "--clip",
            "1e6",
        ],
    );
    assert!(ok, "simulate failed: {stderr}");
    // The table names the coefficients as the model does; summary.json keeps the column too.
    assert!(stdout.contains("\nfeature2 "), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let third = &summary["parameters"][2];
    assert_eq!(
        (&third["name"], &third["label"]),
        (&"theta.3".into(), &"feature2".into())
    );
    assert!(
        summary.get("mmd_to_exact").is_none_or(|v| v.is_null()),
        "{summary}"
    );
    // The preset takes the logistic family's default prior; the outputs state it.
    let default = fedmcmc_common::models::glm_prior::weakly_informative_sd(true, &[[-2.0, 2.0]; 2]);
    let stated: Vec<f64> = summary["prior_sd"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(stated, default, "{summary}");
    assert!(
        stdout.contains("prior: independent normals, sds [10.000, 1.083, 1.083]"),
        "{stdout}"
    );
    let conn = rusqlite::Connection::open(out.join("parties/party-1/rows.sqlite")).unwrap();
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('rows')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(columns, ["feature1", "feature2", "label"]);
    let toml = std::fs::read_to_string(out.join("parties/party-1/party.toml")).unwrap();
    assert!(
        toml.contains("kind = \"glm\"") && toml.contains("feature1"),
        "{toml}"
    );

    // The gaussian GLM over gRPC by noisy sufficient statistics: one release per iteration
    // per party, and an exact reference to compare with.
    let out = dir.path().join("sufficient");
    let (ok, _, stderr) = simulate(
        &out,
        &[
            "--model",
            "gaussian-glm",
            "--variant",
            "sufficient-statistics",
            "--iterations",
            "200",
            "--epsilon",
            "50",
        ],
    );
    assert!(ok, "simulate failed: {stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert!(summary["mmd_to_exact"].is_number(), "{summary}");
    for p in summary["parties"].as_array().unwrap() {
        assert_eq!(p["releases"], 400, "2 chains × 200 iterations: {p}");
    }
}

/// The summaries route over gRPC and mutual TLS: the gaussian GLM's three releases per party at
/// a generous budget (ε = 10⁵: at 1000 the noise of the presets' ±20 label bound still moves
/// the means by a tenth of a posterior sd, and the MMD sees it) gives its exact posterior (the MMD to the exact draws within a few times
/// that of independent exact draws), and a logistic GLM at ε = 3 spends its eight releases per
/// party once and converges (R̂ ≤ 1.01, bulk and tail ESS ≥ 400 for every coefficient).
#[test]
fn simulate_samples_the_summaries_route() {
    let dir = tempfile::tempdir().unwrap();
    let read = |out: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
    };
    let out = dir.path().join("gaussian");
    let (ok, stdout, stderr) = simulate(
        &out,
        &[
            "--model",
            "gaussian-glm",
            "--variant",
            "summaries",
            "--epsilon",
            "1e5",
        ],
    );
    assert!(ok, "simulate failed: {stderr}");
    assert!(!stdout.contains("the summaries route applies"), "{stdout}");
    let summary = read(&out);
    for p in summary["parties"].as_array().unwrap() {
        assert_eq!(p["releases"], EXACT_RELEASES, "{p}");
    }
    let (mmd, baseline) = (
        summary["mmd_to_exact"].as_f64().unwrap(),
        summary["mmd_baseline"].as_f64().unwrap(),
    );
    assert!(
        mmd <= 3.0 * baseline.max(1e-3),
        "MMD {mmd} vs exact-vs-exact {baseline}"
    );

    let out = dir.path().join("logistic");
    let (ok, _, stderr) = simulate(
        &out,
        &[
            "--model",
            "logistic-glm",
            "--variant",
            "summaries",
            "--epsilon",
            "3",
        ],
    );
    assert!(ok, "simulate failed: {stderr}");
    let summary = read(&out);
    for p in summary["parties"].as_array().unwrap() {
        assert_eq!(p["releases"], DEFAULT_RELEASES, "{p}");
    }
    for p in summary["parameters"].as_array().unwrap() {
        assert!(p["r_hat"].as_f64().unwrap() <= 1.01, "{p}");
        assert!(p["ess_bulk"].as_f64().unwrap() >= 400.0, "{p}");
        assert!(p["ess_tail"].as_f64().unwrap() >= 400.0, "{p}");
    }
}
