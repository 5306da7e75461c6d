//! The run lifecycle on a party node in this process, over a ledger on disk: the idle lease,
//! the caps on open runs and chains, and closed runs folded into one aggregate charge that a
//! restart reads back unchanged.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fedmcmc_common::accountant::{Composition, MechanismKind, Release};
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::PartyNode;
use fedmcmc_party::budget::Budget;
use fedmcmc_party::budget::NoiseRequest::Tau;
use fedmcmc_party::config::{BudgetConfig, RunLimits};
use fedmcmc_party::error::PartyError;
use fedmcmc_party::ledger::Ledger;
use fedmcmc_party::node::Grant;
use fedmcmc_party::release::StepKey;
use fedmcmc_party::statistics::Query;
use support::{banana_party, open};

mod support;

const ROWS: usize = 500;
const DELTA: f64 = 1e-6;
const TH: [f64; 2] = [0.0, 3.0];
const PROP: [f64; 2] = [0.01, 2.99];

fn budget() -> Budget {
    Budget::new(BudgetConfig {
        epsilon: 10.0,
        delta: DELTA,
        accountant: Default::default(),
    })
    .unwrap()
}

/// A party over fixed rows with the ledger at `ledger` (opened, or reopened as after a
/// restart) under `limits`; and its model fingerprint.
fn party(ledger: &Path, limits: RunLimits) -> (PartyNode, String) {
    let (node, fp) = banana_party(ROWS, budget(), Ledger::open(ledger).unwrap());
    (node.with_limits(limits), fp)
}

async fn step(node: &PartyNode, run_id: &str, chain: u32, step: u64) -> Result<bool, PartyError> {
    let key = StepKey {
        run_id,
        chain,
        step,
    };
    let query = Query::LogLikRatio {
        theta: &TH,
        theta_proposed: &PROP,
    };
    Ok(node.step(&key, query).await?.replayed)
}

/// ε at the party's δ of Gaussian releases given as (count, noise multiplier).
fn epsilon_of(releases: &[(u64, f64)]) -> f64 {
    let releases = releases
        .iter()
        .filter(|(count, _)| *count > 0)
        .map(|&(count, noise_multiplier)| Release {
            mechanism: MechanismKind::Gaussian,
            noise_multiplier,
            count: count as f64,
        })
        .collect();
    budget().epsilon_of(&Composition::new(releases, Neighbours::Substitute).unwrap())
}

/// A party on a new ledger in a temporary directory, under `limits`; and the ledger's path,
/// to reopen it as after a restart.
fn fresh(limits: RunLimits) -> (tempfile::TempDir, PathBuf, PartyNode, String) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.sqlite");
    let (node, fp) = party(&ledger, limits);
    (dir, ledger, node, fp)
}

fn refusal(result: Result<impl std::fmt::Debug, PartyError>) -> PartyError {
    result.expect_err("a refusal")
}

