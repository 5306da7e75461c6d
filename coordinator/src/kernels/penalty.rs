//! The DP penalty kernel (Yıldırım & Ermiş 2019, Alg. 2; Räisä 2020, Sec. 3.1–3.2): a
//! Gaussian random walk, one-component updates or the guided walk propose θ′, the
//! federation releases Σᵢ d̂ᵢ and Σᵢ σᵢ², and the penalty test of
//! `fedmcmc_common::acceptance` decides, with the proposal's ratio. With `minibatch` each party
//! releases its batch estimate less half its variance instead (Räisä 2020, Sec. 3.4), and the
//! same test decides. With sufficient statistics each party releases its noisy statistics and
//! the ratio and its variance follow from their sum (Yıldırım & Ermiş 2019, Alg. 3, eq. 8).
use std::sync::Arc;

use fedmcmc_common::acceptance::PenaltyTerms;
use fedmcmc_common::models::{Model, noisy_log_lik_ratio};
use fedmcmc_common::proposal::ProposalKind;
use rand_chacha::ChaCha8Rng;

use super::walk::Walk;
use super::{ChainLink, Kernel, LinkError, Transition};
use crate::federation::{PartyHandle, Query};

/// Which release the penalty test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ratio {
    /// The clipped ratio over all rows.
    Full,
    /// The minibatch estimate less half its variance.
    Minibatch,
    /// The ratio from the federation's noisy sufficient statistics.
    Sufficient,
}

pub struct Penalty {
    model: Arc<dyn Model>,
    walk: Walk,
    /// Apply the −½Σσᵢ² penalty; off only in tests that show the uncorrected chain is wrong.
    penalise: bool,
    ratio: Ratio,
}

impl Penalty {
    /// With `Ratio::Sufficient`, `model` must have sufficient statistics.
    pub fn new(
        model: Arc<dyn Model>,
        proposal: ProposalKind,
        proposal_sd: f64,
        target_accept: f64,
        penalise: bool,
        ratio: Ratio,
    ) -> Self {
        Penalty {
            walk: Walk::new(Arc::clone(&model), proposal, proposal_sd, target_accept),
            model,
            penalise,
            ratio,
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
        let (log_prior_ratio, log_proposal_ratio) = self.walk.propose(theta, rng);
        let theta_proposed = self.walk.proposal();
        let (noisy_log_lik_ratio, noise_variance) = match self.ratio {
            Ratio::Full | Ratio::Minibatch => {
                let query = if self.ratio == Ratio::Minibatch {
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
                (answer.value[0], answer.noise_variance)
            }
            Ratio::Sufficient => {
                let family = self
                    .model
                    .sufficient_statistics()
                    .expect("the sampler checks the model has sufficient statistics");
                let query = Query::SufficientStatistics {
                    entries: family.entries(),
                };
                let answer = link.ask(query).await?;
                noisy_log_lik_ratio(
                    family,
                    &answer.value,
                    answer.noise_variance,
                    theta,
                    theta_proposed,
                )
            }
        };
        let log_ratio = PenaltyTerms {
            noisy_log_lik_ratio,
            noise_variance,
            log_prior_ratio,
            log_proposal_ratio,
        }
        .log_ratio(self.penalise);
        let transition = Transition::metropolis(log_ratio, noise_variance, rng);
        self.walk.decided(transition.accepted, theta);
        Ok(transition)
    }

    fn adapt(&mut self, transition: &Transition) {
        self.walk.adapt(transition.accepted);
    }

    fn scale(&self) -> f64 {
        self.walk.scale()
    }
}
