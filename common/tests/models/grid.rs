//! The grid reference posterior, against the conjugate Gaussian.
use fedmcmc_common::models::{
    ExactPosterior, GaussianSpec, GridError, GridPosterior, MAX_EDGE_MASS, ModelSpec,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::support::{moments, odd_gaussian};

/// A 2-d conjugate Gaussian, correlated and tempered, with a non-zero prior mean.
fn gaussian_2d() -> ModelSpec {
    ModelSpec::Gaussian(GaussianSpec {
        cov: vec![vec![1.0, 0.5], vec![0.5, 2.0]],
        prior_mean: Some(vec![0.5, -0.5]),
        prior_var: 4.0,
        temperature: 0.5,
        true_theta: Some(vec![1.0, -1.0]),
        bounds: None,
    })
}

#[test]
fn grid_posterior_reproduces_a_conjugate_posterior() {
    let spec = gaussian_2d();
    let model = spec.build().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let data = model.simulate(&spec.true_theta(), 50, &mut rng);
    let exact = model.exact_posterior(&data).unwrap();
    let (mu, s) = (exact.mean(), exact.sd());
    let cells = 400;
    let lower = [mu[0] - 8.0 * s[0], mu[1] - 8.0 * s[1]];
    let upper = [mu[0] + 8.0 * s[0], mu[1] + 8.0 * s[1]];
    let grid = GridPosterior::new(&*model, &data, lower, upper, cells).unwrap();
    let h = grid.cell_width();
    assert!((h[0] - 16.0 * s[0] / 400.0).abs() < 1e-12);
    // Tolerance: by Poisson summation the midpoint rule with spacing h integrates a Gaussian
    // of sd s (times a polynomial) with relative error ~exp(−2π² s²/h²); here h = s/25, so
    // exp(−12 337). The box cuts off P(|z| > 8) ≈ 1.2e-15 per axis. What remains is rounding in
    // ~1.6e5 cell weights, ~1e-12: 1e-8 sd leaves a wide margin and is ≪ the 0.01 sd a
    // first-order (O(h)) error would give.
    for k in 0..2 {
        let (dm, ds) = (
            (grid.mean()[k] - mu[k]) / s[k],
            (grid.sd()[k] - s[k]) / s[k],
        );
        eprintln!("axis {k}: grid mean error {dm:.2e} sd, sd error {ds:.2e} (relative)");
        assert!(dm.abs() < 1e-8 && ds.abs() < 1e-8, "axis {k}: {dm}, {ds}");
    }
    assert!(grid.edge_mass() < 1e-12, "{}", grid.edge_mass());
    // At cell centres the cell's probability is the unnormalised density there over the
    // grid's normaliser, which equals the exact one to the same accuracy.
    for (theta, _) in grid.cells().step_by(997).filter(|(_, p)| *p > 1e-12) {
        let (got, want) = (grid.log_density(&theta), exact.log_density(&theta));
        assert!((got - want).abs() < 1e-8, "θ {theta:?}: {got} vs {want}");
    }
    assert_eq!(
        grid.log_density(&[upper[0] + 1e-9, mu[1]]),
        f64::NEG_INFINITY
    );
    assert_eq!(grid.log_density(&[f64::NAN, mu[1]]), f64::NEG_INFINITY);
    assert!(grid.log_density(&upper).is_finite());
    // Draws from the piecewise-constant density: its variance exceeds the posterior's by
    // h²/12 per axis, a relative 7e-5 in sd, far inside the Monte-Carlo error.
    let draws: Vec<Vec<f64>> = (0..20_000).map(|_| grid.sample(&mut rng)).collect();
    for k in 0..2 {
        let xs: Vec<f64> = draws.iter().map(|t| t[k]).collect();
        let (mean, sd, se_mean, se_sd) = moments(&xs);
        assert!(
            (mean - mu[k]).abs() < 4.0 * se_mean,
            "draws mean {k}: {mean}"
        );
        assert!((sd - s[k]).abs() < 4.0 * se_sd, "draws sd {k}: {sd}");
        assert!(xs.iter().all(|x| (lower[k]..=upper[k]).contains(x)));
    }
}

#[test]
fn grid_posterior_refuses_bad_grids() {
    let spec = gaussian_2d();
    let model = spec.build().unwrap();
    let data = model.simulate(&spec.true_theta(), 20, &mut ChaCha8Rng::seed_from_u64(24));
    let grid = |lower: [f64; 2], upper: [f64; 2], cells: usize| {
        GridPosterior::new(&*model, &data, lower, upper, cells).unwrap_err()
    };
    assert_eq!(grid([-5.0; 2], [5.0; 2], 1), GridError::TooFewCells(1));
    assert!(matches!(
        grid([-5.0; 2], [5.0, -6.0], 10),
        GridError::BadBox { .. }
    ));
    assert!(matches!(
        grid([f64::NEG_INFINITY, -5.0], [5.0; 2], 10),
        GridError::BadBox { .. }
    ));
    // The posterior sits near (1, −1) with sd ≈ 0.2: a box ending at 0.8 cuts it.
    let GridError::BoxTooSmall { edge_mass } = grid([-5.0; 2], [0.8, 5.0], 50) else {
        panic!("expected BoxTooSmall")
    };
    assert!(edge_mass > MAX_EDGE_MASS);
    assert!(
        GridError::BoxTooSmall { edge_mass }
            .to_string()
            .starts_with("the box is too small")
    );
    let three_d = odd_gaussian().build().unwrap();
    let data3 = three_d.simulate(&[0.0; 3], 5, &mut ChaCha8Rng::seed_from_u64(25));
    assert_eq!(
        GridPosterior::new(&*three_d, &data3, [-5.0; 2], [5.0; 2], 10).unwrap_err(),
        GridError::NotTwoDimensional(3)
    );
    assert_eq!(
        GridPosterior::new(&*model, &data3, [-5.0; 2], [5.0; 2], 10).unwrap_err(),
        GridError::DataColumns {
            expected: 2,
            got: 3
        }
    );
}
