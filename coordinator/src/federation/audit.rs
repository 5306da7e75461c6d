//! What an honest party grants and answers, checked by the coordinator before it uses either.
//!
//! Integrity is outside the privacy threat model (DESIGN §1): a party can always lie about
//! its own rows. But a party that grants other terms than the plan's, states a noise it did
//! not add, or answers a value no clipped statistic could reach would make the draws silently
//! wrong (a stated variance of 1e308 once gave acceptance 0, R̂ 2e15 and exit 0). The
//! coordinator knows the plan, the model and each party's public row count and neighbour
//! relation, so it computes what an honest party's grant and answers must be (the party's
//! own public calibration, [`fedmcmc_party::release::expected`]) and stops the job with a
//! sentence naming the party on any mismatch.
use std::time::Duration;

use fedmcmc_common::models::Model;
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::aggregation::{multiplier_for, share};
use fedmcmc_party::ledger::{HmcTerms, RunTerms};
use fedmcmc_party::release::expected;
use fedmcmc_party::statistics::minibatch::barker_noise_multiplier;
use fedmcmc_party::variants::BARKER;

use super::{Contribution, Grant, NoiseChoice, PartyInfo, Query, RunPlan};

/// The relative difference allowed between a stated number and the coordinator's own
/// computation of it: both are the same f64 arithmetic on the same inputs, so only
/// last-bit differences are expected.
const ROUNDING: f64 = 1e-9;

/// How far beyond its statistic's bound an honest answer may lie, in sds of its stated
/// noise: a Gaussian exceeds 12 sds with probability 4e-33, so a job of 10⁹ entries would
/// stop an honest party with probability below 1e-23.
const NOISE_SDS: f64 = 12.0;

/// One party's run as granted: the terms its answers are checked against.
#[derive(Clone, Debug)]
pub struct Audit {
    terms: RunTerms,
    rows: usize,
    neighbours: Neighbours,
}

/// `x ≤ cap`, false for NaN: no NaN answer passes.
fn within(x: f64, cap: f64) -> bool {
    x <= cap
}

fn close(stated: f64, computed: f64) -> bool {
    (stated - computed).abs() <= ROUNDING * computed.abs()
}

/// Checks `grant` against `plan` and the party's public facts; the terms its run holds.
pub fn check_grant(plan: &RunPlan, info: &PartyInfo, grant: &Grant) -> Result<Audit, String> {
    let planned = u64::from(plan.chains) * plan.steps_per_chain;
    if grant.releases != planned {
        return Err(format!(
            "granted {} releases for a plan of {planned} ({} chains × {} steps)",
            grant.releases, plan.chains, plan.steps_per_chain
        ));
    }
    let (tau, s) = (grant.tau, grant.noise_multiplier);
    if !(s.is_finite() && s > 0.0 && tau.is_finite() && tau > 0.0) {
        return Err(format!(
            "granted the noise multiplier {s} and τ {tau}; both must be positive numbers"
        ));
    }
    let sqrt_n = (info.rows as f64).sqrt();
    // The multiplier a plan implies: τ·√n for a given τ, DP Barker's from its batch; a
    // calibrated τ is the party's to choose, but its multiplier is still τ·√n.
    let implied = match (plan.variant, plan.noise, plan.batch_size) {
        (BARKER, _, Some(batch)) => barker_noise_multiplier(batch),
        (_, NoiseChoice::Tau(t), _) => {
            if !close(tau, t) {
                return Err(format!("granted τ = {tau} for a plan of τ = {t}"));
            }
            t * sqrt_n
        }
        (_, NoiseChoice::Calibrate, _) => tau * sqrt_n,
    };
    if !close(s, implied) {
        return Err(format!(
            "granted the noise multiplier {s}, where its τ = {tau} and {} rows give {implied}",
            info.rows
        ));
    }
    let bounded = |e: f64| e.is_finite() && e >= 0.0 && e <= info.epsilon * (1.0 + ROUNDING);
    if !(bounded(grant.run_epsilon) && bounded(grant.epsilon_committed)) {
        return Err(format!(
            "granted a run of ε {} with ε {} committed, outside its budget's [0, {}]",
            grant.run_epsilon, grant.epsilon_committed, info.epsilon
        ));
    }
    if grant.lease == Duration::ZERO {
        return Err("granted a run with no lease: it would close before the first step".into());
    }
    Ok(Audit {
        terms: RunTerms {
            variant: plan.variant.to_string(),
            chains: plan.chains,
            steps_per_chain: plan.steps_per_chain,
            planned_releases: grant.releases,
            clip: plan.clip,
            tau,
            noise_multiplier: s,
            batch_size: plan.batch_size,
            population: plan.batch_size.map(|_| info.rows),
            barker_variance: plan.barker_variance,
            hmc: plan.hmc.map(|h| HmcTerms {
                leapfrog_steps: h.leapfrog_steps,
                gradient_clip: h.gradient_clip,
                gradient_tau: h.gradient_tau,
                gradient_multiplier: h.gradient_tau * sqrt_n,
            }),
            aggregation: None,
        },
        rows: info.rows as usize,
        neighbours: info.neighbours,
    })
}

