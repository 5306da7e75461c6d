//! Privacy accounting for a party's releases (docs/design.md §3 "Accounting for a party").
//!
//! Every release is a Gaussian mechanism; its noise multiplier s is noise std / L2 sensitivity.
//! A composition of releases is summarised by μ = Σ 1/(2s²) ([`GaussianComposition`]), and an
//! [`Accountant`] turns μ into (ε, δ) statements: the tight analytic Gaussian privacy-loss
//! curve (Räisä 2020, Thm 3.2, 4.3) or the looser zCDP conversion (Thm 2.5, 3.1).
//! [`max_releases`] is Räisä 2020, Alg. 2; [`calibrate`] inverts it for the noise.
//!
//! Beyond plain Gaussian releases: a [`Composition`] of [`Release`]s of any mechanism
//! (Gaussian, Poisson-subsampled, batch without replacement) is accounted by a [`Method`]
//! (analytic, zCDP, RDP, PLD) into a [`Measure`] with explicit conversions to (ε, δ), and
//! [`Choice`] (one method, or the tightest valid one) solves for ε, δ, the most releases or
//! the least noise on any of them, each answer with its [`StatedError`].
mod cancel;
mod choice;
mod composition;
mod gaussian;
mod measure;
pub mod pld;
pub mod rdp;
mod release;
mod solve;
mod special;
pub mod zcdp;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use cancel::Cancel;
pub use choice::Choice;
pub use composition::{
    Answer, Composition, CompositionError, Estimate, Failure, MaxReleases, Method,
};
pub use gaussian::{GaussianComposition, max_mu, mu_per_release};
pub use measure::{Measure, StatedError};
pub use release::{MechanismKind, Release};
pub use solve::largest_fitting;
use solve::{next_down, next_up};

/// Invalid input to an accountant; each message is one sentence naming the bad value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AccountantError {
    #[error("epsilon must be a finite number greater than 0, got {0}")]
    InvalidEpsilon(f64),
    #[error("delta must lie strictly between 0 and 1, got {0}")]
    InvalidDelta(f64),
    #[error("the noise multiplier must be a finite number greater than 0, got {0}")]
    InvalidNoiseMultiplier(f64),
    #[error("a release count must be a finite number of at least 0, got {0}")]
    InvalidReleaseCount(f64),
    #[error("mu (rho) must be a finite number of at least 0, got {0}")]
    InvalidMu(f64),
    #[error("at least one release is needed to calibrate the noise")]
    ZeroReleases,
    #[error("the budget allows more than 2^53 releases, too many to count exactly")]
    TooManyReleases,
    #[error("unknown accountant '{0}', expected 'analytic' or 'zcdp'")]
    UnknownAccountant(String),
}

pub(crate) fn check_epsilon(epsilon: f64) -> Result<(), AccountantError> {
    if epsilon.is_finite() && epsilon > 0.0 {
        Ok(())
    } else {
        Err(AccountantError::InvalidEpsilon(epsilon))
    }
}

pub(crate) fn check_delta(delta: f64) -> Result<(), AccountantError> {
    if delta > 0.0 && delta < 1.0 {
        Ok(())
    } else {
        Err(AccountantError::InvalidDelta(delta))
    }
}

pub(crate) fn check_noise_multiplier(s: f64) -> Result<(), AccountantError> {
    if s.is_finite() && s > 0.0 {
        Ok(())
    } else {
        Err(AccountantError::InvalidNoiseMultiplier(s))
    }
}

pub(crate) fn check_count(count: f64) -> Result<(), AccountantError> {
    if count.is_finite() && count >= 0.0 {
        Ok(())
    } else {
        Err(AccountantError::InvalidReleaseCount(count))
    }
}

pub(crate) fn check_mu(mu: f64) -> Result<(), AccountantError> {
    if mu.is_finite() && mu >= 0.0 {
        Ok(())
    } else {
        Err(AccountantError::InvalidMu(mu))
    }
}

/// Largest integer every f64 up to which is exact; release counts beyond it are refused.
const MAX_EXACT_COUNT: f64 = 9_007_199_254_740_992.0;

/// How a composition of plain Gaussian releases is turned into an (ε, δ) guarantee. Both work
/// on the composition's μ (= zCDP's ρ), which the party's ledger keeps. Compositions of other
/// mechanisms go through [`Method`] / [`Choice`], whose `analytic` and `zcdp` are these two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accountant {
    /// Tight: the Gaussian privacy-loss distribution N(μ, 2μ) (Räisä 2020, Thm 3.2, 4.3).
    #[default]
    Analytic,
    /// zCDP with ρ = μ and the Thm 2.5 conversion (Räisä 2020, Thm 3.1, 4.2): never tighter.
    Zcdp,
}

impl Accountant {
    pub const ALL: [Accountant; 2] = [Accountant::Analytic, Accountant::Zcdp];

