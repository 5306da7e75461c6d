//! The coordinator killed outright (SIGKILL, as in a crash) at random points of a real run,
//! and carried on each time with `--resume`: the draws come out complete, what was written
//! before each kill is never changed, every party's steps are contiguous and each is charged
//! once, and no run is opened twice.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fedmcmc_party::config::PartyConfig;
use fedmcmc_system_tests::{bin, run, simulate, simulated_federation, start_run, write_run_config};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CHAINS: u64 = 2;
const ITERATIONS: u64 = 6000;
const WARMUP: u64 = 200;
/// Kills that must land while the coordinator is running.
const KILLS: usize = 20;

fn resume(command: &str, out: &Path) -> Child {
    Command::new(bin("coordinator"))
        .args([command, "--resume"])
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start coordinator --resume")
}

fn chain_files(out: &Path) -> Vec<PathBuf> {
    (1..=CHAINS)
        .map(|c| out.join(format!("chain-{c}.csv")))
        .collect()
}

/// Each chain file's text (empty while it does not exist).
fn snapshot(out: &Path) -> Vec<String> {
    chain_files(out)
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect()
}

/// Every file of `before` is the start of the same file in `after`.
fn unchanged(before: &[String], after: &[String], when: &str) {
    for (c, (b, a)) in before.iter().zip(after).enumerate() {
        assert!(
            a.starts_with(b.as_str()),
            "chain {}: what was written before {when} changed ({} bytes before, {} after)",
            c + 1,
            b.len(),
            a.len()
        );
    }
}

/// Kills `child` with SIGKILL after `delay` unless it ends first; true if the kill landed.
fn kill_after(mut child: Child, delay: Duration) -> bool {
    let deadline = Instant::now() + delay;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            assert!(
                status.success(),
                "the coordinator failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    true
}

/// Steps the coordinator has on record from party-1, over all its runs and chains.
fn recorded_steps(out: &Path) -> usize {
    std::fs::read_dir(out.join("checkpoint/parties/party-1"))
        .map(|d| {
            d.flatten()
                .filter(|f| f.file_name().to_string_lossy().contains(".chain-"))
                .map(|f| std::fs::read_to_string(f.path()).unwrap().lines().count())
                .sum()
        })
        .unwrap_or(0)
}

/// The post-warm-up rows of a chain file.
fn draw_rows(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("lp__"))
        .count()
}

