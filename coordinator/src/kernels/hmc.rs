//! The DP HMC kernel (Räisä 2020, Alg. 4): a leapfrog trajectory driven by the federation's
//! noisy clipped gradients, then a penalty test on the noisy log-likelihood ratio between its
//! ends. The leapfrog is written in the gradient-reusing form of Sec. 4.2 (a half momentum
//! step, L − 1 full ones, a half one), so an iteration asks for L + 1 gradients, each at a
//! new θ, and one ratio: the fixed pattern each party checks and charges (Thm 4.3).
//!
//! Noise in the gradients keeps the leapfrog reversible and volume-preserving for a
//! symmetric noise distribution, so the target is unchanged (Sec. 4.3); it only lowers the
//! acceptance. The ratio's noise is corrected as in the penalty test: accept iff
//! ln u < ΔĤ − ½Σσ_l² (the printed pseudo-code's `u <` lacks the logarithm).
//!
//! Warm-up adapts the step size by dual averaging towards [`TARGET_ACCEPT`] and, in its
//! middle half, estimates a diagonal mass matrix from the chain's own draws; both then
//! freeze. Both use only the chain's states and the tests' acceptance probabilities:
//! post-processing of releases.
use std::sync::Arc;

use fedmcmc_common::acceptance::PenaltyTerms;
use fedmcmc_common::models::Model;
use fedmcmc_common::proposal::{DualAveraging, VarianceEstimate};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use super::{ChainLink, Kernel, LinkError, Transition};
use crate::federation::{PartyHandle, Query};

/// The mean acceptance probability the step size adapts to: 0.65, near the optimum for HMC
/// in high dimensions (Beskos et al. 2013) and the value Stan uses for HMC without NUTS.
pub const TARGET_ACCEPT: f64 = 0.65;

/// Warm-ups shorter than this adapt the step size only: too few draws for a mass matrix.
const MIN_WARMUP_FOR_MASS: u64 = 40;

/// A trajectory whose end is farther than this over the ratio's clip coefficient has
/// diverged: no model's posterior spans it, and a party would refuse a ratio whose per-row
/// bound clip·‖θ′ − θ‖ nears the overflow of its noise (σ up to 1e150 at multipliers up to
/// 1e12), so it is rejected without asking one.
const MAX_CLIPPED_JUMP: f64 = 1e100;

pub struct Hmc {
    model: Arc<dyn Model>,
    leapfrog_steps: u32,
    /// The longest ‖θ′ − θ‖ asked about: [`MAX_CLIPPED_JUMP`] over the run's ratio clip.
    max_jump: f64,
    step_size: f64,
    /// Diagonal of M⁻¹ (the estimated posterior variances once adapted).
    inverse_mass: Vec<f64>,
    warmup: u64,
    adapted: u64,
    step_adaptation: DualAveraging,
    variances: VarianceEstimate,
    penalise: bool,
    /// Scratch: position and momentum along the trajectory, the summed gradient, and the
    /// chain's state after the last transition (for the mass estimate).
    position: Vec<f64>,
    momentum: Vec<f64>,
    gradient: Vec<f64>,
    last_theta: Vec<f64>,
}

impl Hmc {
    /// `warmup` is the number of adaptation calls the sampler will make (0 without
    /// adaptation); `clip` is the run's ratio clip coefficient.
    pub fn new(
        model: Arc<dyn Model>,
        leapfrog_steps: u32,
        step_size: f64,
        clip: f64,
        warmup: u64,
        penalise: bool,
    ) -> Self {
        let dim = model.dim();
        Hmc {
            model,
            leapfrog_steps,
            max_jump: MAX_CLIPPED_JUMP / clip,
            step_size,
            inverse_mass: vec![1.0; dim],
            warmup,
            adapted: 0,
            step_adaptation: DualAveraging::new(step_size, TARGET_ACCEPT),
            variances: VarianceEstimate::new(dim),
            penalise,
            position: vec![0.0; dim],
            momentum: vec![0.0; dim],
            gradient: vec![0.0; dim],
            last_theta: vec![0.0; dim],
        }
    }

