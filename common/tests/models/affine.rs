//! The affine hot loops (clipped log-likelihood-ratio sums) against per-row log-likelihoods:
//! every model, one-component steps, and the trait's row-by-row defaults.
use fedmcmc_common::clip::clip;
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{ExactPosterior, Model, ModelSpec};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::support::{add, every_spec, naive_ratios, normals};

#[test]
fn kernel_equals_naive_clipped_sum() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for spec in every_spec() {
        let model = spec.build().unwrap();
        let d = model.dim();
        let data = model.simulate(&spec.true_theta(), 3001, &mut rng);
        let theta = add(&spec.true_theta(), &normals(&mut rng, d, 0.01));
        let full_step = add(&theta, &normals(&mut rng, d, 0.01));
        let mut one_component = theta.clone();
        one_component[d - 1] += 0.02;
        for prop in [full_step, one_component, theta.clone()] {
            let r = naive_ratios(&*model, &data, &theta, &prop);
            let mut abs: Vec<f64> = r.iter().map(|v| v.abs()).collect();
            abs.sort_by(f64::total_cmp);
            // Never binds; binds for about half of the rows (halfway between two rows' |r|,
            // so that rounding cannot move a row across it).
            let half = abs.len() / 2;
            for bound in [f64::INFINITY, 0.5 * (abs[half] + abs[half + 1])] {
                let naive_sum: f64 = r.iter().map(|&v| clip(v, bound)).sum();
                let naive_count = r.iter().filter(|v| v.abs() > bound).count() as u64;
                let scale: f64 = r.iter().map(|&v| clip(v, bound).abs()).sum();
                let got = model.clipped_llr_sum(&data, &theta, &prop, bound);
                assert!(
                    (got.sum - naive_sum).abs() <= 1e-9 * scale,
                    "{spec:?} bound {bound}: kernel {} vs naive {naive_sum}",
                    got.sum
                );
                assert_eq!(got.clipped, naive_count, "{spec:?} bound {bound}");
                if bound.is_infinite() {
                    assert_eq!(got.clipped, 0);
                } else if prop != theta {
                    assert!(got.clipped > 1000 && got.clipped < 2000, "{}", got.clipped);
                }
            }
        }
    }
}

/// One-component steps of the 10-d banana: the affine kernel reads only the columns with a
/// non-zero weight (θ1 moves u1 and u2, θj moves uj alone), and its sum equals the full
/// row-by-row computation over every column to rounding, for each coordinate.
#[test]
fn one_component_ratios_equal_the_full_computation() {
    let mut rng = ChaCha8Rng::seed_from_u64(18);
    let spec = ModelSpec::flat_banana(10);
    let model = spec.build().unwrap();
    let data = model.simulate(&spec.true_theta(), 2001, &mut rng);
    let theta = add(&spec.true_theta(), &normals(&mut rng, 10, 0.01));
    for j in 0..10 {
        let mut prop = theta.clone();
        prop[j] += 0.003;
        let r = naive_ratios(&*model, &data, &theta, &prop);
        let mut abs: Vec<f64> = r.iter().map(|v| v.abs()).collect();
        abs.sort_by(f64::total_cmp);
        let bound = 0.5 * (abs[1000] + abs[1001]);
        let naive: f64 = r.iter().map(|&v| clip(v, bound)).sum();
        let scale: f64 = r.iter().map(|&v| clip(v, bound).abs()).sum();
        let got = model.clipped_llr_sum(&data, &theta, &prop, bound);
        assert!(
            (got.sum - naive).abs() <= 1e-9 * scale,
            "θ{}: {} vs {naive}",
            j + 1,
            got.sum
        );
        assert_eq!(got.clipped, 1000, "θ{}", j + 1);
    }
}

/// A model written as a user would (only per-row functions, and the columns each
/// coordinate's ratio depends on): x_j ~ N(θ_j, 1) independently, flat prior.
#[derive(Debug)]
struct Separable;

impl Model for Separable {
    fn name(&self) -> &'static str {
        "separable"
    }
    fn dim(&self) -> usize {
        3
    }
    fn row_dim(&self) -> usize {
        3
    }
    fn fingerprint(&self) -> String {
        "separable/test".into()
    }
    fn temperature(&self) -> f64 {
        1.0
    }
    fn log_prior(&self, _: &[f64]) -> f64 {
        0.0
    }
    fn grad_log_prior(&self, _: &[f64], out: &mut [f64]) {
        out.fill(0.0);
    }
    fn prior_mode(&self) -> Vec<f64> {
        vec![0.0; 3]
    }
    fn log_lik_row(&self, theta: &[f64], row: &[f64]) -> f64 {
        theta
            .iter()
            .zip(row)
            .map(|(t, x)| -0.5 * (x - t).powi(2))
            .sum()
    }
    fn grad_log_lik_row(&self, theta: &[f64], row: &[f64], out: &mut [f64]) {
        for ((o, t), x) in out.iter_mut().zip(theta).zip(row) {
            *o = x - t;
        }
    }
    fn ratio_columns(&self, theta: &[f64], theta_prop: &[f64]) -> Option<Vec<usize>> {
        Some((0..3).filter(|&j| theta[j] != theta_prop[j]).collect())
    }
    fn simulate(&self, theta: &[f64], n: usize, rng: &mut dyn rand::Rng) -> Columns {
        let mut values = Vec::with_capacity(3 * n);
        for t in theta {
            values.extend((0..n).map(|_| {
                let z: f64 =
                    rand_distr::Distribution::sample(&rand_distr::StandardNormal, &mut *rng);
                t + z
            }));
        }
        Columns::from_column_major(n, 3, values).unwrap()
    }
    fn exact_posterior(&self, _: &Columns) -> Option<Box<dyn ExactPosterior>> {
        None
    }
}

/// The trait's row-by-row defaults over [`Model::ratio_columns`] (the other columns passed as 0) give the full
/// computation's sum and terms, for one-component and all-component steps.
#[test]
fn row_by_row_defaults_over_the_ratio_columns_equal_the_full_computation() {
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    let model = Separable;
    let theta = vec![0.1, -0.2, 0.3];
    let data = model.simulate(&theta, 500, &mut rng);
    for prop in [vec![0.1, 0.0, 0.3], vec![0.2, -0.1, 0.25]] {
        let r = naive_ratios(&model, &data, &theta, &prop);
        let bound = 0.05;
        let naive: f64 = r.iter().map(|&v| clip(v, bound)).sum();
        let got = model.clipped_llr_sum(&data, &theta, &prop, bound);
        assert!(
            (got.sum - naive).abs() <= 1e-12 * r.len() as f64,
            "{prop:?}"
        );
        assert_eq!(
            got.clipped,
            r.iter().filter(|v| v.abs() > bound).count() as u64
        );
        let mut terms = vec![f64::NAN; 500];
        model.clipped_llr_terms(&data, &theta, &prop, bound, &mut terms);
        for (t, v) in terms.iter().zip(&r) {
            assert!((t - clip(*v, bound)).abs() <= 1e-12, "{t} vs {v}");
        }
    }
}
