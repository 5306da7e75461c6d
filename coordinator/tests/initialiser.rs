//! The private initialiser against party nodes in this process whose noise is seeded, so
//! its releases, and where it lands, are fixed.
use std::sync::Arc;

use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{Model, ModelSpec};
use fedmcmc_coordinator::federation::Federation;
use fedmcmc_coordinator::federation::local::nodes;
use fedmcmc_coordinator::initialiser::{self, InitialiserSettings};
use fedmcmc_party::PartyNode;
use fedmcmc_party::config::BudgetConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const ROWS: usize = 30_000;
const CLIP: f64 = 2.0;
/// The likelihood covariance 100·[[1, ρ], [ρ, 1]]: its eigenvectors (1, ±1)/√2 have
/// variances 100·(1 ± ρ), so the posterior is a narrow ridge along (1, 1).
const RHO: f64 = 0.99;

/// Three in-process parties over `data`, their noise seeded with `seed`, `seed + 1`, ….
fn seeded_federation(
    spec: &ModelSpec,
    data: &Columns,
    budget: BudgetConfig,
    seed: u64,
) -> Federation<Arc<PartyNode>> {
    let parties = nodes(spec, data.split(3), budget, None)
        .unwrap()
        .into_iter()
        .zip(seed..)
        .map(|((name, node), seed)| {
            let node = Arc::into_inner(node).unwrap().with_seeded_noise(seed);
            (name, Arc::new(node))
        })
        .collect();
    Federation::new(parties)
}

/// A Gaussian posterior along a narrow ridge (the log likelihood's Hessian has eigenvalues
/// n/(100·(1 ± ρ)), 199 apart), whose released gradient is noise within a few posterior sds
/// of the mode along the ridge. A Newton round averages 2d releases, so its centre errs by
/// about r = σ/(√(2d)·λ) along an eigenvector of the Hessian with eigenvalue λ; the point is
/// the median of the later half of at least 15 rounds' centres.
///
/// Measured over 24 noise seeds (this data, these settings), the miss in units of r is
/// within ±1.02 along the ridge, but heavy-tailed across it: median |miss| 1.1·r, and 3 of
/// 24 seeds beyond 10·r (up to 21·r, 3.9 posterior sds). One seed, as this test once used,
/// passed or failed by luck. So: over 24 seeds the median |miss| along each eigenvector is
/// within 1.5·r, and every miss within 5 posterior sds of the mean.
#[tokio::test]
async fn under_heavy_gradient_noise_the_point_lands_near_the_mode_of_a_ridge() {
    let dim = 2;
    let spec = ModelSpec::gaussian(
        vec![vec![100.0, 100.0 * RHO], vec![100.0 * RHO, 100.0]],
        1000.0,
    );
    let model: Arc<dyn Model> = spec.build().unwrap();
    let data = model.simulate(&spec.true_theta(), ROWS, &mut ChaCha8Rng::seed_from_u64(5));
    let exact = model.exact_posterior(&data).unwrap();
    let budget = BudgetConfig {
        epsilon: 20.0,
        delta: 1e-5,
        accountant: Default::default(),
    };
    let n = ROWS as f64;
    let mean = exact.mean();
    let directions = [(1.0, 100.0 * (1.0 + RHO)), (-1.0, 100.0 * (1.0 - RHO))];
    let mut misses = [Vec::new(), Vec::new()];
    for seed in 1..=24u64 {
        let federation = seeded_federation(&spec, &data, budget, 10 * seed);
        let described = federation.describe().await.unwrap();
        let settings = InitialiserSettings {
            share: 0.1,
            steps: 100,
            gradient_clip: CLIP,
        };
        let init = initialiser::run(&federation, &model, &described, settings)
            .await
            .unwrap();
        // Each party's noise sd is its multiplier times the sensitivity 2·clip (substitution).
        let sigma = init
            .grants
            .iter()
            .map(|g| (2.0 * CLIP * g.noise_multiplier).powi(2))
            .sum::<f64>()
            .sqrt();
        for (k, &(sign, variance)) in directions.iter().enumerate() {
            let lambda = n / variance;
            let off = ((init.point[0] - mean[0]) + sign * (init.point[1] - mean[1])) / 2f64.sqrt();
            let round = sigma / ((2 * dim) as f64).sqrt() / lambda;
            // In posterior sds (1/√λ along the eigenvector), and in units of r.
            let sds = off * lambda.sqrt();
            assert!(
                sds.abs() < 5.0,
                "seed {seed}, along (1, {sign}): {sds} sds from the mean"
            );
            misses[k].push(off.abs() / round);
        }
    }
    for (k, mut m) in misses.into_iter().enumerate() {
        m.sort_by(f64::total_cmp);
        let median = (m[11] + m[12]) / 2.0;
        println!(
            "along (1, {}): |miss|/r median {median:.2}, max {:.2}",
            directions[k].0, m[23]
        );
        assert!(
            median <= 1.5,
            "median miss {median}·r along (1, {})",
            directions[k].0
        );
    }
}

/// The default number of releases at d = 10 (40 for the climb, 15 Newton rounds of 20) on
/// the thesis's flat banana (n = 2·10⁵ over three parties) at ε = 4, the initialiser's
/// default tenth of it: at each of three noise seeds the point lies within 4 exact posterior
/// sds of the exact mean along every coordinate, the banana's ridge (θ1, θ2) included. (With
/// a fixed 100 releases, three rounds, the simulated federation's point missed θ2 by 6 to 24
/// sds at 3 seeds of 8, even at ε = 40.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_ten_dimensions_the_default_releases_reach_the_banana_s_mode() {
    let spec = ModelSpec::flat_banana(10);
    let model: Arc<dyn Model> = spec.build().unwrap();
    let rows = 200_000;
    let data = model.simulate(&spec.true_theta(), rows, &mut ChaCha8Rng::seed_from_u64(7));
    let exact = model.exact_posterior(&data).unwrap();
    let budget = BudgetConfig {
        epsilon: 4.0,
        delta: 0.1 / rows as f64,
        accountant: Default::default(),
    };
    for seed in [21u64, 31, 41] {
        let federation = seeded_federation(&spec, &data, budget, seed);
        let described = federation.describe().await.unwrap();
        let settings = InitialiserSettings {
            share: initialiser::DEFAULT_SHARE,
            steps: initialiser::default_steps(10),
            gradient_clip: CLIP,
        };
        assert_eq!(settings.steps, 340);
        let init = initialiser::run(&federation, &model, &described, settings)
            .await
            .unwrap();
        let z: Vec<f64> = (0..10)
            .map(|j| (init.point[j] - exact.mean()[j]) / exact.sd()[j])
            .collect();
        println!("seed {seed}: point in exact sds from the mean {z:.2?}");
        assert!(z.iter().all(|z| z.abs() < 4.0), "seed {seed}: {z:?}");
    }
}
