//! Ctrl-C on a real run: `coordinator run` against `party serve` processes with durable
//! ledgers, interrupted mid-run. No reservation may outlive it: every party must be charged
//! exactly for the releases its ledger records, not for the plan it reserved.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use fedmcmc_common::accountant::{Composition, MechanismKind, Release, StatedError};
use fedmcmc_common::mechanism::accounting_budget;
use fedmcmc_party::config::PartyConfig;
use fedmcmc_system_tests::{
    PartyProcess, bin, describe_as, simulated_federation, write_run_config,
};

/// Iterations per chain: the first progress line comes at a tenth of them, leaving the other
/// nine tenths (seconds over loopback gRPC) for the signal to arrive mid-run.
const ITERATIONS: u64 = 5000;
const WARMUP: u64 = 100;

/// Only a guard against a hung process, so that a failure ends the test; nothing is
/// asserted about how long anything takes.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// A `coordinator run` whose stderr lines arrive on a channel as they are written.
struct Coordinator {
    child: Child,
    lines: Receiver<String>,
    stderr: String,
}

impl Coordinator {
    fn start(config: &Path, out: &Path) -> Coordinator {
        let mut child = Command::new(bin("coordinator"))
            .args(["run", "--config"])
            .arg(config)
            .arg("--out")
            .arg(out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start coordinator");
        let stderr = child.stderr.take().expect("coordinator stderr");
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Coordinator {
            child,
            lines,
            stderr: String::new(),
        }
    }

    /// The next stderr line; `None` once the process has closed its stderr.
    fn next_line(&mut self) -> Option<String> {
        match self.lines.recv_timeout(HANG_GUARD) {
            Ok(line) => {
                self.stderr += &line;
                self.stderr.push('\n');
                Some(line)
            }
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!("the coordinator hangs:\n{}", self.stderr),
        }
    }

    /// Reads stderr up to a line containing `what`.
    fn wait_for(&mut self, what: &str) {
        while let Some(line) = self.next_line() {
            if line.contains(what) {
                return;
            }
        }
        panic!(
            "the coordinator ended without printing {what:?}:\n{}",
            self.stderr
        );
    }

    fn signal(&self, signal: libc::c_int) {
        send(self.child.id(), signal);
    }

    /// Reads stderr to its end and returns the exit code (`None` if killed by a signal).
    fn exit(mut self) -> (Option<i32>, String) {
        while self.next_line().is_some() {}
        let status = self.child.wait().expect("wait for the coordinator");
        (status.code(), self.stderr)
    }
}

fn send(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) only sends a signal; the pid is a child this test started.
    let sent = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(sent, 0, "kill({pid}, {signal}) failed");
}

/// One run as the party's ledger file records it.
struct LedgerRun {
    run_id: String,
    noise_multiplier: f64,
    planned: u64,
    /// Rows in `releases`: the answers that left the party.
    released: u64,
}

