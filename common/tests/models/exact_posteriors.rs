//! Exact posteriors against the unnormalised posterior and against their own samplers, and
//! the banana's curvature term in the posterior mean.
use fedmcmc_common::models::{BananaSpec, ModelSpec};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::support::{
    all_specs, correlated_gaussian, gaussian_glm, moments, odd_banana, odd_circle, odd_gaussian,
    rows,
};

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
