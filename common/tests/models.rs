//! Models against their definitions: the affine hot loop against per-row log-likelihoods,
//! gradients against finite differences, exact posteriors against the unnormalised posterior
//! and against their own samplers, simulation against the likelihood, and spec validation.
use std::sync::Arc;

use fedmcmc_common::clip::clip;
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{BananaSpec, GaussianSpec, Model, ModelError, ModelSpec};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A banana with every hyperparameter away from its default, so each one is exercised.
fn odd_banana() -> ModelSpec {
    ModelSpec::Banana(BananaSpec {
        a: 3.0,
        b: 0.5,
        m: -0.3,
        lik_var: vec![2.0, 0.5, 1.5],
        prior_var: 10.0,
        temperature: 0.7,
        true_theta: Some(vec![0.2, 1.0, -0.5]),
    })
}

/// A correlated Gaussian with a non-zero prior mean and tempering.
fn odd_gaussian() -> ModelSpec {
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
    })
}

fn correlated_gaussian() -> ModelSpec {
    ModelSpec::gaussian(vec![vec![1.0, 0.999], vec![0.999, 1.0]], 100.0)
}

fn all_specs() -> Vec<ModelSpec> {
    vec![
        ModelSpec::flat_banana(2),
        odd_banana(),
        odd_gaussian(),
        correlated_gaussian(),
    ]
}

fn rows(data: &Columns) -> Vec<Vec<f64>> {
    (0..data.n())
        .map(|i| {
            let mut r = vec![0.0; data.d()];
            data.row_into(i, &mut r);
            r
        })
        .collect()
}

fn normals(rng: &mut ChaCha8Rng, d: usize, sd: f64) -> Vec<f64> {
    (0..d)
        .map(|_| sd * rng.sample::<f64, _>(rand_distr::StandardNormal))
        .collect()
}

fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// Per-row ratios computed the slow, obvious way.
fn naive_ratios(model: &dyn Model, data: &Columns, theta: &[f64], prop: &[f64]) -> Vec<f64> {
    rows(data)
        .iter()
        .map(|x| model.log_lik_row(prop, x) - model.log_lik_row(theta, x))
        .collect()
}

#[test]
fn kernel_equals_naive_clipped_sum() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for spec in all_specs() {
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

#[test]
fn gradients_match_central_differences() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let h = 1e-5;
    for spec in all_specs() {
        let model = spec.build().unwrap();
        let d = model.dim();
        let data = model.simulate(&spec.true_theta(), 3, &mut rng);
        for _ in 0..3 {
            let theta = add(&spec.true_theta(), &normals(&mut rng, d, 0.5));
            let fd = |f: &dyn Fn(&[f64]) -> f64, k: usize| {
                let (mut up, mut down) = (theta.clone(), theta.clone());
                up[k] += h;
                down[k] -= h;
                (f(&up) - f(&down)) / (2.0 * h)
            };
            let mut g = vec![f64::NAN; d];
            model.grad_log_prior(&theta, &mut g);
            for (k, gk) in g.iter().enumerate() {
                let num = fd(&|t| model.log_prior(t), k);
                assert!(
                    (num - gk).abs() <= 1e-6 * (1.0 + gk.abs()),
                    "{spec:?} prior {k}: {num} vs {gk}"
                );
            }
            for x in rows(&data) {
                model.grad_log_lik_row(&theta, &x, &mut g);
                for (k, gk) in g.iter().enumerate() {
                    let num = fd(&|t| model.log_lik_row(t, &x), k);
                    assert!(
                        (num - gk).abs() <= 1e-6 * (1.0 + gk.abs()),
                        "{spec:?} lik {k}: {num} vs {gk}"
                    );
                }
            }
        }
    }
}