    /// The short name used on the command line and in serialised configuration.
    pub fn key(self) -> &'static str {
        match self {
            Accountant::Analytic => "analytic",
            Accountant::Zcdp => "zcdp",
        }
    }

    /// What the method is, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Accountant::Analytic => "analytic-gaussian-pld (Räisä 2020, Thm 3.2, 4.3)",
            Accountant::Zcdp => "zcdp-to-approx-dp (Räisä 2020, Thm 2.5, 3.1)",
        }
    }

    /// δ at ε for the composition (ε must be finite and > 0).
    pub fn delta(
        self,
        composition: &GaussianComposition,
        epsilon: f64,
    ) -> Result<f64, AccountantError> {
        check_epsilon(epsilon)?;
        Ok(self.delta_unchecked(composition.mu(), epsilon))
    }

    /// The smallest ε with δ(ε) ≤ `delta` for the composition (δ in (0, 1)).
    pub fn epsilon(
        self,
        composition: &GaussianComposition,
        delta: f64,
    ) -> Result<f64, AccountantError> {
        check_delta(delta)?;
        Ok(match self {
            Accountant::Analytic => composition.epsilon(delta),
            Accountant::Zcdp => zcdp::epsilon_bound(composition.mu(), delta),
        })
    }

    /// The largest total μ this accountant admits under (ε, δ).
    pub fn max_mu(self, epsilon: f64, delta: f64) -> Result<f64, AccountantError> {
        match self {
            Accountant::Analytic => max_mu(epsilon, delta),
            Accountant::Zcdp => zcdp::max_rho(epsilon, delta),
        }
    }

    fn delta_unchecked(self, mu: f64, epsilon: f64) -> f64 {
        match self {
            Accountant::Analytic => GaussianComposition { mu }.delta(epsilon),
            Accountant::Zcdp => zcdp::delta_bound(mu, epsilon),
        }
    }
}

impl fmt::Display for Accountant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

impl FromStr for Accountant {
    type Err = AccountantError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Accountant::ALL
            .into_iter()
            .find(|a| a.key() == s)
            .ok_or_else(|| AccountantError::UnknownAccountant(s.to_owned()))
    }
}

/// The largest k such that k releases with multiplier s fit (ε, δ): δ(k) ≤ δ < δ(k+1) as the
/// accountant computes δ (0 if not even one release fits). Räisä 2020, Alg. 2: start from the
/// zCDP count of Thm 3.1, double until it no longer fits, bisect on real-valued k.
pub fn max_releases(
    accountant: Accountant,
    noise_multiplier: f64,
    epsilon: f64,
    delta: f64,
) -> Result<u64, AccountantError> {
    check_noise_multiplier(noise_multiplier)?;
    let rho = zcdp::max_rho(epsilon, delta)?;
    let mu1 = mu_per_release(noise_multiplier);
    // Same arithmetic as `GaussianComposition::from_releases(&[(k, s)])`.
    let fits = |k: f64| accountant.delta_unchecked(k * mu1, epsilon) <= delta;
    let mut low = (rho / mu1).floor();
    if low >= MAX_EXACT_COUNT {
        return Err(AccountantError::TooManyReleases);
    }
    if !fits(low) {
        // Only the zCDP accountant's own rounding at its boundary gets here; 0 always fits.
        low = 0.0;
    }
    let mut high = low.max(1.0);
    while fits(high) {
        if high >= MAX_EXACT_COUNT {
            return Err(AccountantError::TooManyReleases);
        }
        low = high;
        high *= 2.0;
    }
    while high.floor() - low.floor() > 1.0 {
        let mid = (high + low) / 2.0;
        if fits(mid) {
            low = mid;
        } else {
            high = mid;
        }
    }
    let k = if fits(high.floor()) {
        high.floor()
    } else {
        low.floor()
    };
    Ok(k as u64)
}

/// The smallest noise multiplier s (to the last bit) with which `releases` releases fit
/// (ε, δ): μ = k/(2s²) ≤ max μ, then stepped by ulps to the exact boundary of the accountant's
/// own δ so that callers can re-check it and get the same answer.
pub fn calibrate(
    accountant: Accountant,
    releases: u64,
    epsilon: f64,
    delta: f64,
) -> Result<f64, AccountantError> {
    if releases == 0 {
        return Err(AccountantError::ZeroReleases);
    }
    let k = releases as f64;
    let mu_max = accountant.max_mu(epsilon, delta)?;
    let fits = |s: f64| accountant.delta_unchecked(k * mu_per_release(s), epsilon) <= delta;
    let mut s = (k / (2.0 * mu_max)).sqrt();
    while !fits(s) {
        s = next_up(s);
    }
    while fits(next_down(s)) {
        s = next_down(s);
    }
    Ok(s)
}
