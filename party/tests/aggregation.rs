//! Secure aggregation through the party's release path: three in-process parties with
//! certificates from one CA open a run under a session, join it with every announcement, and
//! answer masked shares; only the sum decodes, to the pooled statistic with one noise.
use std::sync::Arc;

use fedmcmc_common::accountant::Choice;
use fedmcmc_common::clip;
use fedmcmc_common::data::Columns;
use fedmcmc_common::mechanism::grid_step;
use fedmcmc_common::models::{Model, ModelSpec};
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::PartyNode;
use fedmcmc_party::aggregation::Identity;
use fedmcmc_party::budget::{Budget, NoiseRequest};
use fedmcmc_party::config::{BudgetConfig, RunLimits};
use fedmcmc_party::error::PartyError;
use fedmcmc_party::ledger::Ledger;
use fedmcmc_party::node::{Grant, Plan};
use fedmcmc_party::release::StepKey;
use fedmcmc_party::secure::{Announcement, KeyPair, Terms, decode_sum};
use fedmcmc_party::statistics::Query;
use fedmcmc_party::tls;
use rand::SeedableRng;

const NAMES: [&str; 3] = ["a.party", "b.party", "c.party"];
const ROWS: usize = 3_000;
const THETA: [f64; 2] = [0.0, 3.0];
const PROPOSED: [f64; 2] = [0.02, 2.97];

struct Parties {
    _dir: tempfile::TempDir,
    nodes: Vec<PartyNode>,
    model: Arc<dyn Model>,
    data: Columns,
}

/// Three parties over a flat banana's rows split evenly, each with its certificate from one
/// CA, a generous budget and an in-memory ledger.
fn parties(limits: RunLimits) -> Parties {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = NAMES.iter().map(|s| s.to_string()).collect();
    tls::issue(dir.path(), &names).unwrap();
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
    let data = model.simulate(&spec.true_theta(), ROWS, &mut rng);
    let nodes = data
        .split(NAMES.len())
        .into_iter()
        .zip(NAMES)
        .map(|(rows, name)| {
            let budget = Budget::new(BudgetConfig {
                epsilon: 1e4,
                delta: 1e-5,
                accountant: Choice::default(),
            })
            .unwrap();
            let identity = Identity::load(&tls::files_for(dir.path(), name)).unwrap();
            PartyNode::new(
                name.into(),
                Arc::clone(&model),
                rows,
                Neighbours::Substitute,
                budget,
                (Ledger::in_memory().unwrap(), Vec::new()),
            )
            .unwrap()
            .with_limits(limits)
            .with_identity(identity)
        })
        .collect();
    Parties {
        _dir: dir,
        nodes,
        model,
        data,
    }
}

fn terms(threshold: u32) -> Terms {
    Terms::new(
        [3; 32],
        NAMES.iter().map(|s| s.to_string()).collect(),
        threshold,
    )
    .unwrap()
}

/// A secure full-penalty plan; each party's τ is scaled by √(N/nᵢ) so that every
/// multiplier is τ·√N over the pooled N rows, as the coordinator asks.
fn plan(node: &PartyNode, steps: u64, tau: f64, threshold: u32) -> Plan {
    let n = node.describe().rows as f64;
    Plan {
        aggregation: Some(terms(threshold)),
        ..Plan::full_penalty(
            1,
            steps,
            2.0,
            NoiseRequest::Tau(tau * (ROWS as f64 / n).sqrt()),
        )
    }
}

async fn open_all(p: &Parties, steps: u64, tau: f64, threshold: u32) -> Vec<Grant> {
    let mut grants = Vec::new();
    for node in &p.nodes {
        let g = node
            .open_run(plan(node, steps, tau, threshold), &p.model.fingerprint())
            .await
            .unwrap();
        grants.push(g);
    }
    grants
}

