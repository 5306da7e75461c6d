//! What the latent curvature alone does to calibration. A quadratic summary's noise-aware
//! posterior (`noise_aware/quadratic.rs`) keeps the curvature A latent, measured by the
//! release's Â, under a prior ∝ (det A)^p. Its intervals are calibrated when every latent is
//! drawn from its prior; in the calibration table (`summaries_calibration`) θ is, but A is
//! not: it is the rows' own at the finals' centre. This example isolates that: the
//! summary's model holds exactly (ĝ ~ N(AΔ, A + σ²I), Â = A + noise, θ drawn from N(0, I)
//! each repetition), and each posterior is computed exactly (A by importance sampling, θ
//! given A in closed form: `tests/support/latent.rs`), so whatever the intervals miss is the
//! latent curvature's, not an approximation's or a sampler's. Each repetition's releases are
//! read five ways: A known; Â taken as exact (made positive definite), the curvature's noise
//! ignored; and A latent under p = 0, 1 (the product's) and 2.
//!
//! cargo run --release -p fedmcmc-common --example latent_curvature -- [reps] [curvature sd] [noise sd] [seed] [A] [pilot] [d]
//!
//! Defaults: 400 repetitions; A = diag(420, 540, 540), Â's noise sd 77 and ĝ's 97, as in
//! the logistic calibration rows at d = 3, 2 000 rows and ε 0.5 (A the rows' own at one
//! repetition's finals' centre, the noise sds the release's). `A` is `diag` (that matrix,
//! the default, d = 3 only), `rows0`, `rows` or `centre`: the curvature of fresh logistic
//! rows with their features uniform over [−2, 2] (the calibration example's: 2 000, 20 000
//! and 100 000 rows at d = 3, 5 and 6), Σ σ'(x̃ᵀc) x̃x̃ᵀ, at c = 0, at a c drawn from θ's
//! prior independently of θ (so that A varies between repetitions as the rows' own does
//! with the finals' centre, but says nothing of θ), or at the release's centre.
//!
//! `pilot` says where the finals are centred. `none` (the default): at the prior's mean 0,
//! so θ − c is a prior draw. The product centres them where its pilots put θ, so that θ − c
//! is a pilot's error, and Â's noise enters as (Â − A)(θ − c). A number τ: a pilot
//! measurement r = θ + N(0, τ²I), independent of A, centres them at c = r, and every
//! posterior conditions on r too (the prior times r's likelihood is normal, so it enters as
//! θ's prior). `release`: a pilot release like the finals, pooled with them as the product
//! pools its Taylor pilots, so that what it says of θ passes through A (`two_releases`).
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
/// Rows in the calibration example at d = 3, whose curvature the rows' modes draw.
const ROWS_AT_3: usize = 2_000;

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
    let curvature_name = std::env::args()
        .nth(5)
        .unwrap_or_else(|| "diag".to_string());
    let curvature = Curvature::parse(&curvature_name).expect("A: diag, rows0, rows or centre");
    let pilot = std::env::args().nth(6).map_or(Pilot::None, |a| {
        Pilot::parse(&a).expect("pilot: none, a number or release")
    });
    let d = arg(7, 3.0) as usize;
    let rows = match (d, curvature) {
        (3, _) => ROWS_AT_3,
        (5 | 6, Curvature::Diag) => panic!("A = diag is d = 3's"),
        (5, _) => 20_000,
        (6, _) => 100_000,
        _ => panic!("d: 3, 5 or 6 (the calibration example's)"),
    };
    assert!(
        !(pilot == Pilot::Release && matches!(curvature, Curvature::RowsAtCentre)),
        "A = centre needs the finals' centre before the pilot release that places it"
    );
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
    let noise = Noise {
        curvature_sd,
        noise_sd,
    };
    for _ in 0..reps {
        let theta = DVector::from_fn(d, |_, _| normal());
        let (a, posteriors) = match pilot {
            Pilot::Release => two_releases(&theta, curvature, rows, noise, &mut normal),
            _ => one_release(&theta, curvature, rows, noise, pilot, &mut normal),
        };
        diagonal.push(a[(0, 0)]);
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
        "{reps} repetitions, d = {d}, A {curvature_name} (A₀₀ 10/50/90 %: {:.0}, {:.0}, {:.0}), Â's noise sd {curvature_sd}, ĝ's {noise_sd}, pilot {}",
        quantile(&diagonal, 0.1),
        quantile(&diagonal, 0.5),
        quantile(&diagonal, 0.9),
        pilot.name()
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

/// The finals' release noise: the sds of each entry of Â and of ĝ.
#[derive(Clone, Copy)]
struct Noise {
    curvature_sd: f64,
    noise_sd: f64,
}

/// What places the finals' centre (the module's comment).
#[derive(Clone, Copy, PartialEq)]
enum Pilot {
    /// The prior's mean.
    None,
    /// A pilot measurement of θ with this sd, independent of A.
    Measured(f64),
    /// A pilot release like the finals at the prior's mean, pooled with them.
    Release,
}

impl Pilot {
    fn parse(arg: &str) -> Option<Self> {
        match arg {
            "none" => Some(Pilot::None),
            "release" => Some(Pilot::Release),
            sd => sd.parse().ok().map(Pilot::Measured),
        }
    }

    fn name(self) -> String {
        match self {
            Pilot::None => "none".to_string(),
            Pilot::Measured(sd) => format!("sd {sd}"),
            Pilot::Release => "release".to_string(),
        }
    }
}

/// Â: A plus independent noise of sd `sd` in each entry of its upper triangle.
fn measured(a: &DMatrix<f64>, sd: f64, normal: &mut impl FnMut() -> f64) -> Vec<Vec<f64>> {
    let d = a.nrows();
    let mut a_hat = vec![vec![0.0; d]; d];
    for i in 0..d {
        for j in i..d {
            a_hat[i][j] = a[(i, j)] + sd * normal();
            a_hat[j][i] = a_hat[i][j];
        }
    }
    a_hat
}

/// ξ ~ N(0, A): the rows' own score noise, which a release's ĝ carries whatever its budget.
fn score_noise(a: &DMatrix<f64>, normal: &mut impl FnMut() -> f64) -> DVector<f64> {
    let factor = a.clone().cholesky().expect("positive definite").l();
    factor * DVector::from_fn(a.nrows(), |_, _| normal())
}

/// One repetition's A and its five posteriors when the finals are one release, centred at
/// the prior's mean or where a pilot measurement of θ puts it.
fn one_release(
    theta: &DVector<f64>,
    curvature: Curvature,
    rows: usize,
    noise: Noise,
    pilot: Pilot,
    normal: &mut impl FnMut() -> f64,
) -> (DMatrix<f64>, Vec<LatentMarginals>) {
    let d = theta.len();
    let centre: Vec<f64> = match pilot {
        Pilot::Measured(t) => theta.iter().map(|x| x + t * normal()).collect(),
        _ => vec![0.0; d],
    };
    // θ's prior given the pilot: N(0, I) times N(r; θ, τ²I).
    let precision = match pilot {
        Pilot::Measured(t) => 1.0 / (t * t),
        _ => 0.0,
    };
    let mean: Vec<f64> = centre
        .iter()
        .map(|r| r * precision / (1.0 + precision))
        .collect();
    let sd = vec![(1.0 + precision).recip().sqrt(); d];
    let prior = NormalPrior {
        mean: &mean,
        sd: &sd,
    };
    let a = curvature.draw(d, rows, &centre, normal);
    let data = score_noise(&a, normal);
    let delta = theta - DVector::from_column_slice(&centre);
    let g = &a * delta + data + DVector::from_fn(d, |_, _| noise.noise_sd * normal());
    let release = Release {
        centre: centre.clone(),
        g: g.iter().copied().collect(),
        a: measured(&a, noise.curvature_sd, normal),
        noise_variance: noise.noise_sd.powi(2),
        curvature_noise_variance: noise.curvature_sd.powi(2),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(normal().to_bits());
    let posteriors = vec![
        LatentMarginals::known(&release, &prior, &a),
        LatentMarginals::known(&release, &prior, &plugged_in(&release)),
        LatentMarginals::latent(&release, &prior, 0.0, DRAWS, &mut rng),
        LatentMarginals::latent(&release, &prior, 1.0, DRAWS, &mut rng),
        LatentMarginals::latent(&release, &prior, 2.0, DRAWS, &mut rng),
    ];
    (a, posteriors)
}

/// One repetition's A and its five posteriors when a pilot release at the prior's mean 0
/// places the finals at its noise-aware approximation's mode c (A held at Â₀), and the two
/// are pooled at c, as the product pools its Taylor pilots (`noise_aware/rounds.rs`), so
/// that what the pilot says of θ passes through A. Each release has twice the pooled noise
/// variance, and they share the rows' own score noise ξ ~ N(0, A): ĝ₀ = Aθ + ξ + e₀,
/// ĝ₁ = A(θ − c) + ξ + e₁. Moved by A, ½(ĝ₀ − Ac + ĝ₁) = A(θ − c) + ξ + ē, and the
/// contrast ĝ₀ − ĝ₁ − Ac ~ N(0, 2σ²I) measures A too: the latent posteriors move by each
/// draw of A and weigh the contrast; Â taken as exact moves by Â.
fn two_releases(
    theta: &DVector<f64>,
    curvature: Curvature,
    rows: usize,
    noise: Noise,
    normal: &mut impl FnMut() -> f64,
) -> (DMatrix<f64>, Vec<LatentMarginals>) {
    let d = theta.len();
    let (mean, sd) = (vec![0.0; d], vec![1.0; d]);
    let prior = NormalPrior {
        mean: &mean,
        sd: &sd,
    };
    let (each_sd, each_curvature_sd) = (
        noise.noise_sd * std::f64::consts::SQRT_2,
        noise.curvature_sd * std::f64::consts::SQRT_2,
    );
    let a = curvature.draw(d, rows, &mean, normal);
    let data = score_noise(&a, normal);
    let g0 = &a * theta + &data + DVector::from_fn(d, |_, _| each_sd * normal());
    let a0 = measured(&a, each_curvature_sd, normal);
    let pilot = Release {
        centre: mean.clone(),
        g: g0.iter().copied().collect(),
        a: a0.clone(),
        noise_variance: each_sd * each_sd,
        curvature_noise_variance: each_curvature_sd * each_curvature_sd,
    };
    let approximation = LatentMarginals::known(&pilot, &prior, &plugged_in(&pilot));
    let c = DVector::from_fn(d, |j, _| approximation.moments(j).0);
    let g1 = &a * (theta - &c) + &data + DVector::from_fn(d, |_, _| each_sd * normal());
    let a1 = measured(&a, each_curvature_sd, normal);
    let a_hat = DMatrix::from_fn(d, d, |i, j| 0.5 * (a0[i][j] + a1[i][j]));
    let moved = |by: &DMatrix<f64>| 0.5 * (&g0 - by * &c + &g1);
    let g_by_a_hat = moved(&a_hat);
    let release = Release {
        centre: c.iter().copied().collect(),
        g: g_by_a_hat.iter().copied().collect(),
        a: (0..d)
            .map(|i| (0..d).map(|j| a_hat[(i, j)]).collect())
            .collect(),
        noise_variance: noise.noise_sd.powi(2),
        curvature_noise_variance: noise.curvature_sd.powi(2),
    };
    let exact = |a: &DMatrix<f64>| {
        let contrast = &g0 - &g1 - a * &c;
        (
            moved(a),
            -contrast.norm_squared() / (4.0 * each_sd * each_sd),
        )
    };
    let known = Release {
        g: moved(&a).iter().copied().collect(),
        ..release.clone()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(normal().to_bits());
    let posteriors = vec![
        LatentMarginals::known(&known, &prior, &a),
        LatentMarginals::known(&release, &prior, &plugged_in(&release)),
        LatentMarginals::latent_moved(&release, &prior, 0.0, DRAWS, &mut rng, exact),
        LatentMarginals::latent_moved(&release, &prior, 1.0, DRAWS, &mut rng, exact),
        LatentMarginals::latent_moved(&release, &prior, 2.0, DRAWS, &mut rng, exact),
    ];
    (a, posteriors)
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
    RowsAtCentre,
}

impl Curvature {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "diag" => Some(Curvature::Diag),
            "rows0" => Some(Curvature::RowsAtZero),
            "rows" => Some(Curvature::RowsAtPriorDraw),
            "centre" => Some(Curvature::RowsAtCentre),
            _ => None,
        }
    }

    /// One repetition's A for a release at `release_centre`, drawing from `normal` (the
    /// rows' features as normals' cdfs).
    fn draw(
        self,
        d: usize,
        rows: usize,
        release_centre: &[f64],
        normal: &mut impl FnMut() -> f64,
    ) -> DMatrix<f64> {
        let centre = match self {
            Curvature::Diag => {
                return DMatrix::from_diagonal(&DVector::from_vec(vec![420.0, 540.0, 540.0]));
            }
            Curvature::RowsAtZero => DVector::zeros(d),
            Curvature::RowsAtPriorDraw => DVector::from_fn(d, |_, _| normal()),
            Curvature::RowsAtCentre => DVector::from_column_slice(release_centre),
        };
        let mut a = DMatrix::zeros(d, d);
        for _ in 0..rows {
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
