//! Admission through the general accountant, on a party node in this process: what the node
//! composes from its runs (open runs their plan, closed runs what they released), and what
//! OpenRun costs under `best`.
use std::time::Instant;

use fedmcmc_common::accountant::{
    Cancel, Choice, Composition, GaussianComposition, MechanismKind, Release, max_mu,
    mu_per_release,
};
use fedmcmc_common::mechanism::accounting_budget;
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::PartyNode;
use fedmcmc_party::budget::{Budget, NoiseRequest};
use fedmcmc_party::config::BudgetConfig;
use fedmcmc_party::error::PartyError;
use fedmcmc_party::ledger::Ledger;
use fedmcmc_party::release::StepKey;
use fedmcmc_party::statistics::Query;
use support::{banana_party, open};

mod support;

const ROWS: usize = 2_000;
const EPSILON: f64 = 1.0;
const DELTA: f64 = 1e-6;

/// A party over a fixed simulated data set with an in-memory ledger.
fn party(accountant: &str) -> (PartyNode, String) {
    let budget = Budget::new(BudgetConfig {
        epsilon: EPSILON,
        delta: DELTA,
        accountant: accountant.parse().unwrap(),
    })
    .unwrap();
    banana_party(ROWS, budget, (Ledger::in_memory().unwrap(), Vec::new()))
}

/// τ at which `count` releases take `share` of the whole μ budget.
fn tau_for(count: u64, share: f64) -> f64 {
    (count as f64 / (2.0 * share * max_mu(EPSILON, DELTA).unwrap())).sqrt() / (ROWS as f64).sqrt()
}

/// Three prior runs: one closed after 3 of its 100 releases, two still open. Returns what
/// each is charged, as (count, multiplier).
async fn three_prior_runs(node: &PartyNode, fingerprint: &str) -> Vec<(f64, f64)> {
    let closed = open(
        node,
        fingerprint,
        1,
        100,
        NoiseRequest::Tau(tau_for(100, 0.3)),
    )
    .await
    .unwrap();
    for step in 0..3 {
        let key = StepKey {
            run_id: &closed.run_id,
            chain: 0,
            step,
        };
        let query = Query::LogLikRatio {
            theta: &[0.0, 3.0],
            theta_proposed: &[0.01, 2.99],
        };
        node.step(&key, query).await.unwrap();
    }
    assert_eq!(node.close_run(&closed.run_id).await.unwrap().releases, 3);
    let b = open(
        node,
        fingerprint,
        2,
        300,
        NoiseRequest::Tau(tau_for(600, 0.2)),
    )
    .await
    .unwrap();
    let c = open(
        node,
        fingerprint,
        1,
        500,
        NoiseRequest::Tau(tau_for(500, 0.15)),
    )
    .await
    .unwrap();
    vec![
        (3.0, closed.noise_multiplier),
        (600.0, b.noise_multiplier),
        (500.0, c.noise_multiplier),
    ]
}

/// Under `best`, the node's Describe and admission agree with the μ arithmetic it used
/// before: μ left = max μ − Σ count/(2s²) over what each run is charged, ε committed is the
/// analytic ε of that μ, and the releases that fit at a τ are ⌊μ left·2s²⌋ exactly.
#[tokio::test]
async fn a_party_charges_its_runs_as_the_mu_arithmetic_did() {
    let (node, fp) = party("best");
    let charged = three_prior_runs(&node, &fp).await;
    let committed_mu: f64 = charged.iter().map(|&(k, s)| k * mu_per_release(s)).sum();
    // The accountant is asked at (ε, δ) less the exact-noise reservation r, which the
    // party's ε committed then includes.
    let (eps, delta) = accounting_budget(EPSILON, DELTA);
    let r = EPSILON - eps;
    let left = max_mu(eps, delta).unwrap() - committed_mu;

    let d = node.describe();
    assert!(
        (d.mu_remaining / left - 1.0).abs() < 1e-12,
        "{} vs {left}",
        d.mu_remaining
    );
    let epsilon = GaussianComposition::from_mu(committed_mu)
        .unwrap()
        .epsilon(delta)
        + r;
    assert!(
        (d.epsilon_committed / epsilon - 1.0).abs() < 1e-12,
        "{} vs {epsilon}",
        d.epsilon_committed
    );

    // A plan that needs more than is left: refused, naming the count that fits.
    let tau = tau_for(1000, 0.5);
    let s = tau * (ROWS as f64).sqrt();
    let fit = (left / mu_per_release(s)).floor() as u64;
    let err = open(&node, &fp, 1, fit + 1, NoiseRequest::Tau(tau))
        .await
        .unwrap_err();
    assert!(matches!(err, PartyError::BudgetExhausted(_)), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("at most {fit} more releases fit at that τ")),
        "{err}"
    );
    let grant = open(&node, &fp, 1, fit, NoiseRequest::Tau(tau))
        .await
        .unwrap();
    assert_eq!(grant.noise_multiplier, s);
    let all = GaussianComposition::from_mu(committed_mu + fit as f64 * mu_per_release(s))
        .unwrap()
        .epsilon(delta)
        + r;
    assert!((grant.epsilon_committed / all - 1.0).abs() < 1e-12);
}