fn announcements(grants: &[Grant]) -> Vec<Announcement> {
    grants
        .iter()
        .map(|g| {
            g.announcement
                .clone()
                .expect("a secure grant announces a key")
        })
        .collect()
}

async fn step(
    node: &PartyNode,
    grant: &Grant,
    step: u64,
) -> Result<fedmcmc_party::release::Contribution, PartyError> {
    let key = StepKey {
        run_id: &grant.run_id,
        chain: 0,
        step,
    };
    let query = Query::LogLikRatio {
        theta: &THETA,
        theta_proposed: &PROPOSED,
    };
    node.step(&key, query).await
}

/// T·Σ clip(r_x, b) over all the rows, straight from the per-row log-likelihood.
fn pooled_clipped_sum(model: &dyn Model, data: &Columns, b: f64) -> f64 {
    let t = model.temperature();
    let mut row = vec![0.0; data.d()];
    (0..data.n())
        .map(|i| {
            data.row_into(i, &mut row);
            let r = (model.log_lik_row(&PROPOSED, &row) - model.log_lik_row(&THETA, &row)) / t;
            t * r.clamp(-b, b)
        })
        .sum()
}

/// With t = 0 every party adds a third of the pooled noise: the decoded sums are the
/// pooled clipped sum plus noise of the pooled variance (s·(2·T·b + 2γ))² at s = τ·√N (mean
/// and variance within 5 of their standard errors over 3 000 steps), each party is charged
/// at that s, and a party's masked answer alone is uniform on the ring (its top bits).
#[tokio::test]
async fn the_shares_sum_to_the_pooled_statistic_with_one_noise() {
    const STEPS: u64 = 3_000;
    let tau = 0.05;
    let p = parties(RunLimits::default());
    let grants = open_all(&p, STEPS, tau, 0).await;
    let s = tau * (ROWS as f64).sqrt();
    for g in &grants {
        assert!((g.noise_multiplier / s - 1.0).abs() < 1e-12, "{g:?}");
    }
    let all = announcements(&grants);
    for (node, g) in p.nodes.iter().zip(&grants) {
        let m = node.join_aggregation(&g.run_id, all.clone()).await.unwrap();
        // The unit multiplier: s over the add/remove sensitivity, twice s under substitution.
        assert!((m / (2.0 * s) - 1.0).abs() < 1e-12, "{m}");
        // A repeated join with the same announcements gets the same answer.
        assert_eq!(
            node.join_aggregation(&g.run_id, all.clone()).await.unwrap(),
            m
        );
    }
    let b = clip::row_bound(2.0, &THETA, &PROPOSED);
    let t = p.model.temperature();
    let unit = t * b;
    let grid = grid_step(2.0 * s * unit / (NAMES.len() as f64).sqrt()).unwrap();
    let pooled_variance = (2.0 * s * (unit + grid)).powi(2);
    let exact = pooled_clipped_sum(p.model.as_ref(), &p.data, b);

    let (mut sums, mut top_bits) = (Vec::new(), [0u64; 3]);
    for k in 0..STEPS {
        let mut masked = Vec::new();
        let mut variance = 0.0;
        for (i, (node, g)) in p.nodes.iter().zip(&grants).enumerate() {
            let c = step(node, g, k).await.unwrap();
            assert!(c.value.is_empty(), "a secure answer carries no plain value");
            let m = c.masked.expect("a masked answer");
            assert_eq!(m.grid, grid, "every party rounds to the run's grid");
            top_bits[i] += (m.steps[0] >> 127) as u64;
            masked.push(m.steps);
            variance += c.noise_variance;
        }
        assert!((variance / pooled_variance - 1.0).abs() < 1e-12);
        let decoded = decode_sum(&masked).unwrap();
        sums.push(decoded[0] as f64 * grid);
    }
    let n = STEPS as f64;
    let mean = sums.iter().sum::<f64>() / n;
    let var = sums.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let z_mean = (mean - exact) / (pooled_variance / n).sqrt();
    let z_var = (var / pooled_variance - 1.0) / (2.0 / (n - 1.0)).sqrt();
    println!(
        "decoded sums: z(mean) = {z_mean:+.2}, z(variance) = {z_var:+.2}, top bits {top_bits:?}"
    );
    assert!(z_mean.abs() < 5.0 && z_var.abs() < 5.0);
    for ones in top_bits {
        let z = (ones as f64 - n / 2.0) / (n / 4.0).sqrt();
        assert!(z.abs() < 5.0, "top bit set {ones} times in {STEPS}");
    }
    // Each charged its releases at s = τ·√N (its grant), as if the rows were pooled.
    for (node, g) in p.nodes.iter().zip(&grants) {
        let closed = node.close_run(&g.run_id).await.unwrap();
        assert_eq!(closed.releases, STEPS);
    }
}