    /// The federation's noisy clipped gradient of the log-likelihood at θ plus the prior's,
    /// into `self.gradient`. A θ that left the finite numbers (a diverging trajectory) is
    /// not sent: the gradient is asked at `fallback`, so the iteration still makes the
    /// releases it was charged for (the parties check each iteration's pattern), and the
    /// trajectory is rejected.
    async fn gradient_at<P: PartyHandle>(
        &mut self,
        link: &mut ChainLink<'_, P>,
        fallback: &[f64],
    ) -> Result<bool, LinkError> {
        let finite = self.position.iter().all(|v| v.is_finite());
        let at: &[f64] = if finite { &self.position } else { fallback };
        let answer = link.ask(Query::Gradient { theta: at }).await?;
        self.model.grad_log_prior(at, &mut self.gradient);
        for (g, v) in self.gradient.iter_mut().zip(&answer.value) {
            *g += v;
        }
        Ok(finite)
    }

    /// ½ pᵀ M⁻¹ p.
    fn kinetic(&self) -> f64 {
        0.5 * self
            .momentum
            .iter()
            .zip(&self.inverse_mass)
            .map(|(p, m)| p * p * m)
            .sum::<f64>()
    }

    fn kick(&mut self, by: f64) {
        for (p, g) in self.momentum.iter_mut().zip(&self.gradient) {
            *p += by * g;
        }
    }

    fn drift(&mut self) {
        for ((x, p), m) in self
            .position
            .iter_mut()
            .zip(&self.momentum)
            .zip(&self.inverse_mass)
        {
            *x += self.step_size * m * p;
        }
    }
}

impl Kernel for Hmc {
    async fn transition<P: PartyHandle>(
        &mut self,
        link: &mut ChainLink<'_, P>,
        theta: &mut [f64],
        rng: &mut ChaCha8Rng,
    ) -> Result<Transition, LinkError> {
        // p ~ N(0, M), M = diag(1/inverse_mass).
        for (p, m) in self.momentum.iter_mut().zip(&self.inverse_mass) {
            let z: f64 = StandardNormal.sample(rng);
            *p = z / m.sqrt();
        }
        let initial_kinetic = self.kinetic();
        self.position.copy_from_slice(theta);
        let eta = self.step_size;
        let mut finite = self.gradient_at(link, theta).await?;
        self.kick(0.5 * eta);
        for l in 1..=self.leapfrog_steps {
            self.drift();
            finite &= self.gradient_at(link, theta).await?;
            self.kick(if l < self.leapfrog_steps {
                eta
            } else {
                0.5 * eta
            });
        }
        let finite =
            finite && fedmcmc_common::clip::distance(theta, &self.position) <= self.max_jump;
        let theta_proposed: &[f64] = if finite { &self.position } else { theta };
        let answer = link
            .ask(Query::LogLikRatio {
                theta,
                theta_proposed,
            })
            .await?;
        let log_ratio = if finite {
            PenaltyTerms {
                noisy_log_lik_ratio: answer.value[0],
                noise_variance: answer.noise_variance,
                log_prior_ratio: self.model.log_prior(theta_proposed) - self.model.log_prior(theta),
                log_proposal_ratio: initial_kinetic - self.kinetic(),
            }
            .log_ratio(self.penalise)
        } else {
            f64::NEG_INFINITY
        };
        let transition = Transition::metropolis(log_ratio, answer.noise_variance, rng);
        if transition.accepted {
            theta.copy_from_slice(&self.position);
        }
        self.last_theta.copy_from_slice(theta);
        Ok(transition)
    }

    /// Step size by dual averaging throughout; the draws of the middle half of warm-up give
    /// the diagonal mass, after which the step-size search restarts from the current step;
    /// at the last warm-up transition the averaged step size is frozen.
    fn adapt(&mut self, transition: &Transition) {
        self.adapted += 1;
        let t = self.adapted;
        let w = self.warmup;
        self.step_size = self.step_adaptation.update(transition.accept_stat);
        if w >= MIN_WARMUP_FOR_MASS {
            if t > w / 4 && t <= 3 * w / 4 {
                self.variances.add(&self.last_theta);
            }
            if t == 3 * w / 4
                && let Some(v) = self.variances.variances()
            {
                // The step was tuned for the old metric; restart from it with the new one.
                self.inverse_mass = v;
                self.step_adaptation = DualAveraging::new(self.step_size, TARGET_ACCEPT);
            }
        }
        if t == w {
            self.step_size = self.step_adaptation.settled();
        }
    }

    fn scale(&self) -> f64 {
        self.step_size
    }
}
