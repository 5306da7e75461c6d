//! The exact discrete Gaussian sampler in release mode: (1) throughput, draws per second at
//! σ = 1, 10³ and 10⁶ grid steps against the floating-point noise releases used to carry (`value + std·z`,
//! a ziggurat normal) from the same ChaCha20 CSPRNG in the same
//! run, best of five; (2) χ² goodness of fit against the exact pmf on 10⁶ draws per σ, more
//! than the debug-profile tests afford.
//!
//! cargo run --release -p fedmcmc-common --example discrete_gaussian -- [draws per run]
#[path = "../tests/support/dgauss_gof.rs"]
mod gof;

use std::hint::black_box;
use std::time::Instant;

use fedmcmc_common::discrete_gaussian::{DiscreteGaussian, discrete_gaussian_variance};
use gof::{ALPHA, chi_square, exact_dgauss_cdf, normal_dgauss_cdf};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use rand_distr::{Distribution, StandardNormal};

const BATCH: usize = 1024;

/// Best of five runs of `draws` samples, in draws per second.
fn rate(draws: usize, mut run: impl FnMut(usize)) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            run(draws);
            draws as f64 / start.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

fn main() {
    let draws: usize = std::env::args()
        .nth(1)
        .map_or(2_000_000, |a| a.parse().expect("draws per run"));
    let values_f: Vec<f64> = (0..BATCH).map(|i| i as f64).collect();
    let values_i: Vec<i64> = (0..BATCH as i64).collect();

    println!("throughput, best of 5 runs of {draws} draws (batches of {BATCH}), ChaCha20:");
    println!("sampler                              draws/s      ziggurat draws/s  ratio");
    let cases = [
        ("sigma^2 = 1", DiscreteGaussian::new(1, 1).unwrap()),
        (
            "sigma^2 = 1e6",
            DiscreteGaussian::new(1_000_000, 1).unwrap(),
        ),
        (
            "sigma = 1000.3 (sigma^2 over 2^32)",
            DiscreteGaussian::from_sigma_and_step(1000.3, 1.0).unwrap(),
        ),
        (
            "sigma^2 = 1e12",
            DiscreteGaussian::new(1_000_000_000_000, 1).unwrap(),
        ),
        (
            "sigma^2 = (2^63+1)/2^27 (256-bit)",
            DiscreteGaussian::new((1 << 63) + 1, 1 << 27).unwrap(),
        ),
    ];
    for (label, g) in &cases {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let discrete = rate(draws, |n| {
            for _ in 0..n / BATCH {
                let out: Vec<i64> = values_i
                    .iter()
                    .map(|v| v + g.sample(&mut rng) as i64)
                    .collect();
                black_box(out);
            }
        });
        let std = g.sigma_sq_f64().sqrt();
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let ziggurat = rate(draws, |n| {
            for _ in 0..n / BATCH {
                let out: Vec<f64> = values_f
                    .iter()
                    .map(|v| {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        v + std * z
                    })
                    .collect();
                black_box(out);
            }
        });
        println!(
            "{label:36} {discrete:11.3e}  {ziggurat:16.3e}  {:.3}",
            discrete / ziggurat
        );
    }

    println!("\ngoodness of fit, 10^6 draws each, alpha = {ALPHA}:");
    let n = 1_000_000;
    let gof_cases = [
        (
            "sigma = 0.3",
            DiscreteGaussian::from_sigma_and_step(0.3, 1.0).unwrap(),
        ),
        (
            "sigma = 0.8",
            DiscreteGaussian::from_sigma_and_step(0.8, 1.0).unwrap(),
        ),
        ("sigma^2 = 1", DiscreteGaussian::new(1, 1).unwrap()),
        ("sigma^2 = 7/3", DiscreteGaussian::new(7, 3).unwrap()),
        (
            "sigma^2 = 1e6",
            DiscreteGaussian::new(1_000_000, 1).unwrap(),
        ),
        (
            "sigma^2 = 1e12",
            DiscreteGaussian::new(1_000_000_000_000, 1).unwrap(),
        ),
        (
            "sigma^2 = (2^63+1)/2^27",
            DiscreteGaussian::new((1 << 63) + 1, 1 << 27).unwrap(),
        ),
        // Where releases sample: σ between 2^30 and 2^31 grid steps (`mechanism.rs`).
        (
            "sigma = 1.5e9 (releases)",
            DiscreteGaussian::from_sigma_and_step(1.5e9, 1.0).unwrap(),
        ),
    ];
    for (seed, (label, g)) in gof_cases.iter().enumerate() {
        let mut rng = ChaCha20Rng::seed_from_u64(100 + seed as u64);
        let samples: Vec<i128> = (0..n).map(|_| g.sample(&mut rng)).collect();
        let s2 = g.sigma_sq_f64();
        let sigma = s2.sqrt();
        let (stat, critical, dof) = if sigma < 5.0 {
            let cuts: Vec<i128> = (-20..=20).collect();
            chi_square(&samples, &cuts, &exact_dgauss_cdf(s2))
        } else {
            let cuts: Vec<i128> = (-50..50)
                .map(|i| (i as f64 * sigma / 12.5).round() as i128)
                .collect();
            if sigma <= 1e3 {
                chi_square(&samples, &cuts, &exact_dgauss_cdf(s2))
            } else {
                chi_square(&samples, &cuts, &normal_dgauss_cdf(sigma))
            }
        };
        let residues: Vec<i128> = samples.iter().map(|x| x.rem_euclid(16)).collect();
        let cuts: Vec<i128> = (0..15).collect();
        let (low_stat, low_critical, _) = chi_square(&residues, &cuts, &|x: i128| {
            (x + 1).clamp(0, 16) as f64 / 16.0
        });
        let var = samples.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / n as f64;
        let exact = discrete_gaussian_variance(s2);
        println!(
            "{label:24} chi2 {stat:8.2} on {dof:3} dof (critical {critical:6.2}) {}  \
             E[X^2]/Var {:.5}  mod-16 chi2 {low_stat:6.2}{}",
            if stat < critical { "pass" } else { "FAIL" },
            var / exact,
            if sigma >= 100.0 {
                format!(" (critical {low_critical:.2})")
            } else {
                " (not uniform at this sigma)".to_string()
            },
        );
    }
}
