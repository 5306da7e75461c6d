//! Kernels: how a chain's releases become an accept/reject decision. Each kernel is one file
//! (`penalty` for the full-data and minibatch DP penalty, `barker`, `hmc`); the chain
//! bookkeeping, warm-up, stopping and the trace are the sampler's (`sampler.rs`) and shared
//! by all of them.
use std::future::Future;

use fedmcmc_common::acceptance;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::federation::{Contribution, Federation, FederationError, PartyHandle, Query};

pub mod barker;
pub mod hmc;
pub mod penalty;
mod walk;

pub use barker::Barker;
pub use hmc::Hmc;
pub use penalty::{Penalty, Ratio};

/// One chain's line to the federation: numbers its releases 0, 1, 2, … in the order the
/// kernel asks, so a kernel that asks several queries per iteration (HMC's gradients) needs
/// no bookkeeping of its own, and a party sees its steps in order.
pub struct ChainLink<'a, P> {
    pub federation: &'a Federation<P>,
    pub chain: u32,
    next_step: u64,
}

/// A release failed: the step it was for and why.
#[derive(Debug)]
pub struct LinkError {
    pub step: u64,
    pub source: FederationError,
}

impl<'a, P: PartyHandle> ChainLink<'a, P> {
    pub fn new(federation: &'a Federation<P>, chain: u32) -> Self {
        ChainLink {
            federation,
            chain,
            next_step: 0,
        }
    }

    /// The step number the next release will have.
    pub fn next_step(&self) -> u64 {
        self.next_step
    }

    /// The federation's summed contribution to this chain's next release.
    pub async fn ask(&mut self, query: Query<'_>) -> Result<Contribution, LinkError> {
        let step = self.next_step;
        let answer = self
            .federation
            .step(self.chain, step, query)
            .await
            .map_err(|source| LinkError { step, source })?;
        self.next_step += 1;
        Ok(answer)
    }
}

/// What one transition did, as the trace records it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transition {
    pub accepted: bool,
    /// The acceptance probability of the test that decided.
    pub accept_stat: f64,
    /// Σᵢ σᵢ² of the releases it used.
    pub noise_variance: f64,
}

impl Transition {
    /// The Metropolis–Hastings decision on a (penalised) log acceptance ratio: accept iff
    /// ln u < `log_ratio`, u drawn from the chain's `rng`. The penalty and HMC kernels'.
    pub fn metropolis(log_ratio: f64, noise_variance: f64, rng: &mut ChaCha8Rng) -> Self {
        let ln_u = rng.random::<f64>().ln();
        Transition {
            accepted: acceptance::accept(ln_u, log_ratio),
            accept_stat: acceptance::accept_stat(log_ratio),
            noise_variance,
        }
    }
}

/// A Markov kernel over the federation.
pub trait Kernel: Send {
    /// One transition from `theta`, which it overwrites on acceptance.
    fn transition<P: PartyHandle>(
        &mut self,
        link: &mut ChainLink<'_, P>,
        theta: &mut [f64],
        rng: &mut ChaCha8Rng,
    ) -> impl Future<Output = Result<Transition, LinkError>> + Send;
    /// Warm-up adaptation from a transition's outcome: post-processing of releases only.
    fn adapt(&mut self, transition: &Transition);
    /// The proposal scale in force, for the trace.
    fn scale(&self) -> f64;
}
