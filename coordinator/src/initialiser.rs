//! The private initialiser: where the chains start when the analyst names no point. A run
//! of its own (`initialiser` on the parties) releases the clipped gradient at each step of
//! an ascent from the prior's mode towards the posterior mode, each release charged like
//! any other; its cost is a stated share of what every party has left, the rest goes to
//! sampling. The chains then start overdispersed around the point found, so R̂ keeps its
//! meaning. Everything after the releases (the ascent's steps, the point, the spread) is
//! post-processing.
//!
//! The ascent has two phases. First a climb by Barzilai–Borwein steps (Barzilai & Borwein
//! 1988): the step length is sᵀs/sᵀy from the last move s and the change y in the gradient,
//! an estimate of the inverse curvature along the way, so it needs no learning rate matched
//! to the posterior's scale (which nobody may tune on private data) and crosses orders of
//! magnitude of distance in a few steps. Near the mode the released gradient is mostly
//! noise: sᵀy then carries the noise's share, the steps shrink geometrically and the climb
//! stalls wherever it is, along a narrow ridge (the banana's) many posterior sds from the
//! mode. So once the released gradient is within a few noise norms of zero (the noise's
//! variance is public), the rest of the releases go to Newton rounds on a small design of
//! points around the current centre (see [`refine`]): each round's averaged gradient and
//! fitted Hessian point along the ridge as well as across it.
use std::sync::Arc;

use fedmcmc_common::diagnostics::quantile;
use fedmcmc_common::models::Model;
use fedmcmc_party::node::INITIALISER;
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::Serialize;

use crate::federation::{
    Closed, Federation, Grant, NoiseChoice, PartyHandle, PartyInfo, Query, RunPlan,
};
use crate::kernels::ChainLink;
use nalgebra::{DMatrix, DVector};

/// The share of every party's remaining budget (as the privacy-loss μ of its Gaussian
/// releases) the initialiser spends when none is given.
pub const DEFAULT_SHARE: f64 = 0.1;
/// Newton rounds the default number of releases leaves after a climb of [`DEFAULT_CLIMB`].
const DEFAULT_ROUNDS: u64 = 15;
/// The climb's releases in the default number.
const DEFAULT_CLIMB: u64 = 40;

/// Gradient releases of the ascent when none are given, sized for a climb of 40 and 15 Newton
/// rounds of 2d releases: 100 at d = 2, 340 at d = 10. (The climb itself stops once the
/// gradient is noise, or at 40 % of the releases, and the rest go to rounds.) A fixed 100 left
/// d = 10 three rounds: on the flat banana (n = 2·10⁵, 3 parties) its point missed the exact
/// mean of θ2 by 6 to 24 sds at 3 seeds of 8 even at ε = 40, where 340 releases kept all 8
/// within 0.7 sds, and all 6 tried at ε = 4 within 2.6 (each release is noisier at the same
/// share, but a round averages 2d of them).
pub fn default_steps(dim: usize) -> u64 {
    DEFAULT_CLIMB + DEFAULT_ROUNDS * 2 * dim as u64
}
/// The first step's length, relative to max(1, ‖θ₀‖): Barzilai–Borwein steps need one move
/// to measure the curvature from.
const FIRST_STEP: f64 = 0.1;
/// The climb stops once ‖g‖² ≤ NOISE_BALL·σ²·d for the release's noise variance σ² per
/// entry: within three noise norms of zero, the released gradient no longer says which way
/// the mode lies.
const NOISE_BALL: f64 = 9.0;
/// The largest share of the releases the climb may use; the rest are the Newton rounds'.
const CLIMB_SHARE: f64 = 0.4;
/// The design's half-width in fitted posterior sds: at 4 a round's gradient differences
/// stand out of the noise along the flattest direction near the mode (checked on a model of
/// the flat banana at n = 10⁵, ε = 4), and the design stays where the log posterior is
/// close to quadratic.
const DESIGN_WIDTH: f64 = 4.0;
/// The smallest trust radius of a Newton step, in design half-widths.
const TRUST: f64 = 2.0;
/// The chains' spread around the point, in the fitted posterior sds.
const SPREAD: f64 = 2.0;
/// The initialiser's choices.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct InitialiserSettings {
    /// Fraction of each party's remaining μ to spend, in (0, 1).
    pub share: f64,
    pub steps: u64,
    /// Clip on each row's untempered gradient norm.
    pub gradient_clip: f64,
}

