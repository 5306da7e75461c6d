//! A model written in Rust, end to end: the example party program
//! (`party/examples/custom_model`, its own model given to `fedmcmc_party::cli::main`) serves
//! its rows as a separate process, and the coordinator library samples the same model
//! against it (`fedmcmc_coordinator::remote::run_with`), as an analyst's program would.
use std::sync::Arc;

use fedmcmc_common::models::Model;
use fedmcmc_coordinator::interrupt::Stop;
use fedmcmc_coordinator::remote::{self, RunConfig};
use fedmcmc_system_tests::{PartyProcess, describe, example, run};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[path = "../../party/examples/custom_model/model.rs"]
mod model;

const TOKEN: &str = "custom-model-token-0123";
const ROWS: usize = 2000;
const TRUTH: [f64; 2] = [1.0, 2.0];

/// A party directory: CSV rows simulated from the model at [`TRUTH`], a token, and a config
/// with no `[model]` table (plaintext, on a free port).
fn party_dir(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let rows = model::StudentTRegression.simulate(&TRUTH, ROWS, &mut ChaCha8Rng::seed_from_u64(1));
    let mut csv = String::from("x1,x2\n");
    for i in 0..rows.n() {
        csv += &format!("{},{}\n", rows.col(0)[i], rows.col(1)[i]);
    }
    std::fs::write(dir.join("rows.csv"), csv).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let config = dir.join("party.toml");
    std::fs::write(
        &config,
        "name = \"custom\"\nlisten = \"127.0.0.1:0\"\nledger = \"ledger.sqlite\"\nauth_token_file = \"token\"\ninsecure = true\n\
         [budget]\nepsilon = 1000.0\ndelta = 1e-6\n\
         [data]\nformat = \"csv\"\npath = \"rows.csv\"\n",
    )
    .unwrap();
    config
}

#[test]
fn the_example_party_serves_its_own_model_to_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = party_dir(&dir.path().join("party"));
    let party = PartyProcess::start_program(&example("custom_model"), &config);
    let described = describe(party.addr, None, TOKEN).unwrap();
    assert_eq!(described.model, "student-t-regression");
    assert_eq!(described.rows, ROWS as u64);

    let run_toml = dir.path().join("run.toml");
    std::fs::write(
        &run_toml,
        format!(
            "insecure = true\n[sampler]\nchains = 2\ntau = 0.1\niterations = 2000\nclip = 3.0\nproposal_sd = 0.02\nseed = 3\ninit = [0.0, 0.0]\n\n\
             [[parties]]\nname = \"custom\"\naddress = \"http://{}\"\ntoken_file = \"{}\"\n",
            party.addr,
            dir.path().join("party/token").display()
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = runtime
        .block_on(remote::run_with(
            RunConfig::load(&run_toml).unwrap(),
            Arc::new(model::StudentTRegression),
            Some(out.clone()),
            &Stop::new(),
        ))
        .unwrap();
    assert!(
        report.table.contains("student-t-regression"),
        "{}",
        report.table
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["model"], "student-t-regression");
    // 2000 rows pin each coefficient to about ±0.03; the chains (1000 draws each after
    // warm-up, started at the prior's mode) must have found the line.
    for (p, truth) in summary["parameters"].as_array().unwrap().iter().zip(TRUTH) {
        let mean = p["mean"].as_f64().unwrap();
        assert!((mean - truth).abs() < 0.2, "{p}");
    }

    // The built-in `party` binary refuses a config without [model]; the example refuses one
    // with it.
    let (ok, _, stderr) = run(
        std::process::Command::new(fedmcmc_system_tests::bin("party"))
            .args(["status", "--config"])
            .arg(&config),
    );
    assert!(!ok && stderr.contains("has no [model] table"), "{stderr}");
    let with_model = dir.path().join("party/with-model.toml");
    let text = std::fs::read_to_string(&config).unwrap()
        + "[model]\nkind = \"banana\"\na = 20.0\nlik_var = [20.0, 2.5]\nprior_var = 1000.0\n";
    std::fs::write(&with_model, text).unwrap();
    let (ok, _, stderr) = run(std::process::Command::new(example("custom_model"))
        .args(["status", "--config"])
        .arg(&with_model));
    assert!(
        !ok && stderr.contains("remove the [model] table"),
        "{stderr}"
    );
}
