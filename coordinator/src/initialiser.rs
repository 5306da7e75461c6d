//! The private initialiser: where the chains start when the analyst names no point. A run
//! of its own (`initialiser` on the parties) releases the clipped gradient at each step of
//! an ascent from the prior's mode towards the posterior mode, each release charged like
//! any other; its cost is a stated share of what every party has left, the rest goes to
//! sampling. The chains then start overdispersed around the point found, so R̂ keeps its
//! meaning. Everything after the releases (the ascent's steps, the point, the spread) is
//! post-processing.
//!
//! The ascent takes Barzilai–Borwein steps (Barzilai & Borwein 1988): the step length is
//! sᵀs/sᵀy from the last move s and the change y in the gradient, an estimate of the
//! inverse curvature along the way, so it needs no learning rate matched to the
//! posterior's scale (which nobody may tune on private data), crosses orders of magnitude
//! of distance in a few steps, and follows narrow curved ridges (the banana's) where
//! fixed-rate and sign-based ascents stall. Its steps are not monotone, and noise and
//! clipped (flat) gradients make some of them wild, so the point is not its last iterate but
//! the mean of the [`BEST`] iterates with the smallest gradient norm: the mode is where the
//! gradient vanishes, and far from it the clipped gradient saturates at n·b_g.
use std::sync::Arc;

use fedmcmc_common::models::Model;
use fedmcmc_party::node::INITIALISER;
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::Serialize;

use crate::federation::{
    Closed, Federation, Grant, NoiseChoice, PartyHandle, PartyInfo, Query, RunPlan,
};
use crate::kernels::ChainLink;

/// The share of every party's remaining budget (as the privacy-loss μ of its Gaussian
/// releases) the initialiser spends when none is given.
pub const DEFAULT_SHARE: f64 = 0.1;
/// Gradient releases of the ascent when none are given.
pub const DEFAULT_STEPS: u64 = 100;
/// The first step's length, relative to max(1, ‖θ₀‖): Barzilai–Borwein steps need one move
/// to measure the curvature from.
const FIRST_STEP: f64 = 0.1;
/// How many of the ascent's iterates (those with the smallest gradient norm) make the point,
/// and whose spread around it spreads the chains' starts.
const BEST: usize = 10;
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
    /// The ascent's estimate of the posterior mode.
    pub point: Vec<f64>,
    /// Per coordinate, the farthest any of the iterates that made `point` lies from it: how
    /// widely the chains' starts are spread.
    pub scale: Vec<f64>,
    pub grants: Vec<Grant>,
    pub closed: Vec<Closed>,
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
                let s = (self.steps as f64 / (2.0 * mu)).sqrt();
                Ok(RunPlan {
                    variant: INITIALISER,
                    chains: 1,
                    steps_per_chain: self.steps,
                    clip: self.gradient_clip,
                    noise: NoiseChoice::Tau(s / (p.rows as f64).sqrt()),
                    batch_size: None,
                    barker_variance: None,
                    hmc: None,
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
    let grants = federation.open(&plans, &model.fingerprint()).await?;
    let ascent = ascend(federation, model.as_ref(), settings.steps).await;
    let closed = federation.close().await?;
    let (point, scale) = ascent?;
    Ok(Initialised {
        settings,
        point,
        scale,
        grants,
        closed,
    })
}

/// Barzilai–Borwein ascent on the noisy gradient of the log posterior from the prior's
/// mode, one gradient release per step. Returns the mean of the [`BEST`] iterates with the
/// smallest gradient norm and, per coordinate, the farthest of them from it.
async fn ascend<P: PartyHandle>(
    federation: &Federation<P>,
    model: &dyn Model,
    steps: u64,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let mut link = ChainLink::new(federation, 0);
    let mut ask = async |theta: &[f64]| -> anyhow::Result<Vec<f64>> {
        let answer = link
            .ask(Query::Gradient { theta })
            .await
            .map_err(|e| anyhow::anyhow!("initialiser step {}: {}", e.step, e.source))?;
        let mut prior = vec![0.0; theta.len()];
        model.grad_log_prior(theta, &mut prior);
        Ok(answer
            .value
            .iter()
            .zip(&prior)
            .map(|(g, p)| g + p)
            .collect())
    };
    let mut theta = model.prior_mode();
    let mut gradient = ask(&theta).await?;
    let norm = gradient.iter().map(|g| g * g).sum::<f64>().sqrt();
    let reach = theta.iter().map(|t| t * t).sum::<f64>().sqrt().max(1.0);
    let mut length = if norm > 0.0 {
        FIRST_STEP * reach / norm
    } else {
        0.0
    };
    let size = |g: &[f64]| g.iter().map(|v| v * v).sum::<f64>();
    let mut iterates = vec![(size(&gradient), theta.clone())];
    let reach = prior_sd(model, &theta);
    for _ in 1..steps {
        // No move longer than the prior's sd along any coordinate: where every row's gradient
        // is clipped the gradient barely changes, and Barzilai–Borwein reads that as no
        // curvature at all.
        let longest = gradient
            .iter()
            .zip(&reach)
            .map(|(g, r)| (length * g / r).abs())
            .fold(1.0, f64::max);
        let next: Vec<f64> = theta
            .iter()
            .zip(&gradient)
            .map(|(t, g)| t + length * g / longest)
            .collect();
        if next.iter().any(|v| !v.is_finite()) {
            // A step out of the numbers: shorter ones from here, asking the same θ again.
            length *= 0.5;
            gradient = ask(&theta).await?;
            continue;
        }
        let next_gradient = ask(&next).await?;
        let (mut ss, mut sy) = (0.0, 0.0);
        for j in 0..theta.len() {
            let (s, y) = (next[j] - theta[j], next_gradient[j] - gradient[j]);
            ss += s * s;
            sy -= s * y;
        }
        // Ascent: the gradient falls along s where the log posterior curves down.
        if sy > 0.0 && (ss / sy).is_finite() {
            length = ss / sy;
        }
        theta = next;
        gradient = next_gradient;
        iterates.push((size(&gradient), theta.clone()));
    }
    iterates.sort_by(|a, b| a.0.total_cmp(&b.0));
    let best: Vec<&[f64]> = iterates
        .iter()
        .take(BEST)
        .map(|(_, x)| x.as_slice())
        .collect();
    let point: Vec<f64> = (0..theta.len())
        .map(|j| best.iter().map(|x| x[j]).sum::<f64>() / best.len() as f64)
        .collect();
    let scale = (0..theta.len())
        .map(|j| {
            best.iter()
                .map(|x| (x[j] - point[j]).abs())
                .fold(0.0, f64::max)
        })
        .collect();
    Ok((point, scale))
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