/// What the initialiser did, for the chains and the outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Initialised {
    pub settings: InitialiserSettings,
    /// What it released and how it found the point, for the output's label.
    pub method: String,
    /// The ascent's estimate of the posterior mode.
    pub point: Vec<f64>,
    /// Per coordinate, how widely the chains' starts are spread: twice the posterior sd
    /// fitted by the Newton rounds.
    pub scale: Vec<f64>,
    /// The posterior covariance it fitted (row-major rows), whose diagonal `scale` spreads
    /// by: DP Barker's walk takes its shape (`kernels::barker::step_within_clip`).
    pub covariance: Vec<Vec<f64>>,
    pub grants: Vec<Grant>,
    pub closed: Vec<Closed>,
}

/// The chains' spread for a fitted covariance: [`SPREAD`] times its sds.
fn scale_of(covariance: &[Vec<f64>]) -> Vec<f64> {
    (0..covariance.len())
        .map(|j| SPREAD * covariance[j][j].max(0.0).sqrt())
        .collect()
}

/// A matrix as rows.
fn rows_of(m: &DMatrix<f64>) -> Vec<Vec<f64>> {
    m.row_iter().map(|r| r.iter().copied().collect()).collect()
}

impl InitialiserSettings {
    pub fn check(&self) -> Result<(), String> {
        if !(self.share > 0.0 && self.share < 1.0) {
            return Err(format!(
                "the initialiser's share of the budget must be between 0 and 1, got {}",
                self.share
            ));
        }
        if self.steps < 4 {
            return Err(format!(
                "the initialiser needs at least 4 steps, got {}",
                self.steps
            ));
        }
        if !(self.gradient_clip.is_finite() && self.gradient_clip > 0.0) {
            return Err(format!(
                "the initialiser's gradient clip must be a positive number, got {}",
                self.gradient_clip
            ));
        }
        Ok(())
    }

    /// Each party's plan: `steps` gradient releases whose μ is `share` of what the party has
    /// left, so party i's multiplier is s = √(steps / (2·share·μᵢ)) and its τ = s/√nᵢ.
    pub fn plans(&self, parties: &[PartyInfo]) -> Result<Vec<RunPlan>, String> {
        self.check()?;
        self.share_of(parties, INITIALISER, self.steps, self.gradient_clip)
    }

    /// Each party's plan of `releases` releases of `variant` (with `clip`) whose μ is `share`
    /// of what the party has left.
    fn share_of(
        &self,
        parties: &[PartyInfo],
        variant: &'static str,
        releases: u64,
        clip: f64,
    ) -> Result<Vec<RunPlan>, String> {
        parties
            .iter()
            .map(|p| {
                let mu = self.share * p.mu_remaining;
                if mu.is_nan() || mu <= 0.0 {
                    return Err(format!(
                        "party {} has no budget left for the initialiser (ε = {:.4} of {} committed)",
                        p.name, p.epsilon_committed, p.epsilon
                    ));
                }
                let s = (releases as f64 / (2.0 * mu)).sqrt();
                Ok(RunPlan {
                    variant,
                    chains: 1,
                    steps_per_chain: releases,
                    clip,
                    noise: NoiseChoice::Tau(s / (p.rows as f64).sqrt()),
                    batch_size: None,
                    barker_variance: None,
                    hmc: None,
                    aggregation: None,
                })
            })
            .collect()
    }
}

