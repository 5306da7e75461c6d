//! The DP penalty kernel (Yıldırım & Ermiş 2019, Alg. 2; Räisä 2020, Sec. 3.1–3.2): a
//! Gaussian random walk proposes θ′, the federation releases Σᵢ d̂ᵢ and Σᵢ σᵢ², and the
//! penalty test of `fedmcmc_common::acceptance` decides. With `minibatch` each party
//! releases its batch estimate less half its variance instead (Räisä 2020, Sec. 3.4), and the
//! same test decides.
use std::sync::Arc;

use fedmcmc_common::acceptance::PenaltyTerms;
use fedmcmc_common::models::Model;
use rand_chacha::ChaCha8Rng;

use super::walk::Walk;
use super::{ChainLink, Kernel, LinkError, Transition};
use crate::federation::{PartyHandle, Query};

pub struct Penalty {
    walk: Walk,
    /// Apply the −½Σσᵢ² penalty; off only in tests that show the uncorrected chain is wrong.
    penalise: bool,
    /// Ask for the minibatch ratio instead of the full-data one.
    minibatch: bool,
}

impl Penalty {
    pub fn new(
        model: Arc<dyn Model>,
        proposal_sd: f64,
        target_accept: f64,
        penalise: bool,
        minibatch: bool,
    ) -> Self {
        Penalty {
            walk: Walk::new(model, proposal_sd, target_accept),
            penalise,
            minibatch,
        }
    }
}

impl Kernel for Penalty {
    async fn transition<P: PartyHandle>(
        &mut self,
        link: &mut ChainLink<'_, P>,
        theta: &mut [f64],
        rng: &mut ChaCha8Rng,
    ) -> Result<Transition, LinkError> {
        let log_prior_ratio = self.walk.propose(theta, rng);
        let theta_proposed = self.walk.proposal();
        let query = if self.minibatch {
            Query::MinibatchLogLikRatio {
                theta,
                theta_proposed,
            }
        } else {
            Query::LogLikRatio {
                theta,
                theta_proposed,
            }
        };
        let answer = link.ask(query).await?;
        let log_ratio = PenaltyTerms {
            noisy_log_lik_ratio: answer.value[0],
            noise_variance: answer.noise_variance,
            log_prior_ratio,
            log_proposal_ratio: 0.0,
        }
        .log_ratio(self.penalise);
        let transition = Transition::metropolis(log_ratio, answer.noise_variance, rng);
        if transition.accepted {
            self.walk.accept(theta);
        }
        Ok(transition)
    }

    fn adapt(&mut self, transition: &Transition) {
        self.walk.adapt(transition.accepted);
    }

    fn scale(&self) -> f64 {
        self.walk.scale()
    }
}