/// With t = 1 of 3 parties colluding, each adds half the pooled noise: the sum carries 3/2
/// of it, and each honest pair alone still carries all of it.
#[tokio::test]
async fn a_threshold_of_one_gives_each_party_half_the_noise() {
    let tau = 0.05;
    let p = parties(RunLimits::default());
    let grants = open_all(&p, 1, tau, 1).await;
    let all = announcements(&grants);
    for (node, g) in p.nodes.iter().zip(&grants) {
        node.join_aggregation(&g.run_id, all.clone()).await.unwrap();
    }
    let s = tau * (ROWS as f64).sqrt();
    let unit = p.model.temperature() * clip::row_bound(2.0, &THETA, &PROPOSED);
    let grid = grid_step(2.0 * s * unit / 2f64.sqrt()).unwrap();
    let pooled = (2.0 * s * (unit + grid)).powi(2);
    for (node, g) in p.nodes.iter().zip(&grants) {
        let c = step(node, g, 0).await.unwrap();
        assert!((c.noise_variance / (pooled / 2.0) - 1.0).abs() < 1e-12);
    }
}

/// A coordinator that relays its own key in place of party b's (b's signature kept) is
/// detected by every party that joins: each refuses, naming the substitution, and closes
/// its run, which answers no step after.
#[tokio::test]
async fn a_substituted_key_is_refused_and_closes_the_run() {
    let p = parties(RunLimits::default());
    let grants = open_all(&p, 5, 0.05, 0).await;
    let mut forged = announcements(&grants);
    forged[1].key = KeyPair::generate().unwrap().public();
    for (node, g) in p.nodes.iter().zip(&grants) {
        let err = node
            .join_aggregation(&g.run_id, forged.clone())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("substituted"), "{err}");
        let err = step(node, g, 0).await.unwrap_err().to_string();
        assert!(err.contains("closed"), "{err}");
    }
}

/// Refusals, each before anything is released: a step of a run not joined yet; a variant
/// whose noise depends on each party's rows; a threshold below the party's policy; a
/// party without a TLS identity; a roster that leaves the party out.
#[tokio::test]
async fn what_cannot_be_aggregated_securely_is_refused() {
    let p = parties(RunLimits {
        min_threshold: 1,
        ..RunLimits::default()
    });
    let node = &p.nodes[0];
    let fp = p.model.fingerprint();
    let err = node
        .open_run(plan(node, 5, 0.05, 0), &fp)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("at least 1 parties colluding"),
        "{err}"
    );

    let g = node.open_run(plan(node, 5, 0.05, 1), &fp).await.unwrap();
    let err = step(node, &g, 0).await.unwrap_err();
    assert!(err.to_string().contains("has not been joined"), "{err}");

    let minibatch = Plan {
        variant: fedmcmc_party::node::MINIBATCH_PENALTY.into(),
        batch_size: Some(100),
        ..plan(node, 5, 0.05, 1)
    };
    let err = node.open_run(minibatch, &fp).await.unwrap_err();
    assert!(matches!(err, PartyError::Unimplemented(_)), "{err}");
    assert!(err.to_string().contains("cannot share its noise"), "{err}");

    let outsider = Plan {
        aggregation: Some(
            Terms::new([3; 32], vec!["b.party".into(), "c.party".into()], 1).unwrap(),
        ),
        ..plan(node, 5, 0.05, 1)
    };
    let err = node.open_run(outsider, &fp).await.unwrap_err();
    assert!(err.to_string().contains("not in the run's roster"), "{err}");

    let spec = ModelSpec::flat_banana(2);
    let plaintext = PartyNode::new(
        "a.party".into(),
        spec.build().unwrap(),
        p.data.clone(),
        Neighbours::Substitute,
        Budget::new(BudgetConfig {
            epsilon: 10.0,
            delta: 1e-5,
            accountant: Choice::default(),
        })
        .unwrap(),
        (Ledger::in_memory().unwrap(), Vec::new()),
    )
    .unwrap();
    let err = plaintext
        .open_run(plan(&plaintext, 5, 0.05, 0), &fp)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("without TLS"), "{err}");
    assert_eq!(plaintext.describe().open_runs, 0);
}

