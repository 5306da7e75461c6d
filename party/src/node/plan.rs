//! A run plan as the party reads it, and the public checks it must pass before admission:
//! the model, the variant served, the caps, the batch, the noise range. Nothing here reads a
//! row or the budget.
use fedmcmc_common::accountant::MechanismKind;
use fedmcmc_common::neighbours::Neighbours;

use super::PartyNode;
use crate::aggregation::SECURE_VARIANTS;
use crate::budget::NoiseRequest;
use crate::error::PartyError;
use crate::ledger::HmcTerms;
use crate::release::Calibration;
use crate::secure::Terms;
use crate::statistics::minibatch::{barker_bound, barker_noise_multiplier};
use crate::variants::{
    BARKER, FULL_PENALTY, HMC, MINIBATCH_PENALTY, NOISE_MULTIPLIERS, SUFFICIENT_STATISTICS,
    SUMMARIES, mechanism_of, variants_served,
};

/// A run plan as the party reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub variant: String,
    pub chains: u32,
    pub steps_per_chain: u64,
    /// The per-row clip coefficient; 0 (unset) for DP Barker, whose clip is fixed.
    pub clip: f64,
    pub noise: NoiseRequest,
    /// Minibatch variants: rows per secret batch.
    pub batch_size: Option<u64>,
    /// DP Barker: this party's share Cᵢ of the total noise variance C.
    pub barker_variance: Option<f64>,
    /// DP HMC: leapfrog steps and the gradient release's clip and τ.
    pub hmc: Option<HmcPlan>,
    /// Secure aggregation's session, roster and threshold; `None` for plain releases.
    pub aggregation: Option<Terms>,
}

/// A DP HMC run's leapfrog steps L, gradient clip b_g and gradient τ_g.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HmcPlan {
    pub leapfrog_steps: u32,
    pub gradient_clip: f64,
    pub gradient_tau: f64,
}

impl Plan {
    /// A full-data DP-penalty plan.
    pub fn full_penalty(chains: u32, steps_per_chain: u64, clip: f64, noise: NoiseRequest) -> Self {
        Plan {
            variant: FULL_PENALTY.into(),
            chains,
            steps_per_chain,
            clip,
            noise,
            batch_size: None,
            barker_variance: None,
            hmc: None,
            aggregation: None,
        }
    }
}

/// A plan that passed the public checks: its mechanism, releases, the noise to admit it at
/// and the population its batches are drawn from.
pub(crate) struct Checked {
    pub(crate) mechanism: MechanismKind,
    pub(crate) releases: u64,
    pub(crate) noise: NoiseRequest,
    pub(crate) population: Option<u64>,
    pub(crate) hmc: Option<HmcTerms>,
}

