//! The DP Barker kernel (Heikkilä et al. 2019; Räisä 2020, Alg. 3): a Gaussian random walk
//! proposes θ′, each party releases its batch estimate λ*ᵢ with noise topping the batch's
//! variance up to its share Cᵢ, and `fedmcmc_common::acceptance::barker_accept` decides with
//! a draw of the correction V_corr for C = ΣCᵢ.
use std::sync::Arc;

use fedmcmc_common::acceptance;
use fedmcmc_common::barker::CorrectionFit;
use fedmcmc_common::models::Model;
use fedmcmc_common::proposal::ProposalKind;
use rand_chacha::ChaCha8Rng;

use super::walk::Walk;
use super::{ChainLink, Kernel, LinkError, Transition};
use crate::federation::{CallError, CallErrorKind, FederationError, PartyHandle, Query};

pub struct Barker {
    fit: Arc<CorrectionFit>,
    walk: Walk,
}

impl Barker {
    /// `fit` is the correction for the run's total C.
    pub fn new(
        model: Arc<dyn Model>,
        fit: Arc<CorrectionFit>,
        proposal_sd: f64,
        target_accept: f64,
    ) -> Self {
        Barker {
            fit,
            walk: Walk::new(model, ProposalKind::Rw, proposal_sd, target_accept),
        }
    }
}

/// The correction is only right for the C it was fitted for: a federation whose noise adds
/// up to another total (a party that ignored its share) stops the chain.
fn check_total(c: f64, noise_variance: f64, step: u64) -> Result<(), LinkError> {
    if (noise_variance - c).abs() <= 1e-9 * c {
        return Ok(());
    }
    Err(LinkError {
        step,
        source: FederationError {
            party: "(the federation)".into(),
            error: CallError {
                kind: CallErrorKind::Other,
                message: format!(
                    "the parties' noise variances add up to {noise_variance}, not the C = {c} the Barker correction was fitted for"
                ),
            },
        },
    })
}

impl Kernel for Barker {
    async fn transition<P: PartyHandle>(
        &mut self,
        link: &mut ChainLink<'_, P>,
        theta: &mut [f64],
        rng: &mut ChaCha8Rng,
    ) -> Result<Transition, LinkError> {
        // The random walk is symmetric: its proposal ratio is 0.
        let (log_prior_ratio, _) = self.walk.propose(theta, rng);
        let step = link.next_step();
        let answer = link
            .ask(Query::BarkerLogLikRatio {
                theta,
                theta_proposed: self.walk.proposal(),
            })
            .await?;
        check_total(self.fit.c, answer.noise_variance, step)?;
        let lambda_hat = answer.value[0] + log_prior_ratio;
        let accepted = acceptance::barker_accept(lambda_hat, self.fit.sample(rng));
        self.walk.decided(accepted, theta);
        Ok(Transition {
            accepted,
            accept_stat: self.fit.accept_probability(lambda_hat),
            noise_variance: answer.noise_variance,
        })
    }

    /// The walk keeps the step it was given ([`crate::variant::Variant::adapts`] says why);
    /// a sampler configured to adapt anyway does not move it.
    fn adapt(&mut self, _transition: &Transition) {}

    fn scale(&self) -> f64 {
        self.walk.scale()
    }
}

#[cfg(test)]
mod tests {
    use fedmcmc_common::models::ModelSpec;

    use super::*;

    /// Warm-up decisions leave DP Barker's step where it was set, however many are accepted.
    #[test]
    fn the_step_is_not_adapted() {
        let model = ModelSpec::flat_banana(2).build().unwrap();
        let fit = Arc::new(CorrectionFit::load(2.0).unwrap());
        let mut barker = Barker::new(model, fit, 8e-4, 0.5);
        for accepted in [true; 500].into_iter().chain([false; 500]) {
            barker.adapt(&Transition {
                accepted,
                accept_stat: 0.9,
                noise_variance: 2.0,
            });
        }
        assert_eq!(barker.scale(), 8e-4);
    }
}