/// Runs the initialiser over an idle federation: opens its run, ascends, closes it (also
/// after a failure, so nothing stays reserved).
pub async fn run<P: PartyHandle>(
    federation: &Federation<P>,
    model: &Arc<dyn Model>,
    parties: &[PartyInfo],
    settings: InitialiserSettings,
) -> anyhow::Result<Initialised> {
    let plans = settings.plans(parties).map_err(anyhow::Error::msg)?;
    let grants = federation.open(&plans, model).await?;
    let ascent = ascend(federation, model.as_ref(), settings.steps).await;
    let closed = federation.close().await?;
    let (point, covariance) = ascent?;
    let covariance = rows_of(&covariance);
    Ok(Initialised {
        method: format!(
            "{} noisy clipped-gradient releases of an ascent from the prior's mode, Barzilai–Borwein steps then Newton rounds on fitted Hessians (gradient clip {})",
            settings.steps, settings.gradient_clip
        ),
        settings,
        point,
        scale: scale_of(&covariance),
        covariance,
        grants,
        closed,
    })
}

/// The initialiser of a model with summaries: the summaries route's releases at `share` of
/// every party's remaining budget (its pilots and finals, `summaries::release`), and the
/// chains' point the mode of the final summary's plug-in posterior, spread by twice its sds.
/// It needs no gradient clip: each row is bounded by the model's public column bounds, not
/// by the run's ratio clip (which a GLM's run may set to 1e6 to leave the clip to the
/// model, and which made the climb's noise enormous).
pub async fn from_summaries<P: PartyHandle>(
    federation: &Federation<P>,
    model: &Arc<dyn Model>,
    parties: &[PartyInfo],
    settings: InitialiserSettings,
    stop: &crate::interrupt::Stop,
) -> anyhow::Result<Initialised> {
    settings.check().map_err(anyhow::Error::msg)?;
    let schedule = crate::summaries::schedule(model.as_ref()).map_err(anyhow::Error::msg)?;
    let releases = schedule.releases();
    let plans = settings
        .share_of(parties, fedmcmc_party::node::SUMMARIES, releases, 0.0)
        .map_err(anyhow::Error::msg)?;
    let grants = federation.open(&plans, model).await?;
    let released = crate::summaries::release(federation, model, schedule, stop).await;
    let closed = federation.close().await?;
    let (release, line) = released?;
    let rows = parties.iter().map(|p| p.rows).sum();
    let (point, covariance) = crate::summaries::approximate(model, &release, rows);
    Ok(Initialised {
        method: format!(
            "the summaries route's {releases} releases (in place of the climb's {} steps): {line}",
            settings.steps
        ),
        settings: InitialiserSettings {
            steps: releases,
            ..settings
        },
        point,
        scale: scale_of(&covariance),
        covariance,
        grants,
        closed,
    })
}

/// Released gradients of the log posterior: each party's noisy clipped gradient of its log
/// likelihood, summed, plus the prior's gradient (public), one charged release per call.
struct Gradients<'a, P> {
    link: ChainLink<'a, P>,
    model: &'a dyn Model,
    /// The variance of the noise in each entry of the last release (public: the parties
    /// state it).
    noise_variance: f64,
}

impl<P: PartyHandle> Gradients<'_, P> {
    async fn at(&mut self, theta: &[f64]) -> anyhow::Result<DVector<f64>> {
        let answer = self
            .link
            .ask(Query::Gradient { theta })
            .await
            .map_err(|e| anyhow::anyhow!("initialiser step {}: {}", e.step, e.source))?;
        self.noise_variance = answer.noise_variance;
        let mut prior = vec![0.0; theta.len()];
        self.model.grad_log_prior(theta, &mut prior);
        Ok(DVector::from_vec(prior) + DVector::from_vec(answer.value))
    }
}

/// The climb, then the Newton rounds on what it leaves. Returns the point and the spread.
async fn ascend<P: PartyHandle>(
    federation: &Federation<P>,
    model: &dyn Model,
    steps: u64,
) -> anyhow::Result<(Vec<f64>, DMatrix<f64>)> {
    let mut gradients = Gradients {
        link: ChainLink::new(federation, 0),
        model,
        noise_variance: 0.0,
    };
    let reach = prior_sd(model, &model.prior_mode());
    let climbed = climb(&mut gradients, &reach, steps).await?;
    let rounds = (steps - climbed.releases) / (2 * model.dim() as u64);
    refine(&mut gradients, &reach, climbed, rounds).await
}

