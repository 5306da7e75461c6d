//! A party killed (SIGKILL, as in a crash) in the middle of a real run and started again on
//! the same address: the coordinator resends the step it was waiting for, the restarted
//! party answers it from its durable ledger, and the run completes with every draw and every
//! step charged once.
use std::process::Command;
use std::time::Duration;

use fedmcmc_party::config::PartyConfig;
use fedmcmc_system_tests::{PartyProcess, bin, simulate, start_run, write_run_config};

const ITERATIONS: u64 = 3000;
const CHAINS: u64 = 2;

/// Sets a party's `listen` to a port free now, so that it can be restarted on it.
fn fixed_port(config: &std::path::Path) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text = std::fs::read_to_string(config).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("listen") {
                format!("listen = \"127.0.0.1:{port}\"")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(config, text).unwrap();
}

/// Releases the open run of `party status` has made so far (0 while it has none).
fn released_so_far(config: &std::path::Path) -> u64 {
    let out = Command::new(bin("party"))
        .args(["status", "--config"])
        .arg(config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with("open run "))
        .and_then(|l| l.split("released ").nth(1))
        .and_then(|r| r.split(' ').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn a_party_killed_and_restarted_mid_run_loses_nothing_and_charges_once() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    let (ok, _, stderr) = simulate(
        &sim,
        &["--iterations", "20", "--tau", "0.5", "--epsilon", "50"],
    );
    assert!(ok, "{stderr}");
    let configs: Vec<_> = (1..=3)
        .map(|i| sim.join(format!("parties/party-{i}/party.toml")))
        .collect();
    configs.iter().for_each(|c| fixed_port(c));
    let mut parties: Vec<PartyProcess> = configs.iter().map(|c| PartyProcess::start(c)).collect();
    let run_config = write_run_config(dir.path(), &sim, &parties, ITERATIONS, None);
    let out = dir.path().join("run");
    let coordinator = start_run(&run_config, &out);

    // Kill party-2 once its sampling run has released something, and start it again.
    let victim = &configs[1];
    while released_so_far(victim) == 0 {
        std::thread::sleep(Duration::from_millis(20));
    }
    parties.remove(1).kill();
    let before_restart = released_so_far(victim);
    assert!(
        before_restart < CHAINS * ITERATIONS,
        "the run ended before the kill: {before_restart} releases"
    );
    std::thread::sleep(Duration::from_millis(500));
    parties.insert(1, PartyProcess::start(victim));

    let result = coordinator.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "the run failed: {stderr}");
    assert!(
        stderr.contains("resending the same call") && stderr.contains("call=\"Step "),
        "the coordinator never had to resend: {stderr}"
    );

    // Every draw is there.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for chain in summary["chains"].as_array().unwrap() {
        assert_eq!(chain["iterations"], ITERATIONS, "{chain}");
        assert_eq!(chain["status"], "completed", "{chain}");
    }
    for c in 1..=CHAINS {
        let csv = std::fs::read_to_string(out.join(format!("chain-{c}.csv"))).unwrap();
        let rows = csv
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("lp__"))
            .count() as u64;
        assert_eq!(rows, ITERATIONS / 2, "chain {c}: the post-warm-up draws");
    }
    // Every party charged each step once: its closed charge counts exactly the steps, and the
    // restarted party's ledger (one row per (run, chain, step) at most) holds every step of
    // the run, none lost across the crash.
    for p in summary["parties"].as_array().unwrap() {
        assert_eq!(p["releases"], CHAINS * ITERATIONS, "{p}");
    }
    let ledger = PartyConfig::load(victim).unwrap().ledger;
    let db = rusqlite::Connection::open(&ledger).unwrap();
    let recorded: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM releases GROUP BY run_id ORDER BY COUNT(*) DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        recorded as u64,
        CHAINS * ITERATIONS,
        "in {}",
        ledger.display()
    );
}