impl Audit {
    /// Checks one answer to `query` at `step`: the noise variance an honest party states
    /// (σ² = (s·Δ′)², Δ′ the public bound's sensitivity grown by the rounding to its grid) and every entry within the statistic's bound
    /// plus [`NOISE_SDS`] of that noise.
    pub fn check_answer(
        &self,
        model: &dyn Model,
        step: u64,
        query: Query<'_>,
        answer: &Contribution,
    ) -> Result<(), String> {
        let calibration = expected(model, &self.terms, self.rows, self.neighbours, step, query)
            .map_err(|e| format!("answered step {step}, which its own rules refuse ({e})"))?;
        let variance = calibration.mechanism.variance();
        if !close(answer.noise_variance, variance) {
            return Err(format!(
                "stated noise variance {:e} at step {step}, where its run's noise multiplier {} and the step's sensitivity {:e} (rounding to its grid included) give {variance:e}",
                answer.noise_variance,
                calibration.mechanism.mechanism.noise_multiplier,
                calibration.mechanism.mechanism.sensitivity
            ));
        }
        if answer.value.len() != query.released_len() {
            return Err(format!(
                "answered step {step} with {} entries, not {}",
                answer.value.len(),
                query.released_len()
            ));
        }
        let reach = calibration.bound.statistic * (1.0 + ROUNDING) + NOISE_SDS * variance.sqrt();
        if let Some((i, v)) = answer
            .value
            .iter()
            .enumerate()
            .find(|(_, v)| !within(v.abs(), reach))
        {
            return Err(format!(
                "answered {v:e} in entry {i} at step {step}, beyond what its clipped statistic (at most {:e}) and its noise ({NOISE_SDS} sds) can reach",
                calibration.bound.statistic
            ));
        }
        Ok(())
    }

    /// Checks one party's masked share under secure aggregation with common multiplier
    /// `multiplier` and `honest` honest parties: the entries, the grid and the share's
    /// variance an honest party adds (`fedmcmc_party::aggregation::share`). Returns the
    /// bound on its statistic's entries, for the check of the decoded sum.
    pub fn check_share(
        &self,
        model: &dyn Model,
        step: u64,
        query: Query<'_>,
        answer: &Contribution,
        (multipliers, honest, parties): ((f64, f64), u32, usize),
    ) -> Result<f64, String> {
        let multiplier = multiplier_for(&query, &self.terms, multipliers);
        let calibration = expected(model, &self.terms, self.rows, self.neighbours, step, query)
            .map_err(|e| format!("answered step {step}, which its own rules refuse ({e})"))?;
        let len = query.released_len();
        let Some(masked) = answer.masked.as_ref().filter(|m| m.steps.len() == len) else {
            return Err(format!(
                "answered step {step} of a secure run without a masked share of {len} entries"
            ));
        };
        let share = share(
            &calibration.bound,
            self.neighbours,
            multiplier,
            (honest, parties),
            len,
        )
        .map_err(|e| format!("answered step {step}, which its own rules refuse ({e})"))?;
        let (variance, grid) = share.map_or((0.0, 1.0), |s| (s.variance(), s.grid));
        if !close(answer.noise_variance, variance) || masked.grid != grid {
            return Err(format!(
                "stated a share of noise variance {:e} on grid {:e} at step {step}, where the run's common multiplier {multiplier} over {honest} honest parties gives {variance:e} on grid {grid:e}",
                answer.noise_variance, masked.grid
            ));
        }
        Ok(calibration.bound.statistic)
    }
}

/// Checks a decoded secure sum: every entry within the parties' statistic bounds (summed)
/// plus [`NOISE_SDS`] of the sum's noise.
pub fn check_sum(step: u64, sum: &Contribution, statistic: f64) -> Result<(), String> {
    let reach = statistic * (1.0 + ROUNDING) + NOISE_SDS * sum.noise_variance.sqrt();
    match sum.value.iter().find(|v| !within(v.abs(), reach)) {
        Some(v) => Err(format!(
            "the parties' masked shares at step {step} decode to {v:e}, beyond what their clipped statistics (at most {statistic:e} together) and noise can reach: a share was not an honest one, or a party's masks did not cancel"
        )),
        None => Ok(()),
    }
}