/// Where the climb stopped: its iterate with the smallest released gradient, the
/// Barzilai–Borwein step length there (an inverse curvature) and the releases it used.
struct Climbed {
    point: DVector<f64>,
    length: f64,
    releases: u64,
}

/// Barzilai–Borwein ascent from the prior's mode, one release per step, until the released
/// gradient lies within √[`NOISE_BALL`] noise norms of zero or [`CLIMB_SHARE`] of the
/// releases are spent, then on until the rest divides into whole rounds of [`refine`].
async fn climb<P: PartyHandle>(
    gradients: &mut Gradients<'_, P>,
    reach: &[f64],
    steps: u64,
) -> anyhow::Result<Climbed> {
    let dim = reach.len();
    let round = 2 * dim as u64;
    let budget = (CLIMB_SHARE * steps as f64).ceil() as u64;
    let mut theta = DVector::from_vec(gradients.model.prior_mode());
    let mut gradient = gradients.at(theta.as_slice()).await?;
    let mut releases = 1;
    let start = theta.norm().max(1.0);
    let mut length = if gradient.norm() > 0.0 {
        FIRST_STEP * start / gradient.norm()
    } else {
        f64::MIN_POSITIVE
    };
    let mut best = (gradient.norm_squared(), theta.clone(), length);
    let noisy = |g: &DVector<f64>, noise_variance: f64| {
        g.norm_squared() <= NOISE_BALL * noise_variance * dim as f64
    };
    while releases < steps
        && ((releases < budget && !noisy(&gradient, gradients.noise_variance))
            || !(steps - releases).is_multiple_of(round))
    {
        let mut step = &gradient * length;
        within_prior(&mut step, reach);
        let next = &theta + step;
        releases += 1;
        if next.iter().any(|v| !v.is_finite()) {
            // A step out of the numbers: shorter ones from here, asking the same θ again.
            length *= 0.5;
            gradient = gradients.at(theta.as_slice()).await?;
            continue;
        }
        let next_gradient = gradients.at(next.as_slice()).await?;
        let s = &next - &theta;
        // Ascent: the gradient falls along s where the log posterior curves down.
        let sy = -s.dot(&(&next_gradient - &gradient));
        if sy > 0.0 && (s.norm_squared() / sy).is_finite() {
            length = s.norm_squared() / sy;
        }
        theta = next;
        gradient = next_gradient;
        if gradient.norm_squared() < best.0 {
            best = (gradient.norm_squared(), theta.clone(), length);
        }
    }
    Ok(Climbed {
        point: best.1,
        length: best.2,
        releases,
    })
}