impl PartyNode {
    /// The plan's mechanism, releases and noise request, or why it is refused.
    pub(crate) fn check_plan(&self, plan: &Plan, fingerprint: &str) -> Result<Checked, PartyError> {
        let invalid = |m: String| Err(PartyError::InvalidArgument(m));
        if fingerprint != self.model.fingerprint() {
            return Err(PartyError::FailedPrecondition(format!(
                "model mismatch: this party serves {} with fingerprint {}, the request expects {fingerprint:?}",
                self.model.name(),
                self.model.fingerprint()
            )));
        }
        let served = self.variants();
        let variant = plan.variant.as_str();
        if !served.contains(&variant) {
            let why = if variant == SUFFICIENT_STATISTICS {
                format!(
                    "the {} model has no sufficient statistics",
                    self.model.name()
                )
            } else if variant == SUMMARIES {
                format!(
                    "the {} model has no summaries (a GLM has them, and a gaussian or banana model with public bounds on its columns)",
                    self.model.name()
                )
            } else if variants_served(Neighbours::Substitute).contains(&variant) {
                format!(
                    "the {variant} variant's privacy bounds hold for substitute neighbours, and this party states its guarantee under {} neighbours",
                    self.neighbours.as_str()
                )
            } else {
                format!("the {variant:?} variant is not one it serves")
            };
            return Err(PartyError::Unimplemented(format!(
                "{why}; this party serves {}",
                served.join(", ")
            )));
        }
        if plan.chains == 0 {
            return invalid("chains must be at least 1".into());
        }
        if let Some(terms) = &plan.aggregation {
            if !SECURE_VARIANTS.contains(&variant) {
                return Err(PartyError::Unimplemented(format!(
                    "a {variant} run cannot share its noise under secure aggregation (its releases' sensitivity and noise depend on each party's own rows); this party aggregates {} securely",
                    SECURE_VARIANTS.join(", ")
                )));
            }
            let min = self.limits.min_threshold;
            if terms.threshold < min {
                return Err(PartyError::FailedPrecondition(format!(
                    "secure aggregation: this party's policy needs a run to tolerate at least {min} parties colluding with the coordinator, the run assumes {}",
                    terms.threshold
                )));
            }
        }
        let max_chains = self.limits.max_chains;
        if plan.chains > max_chains {
            return Err(PartyError::BudgetExhausted(format!(
                "this party serves at most {max_chains} chains per run (max_chains), not {}",
                plan.chains
            )));
        }
        if plan.steps_per_chain == 0 {
            return invalid("steps_per_chain must be at least 1".into());
        }
        let n = self.data.n() as u64;
        // The smallest batch each minibatch variant takes: σ²_b needs two rows; Räisä 2020,
        // Thm 3.3 needs an order 2 < α < b/5.
        let min_batch = match variant {
            MINIBATCH_PENALTY => Some(2),
            BARKER => Some(16),
            _ => None,
        };
        match (min_batch, plan.batch_size) {
            (None, None) => {}
            (None, Some(b)) => {
                return invalid(format!("a {variant} run takes no batch size, got {b}"));
            }
            (Some(_), None) => {
                return invalid(format!("a {variant} run needs a batch size"));
            }
            (Some(min), Some(b)) if b < min || b > n => {
                return invalid(format!(
                    "a {variant} run needs a batch of {min} to {n} rows (this party's row count), got {b}"
                ));
            }
            (Some(_), Some(_)) => {}
        }
        if variant == SUMMARIES && plan.clip != 0.0 {
            return invalid(format!(
                "a {SUMMARIES} run's rows are bounded by the model's public column bounds; leave clip unset, got {}",
                plan.clip
            ));
        }
        if variant == SUMMARIES && plan.chains != 1 {
            return invalid(format!(
                "a {SUMMARIES} run is one chain of releases, not {}",
                plan.chains
            ));
        }
        if variant == SUMMARIES {
            if let Some(c) = plan.barker_variance {
                return invalid(format!(
                    "a {variant} run takes no Barker variance share, got {c}"
                ));
            }
        } else if variant == BARKER {
            if plan.clip != 0.0 {
                return invalid(format!(
                    "a {BARKER} run's clip is fixed by its batch and variance share (Räisä 2020, Thm 3.3); leave clip unset, got {}",
                    plan.clip
                ));
            }
            match plan.barker_variance {
                Some(c)
                    if c.is_finite()
                        && c > 0.0
                        && c < fedmcmc_common::barker::LOGISTIC_VARIANCE => {}
                other => {
                    return invalid(format!(
                        "a {BARKER} run needs this party's share of the noise variance C, between 0 and π²/3, got {other:?}"
                    ));
                }
            }
        } else {
            if !(plan.clip.is_finite() && plan.clip > 0.0) {
                return invalid(format!("clip must be a positive number, got {}", plan.clip));
            }
            if let Some(c) = plan.barker_variance {
                return invalid(format!(
                    "a {variant} run takes no Barker variance share, got {c}"
                ));
            }
        }
        let hmc = match (variant, plan.hmc) {
            (HMC, Some(h)) => {
                if h.leapfrog_steps == 0 {
                    return invalid("an hmc run needs at least one leapfrog step".into());
                }
                if !(h.gradient_clip.is_finite() && h.gradient_clip > 0.0) {
                    return invalid(format!(
                        "gradient_clip must be a positive number, got {}",
                        h.gradient_clip
                    ));
                }
                let per = u64::from(h.leapfrog_steps) + 2;
                if !plan.steps_per_chain.is_multiple_of(per) {
                    return invalid(format!(
                        "an hmc run with {} leapfrog steps takes {per} steps per iteration (L + 1 gradients and the ratio); steps_per_chain = {} is not a multiple",
                        h.leapfrog_steps, plan.steps_per_chain
                    ));
                }
                let NoiseRequest::Tau(_) = plan.noise else {
                    return invalid(
                        "an hmc run gives its ratio tau and gradient_tau; the party does not calibrate two noises".into(),
                    );
                };
                Some(HmcTerms {
                    leapfrog_steps: h.leapfrog_steps,
                    gradient_clip: h.gradient_clip,
                    gradient_tau: h.gradient_tau,
                    gradient_multiplier: self.multiplier_of("gradient_tau", h.gradient_tau)?,
                })
            }
            (HMC, None) => {
                return invalid(
                    "an hmc run needs its leapfrog steps, gradient clip and gradient tau".into(),
                );
            }
            (_, Some(_)) => {
                return invalid(format!(
                    "a {variant} run takes no leapfrog steps or gradient terms"
                ));
            }
            (_, None) => None,
        };
        let noise = match (variant, plan.noise) {
            // DP Barker's noise is its variance share; its multiplier follows from the batch.
            (BARKER, NoiseRequest::Calibrate) => {
                let batch = plan.batch_size.unwrap_or(1);
                let tau = barker_noise_multiplier(batch) / (n as f64).sqrt();
                self.check_barker_share(batch, plan.barker_variance.unwrap_or(0.0), tau)?;
                NoiseRequest::Tau(tau)
            }
            (BARKER, NoiseRequest::Tau(tau)) => {
                return invalid(format!(
                    "a {BARKER} run's noise is fixed by its variance share; ask the party to calibrate instead of giving tau = {tau}"
                ));
            }
            (_, NoiseRequest::Tau(tau)) => {
                self.multiplier_of("tau", tau)?;
                plan.noise
            }
            (_, NoiseRequest::Calibrate) => plan.noise,
        };
        let population = plan.batch_size.map(|_| n);
        let mechanism = mechanism_of(variant, plan.batch_size, population)
            .map_err(PartyError::InvalidArgument)?;
        let releases = (plan.chains as u64)
            .checked_mul(plan.steps_per_chain)
            .filter(|&k| k <= 1 << 53)
            .ok_or_else(|| PartyError::InvalidArgument("the plan has too many steps".into()))?;
        Ok(Checked {
            mechanism,
            releases,
            noise,
            population,
            hmc,
        })
    }

