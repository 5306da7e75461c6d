//! The acceptance tests: the one place a proposal is accepted or rejected.
//!
//! # DP penalty
//!
//! Yıldırım & Ermiş 2019, Alg. 1-2 (federated form, Sec. 3.2.2), Räisä 2020, Sec. 3.1: with Σᵢ d̂ᵢ the sum of
//! the parties' noisy log-likelihood ratios and σ² = Σᵢ σᵢ² the total variance of their
//! noise, accept iff
//!
//! ln u < Σᵢ d̂ᵢ + ln p(θ′) − ln p(θ) + ln q(θ|θ′) − ln q(θ′|θ) − ½σ².
//!
//! The −½σ² penalty (Ceperley & Dewing) makes the chain target the (clipped) posterior
//! exactly despite the Gaussian noise. The minibatch DP penalty (Räisä 2020, Sec. 3.4) uses
//! the same test: each party's release already subtracts half its batch's variance σ²_b.
//!
//! # DP Barker
//!
//! Heikkilä et al. 2019; Räisä 2020, Sec. 3.3, Alg. 3: with λ̂ = Σᵢ (released λ*ᵢ) + ln p(θ′) −
//! ln p(θ) + ln q(θ|θ′) − ln q(θ′|θ), whose Gaussian noise (batch error and added noise) has
//! the fixed total variance C, accept iff λ̂ + V_corr > 0 with V_corr drawn from the
//! correction distribution for C ([`crate::barker::CorrectionFit`]): in distribution Barker's
//! test λ + V_log > 0, which accepts with probability 1/(1 + e^{−λ}).

/// The terms of one acceptance decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PenaltyTerms {
    /// Σᵢ d̂ᵢ: the parties' noisy clipped log-likelihood ratios, summed.
    pub noisy_log_lik_ratio: f64,
    /// Σᵢ σᵢ²: the total variance of the noise in `noisy_log_lik_ratio`.
    pub noise_variance: f64,
    /// ln p(θ′) − ln p(θ).
    pub log_prior_ratio: f64,
    /// ln q(θ|θ′) − ln q(θ′|θ); zero for symmetric proposals.
    pub log_proposal_ratio: f64,
}

impl PenaltyTerms {
    /// The penalised log acceptance ratio. `penalise = false` drops the −½σ² term; it exists
    /// only so tests can show that the uncorrected chain is detectably wrong.
    pub fn log_ratio(&self, penalise: bool) -> f64 {
        let penalty = if penalise {
            0.5 * self.noise_variance
        } else {
            0.0
        };
        self.noisy_log_lik_ratio + self.log_prior_ratio + self.log_proposal_ratio - penalty
    }
}

/// Accept iff ln u < log_ratio. A NaN ratio (a proposal outside the prior's support gives
/// −∞, never NaN) is rejected.
pub fn accept(ln_u: f64, log_ratio: f64) -> bool {
    ln_u < log_ratio
}

/// CmdStan's `accept_stat__`: the acceptance probability min(1, e^ratio).
pub fn accept_stat(log_ratio: f64) -> f64 {
    if log_ratio.is_nan() {
        0.0
    } else {
        log_ratio.min(0.0).exp()
    }
}

/// DP Barker: accept iff λ̂ + V_corr > 0 (a NaN λ̂ is rejected).
pub fn barker_accept(lambda_hat: f64, v_corr: f64) -> bool {
    lambda_hat + v_corr > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penalty_subtracts_half_the_variance() {
        let t = PenaltyTerms {
            noisy_log_lik_ratio: 1.0,
            noise_variance: 3.0,
            log_prior_ratio: -0.25,
            log_proposal_ratio: 0.5,
        };
        assert_eq!(t.log_ratio(true), 1.0 - 0.25 + 0.5 - 1.5);
        assert_eq!(t.log_ratio(false), 1.25);
        assert!(accept(-0.3, t.log_ratio(true)) == (-0.3 < -0.25));
        assert!(!accept(0.0, f64::NAN));
        assert_eq!(accept_stat(0.7), 1.0);
        assert!((accept_stat(-1.0) - (-1.0f64).exp()).abs() < 1e-15);
    }
}