/// Every run in the ledger, oldest first, with its release rows counted.
fn ledger_runs(path: &Path) -> Vec<LedgerRun> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT run_id, terms, \
             (SELECT COUNT(*) FROM releases WHERE releases.run_id = runs.run_id) \
             FROM runs ORDER BY rowid",
        )
        .unwrap();
    stmt.query_map([], |row| {
        let run_id: String = row.get(0)?;
        let terms: String = row.get(1)?;
        let released: i64 = row.get(2)?;
        let terms: serde_json::Value = serde_json::from_str(&terms).unwrap();
        Ok(LedgerRun {
            run_id,
            noise_multiplier: terms["noise_multiplier"].as_f64().unwrap(),
            planned: terms["planned_releases"].as_u64().unwrap(),
            released: u64::try_from(released).unwrap(),
        })
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// ε at the party's δ of Gaussian release groups (run id, multiplier, count), composed as
/// the party composes its runs: in run-id order, under its neighbour relation, by its
/// configured accountant. Returns ε
/// and how far two computations of it may differ: the PLD's stated discretisation error in
/// ε; for the exact or bounding accountants, rounding only (the same releases give the same
/// curve; the analytic one's stated 1.4e-12 relative error in δ moves ε far less than 1e-9).
fn epsilon_of<'a>(
    config: &PartyConfig,
    groups: impl Iterator<Item = (&'a str, f64, u64)>,
) -> (f64, f64) {
    let mut groups: Vec<_> = groups.filter(|&(_, _, count)| count > 0).collect();
    groups.sort_by_key(|&(run_id, _, _)| run_id);
    let releases = groups
        .into_iter()
        .map(|(_, noise_multiplier, count)| Release {
            mechanism: MechanismKind::Gaussian,
            noise_multiplier,
            count: count as f64,
        })
        .collect();
    let composition = Composition::new(releases, config.neighbours).unwrap();
    // The party asks its accountant at (ε, δ) less its exact-noise reservation and states
    // ε with the reservation added back (`fedmcmc_common::mechanism`).
    let (eps, delta) = accounting_budget(config.budget.epsilon, config.budget.delta);
    let answer = config
        .budget
        .accountant
        .epsilon(&composition, delta)
        .unwrap();
    let reserved = if composition.releases().is_empty() {
        0.0
    } else {
        config.budget.epsilon - eps
    };
    let epsilon = answer.estimate.value + reserved;
    let tolerance = match answer.estimate.error {
        StatedError::Discretisation {
            epsilon_additive, ..
        } => epsilon_additive,
        StatedError::Exact { .. } | StatedError::UpperBound => 1e-9 * epsilon.max(1.0),
    };
    (epsilon, tolerance)
}

/// Checks that every party is charged exactly for the releases in its ledger, with no run
/// left open, and that the last run (the interrupted one) released less than it planned:
/// the charge is not the plan's.
fn charged_for_what_was_released(parties: &[PartyProcess], configs: &[PathBuf], what: &str) {
    for (p, path) in parties.iter().zip(configs) {
        let config = PartyConfig::load(path).unwrap();
        let d = describe_as(p.addr, &config, "coordinator").unwrap();
        let (committed, open_runs) = (d.epsilon_committed, d.open_runs);
        assert_eq!(open_runs, 0, "{what}: {} keeps a run open", config.name);
        let runs = ledger_runs(&config.ledger);
        let (released, tolerance) = epsilon_of(
            &config,
            runs.iter()
                .map(|r| (r.run_id.as_str(), r.noise_multiplier, r.released)),
        );
        assert!(
            (committed - released).abs() <= tolerance,
            "{what}: {} has committed ε = {committed}, its ledger's releases are ε = {released} (± {tolerance})",
            config.name
        );
        let last = runs.len() - 1;
        let (planned, _) = epsilon_of(
            &config,
            runs.iter().enumerate().map(|(i, r)| {
                let count = if i == last { r.planned } else { r.released };
                (r.run_id.as_str(), r.noise_multiplier, count)
            }),
        );
        assert!(
            planned > committed + tolerance,
            "{what}: {} was charged ε = {committed}, as much as the whole plan ({planned})",
            config.name
        );
    }
}

/// Starts a run of `ITERATIONS`, sends `signal` once the chains are a tenth of the way, and
/// checks the exit code, the partial output and every party's charge.
fn interrupt(
    dir: &Path,
    sim: &Path,
    parties: &[PartyProcess],
    configs: &[PathBuf],
    signal: libc::c_int,
    (name, code): (&str, i32),
) {
    let out = dir.join(format!("run-{name}"));
    let config = write_run_config(dir, sim, parties, ITERATIONS, Some(WARMUP));
    let mut coordinator = Coordinator::start(&config, &out);
    coordinator.wait_for("fedmcmc_coordinator::progress");
    coordinator.signal(signal);
    let (exit, stderr) = coordinator.exit();
    assert_eq!(exit, Some(code), "{stderr}");
    assert!(
        stderr.contains(&format!("interrupted by {name}"))
            && stderr.contains(&out.display().to_string()),
        "{stderr}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["partial"], true, "{summary}");
    assert_eq!(summary["stopped_by"], name);
    for (c, chain) in summary["chains"].as_array().unwrap().iter().enumerate() {
        let iterations = chain["iterations"].as_u64().unwrap();
        assert!(iterations < ITERATIONS, "{chain}");
        assert_eq!(chain["status"], format!("stopped by {name}"));
        let csv = std::fs::read_to_string(out.join(format!("chain-{}.csv", c + 1))).unwrap();
        let draws = csv.lines().filter(|l| !l.starts_with('#')).count() - 1;
        assert_eq!(
            draws as u64,
            iterations.saturating_sub(WARMUP),
            "chain {}",
            c + 1
        );
    }
    // What the coordinator reports matches the ledgers.
    for (p, path) in summary["parties"].as_array().unwrap().iter().zip(configs) {
        let config = PartyConfig::load(path).unwrap();
        let last = ledger_runs(&config.ledger).pop().unwrap();
        assert_eq!(p["releases"], last.released, "{}", config.name);
        assert!(last.released < last.planned);
    }
    charged_for_what_was_released(parties, configs, name);
}

#[test]
fn an_interrupted_run_is_charged_only_for_its_releases() {
    let dir = tempfile::tempdir().unwrap();
    // Durable ledgers with a run already in them, and a budget for several more.
    let (sim, parties, configs) = simulated_federation(dir.path(), "200");
    interrupt(
        dir.path(),
        &sim,
        &parties,
        &configs,
        libc::SIGINT,
        ("SIGINT", 130),
    );
    interrupt(
        dir.path(),
        &sim,
        &parties,
        &configs,
        libc::SIGTERM,
        ("SIGTERM", 143),
    );

    // A second signal exits at once, even while a step waits on a party that does not
    // answer (stopped with SIGSTOP): the first signal alone would wait for that step.
    let out = dir.path().join("run-twice");
    let config = write_run_config(dir.path(), &sim, &parties, ITERATIONS, Some(WARMUP));
    let mut coordinator = Coordinator::start(&config, &out);
    coordinator.wait_for("fedmcmc_coordinator::progress");
    let frozen = parties[0].child.id();
    send(frozen, libc::SIGSTOP);
    coordinator.signal(libc::SIGINT);
    coordinator.wait_for("a second signal exits at once");
    coordinator.signal(libc::SIGINT);
    let (exit, stderr) = coordinator.exit();
    send(frozen, libc::SIGCONT);
    assert_eq!(exit, Some(130), "{stderr}");
    assert!(stderr.contains("exiting at once"), "{stderr}");
    assert!(
        !out.join("summary.json").exists(),
        "the chains never finished their step, so nothing was written"
    );
}
