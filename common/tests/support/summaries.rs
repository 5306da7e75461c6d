//! The `summaries` route simulated in one process, for its calibration: a GLM's rows split
//! among parties, each release the party's summary plus the Gaussian noise its budget
//! buys (what `party/src/release/` adds under plain aggregation: the sum carries every
//! party's noise, P times the variance secure aggregation leaves over P parties), walked
//! through the route's rounds, then the noise-aware posterior (and, for contrast, the
//! plug-in one) sampled by the plain HMC.
use std::sync::Arc;

use fedmcmc_common::accountant::max_mu;
use fedmcmc_common::data::Columns;
use fedmcmc_common::diagnostics::quantile;
use fedmcmc_common::models::summaries::split_summary;
use fedmcmc_common::models::{Family, GlmSpec, Model, ModelSpec};
use fedmcmc_common::noise_aware::hmc::{Settings, sample_until_converged};
use fedmcmc_common::noise_aware::quadratic::{Approximation, PlugInPosterior, noise_aware};
use fedmcmc_common::noise_aware::rounds::{Rounds, Schedule};
use fedmcmc_common::noise_aware::{LogDensity, spread};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub family: Family,
    pub dim: usize,
    pub rows: usize,
    pub parties: usize,
    pub epsilon: f64,
    pub delta: f64,
    pub seed: u64,
    pub prior: Prior,
    /// Where within the public box the simulated covariates lie.
    pub covariates: Covariates,
    /// What the noise-aware posterior is told of the curvature A.
    pub curvature: Curvature,
}

/// What the noise-aware posterior conditions on for the quadratic summaries' curvature A.
#[derive(Clone, Copy, Debug, PartialEq)]
#[allow(
    dead_code,
    reason = "the calibration example's diagnostic; the tests condition on the release"
)]
pub enum Curvature {
    /// The release's Â, A latent: the product's posterior.
    Released,
    /// An oracle, for diagnosis only: Â replaced by the pooled rows' own A at the finals'
    /// centre, and its stated noise variance by a thousandth of the release's, so the
    /// latent A keeps within about 3 % of the release's noise sd of the truth (smaller
    /// still, the sampler slows to a crawl). Whatever the oracle's intervals lack of their
    /// nominal rates is not the latent curvature's doing.
    Known,
}

/// The prior, and where the true θ comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Prior {
    /// N(0, s²) on every coefficient, and each repetition's true θ drawn from it (the
    /// calibration check of Bernstein & Sheldon 2018, Sec. 6, under which a correct
    /// posterior's intervals cover at their nominal rates).
    Drawn(f64),
    /// The example's θ (0.5, 1, −0.5, …) under the example's prior (`GlmSpec::example`), or
    /// under sd s on every coefficient.
    Fixed(Option<f64>),
}

/// Where the rows' covariates lie within each feature's public bounds [lo, hi]: the
/// noise-aware posteriors know only the box, and real covariates seldom fill it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[allow(
    dead_code,
    reason = "the calibration example draws every placement, the tests some"
)]
pub enum Covariates {
    /// Uniform over the whole box.
    Box,
    /// Uniform over the middle half of each feature's bounds.
    Inner,
    /// Uniform over the upper half of each feature's bounds (mean off the box's centre).
    Offset,
    /// Normal about each feature's midpoint with sd a quarter of its half-width (clamped to
    /// the bounds, 6·10⁻⁵ of the draws): tilted by e^c at any centre such covariates stay
    /// normal, as the poisson GLM's posterior models them (`noise_aware/tilted.rs`).
    Normal,
}

