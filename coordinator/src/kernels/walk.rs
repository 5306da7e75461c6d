//! The adaptive proposal the penalty and Barker kernels draw θ′ with (random walk, and for the
//! penalty kernel one-component updates or the guided walk), and the prior at the chain's θ
//! kept between steps (one evaluation per step instead of two).
use std::sync::Arc;

use fedmcmc_common::models::Model;
use fedmcmc_common::proposal::{Proposal, ProposalKind, ScaleAdaptation};
use rand_chacha::ChaCha8Rng;

pub struct Walk {
    model: Arc<dyn Model>,
    proposal: Proposal,
    adaptation: ScaleAdaptation,
    /// ln p(θ) at the chain's current θ.
    log_prior: Option<f64>,
    /// ln p(θ′) at the pending proposal.
    log_prior_proposed: f64,
    proposed: Vec<f64>,
}

impl Walk {
    pub fn new(
        model: Arc<dyn Model>,
        kind: ProposalKind,
        proposal_sd: f64,
        target_accept: f64,
    ) -> Self {
        let dim = model.dim();
        Walk {
            model,
            proposal: Proposal::new(kind, proposal_sd, dim),
            adaptation: ScaleAdaptation::new(proposal_sd, target_accept),
            log_prior: None,
            log_prior_proposed: 0.0,
            proposed: vec![0.0; dim],
        }
    }

    /// The walk shaped by `covariance` ([`Proposal::shaped`]).
    pub fn shaped(mut self, covariance: &[Vec<f64>]) -> Result<Self, String> {
        self.proposal = self.proposal.shaped(covariance)?;
        Ok(self)
    }

    /// Proposes θ′ from `theta` and returns the prior's and the proposal's log ratios,
    /// ln p(θ′) − ln p(θ) and ln q(θ|θ′) − ln q(θ′|θ).
    pub fn propose(&mut self, theta: &[f64], rng: &mut ChaCha8Rng) -> (f64, f64) {
        let log_prior = *self
            .log_prior
            .get_or_insert_with(|| self.model.log_prior(theta));
        let log_proposal_ratio = self.proposal.propose(theta, &mut self.proposed, rng);
        self.log_prior_proposed = self.model.log_prior(&self.proposed);
        (self.log_prior_proposed - log_prior, log_proposal_ratio)
    }

    /// The pending proposal θ′.
    pub fn proposal(&self) -> &[f64] {
        &self.proposed
    }

    /// Records the decision on the pending proposal, moving the chain to it if accepted.
    pub fn decided(&mut self, accepted: bool, theta: &mut [f64]) {
        self.proposal.decided(accepted);
        if accepted {
            theta.copy_from_slice(&self.proposed);
            self.log_prior = Some(self.log_prior_proposed);
        }
    }

    /// Warm-up adaptation of the scale from an acceptance decision.
    pub fn adapt(&mut self, accepted: bool) {
        self.proposal.scale = self.adaptation.update(accepted);
    }

    pub fn scale(&self) -> f64 {
        self.proposal.scale
    }
}
