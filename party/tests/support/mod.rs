//! Helpers shared by the node-level tests.
use fedmcmc_common::models::ModelSpec;
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::PartyNode;
use fedmcmc_party::budget::{Budget, NoiseRequest};
use fedmcmc_party::error::PartyError;
use fedmcmc_party::ledger::{Ledger, RunRecord};
use fedmcmc_party::node::{Grant, Plan};
use rand::SeedableRng;

/// OpenRun of a full-penalty plan with clip 2.
pub async fn open(
    node: &PartyNode,
    fingerprint: &str,
    chains: u32,
    steps: u64,
    noise: NoiseRequest,
) -> Result<Grant, PartyError> {
    node.open_run(Plan::full_penalty(chains, steps, 2.0, noise), fingerprint)
        .await
}

/// A party over `rows` rows simulated from the flat banana (seed 3) with `budget` and
/// `ledger`; and its model fingerprint.
pub fn banana_party(
    rows: usize,
    budget: Budget,
    ledger: (Ledger, Vec<RunRecord>),
) -> (PartyNode, String) {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let data = model.simulate(&spec.true_theta(), rows, &mut rng);
    let fingerprint = model.fingerprint();
    let node = PartyNode::new(
        "alpha".into(),
        model,
        data,
        Neighbours::Substitute,
        budget,
        ledger,
    )
    .unwrap();
    (node, fingerprint)
}