#[test]
fn exact_posterior_is_the_normalised_posterior() {
    // ln p(θ) + Σ T ℓ(x|θ) − ln π(θ|X) must not depend on θ: it is ln p(X) (tempered).
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    for spec in all_specs() {
        let model = spec.build().unwrap();
        let data = model.simulate(&spec.true_theta(), 200, &mut rng);
        let rows = rows(&data);
        let post = model.exact_posterior(&data).expect("closed form");
        let gaps: Vec<f64> = (0..6)
            .map(|k| {
                // Posterior draws, widened so that θ also leaves the bulk.
                let draw = post.sample(&mut rng);
                let theta: Vec<f64> = draw
                    .iter()
                    .zip(post.mean())
                    .map(|(t, m)| m + (1.0 + k as f64) * (t - m))
                    .collect();
                let lik: f64 = rows.iter().map(|x| model.log_lik_row(&theta, x)).sum();
                model.log_prior(&theta) + lik - post.log_density(&theta)
            })
            .collect();
        for g in &gaps {
            assert!(
                (g - gaps[0]).abs() <= 1e-9 * gaps[0].abs().max(1.0),
                "{spec:?}: {gaps:?}"
            );
        }
    }
}

/// Sample mean and sd, with Monte-Carlo standard errors of each (the sd's from the sample
/// fourth central moment, so it also holds for the skewed banana marginal).
fn moments(xs: &[f64]) -> (f64, f64, f64, f64) {
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

#[test]
fn exact_sampler_matches_closed_form_moments() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    // A small banana data set, so that the curvature visibly moves E[θ2] and sd(θ2).
    let small_banana = ModelSpec::Banana(BananaSpec {
        temperature: 0.01,
        ..BananaSpec::flat(2)
    });
    for spec in [
        small_banana,
        odd_banana(),
        odd_gaussian(),
        correlated_gaussian(),
    ] {
        let model = spec.build().unwrap();
        let data = model.simulate(&spec.true_theta(), 500, &mut rng);
        let post = model.exact_posterior(&data).unwrap();
        let draws: Vec<Vec<f64>> = (0..20_000).map(|_| post.sample(&mut rng)).collect();
        for k in 0..model.dim() {
            let xs: Vec<f64> = draws.iter().map(|t| t[k]).collect();
            let (mean, sd, se_mean, se_sd) = moments(&xs);
            assert!(
                (mean - post.mean()[k]).abs() < 4.0 * se_mean,
                "{spec:?} mean {k}: {mean} vs {}",
                post.mean()[k]
            );
            assert!(
                (sd - post.sd()[k]).abs() < 4.0 * se_sd,
                "{spec:?} sd {k}: {sd} vs {}",
                post.sd()[k]
            );
        }
    }
}

#[test]
fn banana_curvature_shifts_the_posterior_mean() {
    // Thm 5.2 latent mean μ2 = Tτ2 Σx2 / (Tnτ2 + τ0); E[θ2] lies below it by a(Σ11 + μ1²).
    let spec = ModelSpec::Banana(BananaSpec {
        temperature: 0.01,
        ..BananaSpec::flat(2)
    });
    let model = spec.build().unwrap();
    let data = model.simulate(&spec.true_theta(), 500, &mut ChaCha8Rng::seed_from_u64(15));
    let post = model.exact_posterior(&data).unwrap();
    let (t, n) = (0.01, 500.0);
    let latent = |i: usize, tau: f64| {
        let s: f64 = data.col(i).iter().sum();
        (
            t * tau * s / (t * n * tau + 1e-3),
            1.0 / (t * n * tau + 1e-3),
        )
    };
    let ((mu1, var1), (mu2, _)) = (latent(0, 1.0 / 20.0), latent(1, 1.0 / 2.5));
    assert!((post.mean()[0] - mu1).abs() < 1e-12);
    let expect = mu2 - 20.0 * (var1 + mu1 * mu1);
    assert!((post.mean()[1] - expect).abs() < 1e-9 * expect.abs().max(1.0));
    assert!(
        mu2 - expect > 10.0,
        "curvature term should be large here: {}",
        mu2 - expect
    );
}

