//! The exact discrete Gaussian sampler (common/src/discrete_gaussian.rs) against exact
//! probabilities: χ² goodness of fit over binned support with an explicit critical value
//! (α = 10⁻³, fixed seeds), proportions within five standard errors, and its edge cases.
//! Bigger samples run in release: `cargo run --release -p fedmcmc-common --example
//! discrete_gaussian`.
use fedmcmc_common::discrete_gaussian::{
    DiscreteGaussian, DiscreteGaussianError, bernoulli_exp, discrete_gaussian_variance,
    sample_discrete_laplace, uniform_below,
};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

#[path = "support/dgauss_gof.rs"]
mod gof;
use gof::{ALPHA, chi_square, exact_dgauss_cdf, normal_dgauss_cdf};

fn draw(g: &DiscreteGaussian, n: usize, seed: u64) -> Vec<i128> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    (0..n).map(|_| g.sample(&mut rng)).collect()
}

fn assert_fits(label: &str, samples: &[i128], cuts: &[i128], cdf: &dyn Fn(i128) -> f64) {
    let (stat, critical, dof) = chi_square(samples, cuts, cdf);
    println!("{label}: chi2 = {stat:.2} on {dof} dof, critical {critical:.2} (alpha {ALPHA})");
    assert!(
        stat < critical,
        "{label}: chi2 {stat} >= {critical} on {dof} dof"
    );
}

/// Sample variance within five standard errors (√(2/n)·Var for a near-normal law, with
/// room for the kurtosis of small σ) of the exact variance.
fn assert_variance(label: &str, samples: &[i128], exact: f64) {
    let n = samples.len() as f64;
    let mean = samples.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = samples
        .iter()
        .map(|&x| (x as f64 - mean).powi(2))
        .sum::<f64>()
        / (n - 1.0);
    let fourth = samples.iter().map(|&x| (x as f64).powi(4)).sum::<f64>() / n;
    let se = ((fourth - exact * exact) / n).sqrt();
    println!("{label}: sample variance {var:.6e}, exact {exact:.6e}, se {se:.2e}");
    assert!(
        (var - exact).abs() < 5.0 * se,
        "{label}: variance {var} vs {exact} (se {se})"
    );
}

#[test]
fn discrete_gaussian_matches_its_exact_pmf_below_one_grid_step() {
    for (sigma, seed) in [(0.3, 1u64), (0.8, 2)] {
        let g = DiscreteGaussian::from_sigma_and_step(sigma, 1.0).unwrap();
        let s2 = g.sigma_sq_f64();
        let samples = draw(&g, 40_000, seed);
        let cuts: Vec<i128> = (-6..=5).collect();
        assert_fits(
            &format!("sigma {sigma}"),
            &samples,
            &cuts,
            &exact_dgauss_cdf(s2),
        );
        assert_variance(
            &format!("sigma {sigma}"),
            &samples,
            discrete_gaussian_variance(s2),
        );
    }
}

#[test]
fn discrete_gaussian_matches_its_exact_pmf_for_rational_variances() {
    // σ² = 1, 7/3, a fine dyadic σ² from σ = 12.345 and σ = 10³.
    let cases = [
        ("sigma^2 = 1", DiscreteGaussian::new(1, 1).unwrap(), 3u64),
        ("sigma^2 = 7/3", DiscreteGaussian::new(7, 3).unwrap(), 4),
        (
            "sigma = 12.345",
            DiscreteGaussian::from_sigma_and_step(12.345, 1.0).unwrap(),
            5,
        ),
        (
            "sigma = 1e3",
            DiscreteGaussian::new(1_000_000, 1).unwrap(),
            6,
        ),
    ];
    for (label, g, seed) in cases {
        let s2 = g.sigma_sq_f64();
        let sigma = s2.sqrt();
        let samples = draw(&g, 40_000, seed);
        // Integers for small σ, 40 equal bins over ±4σ otherwise.
        let cuts: Vec<i128> = if sigma < 5.0 {
            (-20..=20).collect()
        } else {
            (-20..20)
                .map(|i| (i as f64 * sigma / 5.0).round() as i128)
                .collect()
        };
        assert_fits(label, &samples, &cuts, &exact_dgauss_cdf(s2));
        assert_variance(label, &samples, discrete_gaussian_variance(s2));
    }
}

