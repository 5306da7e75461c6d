//! What the latent curvature alone does to calibration. A quadratic summary's noise-aware
//! posterior (`noise_aware/quadratic.rs`) keeps the curvature A latent, measured by the
//! release's Â, under a prior ∝ (det A)^p. Its intervals are calibrated when every latent is
//! drawn from its prior; in the calibration table (`summaries_calibration`) θ is, but A is
//! not: it is the rows' own, nearly the same in every repetition. This example isolates
//! that: the summary's model holds exactly (ĝ ~ N(AΔ, A + σ²I) with A fixed, Â = A + noise,
//! θ drawn from N(0, I) each repetition), and each posterior is computed exactly (A by
//! importance sampling, θ given A in closed form: `tests/support/latent.rs`), so whatever
//! the intervals miss is the latent curvature's, not an approximation's or a sampler's.
//! Each repetition's releases are read five ways: A known; Â taken as exact (made positive
//! definite), the curvature's noise ignored; and A latent under p = 0, 1 (the product's)
//! and 2.
//!
//! cargo run --release -p fedmcmc-common --example latent_curvature -- [reps] [curvature sd] [noise sd] [seed] [A]
//!
//! Defaults: 400 repetitions; A = diag(420, 540, 540), Â's noise sd 77 and ĝ's 97, as in
//! the logistic calibration rows at d = 3, 2 000 rows and ε 0.5 (A the rows' own at one
//! repetition's finals' centre, the noise sds the release's). `A` is `diag` (that matrix,
//! the default), `rows0` or `rows`: the curvature of 2 000 fresh logistic rows with their
//! features uniform over [−2, 2] (the calibration example's at d = 3), Σ σ'(x̃ᵀc) x̃x̃ᵀ, at
//! the centre c = 0 or at a c drawn from θ's prior independently of θ, so that A varies
//! between repetitions as the rows' own does with the finals' centre, but says nothing of θ.
#[path = "../tests/support/latent.rs"]
mod latent;

use fedmcmc_common::diagnostics::quantile;
use fedmcmc_common::noise_aware::quadratic::{Release, positive_definite};
use latent::{LatentMarginals, NormalPrior};
use nalgebra::{DMatrix, DVector};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use statrs::function::erf::erfc;

/// Importance draws of A per posterior.
const DRAWS: usize = 20_000;
/// Rows in the calibration example at d = 3, whose curvature `rows0` and `rows` draw.
const ROWS: usize = 2_000;

