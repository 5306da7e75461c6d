//! Models against their definitions: the affine hot loops against per-row log-likelihoods
//! and gradients, gradients against finite differences, exact posteriors against the
//! unnormalised posterior and against their own samplers, simulation against the likelihood,
//! and spec validation; the grid reference posterior against a closed form, and the Gaussian
//! mixture, which has none, against the grid.
use std::sync::Arc;

use fedmcmc_common::clip::clip;
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{
    BananaSpec, CircleSpec, ExactPosterior, Family, GaussianSpec, GlmColumn, GlmSpec, GridError,
    GridPosterior, MAX_EDGE_MASS, MixtureSpec, Model, ModelError, ModelSpec,
    clipped_grad_sum_by_rows,
};
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
        bounds: None,
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
        bounds: None,
    })
}

fn correlated_gaussian() -> ModelSpec {
    ModelSpec::gaussian(vec![vec![1.0, 0.999], vec![0.999, 1.0]], 100.0)
}

/// A circle whose ring is wide and near the origin, so that the exact posterior's truncation
/// at ‖θ‖² = 0 matters, tempered and away from the thesis's θ.
fn odd_circle() -> ModelSpec {
    ModelSpec::Circle(CircleSpec {
        a: 0.002,
        temperature: 0.5,
        true_theta: Some(vec![0.3, 0.4]),
    })
}