#[test]
fn discrete_gaussian_at_a_million_grid_steps_and_its_low_bits() {
    // σ = 10⁶ (integer σ²), and σ² = (2^63 + 1)/2^27 ≈ 2^36, whose d·t makes |Y|·d·t
    // exceed 2^64 and so exercises the 256-bit acceptance path.
    let cases = [
        (
            "sigma = 1e6",
            DiscreteGaussian::new(1_000_000_000_000, 1).unwrap(),
            7u64,
        ),
        (
            "sigma^2 = (2^63+1)/2^27",
            DiscreteGaussian::new((1 << 63) + 1, 1 << 27).unwrap(),
            8,
        ),
    ];
    for (label, g, seed) in cases {
        let s2 = g.sigma_sq_f64();
        let sigma = s2.sqrt();
        let samples = draw(&g, 40_000, seed);
        let cuts: Vec<i128> = (-20..20)
            .map(|i| (i as f64 * sigma / 5.0).round() as i128)
            .collect();
        assert_fits(label, &samples, &cuts, &normal_dgauss_cdf(sigma));
        assert_variance(label, &samples, discrete_gaussian_variance(s2));
        // The residue mod 16 is uniform up to 2e^{−2π²σ²/256}: the low bits carry nothing.
        let residues: Vec<i128> = samples.iter().map(|x| x.rem_euclid(16)).collect();
        let cuts: Vec<i128> = (0..15).collect();
        assert_fits(&format!("{label} mod 16"), &residues, &cuts, &|x: i128| {
            ((x + 1).clamp(0, 16)) as f64 / 16.0
        });
    }
}

#[test]
fn bernoulli_exp_matches_exp_minus_gamma() {
    let n = 100_000;
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let big = 1u128 << 127;
    let cases: [(u128, u128); 10] = [
        (0, 1),
        (1, 3),
        (1, 2),
        (1, 1),
        (3, 2),
        (7, 3),
        (5, 1),
        (10, 3),
        // Denominators so large that b·k overflows: the split Bernoulli(r/b)·Bernoulli(1/k).
        (big - 1, big),
        (3 << 100, 1 << 101),
    ];
    for (num, den) in cases {
        let gamma = num as f64 / den as f64;
        let p = (-gamma).exp();
        let hits = (0..n).filter(|_| bernoulli_exp(num, den, &mut rng)).count();
        let phat = hits as f64 / n as f64;
        let se = (p * (1.0 - p) / n as f64).sqrt();
        println!("gamma {num}/{den}: {phat:.5} vs exp(-gamma) {p:.5} (se {se:.1e})");
        if num == 0 {
            assert_eq!(hits, n, "exp(0) = 1 exactly");
        } else {
            assert!(
                (phat - p).abs() < 5.0 * se,
                "gamma {num}/{den}: {phat} vs {p}"
            );
        }
    }
}

#[test]
fn discrete_laplace_matches_its_pmf() {
    for (t, seed) in [(1u64, 21u64), (2, 22), (7, 23), (100, 24)] {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let samples: Vec<i128> = (0..40_000)
            .map(|_| sample_discrete_laplace(t, &mut rng))
            .collect();
        // P[Y = y] = (1 − r)/(1 + r)·r^|y|, r = e^{−1/t}: P[Y ≤ b] = 1 − r^{b+1}/(1 + r) for
        // b ≥ 0 and r^{−b}/(1 + r) for b < 0.
        let r = (-1.0 / t as f64).exp();
        let cdf = move |b: i128| {
            if b >= 0 {
                1.0 - r.powi((b + 1) as i32) / (1.0 + r)
            } else {
                r.powi((-b) as i32) / (1.0 + r)
            }
        };
        let width = (t as i128 / 4).max(1);
        let cuts: Vec<i128> = (-30..30).map(|i| i * width).collect();
        assert_fits(&format!("laplace t = {t}"), &samples, &cuts, &cdf);
        let var = 2.0 * r / (1.0 - r).powi(2);
        let n = samples.len() as f64;
        let sample_var = samples.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / n;
        assert!(
            (sample_var - var).abs() < 5.0 * var * (5.0 / n).sqrt(),
            "laplace t = {t}: variance {sample_var} vs {var}"
        );
    }
}

#[test]
fn uniform_below_has_no_modulo_bias() {
    let n = 100_000;
    let mut rng = ChaCha20Rng::seed_from_u64(31);
    // About 2/3 of 2^64 and 3/4 of 2^128: a modulo of one raw word would put 2/3 and 5/8 of
    // the draws below m/2.
    for m in [0xAAAA_AAAA_AAAA_AAABu128, 3u128 << 126] {
        let below = (0..n)
            .filter(|_| {
                let x = uniform_below(m, &mut rng);
                assert!(x < m);
                x < m / 2
            })
            .count();
        let phat = below as f64 / n as f64;
        assert!(
            (phat - 0.5).abs() < 5.0 * (0.25 / n as f64).sqrt(),
            "m = {m}: {phat}"
        );
    }
    for _ in 0..100 {
        assert_eq!(uniform_below(1, &mut rng), 0);
    }
    let samples: Vec<i128> = (0..30_000)
        .map(|_| uniform_below(6, &mut rng) as i128)
        .collect();
    assert_fits("uniform below 6", &samples, &[0, 1, 2, 3, 4], &|x: i128| {
        (x + 1).clamp(0, 6) as f64 / 6.0
    });
}