impl Covariates {
    #[allow(dead_code, reason = "the calibration example's argument")]
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "box" => Some(Covariates::Box),
            "inner" => Some(Covariates::Inner),
            "offset" => Some(Covariates::Offset),
            "normal" => Some(Covariates::Normal),
            _ => None,
        }
    }

    /// One covariate drawn within a feature's bounds [lo, hi].
    fn draw(self, [lo, hi]: [f64; 2], rng: &mut dyn Rng) -> f64 {
        let (mid, half) = ((lo + hi) / 2.0, (hi - lo) / 2.0);
        let uniform = |[a, b]: [f64; 2], rng: &mut dyn Rng| a + (b - a) * rng.random::<f64>();
        match self {
            Covariates::Box => uniform([lo, hi], rng),
            Covariates::Inner => uniform([mid - half / 2.0, mid + half / 2.0], rng),
            Covariates::Offset => uniform([mid, hi], rng),
            Covariates::Normal => {
                let z: f64 = StandardNormal.sample(rng);
                (mid + half / 4.0 * z).clamp(lo, hi)
            }
        }
    }
}

/// One parameter's posterior as the intervals see it.
#[derive(Clone, Copy, Debug)]
pub struct Marginal {
    /// The 5 %, 25 %, 75 % and 95 % quantiles.
    pub q: [f64; 4],
}

impl Marginal {
    pub fn of(draws: &[f64]) -> Self {
        Marginal {
            q: [0.05, 0.25, 0.75, 0.95].map(|p| quantile(draws, p)),
        }
    }

    /// A normal marginal's quantiles.
    fn normal(mean: f64, sd: f64) -> Self {
        let (z50, z90) = (0.674_489_750_196_081_7, 1.644_853_626_951_472_7);
        Marginal {
            q: [-z90, -z50, z50, z90].map(|z| mean + z * sd),
        }
    }

    pub fn covers50(&self, x: f64) -> bool {
        self.q[1] <= x && x <= self.q[2]
    }

    pub fn covers90(&self, x: f64) -> bool {
        self.q[0] <= x && x <= self.q[3]
    }
}

pub struct Outcome {
    pub truth: Vec<f64>,
    pub noise_aware: Vec<Marginal>,
    pub plug_in: Vec<Marginal>,
    /// The exact posterior on the pooled rows, without noise, as its Laplace approximation:
    /// what coverage the same data sets give when nothing is approximated or private.
    pub exact: Vec<Marginal>,
    pub converged: bool,
}

/// ∇ ln p(θ | rows) on the pooled rows: the model's own gradient sum with no clip.
fn pooled_gradient(model: &dyn Model, data: &Columns, theta: &[f64]) -> Vec<f64> {
    let (mut prior, mut lik) = (vec![0.0; theta.len()], vec![0.0; theta.len()]);
    model.grad_log_prior(theta, &mut prior);
    model.clipped_grad_sum(data, theta, f64::INFINITY, &mut lik);
    prior.iter().zip(&lik).map(|(p, l)| p + l).collect()
}

/// The Laplace approximation of the exact posterior on the pooled rows: Newton's method to
/// the mode (steps capped at length 1), the curvature by central differences of the
/// gradient; the marginals of N(mode, H⁻¹).
fn laplace(model: &dyn Model, data: &Columns) -> Vec<Marginal> {
    let d = model.dim();
    let mut theta = model.prior_mode();
    let mut precision = DMatrix::zeros(d, d);
    for _ in 0..100 {
        let g = pooled_gradient(model, data, &theta);
        for k in 0..d {
            let h = 1e-5 * (1.0 + theta[k].abs());
            let (mut up, mut down) = (theta.clone(), theta.clone());
            up[k] += h;
            down[k] -= h;
            let (gu, gd) = (
                pooled_gradient(model, data, &up),
                pooled_gradient(model, data, &down),
            );
            for j in 0..d {
                precision[(j, k)] = -(gu[j] - gd[j]) / (2.0 * h);
            }
        }
        precision = (&precision + precision.transpose()) * 0.5;
        let step = precision
            .clone()
            .cholesky()
            .expect("a log-concave posterior")
            .solve(&DVector::from_vec(g));
        let shrink = step.norm().max(1.0);
        for (t, s) in theta.iter_mut().zip(step.iter()) {
            *t += s / shrink;
        }
        if step.norm() < 1e-10 * (1.0 + DVector::from_column_slice(&theta).norm()) {
            break;
        }
    }
    let covariance = precision.try_inverse().expect("invertible curvature");
    (0..d)
        .map(|j| Marginal::normal(theta[j], covariance[(j, j)].sqrt()))
        .collect()
}