/// Newton rounds from the climb's point. Each round releases the gradient at the 2d points
/// c ± D eⱼ around the centre c (D lower triangular, its columns [`DESIGN_WIDTH`] fitted
/// posterior sds long), which give the gradient at c (their mean) and the Hessian H ≈
/// [(g(c + Deⱼ) − g(c − Deⱼ))/2]ⱼ D⁻¹, symmetrised: a central composite design in the
/// manner of Box & Wilson 1951, on gradients. The centre moves by the Newton step (−H)⁻¹g,
/// no longer than a trust radius measured in the design's own sds (Conn, Gould & Toint
/// 2000), doubled while cut steps keep pointing the same way; the next design follows the
/// fitted posterior covariance (−H)⁻¹, its size changing at most twofold a round. Averaging
/// the 2d releases of a round beats the noise that stops the climb, and the Hessian spans
/// every direction, so a step along a narrow curved ridge is as long as the ridge's own
/// curvature asks, which a scalar step length cannot be.
///
/// The point is the median of the later half of the centres along each eigenvector of their
/// rounds' mean Hessian (one noisy round cannot move it far), and the covariance (−H)⁻¹ of
/// those rounds' mean H, [`SPREAD`] times whose sds spread the starts: overdispersed around
/// the point, as R̂ asks (Gelman & Rubin 1992).
async fn refine<P: PartyHandle>(
    gradients: &mut Gradients<'_, P>,
    reach: &[f64],
    climbed: Climbed,
    rounds: u64,
) -> anyhow::Result<(Vec<f64>, DMatrix<f64>)> {
    let dim = reach.len();
    let mut centre = climbed.point.clone();
    let mut design = DMatrix::identity(dim, dim) * (DESIGN_WIDTH * climbed.length.sqrt());
    let mut trust = TRUST;
    let mut cut: Option<DVector<f64>> = None;
    let mut centres = Vec::new();
    let mut hessians = Vec::new();
    for _ in 0..rounds {
        let mut gradient = DVector::zeros(dim);
        let mut change = DMatrix::zeros(dim, dim);
        for j in 0..dim {
            let up = gradients
                .at((&centre + design.column(j)).as_slice())
                .await?;
            let down = gradients
                .at((&centre - design.column(j)).as_slice())
                .await?;
            gradient += &up + &down;
            change.set_column(j, &((up - down) * 0.5));
        }
        gradient /= 2.0 * dim as f64;
        let inverse = design
            .clone()
            .try_inverse()
            .ok_or_else(|| anyhow::anyhow!("the initialiser's design became singular"))?;
        let hessian = change * &inverse;
        let hessian = (&hessian + hessian.transpose()) * 0.5;
        // Where the fit does not curve down everywhere, a step along the gradient in the
        // design's metric, and a wider design.
        let (mut step, next) = match covariance(&hessian).and_then(|c| {
            let root = c.clone().cholesky()?.l();
            Some((c, root))
        }) {
            Some((covariance, root)) => (covariance * &gradient, root * DESIGN_WIDTH),
            None => (&design * design.transpose() * &gradient, &design * 2.0),
        };
        if let Some(last) = &cut {
            trust = if gradient.dot(last) > 0.0 {
                2.0 * trust
            } else {
                (0.5 * trust).max(TRUST)
            };
        }
        let long = (&inverse * &step).norm();
        cut = (long > trust).then(|| {
            step *= trust / long;
            step.clone()
        });
        within_prior(&mut step, reach);
        centre += step;
        // Both designs are lower triangular: the ratio of their sizes from their diagonals.
        let growth = (0..dim)
            .map(|j| (next[(j, j)] / design[(j, j)]).abs().ln())
            .sum::<f64>()
            / dim as f64;
        let growth = growth.exp();
        design = next * (growth.clamp(0.5, 2.0) / growth);
        centres.push(centre.clone());
        hessians.push(hessian);
    }
    let later = centres.len() / 2;
    let mean = hessians[later..]
        .iter()
        .fold(DMatrix::zeros(dim, dim), |sum, h| sum + h)
        / (hessians.len() - later).max(1) as f64;
    // The medians along the eigenvectors of the mean Hessian, where the rounds' errors
    // (−H)⁻¹ξ are independent: along the coordinates, the medians of centres scattered
    // along a ridge would come from different centres and leave the ridge.
    let axes = mean.clone().symmetric_eigen().eigenvectors;
    let point = if centres.is_empty() {
        climbed.point.iter().copied().collect()
    } else {
        let along: Vec<DVector<f64>> = centres[later..].iter().map(|c| axes.tr_mul(c)).collect();
        let medians = DVector::from_fn(dim, |k, _| {
            quantile(&along.iter().map(|a| a[k]).collect::<Vec<_>>(), 0.5)
        });
        (&axes * medians).iter().copied().collect()
    };
    let fitted = covariance(&mean)
        .unwrap_or_else(|| &design * design.transpose() / (DESIGN_WIDTH * DESIGN_WIDTH));
    Ok((point, fitted))
}

