//! Iterations granted under secure aggregation at the same ε and τ (docs/design.md §6): each
//! party is protected by the honest shares, (P − t)/P of the sum's noise τ²·n·Δ², so its
//! multiplier is τ·√(n·(P − t)/P). At t = 0 the parties' admission grants exactly what one
//! party holding all n rows would (Räisä 2020, Alg. 2 at the pooled multiplier); at
//! t = P − 1 exactly what plain releases grant.
use fedmcmc_common::models::ModelSpec;
use fedmcmc_coordinator::federation::local::{identified, nodes};
use fedmcmc_coordinator::federation::{Federation, PartyHandle, secure};
use fedmcmc_party::PartyNode;
use fedmcmc_party::budget::NoiseRequest;
use fedmcmc_party::config::BudgetConfig;
use fedmcmc_party::node::Plan;
use fedmcmc_party::secure::Terms;
use rand::SeedableRng;

const ROWS: usize = 60_000;
const TAU: f64 = 0.1;

/// The most releases `node` admits at `tau` (one more is refused, naming the count).
async fn fit(node: &PartyNode, tau: f64, aggregation: Option<Terms>) -> u64 {
    let spec = ModelSpec::flat_banana(2);
    let plan = Plan {
        aggregation,
        ..Plan::full_penalty(1, 1 << 40, 2.0, NoiseRequest::Tau(tau))
    };
    let err = node
        .open_run(plan, &spec.build().unwrap().fingerprint())
        .await
        .unwrap_err()
        .to_string();
    let (_, rest) = err.split_once("at most ").expect(&err);
    rest.split(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn at_threshold_zero_the_parties_get_the_pooled_iterations() {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let data = model.simulate(
        &spec.true_theta(),
        ROWS,
        &mut rand_chacha::ChaCha8Rng::seed_from_u64(4),
    );
    let budget = BudgetConfig {
        epsilon: 2.0,
        delta: 1e-5,
        accountant: Default::default(),
    };
    let pooled_node = nodes(&spec, vec![data.clone()], budget, None).unwrap();
    let pooled = fit(&pooled_node[0].1, TAU, None).await;
    println!("ε = 2, δ = 1e-5, τ = {TAU}, n = {ROWS}: one party with every row: {pooled} releases");
    println!(
        "{:>3} {:>3} {:>12} {:>12} {:>14}",
        "P", "t", "secure", "plain", "secure/pooled"
    );
    for p in [2usize, 3, 5, 10] {
        let dir = tempfile::tempdir().unwrap();
        let parties = identified(
            nodes(&spec, data.split(p), budget, None).unwrap(),
            dir.path(),
        )
        .unwrap();
        let plain = fit(&parties[0].1, TAU, None).await;
        let federation = Federation::new(parties.clone());
        let infos = federation.describe().await.unwrap();
        let mut thresholds = vec![0, p as u32 / 2, p as u32 - 1];
        thresholds.dedup();
        for t in thresholds {
            let terms =
                Terms::new([9; 32], infos.iter().map(|i| i.name.clone()).collect(), t).unwrap();
            let tau = secure::tau_for(TAU, &infos[0], &infos, t);
            let granted = fit(&parties[0].1, tau, Some(terms)).await;
            println!(
                "{p:>3} {t:>3} {granted:>12} {plain:>12} {:>14.3}",
                granted as f64 / pooled as f64
            );
            if t == 0 {
                assert_eq!(granted, pooled, "P = {p}, t = 0");
            }
            if t == p as u32 - 1 {
                assert_eq!(granted, plain, "P = {p}, t = P − 1");
            }
        }
        // Admission only asked: nothing is open on any party.
        for (_, node) in &parties {
            assert_eq!(
                PartyHandle::describe(node).await.unwrap().epsilon_committed,
                0.0
            );
        }
    }
}
