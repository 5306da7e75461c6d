//! What several of the coordinator's tests start from.
use std::sync::Arc;

use fedmcmc_common::models::ModelSpec;
use fedmcmc_coordinator::federation::local::nodes;
use fedmcmc_party::PartyNode;
use fedmcmc_party::config::BudgetConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// 600 rows of `spec` (drawn at its true θ, seed 1) split evenly among `k` in-process parties,
/// each with a budget of ε = 1000 at δ = 10⁻⁵: enough that no test here is refused for it.
pub fn parties(spec: &ModelSpec, k: usize) -> Vec<(String, Arc<PartyNode>)> {
    let data =
        spec.build()
            .unwrap()
            .simulate(&spec.true_theta(), 600, &mut ChaCha8Rng::seed_from_u64(1));
    let budget = BudgetConfig {
        epsilon: 1000.0,
        delta: 1e-5,
        accountant: Default::default(),
    };
    nodes(spec, data.split(k), budget, None).unwrap()
}