#[test]
fn variance_matches_a_direct_sum_and_the_stated_bounds() {
    let pi2 = std::f64::consts::PI * std::f64::consts::PI;
    for s2 in [
        1e-3, 0.01, 0.09, 0.25, 0.5, 0.64, 1.0, 2.0, 4.0, 4.5, 9.0, 100.0, 1e4,
    ] {
        // Direct sum, largest terms last, out to 60σ + 10.
        let reach = (60.0 * f64::sqrt(s2)).ceil() as i64 + 10;
        let (mut z, mut m2) = (0.0, 0.0);
        for k in (1..=reach).rev() {
            let w = (-((k * k) as f64) / (2.0 * s2)).exp();
            z += w;
            m2 += (k * k) as f64 * w;
        }
        let direct = 2.0 * m2 / (1.0 + 2.0 * z);
        let v = discrete_gaussian_variance(s2);
        println!("sigma^2 {s2}: variance {v:.17e}, direct sum {direct:.17e}");
        assert!(
            (v - direct).abs() <= 1e-13 * s2,
            "sigma^2 {s2}: {v} vs {direct}"
        );
        // CKS 2020: Var ≤ σ²(1 − 4π²σ²/(e^{4π²σ²} − 1)) < σ² (equal to σ² in f64 from
        // σ² ≈ 4 on).
        let cks = s2 * (1.0 - 4.0 * pi2 * s2 / (4.0 * pi2 * s2).exp_m1());
        assert!(
            v <= cks * (1.0 + 1e-15) && v <= s2,
            "sigma^2 {s2}: {v} vs {cks}"
        );
        // The module's gap bound for σ ≥ ½: σ² − Var ≤ 8π²σ⁴e^{−2π²σ²}(1 + 10⁻⁵), checked
        // where the gap is above rounding (σ² ≤ 2).
        if (0.25..=2.0).contains(&s2) {
            let gap = s2 - v;
            let bound = 8.0 * pi2 * s2 * s2 * (-2.0 * pi2 * s2).exp() * (1.0 + 1e-5);
            println!("  gap {gap:.3e} <= bound {bound:.3e}");
            assert!(gap <= bound + 4.0 * f64::EPSILON * s2, "sigma^2 {s2}");
        }
    }
    assert_eq!(discrete_gaussian_variance(0.0), 0.0);
    assert!(discrete_gaussian_variance(-1.0).is_nan());
    assert_eq!(discrete_gaussian_variance(1e12), 1e12);
    assert_eq!(
        DiscreteGaussian::new(7, 3).unwrap().variance(),
        discrete_gaussian_variance(7.0 / 3.0)
    );
}

#[test]
fn edge_cases_are_refused_or_defined() {
    assert_eq!(
        DiscreteGaussian::new(0, 5),
        Err(DiscreteGaussianError::ZeroVariance)
    );
    assert_eq!(
        DiscreteGaussian::new(1, 0),
        Err(DiscreteGaussianError::ZeroDenominator)
    );
    for (sigma, step) in [
        (0.0, 1.0),
        (-1.0, 1.0),
        (f64::NAN, 1.0),
        (1.0, 0.0),
        (1.0, f64::INFINITY),
    ] {
        assert_eq!(
            DiscreteGaussian::from_sigma_and_step(sigma, step),
            Err(DiscreteGaussianError::NotPositiveFinite),
            "sigma {sigma}, step {step}"
        );
    }
    assert!(matches!(
        DiscreteGaussian::new(u64::MAX, 1),
        Err(DiscreteGaussianError::OutOfRange { .. })
    ));
    assert!(matches!(
        DiscreteGaussian::from_sigma_and_step(1e300, 1.0),
        Err(DiscreteGaussianError::OutOfRange { .. })
    ));
    // Reduced by the gcd.
    assert_eq!(DiscreteGaussian::new(6, 4).unwrap().sigma_sq(), (3, 2));
    assert_eq!(DiscreteGaussian::new(6, 4).unwrap().laplace_scale(), 2);

    // Huge σ without overflow: σ² = 2^62 (σ = 2^31 grid steps) and σ = 10⁹ from floats.
    let mut rng = ChaCha20Rng::seed_from_u64(41);
    for g in [
        DiscreteGaussian::new(1 << 62, 1).unwrap(),
        DiscreteGaussian::from_sigma_and_step(1e9, 1.0).unwrap(),
    ] {
        let s2 = g.sigma_sq_f64();
        let n = 4_000;
        let m2 = (0..n)
            .map(|_| (g.sample(&mut rng) as f64).powi(2))
            .sum::<f64>()
            / n as f64;
        assert!(
            (m2 / s2 - 1.0).abs() < 5.0 * (2.0 / n as f64).sqrt(),
            "{m2} vs {s2}"
        );
    }
    assert_eq!(
        DiscreteGaussian::from_sigma_and_step(1e9, 1.0)
            .unwrap()
            .sigma_sq(),
        (1_000_000_000_000_000_000, 1)
    );

    // Tiny σ (σ² = 2^-40): P[X ≠ 0] ≈ 2e^{−2^39}, so every draw is 0.
    let g = DiscreteGaussian::new(1, 1 << 40).unwrap();
    assert!((0..1_000).all(|_| g.sample(&mut rng) == 0));
    assert_eq!(g.variance(), 0.0);

    // The same seed gives the same draws: the caller's RNG is the only randomness.
    let g = DiscreteGaussian::new(7, 3).unwrap();
    assert_eq!(draw(&g, 100, 5), draw(&g, 100, 5));
}