#[test]
fn simulated_data_follow_the_likelihood() {
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let n = 40_000;
    // Banana: column i has mean uᵢ = g⁻¹(θ)ᵢ and variance σᵢ².
    let spec = odd_banana();
    let model = spec.build().unwrap();
    let theta = spec.true_theta();
    let data = model.simulate(&theta, n, &mut rng);
    let u = [0.2, 1.0 + 3.0 * (0.2f64 + 0.3).powi(2) + 0.5, -0.5];
    for (j, (&uj, var)) in u.iter().zip([2.0f64, 0.5, 1.5]).enumerate() {
        let (mean, sd, se_mean, se_sd) = moments(data.col(j));
        assert!(
            (mean - uj).abs() < 4.0 * se_mean,
            "column {j}: {mean} vs {uj}"
        );
        assert!((sd - var.sqrt()).abs() < 4.0 * se_sd, "column {j}: sd {sd}");
    }
    // Gaussian: the sample covariance matches Σ.
    let spec = odd_gaussian();
    let ModelSpec::Gaussian(g) = &spec else {
        unreachable!()
    };
    let model = spec.build().unwrap();
    let data = model.simulate(&[0.0, 1.0, 2.0], n, &mut rng);
    for i in 0..3 {
        for j in 0..3 {
            let (xi, xj) = (data.col(i), data.col(j));
            let cov = xi
                .iter()
                .zip(xj)
                .map(|(a, b)| (a - i as f64) * (b - j as f64))
                .sum::<f64>()
                / n as f64;
            let se = ((g.cov[i][i] * g.cov[j][j] + g.cov[i][j].powi(2)) / n as f64).sqrt();
            assert!(
                (cov - g.cov[i][j]).abs() < 4.0 * se,
                "cov[{i}][{j}] = {cov}"
            );
        }
    }
}

#[test]
fn presets_follow_the_thesis() {
    let ModelSpec::Banana(flat) = ModelSpec::flat_banana(4) else {
        panic!()
    };
    assert_eq!(
        (flat.a, flat.b, flat.m, flat.prior_var, flat.temperature),
        (20.0, 0.0, 0.0, 1000.0, 1.0)
    );
    assert_eq!(flat.lik_var, vec![20.0, 2.5, 1.0, 1.0]);
    assert_eq!(
        ModelSpec::flat_banana(4).true_theta(),
        vec![0.0, 3.0, 0.0, 0.0]
    );
    let ModelSpec::Banana(tempered) = ModelSpec::tempered_banana(2, 100_000) else {
        panic!()
    };
    assert_eq!(tempered.temperature, 0.01);
    assert_eq!(odd_banana().true_theta(), vec![0.2, 1.0, -0.5]);
}

#[test]
fn fingerprint_tracks_likelihood_hyperparameters_only() {
    let fp = |spec: ModelSpec| spec.build().unwrap().fingerprint();
    let base = fp(ModelSpec::flat_banana(2));
    // Golden value: changing it breaks agreement between parties and coordinators of
    // different builds, so it must only change deliberately.
    assert_eq!(base, "7e7ddfa37db4fbfc");
    assert_eq!(base, fp(ModelSpec::flat_banana(2)));
    let ModelSpec::Banana(flat) = ModelSpec::flat_banana(2) else {
        panic!()
    };
    let with = |f: &dyn Fn(&mut BananaSpec)| {
        let mut s = flat.clone();
        f(&mut s);
        fp(ModelSpec::Banana(s))
    };
    assert_eq!(base, with(&|s| s.prior_var = 1.0));
    assert_eq!(base, with(&|s| s.true_theta = Some(vec![1.0, 1.0])));
    for changed in [
        with(&|s| s.a = 21.0),
        with(&|s| s.b = 1.0),
        with(&|s| s.m = 1.0),
        with(&|s| s.lik_var[1] = 2.0),
        with(&|s| s.temperature = 0.5),
        fp(ModelSpec::flat_banana(3)),
        fp(correlated_gaussian()),
    ] {
        assert_ne!(base, changed);
    }
    assert_eq!(fp(correlated_gaussian()).len(), 16);
}

