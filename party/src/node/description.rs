//! What `Describe` answers: the party's public facts, and its budget figures as of the last
//! change of its runs (computed then, not per call).
use std::sync::Mutex;

use fedmcmc_common::accountant::Composition;
use fedmcmc_common::neighbours::Neighbours;

use super::PartyNode;
use crate::budget::Budget;

/// The public facts of `Describe`.
#[derive(Clone, Debug)]
pub struct Description {
    pub name: String,
    pub model: String,
    pub model_fingerprint: String,
    pub dim: usize,
    pub rows: u64,
    pub variants: Vec<&'static str>,
    pub neighbours: Neighbours,
    pub epsilon: f64,
    pub delta: f64,
    pub epsilon_committed: f64,
    pub open_runs: u32,
    /// See [`Budget::mu_remaining`].
    pub mu_remaining: f64,
    /// Whether it can sign secure aggregation's session keys (it has a TLS identity).
    pub secure_aggregation: bool,
}

/// Describe's figures of the budget, and the snapshot of the runs they were computed from.
/// Computed when the runs change (an open, a close), not per call: Describe composes
/// nothing, so no number of callers looping on it takes the workers that answer steps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Figures {
    pub(crate) snapshot: u64,
    pub(crate) epsilon_committed: f64,
    pub(crate) mu_remaining: f64,
}

impl Figures {
    pub(crate) fn of(snapshot: u64, budget: &Budget, committed: &Composition) -> Self {
        Figures {
            snapshot,
            epsilon_committed: budget.epsilon_of(committed),
            mu_remaining: budget.mu_remaining(committed),
        }
    }
}

/// Stores `computed` unless a later snapshot's figures are already stored.
pub(crate) fn store(figures: &Mutex<Figures>, computed: Figures) {
    let mut stored = figures.lock().expect("figures lock");
    if stored.snapshot < computed.snapshot {
        *stored = computed;
    }
}

impl PartyNode {
    /// The party's public facts, with the budget figures of the last change of its runs.
    pub fn describe(&self) -> Description {
        let open_runs = self.open_runs() as u32;
        let figures = *self.figures.lock().expect("figures lock");
        Description {
            name: self.name.clone(),
            model: self.model.name().to_string(),
            model_fingerprint: self.model.fingerprint(),
            dim: self.model.dim(),
            rows: self.data.n() as u64,
            variants: self.variants(),
            neighbours: self.neighbours,
            epsilon: self.budget.epsilon,
            delta: self.budget.delta,
            epsilon_committed: figures.epsilon_committed,
            open_runs,
            mu_remaining: figures.mu_remaining,
            secure_aggregation: self.identity.is_some(),
        }
    }
}