/// Each (run, chain)'s steps in `ledger`: (run id, chain, fewest, most, count).
fn ledger_steps(ledger: &Path) -> Vec<(String, i64, i64, i64, i64)> {
    let db = rusqlite::Connection::open(ledger).unwrap();
    let mut q = db
        .prepare(
            "SELECT run_id, chain, MIN(step), MAX(step), COUNT(*) FROM releases GROUP BY run_id, chain",
        )
        .unwrap();
    q.query_map([], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

#[test]
fn a_coordinator_killed_at_random_points_and_resumed_loses_nothing_and_charges_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, _parties, configs) = simulated_federation(dir.path(), "50");
    let run_config = write_run_config(
        dir.path(),
        &dir.path().join("sim"),
        &_parties,
        ITERATIONS,
        Some(WARMUP),
    );
    let out = dir.path().join("run");
    let ledgers: Vec<PathBuf> = configs
        .iter()
        .map(|c| PartyConfig::load(c).unwrap().ledger)
        .collect();
    let runs_before: Vec<usize> = ledgers.iter().map(|l| ledger_steps(l).len()).collect();

    // Kill times from a fixed seed: some land while the coordinator starts or retraces,
    // most while it samples.
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut written = snapshot(&out);
    let mut landed = 0;
    let mut attempts = 0;
    let mut progressed = 0;
    while landed < KILLS {
        attempts += 1;
        assert!(attempts < 4 * KILLS, "the run ended after {landed} kills");
        let child = if attempts == 1 {
            start_run(&run_config, &out)
        } else {
            resume("run", &out)
        };
        let delay = Duration::from_millis(rng.random_range(30..400));
        if !kill_after(child, delay) {
            break;
        }
        landed += 1;
        let now = snapshot(&out);
        unchanged(&written, &now, &format!("kill {landed}"));
        let rows: Vec<usize> = now.iter().map(|t| draw_rows(t)).collect();
        eprintln!(
            "kill {landed} after {delay:?}: draw rows {rows:?}, steps recorded {}",
            recorded_steps(&out)
        );
        if now != written {
            progressed += 1;
        }
        written = now;
    }
    assert_eq!(
        landed, KILLS,
        "the run ended before {KILLS} kills; make it longer"
    );
    // Kills that all landed before the chains wrote anything would test nothing.
    assert!(
        progressed >= KILLS / 2,
        "only {progressed} kills came after new draws"
    );

    let result = resume("run", &out).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "the last resume failed: {stderr}");
    let last = snapshot(&out);
    unchanged(&written, &last, "the last resume");

    // Every draw is there.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for chain in summary["chains"].as_array().unwrap() {
        assert_eq!(chain["iterations"], ITERATIONS, "{chain}");
        assert_eq!(chain["status"], "completed", "{chain}");
    }
    for (c, text) in last.iter().enumerate() {
        assert_eq!(
            draw_rows(text) as u64,
            ITERATIONS - WARMUP,
            "chain {}",
            c + 1
        );
    }
    // Each party charged each step once: one more run than before, whose chains' steps run
    // 0, 1, … with no gap and no repeat, and whose closed charge counts exactly them.
    for p in summary["parties"].as_array().unwrap() {
        assert_eq!(p["releases"], CHAINS * ITERATIONS, "{p}");
    }
    for (ledger, before) in ledgers.iter().zip(&runs_before) {
        let steps = ledger_steps(ledger);
        assert_eq!(steps.len(), before + CHAINS as usize, "{steps:?}");
        let ours = &steps[..];
        let run_id = &ours
            .iter()
            .find(|s| s.4 == ITERATIONS as i64)
            .unwrap_or_else(|| panic!("no run with {ITERATIONS} steps per chain: {steps:?}"))
            .0;
        for chain in 0..CHAINS as i64 {
            let s = ours
                .iter()
                .find(|s| &s.0 == run_id && s.1 == chain)
                .unwrap();
            assert_eq!(
                (s.2, s.3, s.4),
                (0, ITERATIONS as i64 - 1, ITERATIONS as i64)
            );
        }
    }

    // The finished run cannot be resumed, and its directory takes no new run.
    let (ok, _, stderr) = run(Command::new(bin("coordinator"))
        .args(["run", "--resume"])
        .arg(&out));
    assert!(!ok && stderr.contains("nothing to resume"), "{stderr}");
    let (ok, _, stderr) = run(Command::new(bin("coordinator"))
        .args(["run", "--config"])
        .arg(&run_config)
        .arg("--out")
        .arg(&out));
    assert!(
        !ok && stderr.contains("holds the outputs of another run"),
        "{stderr}"
    );
}

#[test]
fn a_simulation_killed_mid_run_is_carried_on_with_its_parties_served_again() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    let iterations = "3000";
    let child = Command::new(bin("coordinator"))
        .args([
            "simulate",
            "--rows",
            "6000",
            "--chains",
            "2",
            "--seed",
            "3",
            "--iterations",
            iterations,
            "--tau",
            "0.5",
            "--epsilon",
            "50",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill it once the chains have written draws.
    let started = Instant::now();
    let mut child = Some(child);
    while snapshot(&out).iter().map(|t| draw_rows(t)).sum::<usize>() < 10 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no draws written"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        kill_after(child.take().unwrap(), Duration::ZERO),
        "it ended before the kill"
    );
    let written = snapshot(&out);

    // A new simulation may not take the directory; the resumed one carries on.
    let (ok, _, stderr) = simulate(&out, &[]);
    assert!(
        !ok && stderr.contains("already holds a simulation"),
        "{stderr}"
    );
    let (ok, _, stderr) = run(Command::new(bin("coordinator"))
        .args(["simulate", "--resume"])
        .arg(&out)
        .args(["--chains", "3"]));
    assert!(!ok && stderr.contains("give no other flag"), "{stderr}");
    let result = resume("simulate", &out).wait_with_output().unwrap();
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    unchanged(&written, &snapshot(&out), "the kill");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for p in summary["parties"].as_array().unwrap() {
        assert_eq!(p["releases"], 2 * 3000, "{p}");
    }
}
