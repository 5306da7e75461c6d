//! The adaptive Gaussian random walk the penalty and Barker kernels propose with, and the
//! prior at the chain's θ kept between steps (one evaluation per step instead of two).
use std::sync::Arc;

use fedmcmc_common::models::Model;
use fedmcmc_common::proposal::{RandomWalk, ScaleAdaptation};
use rand_chacha::ChaCha8Rng;

pub struct Walk {
    model: Arc<dyn Model>,
    walk: RandomWalk,
    adaptation: ScaleAdaptation,
    /// ln p(θ) at the chain's current θ.
    log_prior: Option<f64>,
    /// ln p(θ′) at the pending proposal.
    log_prior_proposed: f64,
    proposal: Vec<f64>,
}

impl Walk {
    pub fn new(model: Arc<dyn Model>, proposal_sd: f64, target_accept: f64) -> Self {
        let dim = model.dim();
        Walk {
            model,
            walk: RandomWalk { scale: proposal_sd },
            adaptation: ScaleAdaptation::new(proposal_sd, target_accept),
            log_prior: None,
            log_prior_proposed: 0.0,
            proposal: vec![0.0; dim],
        }
    }

    /// Proposes θ′ from `theta` (symmetric: no proposal ratio) and returns ln p(θ′) − ln p(θ).
    pub fn propose(&mut self, theta: &[f64], rng: &mut ChaCha8Rng) -> f64 {
        let log_prior = *self
            .log_prior
            .get_or_insert_with(|| self.model.log_prior(theta));
        self.walk.propose(theta, &mut self.proposal, rng);
        self.log_prior_proposed = self.model.log_prior(&self.proposal);
        self.log_prior_proposed - log_prior
    }

    /// The pending proposal θ′.
    pub fn proposal(&self) -> &[f64] {
        &self.proposal
    }

    /// Moves the chain to the pending proposal.
    pub fn accept(&mut self, theta: &mut [f64]) {
        theta.copy_from_slice(&self.proposal);
        self.log_prior = Some(self.log_prior_proposed);
    }

    /// Warm-up adaptation of the scale from an acceptance decision.
    pub fn adapt(&mut self, accepted: bool) {
        self.walk.scale = self.adaptation.update(accepted);
    }

    pub fn scale(&self) -> f64 {
        self.walk.scale
    }
}
