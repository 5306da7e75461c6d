//! The DP-penalty sampler against exact posteriors, through real party nodes in this process
//! (same release path, accountant and ledger code as a served party; in-memory ledgers).
//! Models without one (the logistic and poisson GLMs) are held against a long plain
//! random-walk Metropolis chain on the pooled rows, with both chains' Monte Carlo errors.
//!
//! Tolerances come from the Monte Carlo error: a mean is within 4·sd/√ESS of the exact mean,
//! an sd within 4 standard errors from batch means of the squared deviations, and the
//! MMD of ESS-many evenly thinned draws within the spread of exact-vs-exact MMDs of the same
//! size, with the negative control required to miss by more than 6. Every seed is fixed: data,
//! proposals, acceptance draws, and the parties' noise, which these in-process parties draw
//! from a seeded stream per (chain, step) (the `seeded-noise` feature; a served party's noise
//! is OS-seeded and no caller can seed it), so each run here is the same on every machine.
mod checks;
mod harness;

mod barker;
mod glm;
mod hmc;
mod minibatch_penalty;
mod penalty;