/// (−H)⁻¹ where −H is positive definite, with finite entries.
fn covariance(hessian: &DMatrix<f64>) -> Option<DMatrix<f64>> {
    let eigen = (-hessian).symmetric_eigen();
    if !eigen.eigenvalues.iter().all(|&v| v > 0.0 && v.is_finite()) {
        return None;
    }
    let inverse = eigen.eigenvalues.map(f64::recip);
    let covariance =
        &eigen.eigenvectors * DMatrix::from_diagonal(&inverse) * eigen.eigenvectors.transpose();
    covariance
        .iter()
        .all(|v| v.is_finite())
        .then_some(covariance)
}

/// Shortens `step` so that it is no longer than the prior's sd along any coordinate: where
/// every row's gradient is clipped the gradient barely changes, and a step length read from
/// it (Barzilai–Borwein's, or a near-singular fitted Hessian's) would be unbounded.
fn within_prior(step: &mut DVector<f64>, reach: &[f64]) {
    let longest = step
        .iter()
        .zip(reach)
        .map(|(s, r)| (s / r).abs())
        .fold(1.0, f64::max);
    *step /= longest;
}

/// The prior's sd along each coordinate at its mode, 1/√(−∂²ⱼ ln p), from the change of
/// its gradient over a unit step (exact for a Gaussian prior); unbounded where the prior is
/// flat.
fn prior_sd(model: &dyn Model, mode: &[f64]) -> Vec<f64> {
    let dim = mode.len();
    let mut at_mode = vec![0.0; dim];
    model.grad_log_prior(mode, &mut at_mode);
    (0..dim)
        .map(|j| {
            let mut moved = mode.to_vec();
            moved[j] += 1.0;
            let mut g = vec![0.0; dim];
            model.grad_log_prior(&moved, &mut g);
            let curvature = at_mode[j] - g[j];
            if curvature > 0.0 {
                curvature.sqrt().recip()
            } else {
                f64::INFINITY
            }
        })
        .collect()
}

/// `chains` starting points: the point found plus N(0, scale²) per coordinate.
pub fn disperse(init: &Initialised, chains: u32, rng: &mut impl Rng) -> Vec<Vec<f64>> {
    (0..chains)
        .map(|_| {
            init.point
                .iter()
                .zip(&init.scale)
                .map(|(p, s)| {
                    let z: f64 = StandardNormal.sample(rng);
                    p + s * z
                })
                .collect()
        })
        .collect()
}

/// Where chains start, as `--init` (or `init` in a config file) spells it: `private` (the
/// default), `truth-jitter` (simulations only), or one point `x,y,…` for every chain.
#[derive(Clone, Debug, PartialEq)]
pub enum InitChoice {
    Private,
    /// The thesis's protocol for simulations: the true θ plus N(0, 1)·(mean exact posterior
    /// sd) per chain (Räisä 2020, Sec. 6). It uses the truth, which only a simulation knows.
    TruthJitter,
    Point(Vec<f64>),
}

impl std::str::FromStr for InitChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "private" => Ok(InitChoice::Private),
            "truth-jitter" => Ok(InitChoice::TruthJitter),
            point => point
                .split(',')
                .map(|v| v.trim().parse::<f64>())
                .collect::<Result<Vec<f64>, _>>()
                .map(InitChoice::Point)
                .map_err(|_| {
                    format!(
                        "--init takes `private`, `truth-jitter` or comma-separated numbers, not {point:?}"
                    )
                }),
        }
    }
}

impl Serialize for InitChoice {
    /// As [`serde::Deserialize`] reads it: a name, or an array of numbers.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            InitChoice::Private => s.serialize_str("private"),
            InitChoice::TruthJitter => s.serialize_str("truth-jitter"),
            InitChoice::Point(p) => p.serialize(s),
        }
    }
}

impl<'de> serde::Deserialize<'de> for InitChoice {
    /// A string as on the command line, or an array of numbers.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Name(String),
            Point(Vec<f64>),
        }
        match Raw::deserialize(d)? {
            Raw::Name(s) => s.parse().map_err(serde::de::Error::custom),
            Raw::Point(p) => Ok(InitChoice::Point(p)),
        }
    }
}