fn marginals(
    target: &dyn LogDensity,
    inits: Vec<Vec<f64>>,
    dim: usize,
    seed: u64,
) -> (Vec<Marginal>, bool) {
    let sampled = sample_until_converged(
        target,
        inits,
        &[seed, seed + 1, seed + 2, seed + 3],
        Settings::default(),
        &|x| x[..dim].to_vec(),
    )
    .unwrap();
    if !sampled.converged {
        let means: Vec<Vec<f64>> = sampled
            .chains
            .iter()
            .map(|c| {
                let kept = &c.states[sampled.warmup..];
                (0..dim)
                    .map(|j| kept.iter().map(|x| x[j]).sum::<f64>() / kept.len() as f64)
                    .collect()
            })
            .collect();
        eprintln!(
            "seed {seed}: not converged (R̂ {:.3}, ESS {:.0}, {:?} divergent); the chains' means {means:.2?}",
            sampled.rhat,
            sampled.ess,
            sampled.divergences()
        );
    }
    let draws: Vec<&Vec<f64>> = sampled
        .chains
        .iter()
        .flat_map(|c| &c.states[sampled.warmup..])
        .collect();
    let m = (0..dim)
        .map(|j| Marginal::of(&draws.iter().map(|x| x[j]).collect::<Vec<_>>()))
        .collect();
    (m, sampled.converged)
}

pub fn run(config: Config) -> Outcome {
    let mut spec = GlmSpec::example(config.family, config.dim);
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    match config.prior {
        Prior::Drawn(sd) => {
            spec.prior_sd = vec![sd];
            spec.true_theta = Some(
                (0..config.dim)
                    .map(|_| {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        sd * z
                    })
                    .collect(),
            );
        }
        Prior::Fixed(Some(sd)) => spec.prior_sd = vec![sd],
        Prior::Fixed(None) => {}
    }
    let truth = spec.true_theta.clone().unwrap();
    // The rows come from the same GLM with its covariates drawn as `covariates` says, within
    // the box; the posterior is the model's, which knows only the box.
    let bounds: Vec<[f64; 2]> = (spec.features.iter())
        .map(|c| c.bounds.expect("the example's features are bounded"))
        .collect();
    let data =
        spec.build()
            .unwrap()
            .simulate_with(&truth, config.rows, &mut rng, &mut |row, rng| {
                for (x, b) in row.iter_mut().zip(&bounds) {
                    *x = config.covariates.draw(*b, rng);
                }
            });
    let model: Arc<dyn Model> = ModelSpec::Glm(spec).build().unwrap();
    let parts = data.split(config.parties);
    let summaries = model.summaries().unwrap();
    let schedule = Schedule::default_for(model.as_ref()).unwrap();
    let mu = max_mu(config.epsilon, config.delta).unwrap();
    let multiplier = (schedule.releases() as f64 / (2.0 * mu)).sqrt();
    let mut rounds = Rounds::new(Arc::clone(&model), schedule);
    while let Some((centre, window, weight)) = rounds.next() {
        let centre = centre.to_vec();
        let sd = multiplier * 2.0 * summaries.row_bound(&centre, window, weight);
        let mut sum = vec![0.0; summaries.entries()];
        for part in &parts {
            for (s, v) in sum
                .iter_mut()
                .zip(summaries.summary(part, &centre, window, weight))
            {
                let z: f64 = StandardNormal.sample(&mut rng);
                *s += v + sd * z;
            }
        }
        rounds.record(&sum, config.parties as f64 * sd * sd);
    }
    let mut release = rounds.finish().unwrap().quadratic();
    if config.curvature == Curvature::Known {
        let rows_own = summaries.summary(&data, &release.centre, 0.0, 1.0);
        release.a = split_summary(config.dim, &rows_own).1;
        release.curvature_noise_variance *= 1e-3;
    }
    let aware = noise_aware(&model, release.clone(), config.rows as u64);
    // The chains start as the product's do (`coordinator/src/summaries.rs`): θ spread about
    // the approximation's mode by twice its sds, so that R̂ sees a posterior's other modes.
    let approximation = Approximation::of(model.as_ref(), &release);
    let sds = approximation.sds();
    let inits = (0..4)
        .map(|_| aware.start(&spread(&sds, &mut rng)))
        .collect();
    let (noise_aware, converged) = marginals(aware.target.as_ref(), inits, config.dim, config.seed);
    let plug = PlugInPosterior::new(Arc::clone(&model), &release);
    let (plug_in, plug_converged) =
        marginals(&plug, vec![approximation.mode; 4], config.dim, config.seed);
    Outcome {
        exact: laplace(model.as_ref(), &data),
        truth,
        noise_aware,
        plug_in,
        converged: converged && plug_converged,
    }
}