#[test]
fn specs_deserialise_with_defaults() {
    let spec: ModelSpec = serde_json::from_str(
        r#"{"kind": "banana", "a": 20.0, "lik_var": [20.0, 2.5], "prior_var": 1000.0}"#,
    )
    .unwrap();
    assert_eq!(spec, ModelSpec::flat_banana(2));
    let spec: ModelSpec = serde_json::from_str(
        r#"{"kind": "gaussian", "cov": [[1.0, 0.999], [0.999, 1.0]], "prior_var": 100.0}"#,
    )
    .unwrap();
    assert_eq!(spec, correlated_gaussian());
    for spec in [odd_banana(), odd_gaussian()] {
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<ModelSpec>(&json).unwrap(), spec);
    }
    let err = |s: &str| {
        serde_json::from_str::<ModelSpec>(s)
            .unwrap_err()
            .to_string()
    };
    assert!(err(r#"{"kind": "circle"}"#).contains("unknown variant"));
    assert!(
        err(r#"{"kind": "banana", "a": 1, "lik_var": [1, 1], "prior_var": 1, "sigma0": 1}"#)
            .contains("unknown field")
    );
}

#[test]
fn invalid_specs_are_rejected_clearly() {
    let banana = |f: &dyn Fn(&mut BananaSpec)| {
        let mut s = BananaSpec::flat(2);
        f(&mut s);
        ModelSpec::Banana(s).build().unwrap_err()
    };
    assert_eq!(
        banana(&|s| s.lik_var[1] = -1.0),
        ModelError::NotPositive {
            field: "lik_var",
            value: -1.0
        }
    );
    assert_eq!(
        banana(&|s| s.prior_var = 0.0),
        ModelError::NotPositive {
            field: "prior_var",
            value: 0.0
        }
    );
    assert_eq!(
        banana(&|s| s.temperature = 0.0),
        ModelError::NotPositive {
            field: "temperature",
            value: 0.0
        }
    );
    assert!(matches!(
        banana(&|s| s.temperature = f64::INFINITY),
        ModelError::NotPositive { .. }
    ));
    assert!(matches!(
        banana(&|s| s.a = f64::NAN),
        ModelError::NotFinite { field: "a", .. }
    ));
    assert_eq!(
        banana(&|s| s.lik_var = vec![1.0]),
        ModelError::TooFewDimensions {
            model: "banana",
            min: 2,
            got: 1
        }
    );
    assert_eq!(
        banana(&|s| s.true_theta = Some(vec![0.0; 3])),
        ModelError::LengthMismatch {
            field: "true_theta",
            expected: 2,
            got: 3
        }
    );

    let gaussian = |cov: Vec<Vec<f64>>, f: &dyn Fn(&mut GaussianSpec)| {
        let ModelSpec::Gaussian(mut s) = ModelSpec::gaussian(cov, 1.0) else {
            unreachable!()
        };
        f(&mut s);
        ModelSpec::Gaussian(s).build().unwrap_err()
    };
    let good = vec![vec![1.0, 0.5], vec![0.5, 1.0]];
    assert_eq!(
        gaussian(vec![vec![1.0, 2.0], vec![2.0, 1.0]], &|_| ()),
        ModelError::NotPositiveDefinite
    );
    assert_eq!(
        gaussian(vec![vec![1.0, 0.5], vec![0.4, 1.0]], &|_| ()).to_string(),
        "cov must be symmetric: cov[1][0] = 0.4 but cov[0][1] = 0.5"
    );
    assert_eq!(
        gaussian(vec![vec![1.0, 0.5], vec![0.5]], &|_| ()),
        ModelError::LengthMismatch {
            field: "cov row",
            expected: 2,
            got: 1
        }
    );
    assert_eq!(
        gaussian(good.clone(), &|s| s.prior_mean = Some(vec![0.0])),
        ModelError::LengthMismatch {
            field: "prior_mean",
            expected: 2,
            got: 1
        }
    );
    assert_eq!(
        gaussian(good, &|s| s.prior_var = -2.0).to_string(),
        "prior_var must be positive and finite, got -2"
    );
    assert_eq!(
        gaussian(vec![], &|_| ()),
        ModelError::TooFewDimensions {
            model: "gaussian",
            min: 1,
            got: 0
        }
    );
}

#[test]
fn models_are_shareable_trait_objects() {
    let models: Vec<Arc<dyn Model>> = all_specs().iter().map(|s| s.build().unwrap()).collect();
    let names: Vec<&str> = models.iter().map(|m| m.name()).collect();
    assert_eq!(names, ["banana", "banana", "gaussian", "gaussian"]);
    assert_eq!(
        models
            .iter()
            .map(|m| (m.dim(), m.row_dim()))
            .collect::<Vec<_>>(),
        [(2, 2), (3, 3), (3, 3), (2, 2)]
    );
    let handle = std::thread::spawn({
        let m = Arc::clone(&models[0]);
        move || m.log_prior(&[0.0, 3.0])
    });
    assert!(handle.join().unwrap().is_finite());
}
