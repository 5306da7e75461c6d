//! A party killed (SIGKILL, as in a crash) in the middle of a real run and started again on
//! the same address: the coordinator resends the step it was waiting for, the restarted
//! party answers it from its durable ledger, and the run completes with every draw and every
//! step charged once.
use std::process::Command;
use std::time::Duration;

use fedmcmc_common::accountant::GaussianComposition;
use fedmcmc_common::mechanism::accounting_budget;
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

/// Three simulated parties served on fixed ports (so that each can be restarted on its own),
/// and a coordinator running `chains` × `iterations` against them into `dir/run`: the
/// parties' configs, the parties, the coordinator and its output directory.
fn federation_running(
    dir: &std::path::Path,
    chains: u64,
    iterations: u64,
) -> (
    Vec<std::path::PathBuf>,
    Vec<PartyProcess>,
    std::process::Child,
    std::path::PathBuf,
) {
    let sim = dir.join("sim");
    let (ok, _, stderr) = simulate(
        &sim,
        &["--iterations", "20", "--tau", "0.5", "--epsilon", "50"],
    );
    assert!(ok, "{stderr}");
    let configs: Vec<_> = (1..=3)
        .map(|i| sim.join(format!("parties/party-{i}/party.toml")))
        .collect();
    configs.iter().for_each(|c| fixed_port(c));
    let parties: Vec<PartyProcess> = configs.iter().map(|c| PartyProcess::start(c)).collect();
    let run_config = write_run_config(dir, &sim, &parties, iterations, None);
    let text = std::fs::read_to_string(&run_config).unwrap();
    std::fs::write(
        &run_config,
        text.replace("chains = 2", &format!("chains = {chains}")),
    )
    .unwrap();
    let out = dir.join("run");
    let coordinator = start_run(&run_config, &out);
    (configs, parties, coordinator, out)
}

#[test]
fn a_party_killed_and_restarted_mid_run_loses_nothing_and_charges_once() {
    let dir = tempfile::tempdir().unwrap();
    let (configs, mut parties, coordinator, out) =
        federation_running(dir.path(), CHAINS, ITERATIONS);

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

/// One step of a chain as the coordinator recorded its reply (`checkpoint/parties/<name>/
/// <run id>.chain-<c>.jsonl`).
#[derive(serde::Deserialize)]
struct RecordedStep {
    step: u64,
    answer: RecordedAnswer,
}

#[derive(serde::Deserialize)]
struct RecordedAnswer {
    value: Vec<f64>,
    noise_variance: f64,
    masked: Option<RecordedMasked>,
}

#[derive(serde::Deserialize)]
struct RecordedMasked {
    steps: Vec<u128>,
    grid: f64,
}

/// Parties killed (SIGKILL) at random moments under load, four chains at once so that the
/// ledger's commits group several releases, and started again: every answer the coordinator
/// received is in the party's ledger bit for bit (none was answered before it was durable),
/// every step is charged exactly once, and each party's run spent the ε its releases compose
/// to (no crash allowance is needed: nothing is reserved beyond the releases).
#[test]
fn parties_killed_at_random_moments_keep_every_answer_they_gave() {
    use rand::{RngExt, SeedableRng};
    const CHAINS: u64 = 4;
    const ITERATIONS: u64 = 2000;
    let dir = tempfile::tempdir().unwrap();
    let (configs, mut parties, coordinator, out) =
        federation_running(dir.path(), CHAINS, ITERATIONS);

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    while released_so_far(&configs[0]) == 0 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut kills = Vec::new();
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(rng.random_range(20..400)));
        let k = rng.random_range(0..3usize);
        let released = released_so_far(&configs[k]);
        if released >= CHAINS * ITERATIONS {
            break;
        }
        parties.remove(k).kill();
        kills.push((k + 1, released));
        std::thread::sleep(Duration::from_millis(rng.random_range(50..500)));
        parties.insert(k, PartyProcess::start(&configs[k]));
    }
    assert!(kills.len() >= 2, "the run ended after {kills:?}");

    let result = coordinator.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        result.status.success(),
        "the run failed after kills {kills:?}: {stderr}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for (p, config) in summary["parties"].as_array().unwrap().iter().zip(&configs) {
        let name = p["name"].as_str().unwrap();
        assert_eq!(p["releases"], CHAINS * ITERATIONS, "{p}");
        let db = rusqlite::Connection::open(PartyConfig::load(config).unwrap().ledger).unwrap();
        let records = out.join("checkpoint/parties").join(name);
        let mut received = 0;
        let mut run_ids = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(&records).unwrap() {
            let path = entry.unwrap().path();
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let Some((run_id, chain)) = file
                .strip_suffix(".jsonl")
                .and_then(|f| f.split_once(".chain-"))
            else {
                continue;
            };
            run_ids.insert(run_id.to_string());
            let chain: u32 = chain.parse().unwrap();
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let s: RecordedStep = serde_json::from_str(line).unwrap();
                let (value, noise_variance, masked, grid): (Vec<u8>, f64, Option<Vec<u8>>, Option<f64>) = db
                    .query_row(
                        "SELECT value, noise_variance, masked, grid FROM releases WHERE run_id = ?1 AND chain = ?2 AND step = ?3",
                        rusqlite::params![run_id, chain, s.step as i64],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                    )
                    .unwrap_or_else(|e| panic!("{name}: run {run_id} chain {chain} step {} was answered but is not in the ledger: {e}", s.step));
                let bytes: Vec<u8> = s
                    .answer
                    .value
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect();
                assert_eq!(
                    value, bytes,
                    "{name}: step {} answered other values",
                    s.step
                );
                assert_eq!(noise_variance.to_bits(), s.answer.noise_variance.to_bits());
                let sent = s.answer.masked.as_ref().map(|m| {
                    m.steps
                        .iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect::<Vec<u8>>()
                });
                assert_eq!(masked, sent, "{name}: step {} masked share", s.step);
                assert_eq!(grid, s.answer.masked.as_ref().map(|m| m.grid));
                received += 1;
            }
        }
        assert_eq!(received, CHAINS * ITERATIONS, "{name}: answers on record");
        assert_eq!(run_ids.len(), 1, "{name}: one sampling run");
        let run_id = run_ids.into_iter().next().unwrap();
        let in_ledger: i64 = db
            .query_row(
                "SELECT COUNT(*) FROM releases WHERE run_id = ?1",
                [&run_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            in_ledger as u64,
            CHAINS * ITERATIONS,
            "{name}: charged once each"
        );
        // The run's ε is that of its releases composed: the Gaussian mechanism at the grant's
        // noise multiplier, CHAINS × ITERATIONS times, at the party's δ, with the stated
        // reservation for exact discrete noise (`mechanism::accounting_budget`).
        let (budget, delta) = (p["epsilon"].as_f64().unwrap(), p["delta"].as_f64().unwrap());
        let (accounted, accounting_delta) = accounting_budget(budget, delta);
        let releases = [(
            (CHAINS * ITERATIONS) as f64,
            p["noise_multiplier"].as_f64().unwrap(),
        )];
        let expected = GaussianComposition::from_releases(&releases)
            .unwrap()
            .epsilon(accounting_delta)
            + (budget - accounted);
        let spent = p["epsilon_spent"].as_f64().unwrap();
        assert!(
            (spent - expected).abs() <= 1e-6 * expected,
            "{name}: ε {spent} vs {expected}"
        );
    }
    println!("kills (party, its releases by then): {kills:?}");
}