fn main() {
    let arg = |n: usize, default: f64| {
        std::env::args()
            .nth(n)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let (reps, curvature_sd, noise_sd, seed) = (
        arg(1, 400.0) as usize,
        arg(2, 77.0),
        arg(3, 97.0),
        arg(4, 1.0) as u64,
    );
    let d = 3;
    let curvature_name = std::env::args()
        .nth(5)
        .unwrap_or_else(|| "diag".to_string());
    let curvature = Curvature::parse(&curvature_name).expect("A: diag, rows0 or rows");
    let (mean, sd) = (vec![0.0; d], vec![1.0; d]);
    let prior = NormalPrior {
        mean: &mean,
        sd: &sd,
    };
    let names = [
        "A known",
        "Â taken as exact",
        "A latent, p = 0",
        "A latent, p = 1",
        "A latent, p = 2",
    ];
    // Per way: per repetition, the share of its d intervals that covered (50 %, 90 %), and
    // the 90 % hits by coefficient.
    let mut shares = vec![Vec::new(); names.len()];
    let mut by_coefficient = vec![vec![0usize; d]; names.len()];
    // Per way, each interval's posterior sd over the known-A posterior's; every latent
    // posterior's effective importance draws.
    let mut widths = vec![Vec::new(); names.len()];
    let mut effective = Vec::new();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut normal = move || -> f64 { StandardNormal.sample(&mut rng) };
    let mut diagonal = Vec::new();
    for _ in 0..reps {
        let theta = DVector::from_fn(d, |_, _| normal());
        let a = curvature.draw(d, &mut normal);
        diagonal.push(a[(0, 0)]);
        let data_factor = a.clone().cholesky().expect("positive definite").l();
        let data = &data_factor * DVector::from_fn(d, |_, _| normal());
        let g = &a * &theta + data + DVector::from_fn(d, |_, _| noise_sd * normal());
        let mut a_hat = vec![vec![0.0; d]; d];
        for i in 0..d {
            for j in i..d {
                a_hat[i][j] = a[(i, j)] + curvature_sd * normal();
                a_hat[j][i] = a_hat[i][j];
            }
        }
        let release = Release {
            centre: mean.clone(),
            g: g.iter().copied().collect(),
            a: a_hat,
            noise_variance: noise_sd * noise_sd,
            curvature_noise_variance: curvature_sd * curvature_sd,
        };
        let mut posterior_rng = ChaCha8Rng::seed_from_u64(normal().to_bits());
        let posteriors = [
            LatentMarginals::known(&release, &prior, &a),
            LatentMarginals::known(&release, &prior, &plugged_in(&release)),
            LatentMarginals::latent(&release, &prior, 0.0, DRAWS, &mut posterior_rng),
            LatentMarginals::latent(&release, &prior, 1.0, DRAWS, &mut posterior_rng),
            LatentMarginals::latent(&release, &prior, 2.0, DRAWS, &mut posterior_rng),
        ];
        for (k, posterior) in posteriors.iter().enumerate() {
            if k > 1 {
                effective.push(posterior.effective_draws());
            }
            let mut share = [0.0; 2];
            for j in 0..d {
                widths[k].push(posterior.moments(j).1 / posteriors[0].moments(j).1);
                // An interval covers θⱼ iff θⱼ's posterior cdf is within its bounds.
                let at = posterior.cdf(j, theta[j]);
                share[0] += f64::from(u8::from((0.25..=0.75).contains(&at))) / d as f64;
                let covered = (0.05..=0.95).contains(&at);
                share[1] += f64::from(u8::from(covered)) / d as f64;
                by_coefficient[k][j] += usize::from(covered);
            }
            shares[k].push(share);
        }
    }
    println!(
        "{reps} repetitions, A {curvature_name} (A₀₀ 10/50/90 %: {:.0}, {:.0}, {:.0}), Â's noise sd {curvature_sd}, ĝ's {noise_sd}",
        quantile(&diagonal, 0.1),
        quantile(&diagonal, 0.5),
        quantile(&diagonal, 0.9)
    );
    println!(
        "posterior          50 %   90 %   se50   se90   sd/known¹ 90 % by coefficient (effective importance draws: fewest {:.0}, 1 % {:.0}, median {:.0})",
        quantile(&effective, 0.0),
        quantile(&effective, 0.01),
        quantile(&effective, 0.5)
    );
    for (k, name) in names.iter().enumerate() {
        let [(m50, s50), (m90, s90)] = [0, 1].map(|c| {
            let n = reps as f64;
            let m = shares[k].iter().map(|s| s[c]).sum::<f64>() / n;
            let var = shares[k].iter().map(|s| (s[c] - m).powi(2)).sum::<f64>() / (n - 1.0);
            (m, (var / n).sqrt())
        });
        let coefficients: Vec<String> = (by_coefficient[k].iter())
            .map(|h| format!("{:.3}", *h as f64 / reps as f64))
            .collect();
        println!(
            "{name:<18} {m50:.3}  {m90:.3}  {s50:.3}  {s90:.3}  {:.3}     {}",
            quantile(&widths[k], 0.5),
            coefficients.join(" ")
        );
    }
    println!("¹ the median over intervals of the posterior sd over the known-A posterior's");
}

/// Â made positive definite with the floor the product's plug-in posterior gives it (the
/// noise sd).
fn plugged_in(release: &Release) -> DMatrix<f64> {
    let d = release.centre.len();
    let a_hat = DMatrix::from_fn(d, d, |i, j| release.a[i][j]);
    positive_definite(&a_hat, release.curvature_noise_variance.sqrt())
}

/// Where each repetition's A comes from (the module's comment).
#[derive(Clone, Copy)]
enum Curvature {
    Diag,
    RowsAtZero,
    RowsAtPriorDraw,
}

impl Curvature {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "diag" => Some(Curvature::Diag),
            "rows0" => Some(Curvature::RowsAtZero),
            "rows" => Some(Curvature::RowsAtPriorDraw),
            _ => None,
        }
    }

    /// One repetition's A, drawing from `normal` (the rows' features as normals' cdfs).
    fn draw(self, d: usize, normal: &mut impl FnMut() -> f64) -> DMatrix<f64> {
        let centre = match self {
            Curvature::Diag => {
                return DMatrix::from_diagonal(&DVector::from_vec(vec![420.0, 540.0, 540.0]));
            }
            Curvature::RowsAtZero => DVector::zeros(d),
            Curvature::RowsAtPriorDraw => DVector::from_fn(d, |_, _| normal()),
        };
        let mut a = DMatrix::zeros(d, d);
        for _ in 0..ROWS {
            let x = DVector::from_fn(d, |j, _| {
                if j == 0 {
                    1.0
                } else {
                    let u = 0.5 * erfc(-normal() / std::f64::consts::SQRT_2);
                    4.0 * u - 2.0
                }
            });
            let p = 1.0 / (1.0 + (-x.dot(&centre)).exp());
            a += &x * x.transpose() * (p * (1.0 - p));
        }
        a
    }
}
