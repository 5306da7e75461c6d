//! Admission: does a run's whole plan fit what is left of the party's (ε, δ)?
//!
//! Every release a party makes is a Gaussian mechanism, so everything it has ever released
//! composes to one Gaussian privacy-loss distribution with μ = Σ 1/(2sⱼ²) (seed 003 Thm 3.2;
//! heterogeneous releases add their μ's, Thm 4.3). The budget is therefore one number, the
//! largest μ whose tight δ(ε) stays within the configured δ, and admission compares μ's.
use fedmcmc_common::accountant::{self, GaussianComposition};

use crate::config::BudgetConfig;

#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub epsilon: f64,
    pub delta: f64,
    /// Largest total μ with δ(ε; μ) ≤ δ.
    pub max_mu: f64,
}

/// Fraction of the budget below which what is left counts as nothing.
const NEGLIGIBLE: f64 = 1e-9;

/// The noise a run asks for: a given τ to check, or the smallest τ that fits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NoiseRequest {
    Tau(f64),
    Calibrate,
}

/// What admission grants: the noise to use for every release of the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Admission {
    pub tau: f64,
    pub noise_multiplier: f64,
    /// μ reserved for the whole run.
    pub mu: f64,
}

impl Budget {
    pub fn new(config: BudgetConfig) -> Result<Self, accountant::AccountantError> {
        Ok(Budget {
            epsilon: config.epsilon,
            delta: config.delta,
            max_mu: accountant::max_mu(config.epsilon, config.delta)?,
        })
    }

    /// ε at this budget's δ for a total μ.
    pub fn epsilon_of(&self, mu: f64) -> f64 {
        GaussianComposition::from_mu(mu).map_or(0.0, |c| c.epsilon(self.delta))
    }

    /// Admits `releases` releases from a party with `rows` rows when `committed` μ is already
    /// spent or reserved; the refusal says what is left in one sentence.
    pub fn admit(
        &self,
        committed: f64,
        releases: u64,
        rows: u64,
        noise: NoiseRequest,
    ) -> Result<Admission, String> {
        let left = self.max_mu - committed;
        let sqrt_n = (rows as f64).sqrt();
        let what_is_left = || {
            format!(
                "ε = {:.4} of the party's ε = {} (δ = {:e}) is already spent or reserved",
                self.epsilon_of(committed),
                self.epsilon,
                self.delta
            )
        };
        match noise {
            NoiseRequest::Tau(tau) => {
                let s = tau * sqrt_n;
                let per_release = accountant::mu_per_release(s);
                let mu = releases as f64 * per_release;
                if mu <= left {
                    return Ok(Admission {
                        tau,
                        noise_multiplier: s,
                        mu,
                    });
                }
                let fit = if left > 0.0 {
                    (left / per_release).floor() as u64
                } else {
                    0
                };
                Err(format!(
                    "budget exhausted: {}; this plan's {releases} releases at τ = {tau} would need ε = {:.4} on their own, and at most {fit} more releases fit at that τ",
                    what_is_left(),
                    self.epsilon_of(mu)
                ))
            }
            NoiseRequest::Calibrate => {
                // A sliver left by rounding would be granted as absurd noise; call it spent.
                if left <= NEGLIGIBLE * self.max_mu {
                    return Err(format!(
                        "budget exhausted: {}; no further release fits at any noise level",
                        what_is_left()
                    ));
                }
                // Smallest s with releases/(2s²) ≤ left, nudged up past rounding.
                let mut s = (releases as f64 / (2.0 * left)).sqrt();
                while releases as f64 * accountant::mu_per_release(s) > left {
                    s *= 1.0 + 1e-12;
                }
                Ok(Admission {
                    tau: s / sqrt_n,
                    noise_multiplier: s,
                    mu: releases as f64 * accountant::mu_per_release(s),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Budget {
        Budget::new(BudgetConfig {
            epsilon: 1.0,
            delta: 1e-6,
        })
        .unwrap()
    }

    #[test]
    fn calibrated_plan_uses_exactly_what_is_left() {
        let b = budget();
        let committed = 0.25 * b.max_mu;
        let a = b
            .admit(committed, 1000, 10_000, NoiseRequest::Calibrate)
            .unwrap();
        assert!(committed + a.mu <= b.max_mu);
        assert!((committed + a.mu - b.max_mu).abs() < 1e-9 * b.max_mu);
        // The granted τ, requested explicitly, is admitted; 0.1% less noise is not.
        assert!(
            b.admit(committed, 1000, 10_000, NoiseRequest::Tau(a.tau))
                .is_ok()
        );
        assert!(
            b.admit(committed, 1000, 10_000, NoiseRequest::Tau(a.tau * 0.999))
                .is_err()
        );
    }

    #[test]
    fn refusal_says_what_is_left() {
        let b = budget();
        let err = b
            .admit(0.9 * b.max_mu, 1_000_000, 100, NoiseRequest::Tau(0.1))
            .unwrap_err();
        assert!(err.contains("budget") && err.contains("at most"), "{err}");
        let err = b
            .admit(b.max_mu, 1, 100, NoiseRequest::Calibrate)
            .unwrap_err();
        assert!(err.contains("no further release"), "{err}");
    }
}