    /// Refuses a DP Barker share Cᵢ so small that no step of the run could be answered with
    /// it: a release's bound and noise follow from the share, the batch and n alone
    /// ([`barker_bound`]), the same at every step, so the release path's public check
    /// ([`Calibration::check`]) is made here once, at the multiplier the run will have
    /// (τ·√n, as admission computes it). A share whose noise variance underflows (below
    /// about 2.2e-308) fails it at every step; one whose clip √(Cᵢ/(2b))·b/n underflows to 0
    /// would pass it and answer 0 with noise variance 0 instead of Cᵢ, carrying nothing.
    /// Refused before admission, so nothing is reserved or charged.
    fn check_barker_share(&self, batch: u64, share: f64, tau: f64) -> Result<(), PartyError> {
        let n = self.data.n();
        let bound = barker_bound(n, batch, share);
        let multiplier = tau * (n as f64).sqrt();
        if bound.row > 0.0 && Calibration::check(bound, multiplier, 1).is_ok() {
            return Ok(());
        }
        Err(PartyError::InvalidArgument(format!(
            "a {BARKER} run's variance share C_i = {share:e} is too small: with a batch of {batch} of this party's {n} rows its releases' clip ({:e}) or noise variance ({:e}) underflows, so no step could be answered; give a share of at least about {:e}",
            bound.row,
            (multiplier * bound.sensitivity).powi(2),
            f64::MIN_POSITIVE
        )))
    }

    /// The noise multiplier τ·√n of a requested τ over this party's rows, or why it is
    /// refused.
    fn multiplier_of(&self, what: &str, tau: f64) -> Result<f64, PartyError> {
        let n = self.data.n();
        let s = tau * (n as f64).sqrt();
        let (low, high) = NOISE_MULTIPLIERS;
        if !(tau.is_finite() && tau > 0.0) {
            return Err(PartyError::InvalidArgument(format!(
                "{what} must be a positive number, got {tau}"
            )));
        }
        if !(low..=high).contains(&s) {
            return Err(PartyError::InvalidArgument(format!(
                "{what} = {tau:e} gives a noise multiplier τ·√n = {s:e} over this party's {n} rows; it accepts multipliers from {low:e} to {high:e}"
            )));
        }
        Ok(s)
    }
}
