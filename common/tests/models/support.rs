//! Shared fixtures: model specs with hyperparameters away from their defaults, and helpers
//! for rows, Gaussian perturbations, per-row ratios the slow way and sample moments.
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{
    BananaSpec, CircleSpec, Family, GaussianSpec, GlmSpec, MixtureSpec, Model, ModelSpec,
};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// A banana with every hyperparameter away from its default, so each one is exercised.
pub(crate) fn odd_banana() -> ModelSpec {
    ModelSpec::Banana(BananaSpec {
        a: 3.0,
        b: 0.5,
        m: -0.3,
        lik_var: vec![2.0, 0.5, 1.5],
        prior_var: 10.0,
        temperature: 0.7,
        true_theta: Some(vec![0.2, 1.0, -0.5]),
        bounds: None,
    })
}

/// A correlated Gaussian with a non-zero prior mean and tempering.
pub(crate) fn odd_gaussian() -> ModelSpec {
    ModelSpec::Gaussian(GaussianSpec {
        cov: vec![
            vec![2.0, 0.6, -0.3],
            vec![0.6, 1.0, 0.2],
            vec![-0.3, 0.2, 0.5],
        ],
        prior_mean: Some(vec![1.0, -1.0, 0.5]),
        prior_var: 4.0,
        temperature: 0.5,
        true_theta: None,
        bounds: None,
    })
}

pub(crate) fn correlated_gaussian() -> ModelSpec {
    ModelSpec::gaussian(vec![vec![1.0, 0.999], vec![0.999, 1.0]], 100.0)
}

/// A circle whose ring is wide and near the origin, so that the exact posterior's truncation
/// at ‖θ‖² = 0 matters, tempered and away from the thesis's θ.
pub(crate) fn odd_circle() -> ModelSpec {
    ModelSpec::Circle(CircleSpec {
        a: 0.002,
        temperature: 0.5,
        true_theta: Some(vec![0.3, 0.4]),
    })
}

pub(crate) fn all_specs() -> Vec<ModelSpec> {
    vec![
        ModelSpec::flat_banana(2),
        odd_banana(),
        odd_gaussian(),
        correlated_gaussian(),
        ModelSpec::Circle(CircleSpec::thesis()),
        odd_circle(),
    ]
}

/// The mixture with every hyperparameter away from Heikkilä et al. 2019's.
pub(crate) fn odd_mixture() -> ModelSpec {
    ModelSpec::Mixture(MixtureSpec {
        prior_var: vec![4.0, 2.0],
        lik_var: 1.5,
        temperature: 0.7,
        true_theta: Some(vec![-0.5, 2.0]),
    })
}

/// The three GLM families, each with something away from the simulation preset: a tempered
/// gaussian with a prior mean, a logistic without an intercept over three features, a poisson
/// with asymmetric feature bounds.
pub(crate) fn glm_specs() -> Vec<ModelSpec> {
    let gaussian = GlmSpec {
        temperature: 0.7,
        prior_mean: Some(vec![0.1, -0.2, 0.3]),
        prior_sd: vec![2.0, 3.0, 4.0],
        noise_sd: Some(0.8),
        ..GlmSpec::example(Family::Gaussian, 3)
    };
    let mut logistic = GlmSpec::example(Family::Logistic, 4);
    logistic.intercept = false;
    logistic.true_theta = Some(vec![1.0, -0.5, 0.25]);
    let mut poisson = GlmSpec::example(Family::Poisson, 3);
    poisson.features[0].bounds = Some([-0.5, 1.5]);
    [gaussian, logistic, poisson]
        .into_iter()
        .map(ModelSpec::Glm)
        .collect()
}

/// The gaussian GLM, which has an exact posterior.
pub(crate) fn gaussian_glm() -> ModelSpec {
    glm_specs().swap_remove(0)
}

/// Every model, with or without a closed-form posterior.
pub(crate) fn every_spec() -> Vec<ModelSpec> {
    let mut specs = all_specs();
    specs.push(ModelSpec::Mixture(MixtureSpec::heikkila(100.0, 1000)));
    specs.push(odd_mixture());
    specs.extend(glm_specs());
    specs
}

pub(crate) fn rows(data: &Columns) -> Vec<Vec<f64>> {
    (0..data.n())
        .map(|i| {
            let mut r = vec![0.0; data.d()];
            data.row_into(i, &mut r);
            r
        })
        .collect()
}

pub(crate) fn normals(rng: &mut ChaCha8Rng, d: usize, sd: f64) -> Vec<f64> {
    (0..d)
        .map(|_| sd * rng.sample::<f64, _>(rand_distr::StandardNormal))
        .collect()
}

pub(crate) fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// Per-row ratios computed the slow, obvious way.
pub(crate) fn naive_ratios(
    model: &dyn Model,
    data: &Columns,
    theta: &[f64],
    prop: &[f64],
) -> Vec<f64> {
    rows(data)
        .iter()
        .map(|x| model.log_lik_row(prop, x) - model.log_lik_row(theta, x))
        .collect()
}

/// Sample mean and sd, with Monte-Carlo standard errors of each (the sd's from the sample
/// fourth central moment, so it also holds for the skewed banana marginal).
pub(crate) fn moments(xs: &[f64]) -> (f64, f64, f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let m4 = xs.iter().map(|x| (x - mean).powi(4)).sum::<f64>() / n;
    let sd = var.sqrt();
    (
        mean,
        sd,
        sd / n.sqrt(),
        ((m4 - var * var) / n).sqrt() / (2.0 * sd),
    )
}
