//! What a run was admitted under, as the ledger stores it (as JSON, whole): enough to explain
//! every charge from the ledger alone.
use serde::{Deserialize, Serialize};

use crate::secure::{Announcement, Terms};

/// The terms a run was admitted under; stored whole so the ledger alone explains every charge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunTerms {
    pub variant: String,
    pub chains: u32,
    pub steps_per_chain: u64,
    /// Releases reserved for the whole run.
    pub planned_releases: u64,
    pub clip: f64,
    pub tau: f64,
    /// Noise std / L2 sensitivity of one release.
    pub noise_multiplier: f64,
    /// Minibatch variants: rows per secret batch, and the row count it is drawn from (the
    /// accountant's sampling fraction is their ratio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub population: Option<u64>,
    /// DP Barker: this party's share Cᵢ of the total noise variance C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barker_variance: Option<f64>,
    /// DP HMC: its leapfrog steps and gradient release (`clip`, `tau` and `noise_multiplier`
    /// above are its ratio release's). An initialiser run has none: it releases only
    /// gradients, with the run's own clip and multiplier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmc: Option<HmcTerms>,
    /// Secure aggregation: the session (hex), roster and threshold. Its secrets are not
    /// recorded: after a restart the run's steps are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregation: Option<AggregationTerms>,
}

/// A secure-aggregation run's public terms, as the ledger records them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AggregationTerms {
    pub session: String,
    pub roster: Vec<String>,
    pub threshold: u32,
    /// The party's own signed announcement (public).
    pub announcement: Announcement,
}

impl AggregationTerms {
    /// The record of a run's `terms` and the party's own `announcement`.
    pub fn of(terms: &Terms, announcement: &Announcement) -> Self {
        AggregationTerms {
            session: terms.session.iter().map(|b| format!("{b:02x}")).collect(),
            roster: terms.roster.clone(),
            threshold: terms.threshold,
            announcement: announcement.clone(),
        }
    }

    /// The run's terms back from the record; `None` if it does not hold together.
    pub fn terms(&self) -> Option<Terms> {
        let bytes: Vec<u8> = (0..self.session.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(self.session.get(i..i + 2)?, 16).ok())
            .collect::<Option<_>>()?;
        Terms::new(bytes.try_into().ok()?, self.roster.clone(), self.threshold).ok()
    }
}

/// An HMC run's leapfrog steps L and gradient release: clip b_g, τ_g and multiplier τ_g·√n.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HmcTerms {
    pub leapfrog_steps: u32,
    pub gradient_clip: f64,
    pub gradient_tau: f64,
    pub gradient_multiplier: f64,
}

impl RunTerms {
    /// Releases per iteration of a chain: L + 2 for DP HMC (L + 1 gradients and the ratio,
    /// Räisä 2020, Alg. 4), 1 for the other variants.
    pub fn releases_per_iteration(&self) -> u64 {
        self.hmc.map_or(1, |h| u64::from(h.leapfrog_steps) + 2)
    }

    /// The plan as the accountant reserves it: (releases, noise multiplier). A DP HMC
    /// iteration's ratio release at multiplier s_l and L + 1 gradient releases at s_g compose
    /// exactly as one Gaussian release at s with 1/s² = 1/s_l² + (L + 1)/s_g² (their
    /// privacy-loss distributions are Gaussian and add, Räisä 2020, Thm 4.3; Rényi
    /// divergences add alike), one per planned iteration. Other runs reserve their planned
    /// releases at their multiplier.
    pub fn reservation(&self) -> (u64, f64) {
        match self.hmc {
            Some(h) => {
                let gradients = (h.leapfrog_steps as f64 + 1.0) / h.gradient_multiplier.powi(2);
                let s = (self.noise_multiplier.powi(-2) + gradients).sqrt().recip();
                (self.planned_releases / self.releases_per_iteration(), s)
            }
            None => (self.planned_releases, self.noise_multiplier),
        }
    }

    /// The clip b_g and noise multiplier of this run's gradient releases.
    pub fn gradient_release(&self) -> Option<(f64, f64)> {
        match self.hmc {
            Some(h) => Some((h.gradient_clip, h.gradient_multiplier)),
            None => (self.variant == crate::variants::INITIALISER)
                .then_some((self.clip, self.noise_multiplier)),
        }
    }
}