/// A party restarted mid-run reads its session secret back from its ledger: its steps are
/// refused until the coordinator relays the announcements again, then it answers the next
/// step with masks that still cancel against the others'.
#[tokio::test]
async fn a_restarted_party_joins_again_and_its_masks_still_cancel() {
    let mut p = parties(RunLimits::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let budget = || {
        Budget::new(BudgetConfig {
            epsilon: 1e4,
            delta: 1e-5,
            accountant: Choice::default(),
        })
        .unwrap()
    };
    let rows = p.data.split(NAMES.len()).remove(0);
    let identity = || Identity::load(&tls::files_for(p._dir.path(), NAMES[0])).unwrap();
    let durable = |ledger| {
        PartyNode::new(
            NAMES[0].into(),
            Arc::clone(&p.model),
            rows.clone(),
            Neighbours::Substitute,
            budget(),
            ledger,
        )
        .unwrap()
        .with_identity(identity())
    };
    p.nodes[0] = durable(Ledger::open(&path).unwrap());
    let grants = open_all(&p, 4, 0.05, 0).await;
    let all = announcements(&grants);
    for (node, g) in p.nodes.iter().zip(&grants) {
        node.join_aggregation(&g.run_id, all.clone()).await.unwrap();
    }
    let sum_of = |answers: Vec<fedmcmc_party::release::Contribution>| {
        let masked: Vec<Vec<u128>> = answers
            .into_iter()
            .map(|c| c.masked.unwrap().steps)
            .collect();
        decode_sum(&masked).unwrap()[0]
    };
    let mut answers = Vec::new();
    for (node, g) in p.nodes.iter().zip(&grants) {
        answers.push(step(node, g, 0).await.unwrap());
    }
    let before = sum_of(answers);

    drop(std::mem::replace(
        &mut p.nodes[0],
        durable((Ledger::in_memory().unwrap(), Vec::new())),
    ));
    p.nodes[0] = durable(Ledger::open(&path).unwrap());
    let err = step(&p.nodes[0], &grants[0], 1).await.unwrap_err();
    assert!(err.to_string().contains("has not been joined"), "{err}");
    p.nodes[0]
        .join_aggregation(&grants[0].run_id, all.clone())
        .await
        .unwrap();
    let mut answers = Vec::new();
    for (node, g) in p.nodes.iter().zip(&grants) {
        answers.push(step(node, g, 1).await.unwrap());
    }
    let after = sum_of(answers);
    // Both sums are the same statistic plus noise of sd about 2·s·T·b/γ ≈ 2^30 grid steps:
    // masks that failed to cancel would leave a uniform 128-bit number.
    let spread = (after - before).unsigned_abs();
    assert!(spread < 1u128 << 40, "{before} then {after}");
}