/// The share of 50 % and 90 % intervals that covered the true θ, by posterior.
pub struct Coverage {
    /// Noise-aware (50 %, 90 %).
    pub aware: (f64, f64),
    /// Plug-in (50 %, 90 %).
    pub plug_in: (f64, f64),
    /// The exact posterior on the same rows without noise (50 %, 90 %).
    pub exact: (f64, f64),
    /// The noise-aware coverages' standard errors (50 %, 90 %), from the spread of each
    /// repetition's share: a repetition's intervals share one release's noise and are not
    /// independent, so the binomial sd of the intervals understates the error.
    pub aware_se: (f64, f64),
    /// Intervals counted (coefficients × repetitions).
    pub intervals: usize,
    /// Repetitions whose chains converged.
    pub converged: usize,
    /// The noise-aware 90 % intervals' mean width over the exact posterior's: what the
    /// privacy costs in precision.
    pub width: f64,
}

/// Coverage of the 50 % and 90 % intervals of every coefficient over `reps` repetitions
/// with fresh data and noise.
pub fn coverage(config: Config, reps: u64) -> Coverage {
    let mut hits = [0usize; 6];
    let mut width = 0.0;
    let (mut count, mut converged) = (0, 0);
    let mut per_rep: Vec<[f64; 2]> = Vec::new();
    for r in 0..reps {
        let out = run(Config {
            seed: config.seed + 1000 * r,
            ..config
        });
        converged += usize::from(out.converged);
        let before = [hits[0], hits[1]];
        for (j, &t) in out.truth.iter().enumerate() {
            hits[0] += usize::from(out.noise_aware[j].covers50(t));
            hits[1] += usize::from(out.noise_aware[j].covers90(t));
            hits[2] += usize::from(out.plug_in[j].covers50(t));
            hits[3] += usize::from(out.plug_in[j].covers90(t));
            hits[4] += usize::from(out.exact[j].covers50(t));
            hits[5] += usize::from(out.exact[j].covers90(t));
            width += (out.noise_aware[j].q[3] - out.noise_aware[j].q[0])
                / (out.exact[j].q[3] - out.exact[j].q[0]);
            count += 1;
        }
        let d = out.truth.len() as f64;
        per_rep.push([0, 1].map(|k| (hits[k] - before[k]) as f64 / d));
    }
    let share = |h: usize| h as f64 / count as f64;
    let se = |k: usize| {
        let n = per_rep.len() as f64;
        let mean = per_rep.iter().map(|c| c[k]).sum::<f64>() / n;
        let var = per_rep.iter().map(|c| (c[k] - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (var / n).sqrt()
    };
    Coverage {
        aware: (share(hits[0]), share(hits[1])),
        aware_se: (se(0), se(1)),
        plug_in: (share(hits[2]), share(hits[3])),
        exact: (share(hits[4]), share(hits[5])),
        intervals: count,
        converged,
        width: width / count as f64,
    }
}