/// zCDP is looser than the analytic curve `best` answers with: from the same budget and runs
/// a zcdp party admits fewer releases at the same τ.
#[tokio::test]
async fn a_zcdp_party_admits_fewer_releases_than_a_best_one() {
    let (best, fp) = party("best");
    let (zcdp, _) = party("zcdp");
    let tau = tau_for(1000, 0.5);
    // The most a best party admits at τ: one more is refused.
    let err = open(&best, &fp, 1, 1 << 40, NoiseRequest::Tau(tau))
        .await
        .unwrap_err()
        .to_string();
    let fit = |err: &str| -> u64 {
        let (_, rest) = err.split_once("at most ").expect(err);
        rest.split(' ').next().unwrap().parse().unwrap()
    };
    let k_best = fit(&err);
    let err = open(&zcdp, &fp, 1, k_best, NoiseRequest::Tau(tau))
        .await
        .unwrap_err()
        .to_string();
    let k_zcdp = fit(&err);
    assert!(k_zcdp < k_best, "zcdp {k_zcdp}, best {k_best}");
    assert!(
        open(&best, &fp, 1, k_best, NoiseRequest::Tau(tau))
            .await
            .is_ok()
    );
    assert!(
        open(&zcdp, &fp, 1, k_zcdp, NoiseRequest::Tau(tau))
            .await
            .is_ok()
    );
    assert!(zcdp.describe().epsilon_committed <= EPSILON);
}

/// OpenRun latency: a party with 3 prior runs admits a calibrated plan of 4 × 1000
/// releases, once per accountant; then each method's calibration alone on the same runs, to
/// show which dominates `best`. Prints only. Run in a release build:
/// `cargo test --release -p fedmcmc-party --test admission -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn open_run_latency() {
    for accountant in ["analytic", "zcdp", "rdp", "pld", "best"] {
        let (node, fp) = party(accountant);
        let charged = three_prior_runs(&node, &fp).await;
        let start = Instant::now();
        let d = node.describe();
        let describe = start.elapsed();
        let start = Instant::now();
        let grant = open(&node, &fp, 4, 1000, NoiseRequest::Calibrate).await;
        let calibrate = start.elapsed();
        let grant = grant.unwrap();
        // The same plan at a given τ that fits, on a party with the same prior runs.
        let (other, _) = party(accountant);
        three_prior_runs(&other, &fp).await;
        let start = Instant::now();
        let admitted = open(&other, &fp, 4, 1000, NoiseRequest::Tau(tau_for(4000, 0.2))).await;
        let admission = start.elapsed();
        admitted.unwrap();
        // Everything is now committed: a further plan at τ is refused, with the count that fits.
        let start = Instant::now();
        let refused = open(&node, &fp, 1, 10, NoiseRequest::Tau(grant.tau)).await;
        let refusal = start.elapsed();
        assert!(refused.is_err());
        println!(
            "{accountant:>8}: OpenRun(calibrate 4×1000) {calibrate:>10.3?} → s = {:.6}, ε = {:.6}; \
             OpenRun(τ, 4×1000) {admission:>10.3?}; refused OpenRun(τ) {refusal:>10.3?}; \
             Describe {describe:>10.3?} (ε committed {:.4})",
            grant.noise_multiplier, grant.epsilon_committed, d.epsilon_committed,
        );
        if accountant == "best" {
            let prefix = Composition::new(
                charged
                    .iter()
                    .map(|&(count, noise_multiplier)| Release {
                        mechanism: MechanismKind::Gaussian,
                        noise_multiplier,
                        count,
                    })
                    .collect(),
                Neighbours::Substitute,
            )
            .unwrap();
            for method in ["analytic", "zcdp", "rdp", "pld"] {
                let choice: Choice = method.parse().unwrap();
                let start = Instant::now();
                let answer = choice
                    .calibrate(
                        &prefix,
                        MechanismKind::Gaussian,
                        4000,
                        (EPSILON, DELTA),
                        &Cancel::new(),
                    )
                    .unwrap();
                println!(
                    "   best's {method:>8} candidate: calibrate {:>10.3?} → s = {:.6}",
                    start.elapsed(),
                    answer.estimate.value
                );
            }
        }
    }
}

/// A party asked to stop refuses the plan it would calibrate, at once and with nothing
/// reserved, whichever accountant it uses: after one run is open (so the calibration must
/// search rather than use the closed form), a calibrated plan is refused with a sentence
/// saying why, the committed ε is unchanged, and a plan at a given τ (no search) still opens.
#[tokio::test]
async fn a_stopping_party_refuses_the_plan_it_calibrates_and_reserves_nothing() {
    for accountant in ["best", "pld", "rdp"] {
        let (node, fp) = party(accountant);
        open(&node, &fp, 1, 100, NoiseRequest::Tau(tau_for(100, 0.3)))
            .await
            .unwrap();
        node.calibrations().cancel();
        let before = node.describe().epsilon_committed;
        let err = open(&node, &fp, 1, 1000, NoiseRequest::Calibrate)
            .await
            .unwrap_err();
        assert!(matches!(err, PartyError::FailedPrecondition(_)), "{err}");
        assert!(
            err.to_string().contains("the party is stopping"),
            "{accountant}: {err}"
        );
        assert_eq!(node.describe().epsilon_committed, before, "{accountant}");
        open(&node, &fp, 1, 10, NoiseRequest::Tau(tau_for(10, 0.1)))
            .await
            .unwrap();
    }
}
