//! The Gaussian mixture (Heikkilä et al. 2019), which has no closed form.
use fedmcmc_common::clip::clip;
use fedmcmc_common::models::{ExactPosterior, GridPosterior, MixtureSpec, ModelError, ModelSpec};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::support::{moments, odd_mixture};

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