fn all_specs() -> Vec<ModelSpec> {
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
fn odd_mixture() -> ModelSpec {
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
fn glm_specs() -> Vec<ModelSpec> {
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
fn gaussian_glm() -> ModelSpec {
    glm_specs().swap_remove(0)
}

/// Every model, with or without a closed-form posterior.
fn every_spec() -> Vec<ModelSpec> {
    let mut specs = all_specs();
    specs.push(ModelSpec::Mixture(MixtureSpec::heikkila(100.0, 1000)));
    specs.push(odd_mixture());
    specs.extend(glm_specs());
    specs
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

#[test]
fn gradients_match_central_differences() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let h = 1e-5;
    for spec in every_spec() {
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

/// Every model, and the dimensions the affine gradient kernel treats apart: one, past its
/// register kernels, in between.
fn gradient_specs() -> Vec<ModelSpec> {
    let mut specs = every_spec();
    specs.push(ModelSpec::gaussian(vec![vec![0.7]], 10.0));
    specs.push(ModelSpec::flat_banana(5));
    specs.push(ModelSpec::tempered_banana(9, 1000));
    specs
}

/// Each row's tempered gradient norm ‖∇_θ T·ℓ(x|θ)‖.
fn gradient_norms(model: &dyn Model, data: &Columns, theta: &[f64]) -> Vec<f64> {
    let mut g = vec![0.0; model.dim()];
    rows(data)
        .iter()
        .map(|x| {
            model.grad_log_lik_row(theta, x, &mut g);
            g.iter().map(|v| v * v).sum::<f64>().sqrt()
        })
        .collect()
}

/// `got` within a relative 1e-12 of `expect`, relative to Σ_x ‖clip_b(g_x)‖: the sum's terms
/// cancel, so relative to the sum itself would ask more than either order of summation gives.
fn assert_close(got: &[f64], expect: &[f64], norms: &[f64], bound: f64, what: &str) {
    let scale: f64 = norms.iter().map(|v| v.min(bound)).sum();
    for (g, e) in got.iter().zip(expect) {
        assert!(
            (g - e).abs() <= 1e-12 * scale,
            "{what}: {got:?} vs {expect:?}"
        );
    }
}

#[test]
fn clipped_gradient_sum_equals_the_row_by_row_default() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    for spec in gradient_specs() {
        let model = spec.build().unwrap();
        let d = model.dim();
        let truth = spec.true_theta();
        // Rows enough for several blocks and a partial last group; and fewer than a group.
        for n in [3001, 5] {
            let data = model.simulate(&truth, n, &mut rng);
            let near = add(&truth, &normals(&mut rng, d, 0.05));
            let far = add(&truth, &normals(&mut rng, d, 1.0));
            for theta in [truth.clone(), near, far] {
                let norms = gradient_norms(&*model, &data, &theta);
                let mut sorted = norms.clone();
                sorted.sort_by(f64::total_cmp);
                // Binds for about half the rows (halfway between two rows' norms, so that
                // rounding cannot move a row across it); for none; for every row.
                let half = 0.5 * (sorted[n / 2] + sorted[n / 2 + 1]);
                for bound in [half, 2.0 * sorted[n - 1], 0.0] {
                    let what = format!("{spec:?} n {n} θ {theta:?} bound {bound}");
                    let (mut got, mut expect) = (vec![f64::NAN; d], vec![f64::NAN; d]);
                    let clipped = model.clipped_grad_sum(&data, &theta, bound, &mut got);
                    let expect_clipped =
                        clipped_grad_sum_by_rows(&*model, &data, &theta, bound, &mut expect);
                    assert_eq!(clipped, expect_clipped, "{what}");
                    assert_close(&got, &expect, &norms, bound, &what);
                    let norm = got.iter().map(|v| v * v).sum::<f64>().sqrt();
                    assert!(norm <= n as f64 * bound * (1.0 + 1e-12), "{what}: {norm}");
                    let expect_count = match bound {
                        0.0 => n as u64,
                        b if b == half => (n - n / 2 - 1) as u64,
                        _ => 0,
                    };
                    assert_eq!(clipped, expect_count, "{what}");
                }
            }
        }
    }
}

/// A row whose tempered gradient is ∞ or NaN, or whose squared norm overflows, adds nothing
/// and counts as clipped whatever the bound, in each model's override as in the default: rows
/// at ±f64::MAX and 1e300 among ordinary ones, and an extreme θ where every row's is.
#[test]
fn non_finite_gradients_add_nothing_and_count_as_clipped() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    for spec in gradient_specs() {
        let model = spec.build().unwrap();
        let (d, theta) = (model.dim(), spec.true_theta());
        let ordinary = model.simulate(&theta, 37, &mut rng);
        let extreme = [
            vec![f64::MAX; model.row_dim()],
            (0..model.row_dim())
                .map(|j| if j % 2 == 0 { f64::MAX } else { -f64::MAX })
                .collect(),
            vec![1e300; model.row_dim()],
        ];
        let mut mixed = rows(&ordinary);
        for (i, x) in extreme.iter().enumerate() {
            mixed.insert(10 * i + 3, x.clone());
        }
        let mixed = Columns::from_rows(model.row_dim(), &mixed).unwrap();
        let norms = gradient_norms(&*model, &ordinary, &theta);
        for bound in [0.5, 1e6] {
            let what = format!("{spec:?} bound {bound}");
            let (mut plain, mut got, mut by_rows) = (vec![0.0; d], vec![0.0; d], vec![0.0; d]);
            let plain_clipped = model.clipped_grad_sum(&ordinary, &theta, bound, &mut plain);
            let clipped = model.clipped_grad_sum(&mixed, &theta, bound, &mut got);
            let by_rows_clipped =
                clipped_grad_sum_by_rows(&*model, &mixed, &theta, bound, &mut by_rows);
            assert_eq!(clipped, plain_clipped + 3, "{what}");
            assert_eq!(by_rows_clipped, clipped, "{what}");
            assert_close(&got, &plain, &norms, bound, &what);
            assert_close(&by_rows, &plain, &norms, bound, &what);
            if bound == 1e6 {
                assert_eq!(plain_clipped, 0, "{what}");
            }
        }
        // A GLM row's score may stay finite at any θ: a logistic one always, a poisson one
        // where e^η underflows.
        if matches!(&spec, ModelSpec::Glm(_)) {
            continue;
        }
        let mut got = vec![f64::NAN; d];
        let far = vec![1e200; d];
        assert_eq!(
            model.clipped_grad_sum(&ordinary, &far, 1.0, &mut got),
            37,
            "{spec:?}"
        );
        assert!(got.iter().all(|v| *v == 0.0), "{spec:?}: {got:?}");
    }
}

#[test]
fn exact_posterior_is_the_normalised_posterior() {
    // ln p(θ) + Σ T ℓ(x|θ) − ln π(θ|X) must not depend on θ: it is ln p(X) (tempered).
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    for spec in all_specs().into_iter().chain([gaussian_glm()]) {
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
        gaussian_glm(),
        odd_circle(),
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
    let circle = ModelSpec::Circle(CircleSpec::thesis());
    let ModelSpec::Circle(c) = &circle else {
        panic!()
    };
    assert_eq!((c.a, c.temperature), (1e-5, 1.0));
    assert_eq!(circle.true_theta(), vec![0.0, 3.0]);
}

/// The circle's data are r ~ N(‖θ‖, 1) (the thesis's N(3, 1) at θ = (0, 3)); its exact
/// posterior has mean 0, is flat in the angle and puts ‖θ‖² around the mean of r², with
/// the truncated normal's moments checked against draws in
/// `exact_sampler_matches_closed_form_moments`.
#[test]
fn circle_data_and_ring_follow_the_thesis() {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let spec = ModelSpec::Circle(CircleSpec::thesis());
    let model = spec.build().unwrap();
    let data = model.simulate(&spec.true_theta(), 100_000, &mut rng);
    let (mean, sd, se_mean, se_sd) = moments(data.col(0));
    assert!((mean - 3.0).abs() < 4.0 * se_mean, "r mean {mean}");
    assert!((sd - 1.0).abs() < 4.0 * se_sd, "r sd {sd}");
    let post = model.exact_posterior(&data).unwrap();
    assert_eq!(post.mean(), vec![0.0, 0.0]);
    let m = data.col(0).iter().map(|r| r * r).sum::<f64>() / 1e5;
    // Var s = 1/(2an) = 0.5: the ring's squared radius is m ± 0.71, untruncated here.
    let s: Vec<f64> = (0..20_000)
        .map(|_| post.sample(&mut rng).iter().map(|t| t * t).sum())
        .collect();
    let (s_mean, s_sd, se_s, se_s_sd) = moments(&s);
    assert!((s_mean - m).abs() < 4.0 * se_s, "E s = {s_mean} vs {m}");
    assert!(
        (s_sd - 0.5f64.sqrt()).abs() < 4.0 * se_s_sd,
        "sd s = {s_sd}"
    );
    assert!(
        (post.sd()[0] - (m / 2.0).sqrt()).abs() < 1e-9,
        "{:?}",
        post.sd()
    );
    assert!(model.log_prior(&[5.0, -7.0]) == 0.0);
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
    let spec: ModelSpec = serde_json::from_str(r#"{"kind": "circle", "a": 1e-5}"#).unwrap();
    assert_eq!(spec, ModelSpec::Circle(CircleSpec::thesis()));
    for spec in [odd_banana(), odd_gaussian(), odd_circle()] {
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<ModelSpec>(&json).unwrap(), spec);
    }
    let err = |s: &str| {
        serde_json::from_str::<ModelSpec>(s)
            .unwrap_err()
            .to_string()
    };
    assert!(err(r#"{"kind": "torus"}"#).contains("unknown variant"));
    assert!(err(r#"{"kind": "circle"}"#).contains("missing field"));
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
    assert_eq!(
        names,
        [
            "banana", "banana", "gaussian", "gaussian", "circle", "circle"
        ]
    );
    assert_eq!(
        models
            .iter()
            .map(|m| (m.dim(), m.row_dim()))
            .collect::<Vec<_>>(),
        [(2, 2), (3, 3), (3, 3), (2, 2), (2, 1), (2, 1)]
    );
    let handle = std::thread::spawn({
        let m = Arc::clone(&models[0]);
        move || m.log_prior(&[0.0, 3.0])
    });
    assert!(handle.join().unwrap().is_finite());
}

// ---------------------------------------------------------------------------------------------
// The grid reference posterior, against the conjugate Gaussian.

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

// ---------------------------------------------------------------------------------------------
// The Gaussian mixture (Heikkilä et al. 2019), which has no closed form.

/// The relabelling (θ1, θ2) ↦ (θ1 + θ2, −θ2) that swaps the mixture's components.
fn swap_components(theta: &[f64]) -> Vec<f64> {
    vec![theta[0] + theta[1], -theta[1]]
}

#[test]
fn mixture_gradients_match_central_differences_away_from_the_data() {
    // Far from the rows one component takes all the responsibility (w at 0 or 1), near
    // θ2 = 0 they share it: every regime of the log-sum-exp.
    let h = 1e-5;
    for spec in [
        ModelSpec::Mixture(MixtureSpec::heikkila(1.0, 1)),
        odd_mixture(),
    ] {
        let model = spec.build().unwrap();
        for theta in [[3.0, -2.0], [-1.0, 0.0], [0.5, 4.0], [-6.0, 12.0]] {
            let fd = |f: &dyn Fn(&[f64]) -> f64, k: usize| {
                let (mut up, mut down) = (theta.to_vec(), theta.to_vec());
                up[k] += h;
                down[k] -= h;
                (f(&up) - f(&down)) / (2.0 * h)
            };
            let mut g = [f64::NAN; 2];
            model.grad_log_prior(&theta, &mut g);
            for (k, gk) in g.iter().enumerate() {
                let num = fd(&|t| model.log_prior(t), k);
                assert!((num - gk).abs() <= 1e-6 * (1.0 + gk.abs()), "prior {k}");
            }
            for x in [-3.0, 0.2, 5.0, 40.0] {
                model.grad_log_lik_row(&theta, &[x], &mut g);
                for (k, gk) in g.iter().enumerate() {
                    let num = fd(&|t| model.log_lik_row(t, &[x]), k);
                    assert!(
                        (num - gk).abs() <= 1e-6 * (1.0 + gk.abs()),
                        "{spec:?} θ {theta:?} x {x} lik {k}: {num} vs {gk}"
                    );
                }
            }
        }
    }
}

#[test]
fn mixture_likelihood_is_a_tempered_density_symmetric_in_the_components() {
    // ∫ exp(ℓ(x|θ)/T) dx = 1, by the trapezoid rule over ±40 around both components (σx ≤ 1.5,
    // so the tails beyond hold < 1e-100 and the rule is accurate to rounding for a smooth,
    // decaying integrand).
    for spec in [
        ModelSpec::Mixture(MixtureSpec::heikkila(100.0, 1000)),
        odd_mixture(),
    ] {
        let model = spec.build().unwrap();
        let t = model.temperature();
        for theta in [[0.0f64, 1.0], [-2.0, 5.0], [1.0, 0.0]] {
            let lo = theta[0].min(theta[0] + theta[1]) - 40.0;
            let step = 0.01;
            let m = ((theta[1].abs() + 80.0) / step).round() as usize;
            let integral: f64 = (0..=m)
                .map(|k| {
                    let edge = if k == 0 || k == m { 0.5 } else { 1.0 };
                    edge * (model.log_lik_row(&theta, &[lo + k as f64 * step]) / t).exp()
                })
                .sum::<f64>()
                * step;
            assert!(
                (integral - 1.0).abs() < 1e-10,
                "{spec:?} θ {theta:?}: {integral}"
            );
            for x in [-1.0, 0.3, 4.0] {
                let (a, b) = (
                    model.log_lik_row(&theta, &[x]),
                    model.log_lik_row(&swap_components(&theta), &[x]),
                );
                assert!((a - b).abs() < 1e-12 * a.abs().max(1.0), "{a} vs {b}");
            }
        }
    }
    // Both components hopeless: −∞, not NaN from −∞ − (−∞).
    let model = odd_mixture().build().unwrap();
    assert_eq!(model.log_lik_row(&[1e200, 0.0], &[0.0]), f64::NEG_INFINITY);
}

#[test]
fn mixture_clipped_sum_is_a_plain_clip_loop_even_at_non_finite_ratios() {
    let spec = odd_mixture();
    let model = spec.build().unwrap();
    let data = model.simulate(&spec.true_theta(), 777, &mut ChaCha8Rng::seed_from_u64(21));
    let naive = |theta: &[f64], prop: &[f64], bound: f64| {
        let mut sum = 0.0;
        let mut clipped = 0;
        for x in data.col(0) {
            let r = model.log_lik_row(prop, &[*x]) - model.log_lik_row(theta, &[*x]);
            sum += clip(r, bound);
            clipped += u64::from(clip(r, bound) != r);
        }
        (sum, clipped)
    };
    let theta = [-0.4, 1.9];
    for (prop, bound) in [
        ([-0.38, 1.95], 0.01),
        ([-0.38, 1.95], f64::INFINITY),
        ([1.5, -2.0], 0.5),
        // Overflow: ℓ(x|θ′) = −∞, every ratio −∞, every row clipped to −bound.
        ([1e200, 0.0], 0.3),
        // ∞ − ∞ inside the exponents: NaN ratios, which clip also maps to −bound.
        ([f64::INFINITY, f64::NEG_INFINITY], 0.3),
        ([f64::NAN, 0.0], 0.3),
    ] {
        let (sum, clipped) = naive(&theta, &prop, bound);
        let got = model.clipped_llr_sum(&data, &theta, &prop, bound);
        assert!(
            (got.sum - sum).abs() <= 1e-12 * sum.abs().max(1.0),
            "θ′ {prop:?}: {} vs {sum}",
            got.sum
        );
        assert_eq!(got.clipped, clipped, "θ′ {prop:?}");
        if !prop[0].is_finite() || prop[0] > 1e100 {
            assert!((got.sum + 0.3 * 777.0).abs() < 1e-9, "{}", got.sum);
            assert_eq!(got.clipped, 777);
        }
    }
}

#[test]
fn mixture_simulation_follows_the_likelihood() {
    // x = θ1 + Bθ2 + ε with B ~ Bernoulli(½): mean θ1 + θ2/2, variance σx² + θ2²/4.
    let spec = odd_mixture();
    let model = spec.build().unwrap();
    let n = 40_000;
    let data = model.simulate(&[-0.5, 2.0], n, &mut ChaCha8Rng::seed_from_u64(22));
    assert_eq!((data.n(), data.d()), (n, 1));
    let (mean, sd, se_mean, se_sd) = moments(data.col(0));
    assert!((mean - 0.5).abs() < 4.0 * se_mean, "mean {mean}");
    let expect_sd = (1.5f64 + 1.0).sqrt();
    assert!((sd - expect_sd).abs() < 4.0 * se_sd, "sd {sd}");
    assert!(model.exact_posterior(&data).is_none());
}

#[test]
fn mixture_posterior_is_bimodal_with_nearly_equal_modes() {
    // n = 1000 rows at θ = (0, 1), T = 1. The likelihood is the same at θ and at its
    // relabelling (θ1 + θ2, −θ2), so the two half-planes' masses differ only through the prior:
    // mass(θ2 < 0) = Σ_{θ2 > 0} p(θ) · prior(θ̃)/prior(θ) with θ̃ the relabelling, and the prior
    // ratio exp(−(2θ1θ2 + θ2²)/(2σ1²)) is e^{−0.05} ≈ 0.95 at (0, 1). So neither mode is
    // negligible: the prior makes (0, 1) only ~5% more probable than (1, −1).
    let spec = ModelSpec::Mixture(MixtureSpec::heikkila(1000.0, 1000));
    let model = spec.build().unwrap();
    assert_eq!(model.temperature(), 1.0);
    let data = model.simulate(&spec.true_theta(), 1000, &mut ChaCha8Rng::seed_from_u64(26));
    // Square cells of side h, an odd number per axis and θ2's centres at k·h, k ∈ −100..=100:
    // the relabelling maps cell centres onto cell centres (it shifts θ1 by k·h), so the
    // identity above holds on the grid up to rounding and the mass whose image leaves the box.
    let (cells, h) = (201, 0.025);
    let half = cells as f64 * h / 2.0;
    let lower = [-1.75, -half];
    let upper = [-1.75 + 2.0 * half, half];
    let start = std::time::Instant::now();
    let grid = GridPosterior::new(&*model, &data, lower, upper, cells).unwrap();
    eprintln!(
        "mixture grid {cells}² over 1000 rows: {:.2?}, edge mass {:.1e}",
        start.elapsed(),
        grid.edge_mass()
    );
    let cells_vec: Vec<([f64; 2], f64)> = grid.cells().collect();
    let mass = |f: &dyn Fn(&[f64; 2]) -> bool| -> f64 {
        cells_vec.iter().filter(|(t, _)| f(t)).map(|(_, p)| p).sum()
    };
    let (up, down) = (mass(&|t| t[1] > h / 2.0), mass(&|t| t[1] < -h / 2.0));
    let prior_ratio =
        |t: &[f64; 2]| (model.log_prior(&swap_components(t)) - model.log_prior(t)).exp();
    let predicted: f64 = cells_vec
        .iter()
        .filter(|(t, _)| t[1] > h / 2.0)
        .map(|(t, p)| p * prior_ratio(t))
        .sum();
    eprintln!(
        "mass θ2 > 0: {up:.4}, θ2 < 0: {down:.4}, θ2 = 0 row: {:.2e}; predicted θ2 < 0 from θ2 > 0: {predicted:.6} (off by {:.1e}); mean {:?}, sd {:?}",
        1.0 - up - down,
        down - predicted,
        grid.mean(),
        grid.sd()
    );
    assert!(up >= 0.1 && down >= 0.1, "{up}, {down}");
    // Images leaving the box carry < the edge mass (2e-23 here); rounding is ~1e-15.
    assert!((down - predicted).abs() < 1e-9, "{down} vs {predicted}");
    // The ratio is the prior ratio averaged over the θ2 > 0 mode, e^{−0.05} at its centre.
    assert!((down / up - (-0.05f64).exp()).abs() < 0.05, "{}", down / up);
    // Each half-plane's mass sits near its mode: within 0.5 of (0, 1) and of (1, −1).
    let near = |m: [f64; 2]| mass(&|t| (t[0] - m[0]).hypot(t[1] - m[1]) < 0.5);
    let (near_a, near_b) = (near([0.0, 1.0]), near([1.0, -1.0]));
    eprintln!("mass within 0.5 of (0, 1): {near_a:.4}, of (1, −1): {near_b:.4}");
    assert!(
        near_a > 0.9 * up && near_b > 0.9 * down,
        "{near_a}, {near_b}"
    );
}

#[test]
fn mixture_spec_round_trips_and_validates() {
    let heikkila = ModelSpec::Mixture(MixtureSpec::heikkila(100.0, 10_000));
    let ModelSpec::Mixture(s) = &heikkila else {
        unreachable!()
    };
    assert_eq!(
        (s.prior_var.clone(), s.lik_var, s.temperature),
        (vec![10.0, 1.0], 2.0, 0.01)
    );
    assert_eq!(heikkila.true_theta(), vec![0.0, 1.0]);
    assert_eq!(odd_mixture().true_theta(), vec![-0.5, 2.0]);
    // `common` has no TOML dependency; JSON goes through the same serde derive.
    for spec in [heikkila.clone(), odd_mixture()] {
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<ModelSpec>(&json).unwrap(), spec);
    }
    let spec: ModelSpec =
        serde_json::from_str(r#"{"kind": "mixture", "prior_var": [10, 1], "lik_var": 2}"#).unwrap();
    assert_eq!(spec, ModelSpec::Mixture(MixtureSpec::heikkila(1.0, 1)));
    assert!(
        serde_json::from_str::<ModelSpec>(
            r#"{"kind": "mixture", "prior_var": [10, 1], "lik_var": 2, "weights": [0.5, 0.5]}"#
        )
        .unwrap_err()
        .to_string()
        .contains("unknown field")
    );
    let model = spec.build().unwrap();
    assert_eq!(
        (model.name(), model.dim(), model.row_dim()),
        ("mixture", 2, 1)
    );

    let invalid = |f: &dyn Fn(&mut MixtureSpec)| {
        let mut s = MixtureSpec::heikkila(1.0, 1);
        f(&mut s);
        ModelSpec::Mixture(s).build().unwrap_err()
    };
    assert_eq!(
        invalid(&|s| s.prior_var = vec![1.0; 3]),
        ModelError::LengthMismatch {
            field: "prior_var",
            expected: 2,
            got: 3
        }
    );
    assert_eq!(
        invalid(&|s| s.prior_var[1] = 0.0),
        ModelError::NotPositive {
            field: "prior_var",
            value: 0.0
        }
    );
    assert!(matches!(
        invalid(&|s| s.lik_var = f64::NAN),
        ModelError::NotPositive {
            field: "lik_var",
            ..
        }
    ));
    assert!(matches!(
        ModelSpec::Mixture(MixtureSpec::heikkila(100.0, 0))
            .build()
            .unwrap_err(),
        ModelError::NotPositive {
            field: "temperature",
            ..
        }
    ));
    assert!(matches!(
        invalid(&|s| s.true_theta = Some(vec![0.0, f64::INFINITY])),
        ModelError::NotFinite {
            field: "true_theta",
            ..
        }
    ));
}

#[test]
fn mixture_fingerprint_tracks_likelihood_hyperparameters_only() {
    let fp = |s: MixtureSpec| ModelSpec::Mixture(s).build().unwrap().fingerprint();
    let base = MixtureSpec::heikkila(1.0, 1);
    let golden = fp(base.clone());
    // Golden value, as for the banana: it must only change deliberately.
    assert_eq!(golden, "bf4c805613093900");
    assert_eq!(
        golden,
        fp(MixtureSpec {
            prior_var: vec![1.0, 1.0],
            true_theta: Some(vec![2.0, 2.0]),
            ..base.clone()
        })
    );
    for changed in [
        MixtureSpec {
            lik_var: 2.5,
            ..base.clone()
        },
        MixtureSpec::heikkila(1.0, 2),
    ] {
        assert_ne!(golden, fp(changed));
    }
    assert_ne!(
        golden,
        ModelSpec::flat_banana(2).build().unwrap().fingerprint()
    );
}

// ---------------------------------------------------------------------------------------------
// Generalised linear models over named, bounded columns.

/// Every corner of a GLM's box of admitted rows (features and label at their bounds): the
/// rows where its ratio and gradient bounds are attained, if anywhere.
fn glm_corners(model: &dyn Model) -> Columns {
    let bounds: Vec<[f64; 2]> = model
        .columns()
        .iter()
        .map(|c| c.bounds.expect("a GLM bounds every column"))
        .collect();
    let corners: Vec<Vec<f64>> = (0..1usize << bounds.len())
        .map(|mask| {
            (0..bounds.len())
                .map(|j| bounds[j][(mask >> j) & 1])
                .collect()
        })
        .collect();
    Columns::from_rows(bounds.len(), &corners).unwrap()
}

/// The model's public bounds hold on every admitted row, so a clip at them never binds: on
/// simulated rows and on the box's corners, at θ near the truth and far from it, for full,
/// one-component and long steps; and near the truth the ratio bound is attained within a
/// factor of 4 at a corner (it is not vacuous; far from the truth the largest score and the
/// longest reach x̃ᵀ(θ′ − θ) fall on different corners).
#[test]
fn glm_clips_at_the_public_bounds_never_bind() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    for spec in glm_specs() {
        let model = spec.build().unwrap();
        let (d, t) = (model.dim(), model.temperature());
        let truth = spec.true_theta();
        let simulated = model.simulate(&truth, 2000, &mut rng);
        let corners = glm_corners(&*model);
        for sd in [0.01, 0.3, 2.0] {
            let theta = add(&truth, &normals(&mut rng, d, sd));
            let mut one_component = theta.clone();
            one_component[d - 1] += sd;
            for prop in [add(&theta, &normals(&mut rng, d, sd)), one_component] {
                let bound = model.ratio_bound(&theta, &prop).unwrap();
                for data in [&simulated, &corners] {
                    let sum = model.clipped_llr_sum(data, &theta, &prop, t * bound);
                    assert_eq!(sum.clipped, 0, "{spec:?} sd {sd}");
                }
                let worst = naive_ratios(&*model, &corners, &theta, &prop)
                    .iter()
                    .fold(0.0f64, |m, r| m.max(r.abs()));
                assert!(worst <= t * bound, "{spec:?}");
                assert!(
                    sd > 0.01 || 4.0 * worst >= t * bound,
                    "{spec:?}: {worst} {bound}"
                );
            }
            let bound = model.gradient_bound(&theta).unwrap();
            for data in [&simulated, &corners] {
                let mut g = vec![0.0; d];
                assert_eq!(
                    model.clipped_grad_sum(data, &theta, t * bound, &mut g),
                    0,
                    "{spec:?} sd {sd}"
                );
            }
        }
    }
}

/// At θ so large that a predictor's range is not a number (features within [2, 3], so
/// θ = (−f64::MAX, f64::MAX) makes it −∞ + ∞), a GLM of any family claims no bound (∞), so
/// a party keeps the run's clip instead of trusting a meaningless one.
#[test]
fn glm_bounds_at_absurd_theta_defer_to_the_run_clip() {
    for family in [Family::Gaussian, Family::Logistic, Family::Poisson] {
        let mut spec = GlmSpec::example(family, 3);
        spec.intercept = false;
        spec.true_theta = None;
        for feature in &mut spec.features {
            feature.bounds = Some([2.0, 3.0]);
        }
        let model = ModelSpec::Glm(spec).build().unwrap();
        let theta = [-f64::MAX, f64::MAX];
        let far = model.ratio_bound(&theta, &[0.0, 0.0]);
        assert_eq!(far, Some(f64::INFINITY), "{family:?}");
        assert_eq!(
            model.gradient_bound(&theta),
            Some(f64::INFINITY),
            "{family:?}"
        );
    }
}

/// A logistic GLM's ratio is Lipschitz everywhere: its bound never exceeds max‖x̃‖·‖θ′ − θ‖.
#[test]
fn logistic_ratio_bound_is_within_the_feature_norm() {
    let spec = GlmSpec::example(Family::Logistic, 3);
    let model = ModelSpec::Glm(spec).build().unwrap();
    let max_norm = (1.0f64 + 4.0 + 4.0).sqrt();
    let mut rng = ChaCha8Rng::seed_from_u64(22);
    for sd in [0.1, 10.0, 1e3] {
        let theta = normals(&mut rng, 3, sd);
        let prop = add(&theta, &normals(&mut rng, 3, sd));
        let distance = fedmcmc_common::clip::distance(&theta, &prop);
        let bound = model.ratio_bound(&theta, &prop).unwrap();
        assert!(bound <= max_norm * distance * (1.0 + 1e-9), "{bound}");
        assert!(model.gradient_bound(&theta).unwrap() <= max_norm * (1.0 + 1e-9));
    }
}

#[test]
fn glm_simulation_stays_within_the_bounds_and_follows_the_family() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    for spec in glm_specs() {
        let ModelSpec::Glm(glm) = &spec else {
            unreachable!()
        };
        let model = spec.build().unwrap();
        let truth = spec.true_theta();
        let data = model.simulate(&truth, 40_000, &mut rng);
        for (j, column) in model.columns().iter().enumerate() {
            let [lo, hi] = column.bounds.unwrap();
            assert!(
                data.col(j).iter().all(|v| (lo..=hi).contains(v)),
                "{spec:?}"
            );
        }
        // The label's residual from its mean given η has mean 0 (and, for the gaussian
        // family, the noise sd).
        let residuals: Vec<f64> = rows(&data)
            .iter()
            .map(|x| {
                let p = x.len() - 1;
                let eta: f64 = (if glm.intercept { truth[0] } else { 0.0 })
                    + truth[usize::from(glm.intercept)..]
                        .iter()
                        .zip(&x[..p])
                        .map(|(t, v)| t * v)
                        .sum::<f64>();
                let mean = match glm.family {
                    Family::Gaussian => eta,
                    Family::Logistic => 1.0 / (1.0 + (-eta).exp()),
                    Family::Poisson => eta.exp(),
                };
                x[p] - mean
            })
            .collect();
        let (mean, sd, se_mean, se_sd) = moments(&residuals);
        assert!(mean.abs() < 4.0 * se_mean, "{spec:?}: residual mean {mean}");
        if let Some(noise) = glm.noise_sd {
            assert!(
                (sd - noise).abs() < 4.0 * se_sd,
                "{spec:?}: residual sd {sd}"
            );
        }
    }
}

#[test]
fn glm_columns_and_fingerprint_follow_the_configuration() {
    let base = GlmSpec::example(Family::Poisson, 3);
    let model = ModelSpec::Glm(base.clone()).build().unwrap();
    let columns: Vec<(String, Option<[f64; 2]>)> = model
        .columns()
        .into_iter()
        .map(|c| (c.name, c.bounds))
        .collect();
    assert_eq!(
        columns,
        [
            ("feature1".to_string(), Some([-1.0, 1.0])),
            ("feature2".to_string(), Some([-1.0, 1.0])),
            ("label".to_string(), Some([0.0, 100.0])),
        ]
    );
    assert_eq!((model.dim(), model.row_dim()), (3, 3));
    let fp = |f: &dyn Fn(&mut GlmSpec)| {
        let mut s = base.clone();
        f(&mut s);
        ModelSpec::Glm(s).build().unwrap().fingerprint()
    };
    let same = fp(&|_| ());
    assert_eq!(same, fp(&|s| s.prior_sd = vec![1.0, 2.0, 3.0]));
    assert_eq!(same, fp(&|s| s.true_theta = None));
    for changed in [
        fp(&|s| {
            s.family = Family::Logistic;
            s.label.bounds = Some([0.0, 1.0]);
        }),
        fp(&|s| s.features[1].name = "dose".into()),
        fp(&|s| s.features[0].bounds = Some([-1.0, 2.0])),
        fp(&|s| s.label.bounds = Some([0.0, 50.0])),
        fp(&|s| s.label.name = "count".into()),
        fp(&|s| {
            s.intercept = false;
            s.prior_sd = vec![10.0];
            s.true_theta = None;
        }),
        fp(&|s| s.temperature = 0.5),
    ] {
        assert_ne!(same, changed);
    }
    let gaussian = |sd: f64| {
        ModelSpec::Glm(GlmSpec {
            noise_sd: Some(sd),
            ..GlmSpec::example(Family::Gaussian, 3)
        })
        .build()
        .unwrap()
        .fingerprint()
    };
    assert_ne!(gaussian(1.0), gaussian(2.0));
}

#[test]
fn glm_specs_deserialise_and_are_validated_clearly() {
    let spec: ModelSpec = serde_json::from_str(
        r#"{"kind": "glm", "family": "logistic", "label": {"name": "outcome"},
            "features": [{"name": "age", "bounds": [18, 90]}], "prior_sd": [10.0]}"#,
    )
    .unwrap();
    let ModelSpec::Glm(glm) = &spec else { panic!() };
    assert!(glm.intercept && glm.temperature == 1.0 && glm.noise_sd.is_none());
    assert_eq!(spec.build().unwrap().dim(), 2);
    for s in glm_specs() {
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<ModelSpec>(&json).unwrap(), s);
    }
    let error = |f: &dyn Fn(&mut GlmSpec)| {
        let mut s = GlmSpec::example(Family::Gaussian, 3);
        f(&mut s);
        ModelSpec::Glm(s).build().unwrap_err().to_string()
    };
    type Case<'a> = (&'a dyn Fn(&mut GlmSpec), &'a str);
    let cases: [Case; 11] = [
        (
            &|s| s.features[1].name = "feature1".into(),
            "column feature1 is named twice",
        ),
        (
            &|s| s.label.name = "feature2".into(),
            "column feature2 is named twice",
        ),
        (
            &|s| s.features[0].name = "1st; DROP".into(),
            "column name \"1st; DROP\" is not a plain identifier",
        ),
        (
            &|s| s.features[0].bounds = Some([2.0, 2.0]),
            "column feature1: bounds [2, 2] must be finite with lo < hi",
        ),
        (
            &|s| s.features[1].bounds = Some([0.0, f64::INFINITY]),
            "column feature2: bounds [0, inf] must be finite with lo < hi",
        ),
        (
            &|s| s.features[0].bounds = None,
            "column feature1 needs public bounds = [lo, hi]",
        ),
        (
            &|s| s.label.bounds = None,
            "column label needs public bounds = [lo, hi]",
        ),
        (
            &|s| s.noise_sd = None,
            "the gaussian family: noise_sd is required",
        ),
        (
            &|s| s.features.clear(),
            "the glm (features) model needs dimension at least 1, got 0",
        ),
        (
            &|s| s.prior_sd = vec![1.0, 1.0],
            "prior_sd has length 2, expected 3",
        ),
        (
            &|s| s.noise_sd = Some(0.0),
            "noise_sd must be positive and finite, got 0",
        ),
    ];
    for (change, message) in cases {
        let got = error(change);
        assert!(got.starts_with(message), "{got}");
    }
    let family = |family: Family, label: Option<[f64; 2]>, noise_sd: Option<f64>| {
        let mut s = GlmSpec::example(family, 2);
        s.label = GlmColumn::new("y", label);
        s.noise_sd = noise_sd;
        ModelSpec::Glm(s)
            .build()
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        family(Family::Logistic, Some([0.0, 2.0]), None),
        Err("the logistic family: the label's bounds must lie within [0, 1]".into())
    );
    assert_eq!(
        family(Family::Logistic, None, Some(1.0)),
        Err("the logistic family: noise_sd applies to the gaussian family only".into())
    );
    assert_eq!(
        family(Family::Poisson, Some([-1.0, 5.0]), None),
        Err("the poisson family: the label is a count: its lower bound must be ≥ 0".into())
    );
    assert_eq!(family(Family::Poisson, Some([0.0, 5.0]), None), Ok(()));
}

/// The gaussian GLM's sufficient statistics (Yıldırım & Ermiş 2019, Alg. 3): ⟨S, φ(θ′) − φ(θ)⟩
/// is the tempered log-likelihood ratio over the rows, each row's ‖T·s(x)‖ is within the
/// public row bound (attained at a corner of the box), and the noisy ratio's variance is
/// eq. 8's σ²‖φ(θ′) − φ(θ)‖². The other families have none.
#[test]
fn gaussian_glm_sufficient_statistics_give_the_ratio() {
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    for spec in glm_specs() {
        let model = spec.build().unwrap();
        let Some(family) = model.sufficient_statistics() else {
            assert!(!matches!(&spec, ModelSpec::Glm(g) if g.family == Family::Gaussian));
            continue;
        };
        let d = model.dim();
        let data = model.simulate(&spec.true_theta(), 500, &mut rng);
        let stats = family.sum(&data);
        assert_eq!(stats.len(), family.entries());
        for _ in 0..5 {
            let theta = add(&spec.true_theta(), &normals(&mut rng, d, 0.5));
            let prop = add(&theta, &normals(&mut rng, d, 0.5));
            let naive: f64 = naive_ratios(&*model, &data, &theta, &prop).iter().sum();
            let (ratio, variance) =
                fedmcmc_common::models::noisy_log_lik_ratio(family, &stats, 2.0, &theta, &prop);
            assert!(
                (ratio - naive).abs() <= 1e-9 * naive.abs().max(1.0),
                "{ratio} vs {naive}"
            );
            let c = family.ratio_coefficients(&theta, &prop);
            assert_eq!(variance, 2.0 * c.iter().map(|c| c * c).sum::<f64>());
        }
        let corners = glm_corners(&*model);
        let norms: Vec<f64> = rows(&corners)
            .iter()
            .map(|x| {
                let one = Columns::from_rows(x.len(), &[x]).unwrap();
                family.sum(&one).iter().map(|v| v * v).sum::<f64>().sqrt()
            })
            .collect();
        let largest = norms.iter().fold(0.0f64, |m, v| m.max(*v));
        let bound = family.row_bound();
        assert!(
            largest <= bound * (1.0 + 1e-12) && largest >= bound * (1.0 - 1e-12),
            "{largest} vs {bound}"
        );
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