/// A run without a step for longer than the lease is closed and charged what it released, not
/// its plan; a step renews the lease; a late step is told why the run was closed, after a
/// restart too, and a late CloseRun gets the answer the lease's close computed.
#[tokio::test]
async fn an_idle_run_is_closed_by_its_lease_and_charged_what_it_released() {
    let limits = RunLimits {
        lease_seconds: 5,
        ..RunLimits::default()
    };
    let (_dir, ledger, node, fp) = fresh(limits);
    let idle = open(&node, &fp, 1, 10, Tau(0.5)).await.unwrap();
    assert_eq!(idle.lease, Duration::from_secs(5));
    let busy = open(&node, &fp, 1, 10, Tau(0.5)).await.unwrap();
    for s in 0..3 {
        step(&node, &idle.run_id, 0, s).await.unwrap();
    }
    step(&node, &busy.run_id, 0, 0).await.unwrap();
    // The clock moves on before `before`: the idle run's last step is strictly earlier.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let before = Instant::now();
    step(&node, &busy.run_id, 0, 1).await.unwrap();

    // At `before` + lease the busy run has been idle for at most the lease: it stays open.
    let closed = node.close_idle_runs(before + limits.lease()).await.unwrap();
    assert_eq!(closed, vec![idle.run_id.clone()]);
    let s = idle.noise_multiplier;
    let expected = epsilon_of(&[(3, s), (10, busy.noise_multiplier)]);
    let d = node.describe();
    assert_eq!(d.open_runs, 1);
    assert!(
        (d.epsilon_committed / expected - 1.0).abs() < 1e-12,
        "{} vs {expected}",
        d.epsilon_committed
    );
    assert!(d.epsilon_committed < epsilon_of(&[(10, s), (10, busy.noise_multiplier)]));

    let said = format!("run {} was closed after 5 s idle", idle.run_id);
    let late = refusal(step(&node, &idle.run_id, 0, 3).await);
    assert!(
        matches!(late, PartyError::FailedPrecondition(_)),
        "{late:?}"
    );
    assert!(late.to_string().contains(&said), "{late}");
    let by_lease = node.close_run(&idle.run_id).await.unwrap();
    assert_eq!(by_lease.releases, 3);
    assert_eq!(by_lease.epsilon_committed, d.epsilon_committed);
    assert!(step(&node, &busy.run_id, 0, 2).await.is_ok());

    let committed = node.describe().epsilon_committed;
    drop(node);
    let (node, _) = party(&ledger, limits);
    assert_eq!(node.describe().epsilon_committed, committed);
    let late = refusal(step(&node, &idle.run_id, 0, 3).await);
    assert!(late.to_string().contains(&said), "{late}");
    assert_eq!(node.close_run(&idle.run_id).await.unwrap(), by_lease);
    // The open run's lease starts afresh at start-up: a sweep at once closes nothing.
    assert!(
        node.close_idle_runs(Instant::now())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(node.describe().open_runs, 1);
}

/// OpenRun past `max_open_runs` or with more than `max_chains` chains is refused with
/// RESOURCE_EXHAUSTED naming the cap, and reserves nothing; closing a run makes room.
#[tokio::test]
async fn open_runs_and_chains_are_capped() {
    let limits = RunLimits {
        max_open_runs: 2,
        max_chains: 4,
        ..RunLimits::default()
    };
    let (_dir, _, node, fp) = fresh(limits);
    let capped = |result: Result<Grant, PartyError>, cap: &str| {
        let err = refusal(result);
        assert!(matches!(err, PartyError::BudgetExhausted(_)), "{err:?}");
        assert!(err.to_string().contains(cap), "{err}");
    };
    capped(
        open(&node, &fp, 5, 1, Tau(0.5)).await,
        "at most 4 chains per run (max_chains)",
    );
    let first = open(&node, &fp, 4, 1, Tau(0.5)).await.unwrap();
    open(&node, &fp, 1, 1, Tau(0.5)).await.unwrap();
    let committed = node.describe().epsilon_committed;
    capped(
        open(&node, &fp, 1, 1, Tau(0.5)).await,
        "at most 2 open runs (max_open_runs)",
    );
    assert_eq!(node.describe().epsilon_committed, committed);
    assert_eq!(node.describe().open_runs, 2);
    node.close_run(&first.run_id).await.unwrap();
    open(&node, &fp, 1, 1, Tau(0.5)).await.unwrap();
}

/// Many closed runs at two noise levels, and one open run: ε committed is what composing
/// them run by run gives, and a restart (closed runs read back aggregated) reproduces it
/// exactly. Closed runs are remembered as closed, open runs resume where their chains were.
#[tokio::test]
async fn closed_runs_compose_as_before_and_a_restart_reads_them_back_unchanged() {
    let (_dir, ledger, node, fp) = fresh(RunLimits::default());
    let mut per_run = Vec::new();
    let mut closed_ids = Vec::new();
    for i in 0..60u64 {
        let tau = if i % 3 == 0 { 0.8 } else { 0.5 };
        let grant = open(&node, &fp, 2, 3, Tau(tau)).await.unwrap();
        let released = i % 4;
        for s in 0..released {
            step(&node, &grant.run_id, (s % 2) as u32, s / 2)
                .await
                .unwrap();
        }
        assert_eq!(
            node.close_run(&grant.run_id).await.unwrap().releases,
            released
        );
        per_run.push((released, grant.noise_multiplier));
        closed_ids.push(grant.run_id);
    }
    let open_run = open(&node, &fp, 3, 4, Tau(0.6)).await.unwrap();
    step(&node, &open_run.run_id, 0, 0).await.unwrap();
    step(&node, &open_run.run_id, 0, 1).await.unwrap();
    step(&node, &open_run.run_id, 2, 0).await.unwrap();
    per_run.push((12, open_run.noise_multiplier));

    let before = node.describe();
    let run_by_run = epsilon_of(&per_run);
    assert!(
        (before.epsilon_committed / run_by_run - 1.0).abs() < 1e-9,
        "{} vs {run_by_run}",
        before.epsilon_committed
    );
    drop(node);

    let (node, _) = party(&ledger, RunLimits::default());
    let after = node.describe();
    assert_eq!(after.epsilon_committed, before.epsilon_committed);
    assert_eq!(after.mu_remaining, before.mu_remaining);
    assert_eq!(after.open_runs, 1);
    for id in [&closed_ids[0], &closed_ids[59]] {
        let err = refusal(step(&node, id, 0, 0).await);
        assert!(matches!(err, PartyError::FailedPrecondition(_)), "{err:?}");
        assert!(
            err.to_string().contains(&format!("run {id} is closed")),
            "{err}"
        );
    }
    let unknown = refusal(step(&node, "00112233445566778899aabbccddeeff", 0, 0).await);
    assert!(matches!(unknown, PartyError::NotFound(_)), "{unknown:?}");
    // Each chain of the open run resumes at its own next step; its last answer is replayed.
    assert!(step(&node, &open_run.run_id, 0, 1).await.unwrap());
    assert!(!step(&node, &open_run.run_id, 0, 2).await.unwrap());
    assert!(!step(&node, &open_run.run_id, 1, 0).await.unwrap());
    assert!(matches!(
        refusal(step(&node, &open_run.run_id, 2, 2).await),
        PartyError::FailedPrecondition(_)
    ));
    assert!(!step(&node, &open_run.run_id, 2, 1).await.unwrap());
    // Three releases before the restart, three fresh ones after (the replay is not charged).
    let closed = node.close_run(&open_run.run_id).await.unwrap();
    assert_eq!(closed.releases, 6);
    // A repeated CloseRun (its first answer lost, or a resumed coordinator's) gets the same
    // answer and charges nothing more; a step after it is still refused.
    let committed = node.describe().epsilon_committed;
    assert_eq!(node.close_run(&open_run.run_id).await.unwrap(), closed);
    assert_eq!(node.describe().epsilon_committed, committed);
    assert!(matches!(
        refusal(step(&node, &open_run.run_id, 0, 3).await),
        PartyError::FailedPrecondition(_)
    ));
}

/// Resident set size of this process, from /proc (Linux).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}

/// 3 000 attempted OpenRuns of 1 024 chains × 1 step at τ = 1e9 (issue 9's load), under
/// the default caps and under `max_chains = 1024`, each granted run answering one step and
/// then closed at once (`close`) or left open: prints the party's RSS. Measures; asserts
/// nothing about time or size. Run one at a time (RSS is per process):
/// `cargo test -p fedmcmc-party --test runs -- --ignored --nocapture --exact tiny_runs_default_caps`
/// (likewise `tiny_runs_1024_chains_closed`, `tiny_runs_1024_chains_left_open`).
async fn tiny_runs(max_chains: u32, close: bool) {
    let limits = RunLimits {
        max_chains,
        ..RunLimits::default()
    };
    let (_dir, _, node, fp) = fresh(limits);
    let start = rss_mib();
    let (mut granted, mut refused) = (0, 0);
    for _ in 0..3000 {
        match open(&node, &fp, 1024, 1, Tau(1e9)).await {
            Ok(g) => {
                granted += 1;
                step(&node, &g.run_id, 0, 0).await.unwrap();
                if close {
                    node.close_run(&g.run_id).await.unwrap();
                }
            }
            Err(_) => refused += 1,
        }
    }
    println!(
        "max_chains {max_chains}, close {close}: {granted} granted, {refused} refused; \
         RSS {start:.1} MiB → {:.1} MiB; ε committed {:.3e}",
        rss_mib(),
        node.describe().epsilon_committed
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn tiny_runs_default_caps() {
    tiny_runs(RunLimits::default().max_chains, true).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn tiny_runs_1024_chains_closed() {
    tiny_runs(1024, true).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn tiny_runs_1024_chains_left_open() {
    tiny_runs(1024, false).await;
}

/// Start-up (Ledger::open + PartyNode::new) over a ledger holding 10 000 closed runs of
/// 1 024 chains with one release each, and one open run. Prints the times:
/// `cargo test -p fedmcmc-party --test runs -- --ignored --nocapture start_up`.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn start_up_with_10000_closed_runs() {
    let limits = RunLimits {
        max_chains: 1024,
        ..RunLimits::default()
    };
    let (_dir, ledger, node, fp) = fresh(limits);
    let fill = Instant::now();
    for _ in 0..10_000 {
        let g = open(&node, &fp, 1024, 1, Tau(1e9)).await.unwrap();
        step(&node, &g.run_id, 0, 0).await.unwrap();
        node.close_run(&g.run_id).await.unwrap();
    }
    let g = open(&node, &fp, 1024, 1, Tau(1e9)).await.unwrap();
    step(&node, &g.run_id, 7, 0).await.unwrap();
    let committed = node.describe().epsilon_committed;
    println!("filled 10 000 closed runs in {:.1?}", fill.elapsed());
    drop(node);
    for _ in 0..3 {
        let start = Instant::now();
        let (node, _) = party(&ledger, limits);
        let took = start.elapsed();
        assert_eq!(node.describe().epsilon_committed, committed);
        println!(
            "start-up with 10 000 closed runs: {took:.3?} (incl. loading {ROWS} rows); RSS {:.1} MiB",
            rss_mib()
        );
    }
}

/// A repeated CloseRun gets the first answer from the ledger: after a restart, although a
/// later run changed the total committed, and for a run the lease closed, the answer its
/// close computed. An unknown run id is still refused.
#[tokio::test]
async fn a_repeated_close_after_a_restart_gets_the_first_answer() {
    let limits = RunLimits {
        lease_seconds: 5,
        ..RunLimits::default()
    };
    let (_dir, ledger, node, fp) = fresh(limits);
    let closed = open(&node, &fp, 1, 10, Tau(0.5)).await.unwrap();
    let leased = open(&node, &fp, 1, 10, Tau(0.7)).await.unwrap();
    for s in 0..3 {
        step(&node, &closed.run_id, 0, s).await.unwrap();
    }
    step(&node, &leased.run_id, 0, 0).await.unwrap();
    let first = node.close_run(&closed.run_id).await.unwrap();
    let after_lease = Instant::now() + limits.lease() + Duration::from_secs(1);
    assert_eq!(
        node.close_idle_runs(after_lease).await.unwrap(),
        vec![leased.run_id.clone()]
    );
    let (s, s_leased) = (closed.noise_multiplier, leased.noise_multiplier);
    let by_lease = node.close_run(&leased.run_id).await.unwrap();
    assert_eq!(by_lease.releases, 1);
    let near = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-12;
    assert!(
        near(by_lease.run_epsilon, epsilon_of(&[(1, s_leased)])),
        "{by_lease:?}"
    );
    assert!(
        near(
            by_lease.epsilon_committed,
            epsilon_of(&[(3, s), (1, s_leased)])
        ),
        "{by_lease:?}"
    );
    let later = open(&node, &fp, 1, 10, Tau(0.5)).await.unwrap();
    drop(node);

    let (node, _) = party(&ledger, limits);
    assert!(node.describe().epsilon_committed > first.epsilon_committed);
    assert_eq!(node.close_run(&closed.run_id).await.unwrap(), first);
    assert_eq!(node.close_run(&leased.run_id).await.unwrap(), by_lease);
    let said = format!("run {} was closed after 5 s idle", leased.run_id);
    let late = refusal(step(&node, &leased.run_id, 0, 1).await);
    assert!(late.to_string().contains(&said), "{late}");
    let unknown = refusal(node.close_run("00112233445566778899aabbccddeeff").await);
    assert!(matches!(unknown, PartyError::NotFound(_)), "{unknown:?}");
    assert_eq!(node.close_run(&later.run_id).await.unwrap().releases, 0);
}

/// A run whose close was committed but never answered (the party stopped between the two)
/// gets an answer made from the ledger at its next CloseRun: its releases, its ε, the total
/// committed then; recorded, so a CloseRun after another restart gets the same.
#[tokio::test]
async fn a_close_never_answered_is_answered_from_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let (node, fp) = party(&path, RunLimits::default());
    let grant = open(&node, &fp, 2, 10, Tau(0.5)).await.unwrap();
    for s in 0..2 {
        step(&node, &grant.run_id, 0, s).await.unwrap();
        step(&node, &grant.run_id, 1, s).await.unwrap();
    }
    drop(node);
    {
        let (ledger, _) = Ledger::open(&path).unwrap();
        ledger
            .close_run(&grant.run_id, fedmcmc_party::ledger::ClosedBy::CloseRun)
            .await
            .unwrap();
    }
    let (node, _) = party(&path, RunLimits::default());
    let answer = node.close_run(&grant.run_id).await.unwrap();
    assert_eq!(answer.releases, 4);
    let expected = epsilon_of(&[(4, grant.noise_multiplier)]);
    assert!(
        (answer.run_epsilon / expected - 1.0).abs() < 1e-12,
        "{answer:?}"
    );
    assert_eq!(answer.epsilon_committed, node.describe().epsilon_committed);
    drop(node);
    let (node, _) = party(&path, RunLimits::default());
    assert_eq!(node.close_run(&grant.run_id).await.unwrap(), answer);
}
