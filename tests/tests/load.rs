//! Load: two coordinators with 4 chains each sample against the same 3 `party serve`
//! processes (mutual TLS, durable ledgers) for a fixed time, then are interrupted. Afterwards
//! every party's ledger holds, for each coordinator's run, exactly the steps that
//! coordinator's chains completed: nothing answered went unrecorded, nothing recorded went
//! unanswered, and no run stays open. The test is bounded in time by [`LOAD`], not by the
//! number of iterations.
use std::collections::BTreeSet;
use std::time::Duration;

use fedmcmc_party::config::PartyConfig;
use fedmcmc_system_tests::{simulated_federation, start_run, write_run_config};

/// How long both coordinators sample; `FEDMCMC_LOAD_SECONDS` overrides it.
const LOAD: Duration = Duration::from_secs(60);

fn run_ids(ledger: &std::path::Path) -> BTreeSet<String> {
    let db = rusqlite::Connection::open(ledger).unwrap();
    let mut q = db.prepare("SELECT run_id FROM runs").unwrap();
    q.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// (releases recorded, closed) of one run.
fn recorded(ledger: &std::path::Path, run_id: &str) -> (u64, bool) {
    let db = rusqlite::Connection::open(ledger).unwrap();
    let releases: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM releases WHERE run_id = ?1",
            [run_id],
            |r| r.get(0),
        )
        .unwrap();
    let closed: i64 = db
        .query_row("SELECT closed FROM runs WHERE run_id = ?1", [run_id], |r| {
            r.get(0)
        })
        .unwrap();
    (releases as u64, closed != 0)
}

#[test]
fn two_coordinators_against_three_parties_every_ledger_matches_what_it_answered() {
    let load = std::env::var("FEDMCMC_LOAD_SECONDS")
        .ok()
        .map_or(LOAD, |s| Duration::from_secs(s.parse().unwrap()));
    let dir = tempfile::tempdir().unwrap();
    let (sim, parties, configs) = simulated_federation(dir.path(), "100000");
    let ledgers: Vec<_> = configs
        .iter()
        .map(|c| PartyConfig::load(c).unwrap().ledger)
        .collect();
    let before: Vec<_> = ledgers.iter().map(|l| run_ids(l)).collect();

    let coordinators: Vec<_> = (0..2)
        .map(|k| {
            let dir = dir.path().join(format!("coordinator-{k}"));
            std::fs::create_dir_all(&dir).unwrap();
            let config = write_run_config(&dir, &sim, &parties, 200_000, Some(100));
            let text = std::fs::read_to_string(&config).unwrap();
            let text = text
                .replace("chains = 2", "chains = 4")
                .replace("seed = 5", &format!("seed = {}", 11 + k));
            std::fs::write(&config, text).unwrap();
            let out = dir.join("out");
            (start_run(&config, &out), out)
        })
        .collect();
    std::thread::sleep(load);
    let mut finished = Vec::new();
    for (child, out) in coordinators {
        // SAFETY: kill(2) only sends a signal to a child this test started.
        assert_eq!(
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
            0
        );
        let result = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
        assert_eq!(result.status.code(), Some(130), "{stderr}");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let completed: u64 = summary["chains"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["iterations"].as_u64().unwrap())
            .sum();
        assert!(completed > 0, "{stderr}");
        finished.push(completed);
    }
    finished.sort();

    for (ledger, before) in ledgers.iter().zip(&before) {
        let new: Vec<String> = run_ids(ledger).difference(before).cloned().collect();
        assert_eq!(
            new.len(),
            2,
            "one run per coordinator in {}",
            ledger.display()
        );
        let mut counts: Vec<u64> = new
            .iter()
            .map(|run| {
                let (releases, closed) = recorded(ledger, run);
                assert!(closed, "run {run} left open in {}", ledger.display());
                releases
            })
            .collect();
        counts.sort();
        assert_eq!(
            counts,
            finished,
            "{}: the releases recorded per run against the steps the coordinators completed",
            ledger.display()
        );
    }
    println!(
        "{} s of load: the coordinators completed {finished:?} steps over 4 chains each",
        load.as_secs()
    );
}
