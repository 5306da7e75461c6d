//! Parties in this process: the sampler calls each node's methods directly, no sockets.
//! The release path, ledger and accountant are the same code a served party runs.
use std::sync::Arc;

use fedmcmc_party::PartyNode;
use fedmcmc_party::budget::NoiseRequest;
use fedmcmc_party::error::PartyError;
use fedmcmc_party::node::Plan;
use fedmcmc_party::release::StepKey;

use super::{
    CallError, CallErrorKind, Closed, Contribution, Grant, NoiseChoice, PartyHandle, PartyInfo,
    Query, RunPlan,
};

impl From<PartyError> for CallError {
    fn from(e: PartyError) -> CallError {
        let kind = match &e {
            PartyError::BudgetExhausted(_) => CallErrorKind::Budget,
            PartyError::InvalidArgument(_)
            | PartyError::NotFound(_)
            | PartyError::FailedPrecondition(_)
            | PartyError::Unimplemented(_) => CallErrorKind::Refused,
            PartyError::Ledger(_) => CallErrorKind::Other,
        };
        CallError {
            kind,
            message: e.to_string(),
        }
    }
}

impl PartyHandle for Arc<PartyNode> {
    async fn describe(&self) -> Result<PartyInfo, CallError> {
        let d = PartyNode::describe(self);
        Ok(PartyInfo {
            name: d.name,
            model: d.model,
            model_fingerprint: d.model_fingerprint,
            dim: d.dim,
            rows: d.rows,
            epsilon: d.epsilon,
            delta: d.delta,
            epsilon_committed: d.epsilon_committed,
            mu_remaining: d.mu_remaining,
        })
    }

    async fn open_run(&self, plan: &RunPlan, fingerprint: &str) -> Result<Grant, CallError> {
        Ok(PartyNode::open_run(
            self,
            Plan {
                variant: plan.variant.to_string(),
                chains: plan.chains,
                steps_per_chain: plan.steps_per_chain,
                clip: plan.clip,
                noise: match plan.noise {
                    NoiseChoice::Tau(t) => NoiseRequest::Tau(t),
                    NoiseChoice::Calibrate => NoiseRequest::Calibrate,
                },
                batch_size: plan.batch_size,
                barker_variance: plan.barker_variance,
                hmc: plan.hmc,
            },
            fingerprint,
        )
        .await?)
    }

    async fn step(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> Result<Contribution, CallError> {
        let key = StepKey {
            run_id,
            chain,
            step,
        };
        let c = PartyNode::step(self, &key, query).await?;
        Ok(Contribution {
            value: c.value,
            noise_variance: c.noise_variance,
        })
    }

    async fn close_run(&self, run_id: &str) -> Result<Closed, CallError> {
        Ok(PartyNode::close_run(self, run_id).await?)
    }
}

/// In-process party nodes over `parts` (one per part, named `party-1 …`), each with the
/// same budget; ledgers in memory, or durable files in `ledger_dir`. For tests, benchmarks
/// and one-machine simulations.
pub fn nodes(
    model: &fedmcmc_common::models::ModelSpec,
    parts: Vec<fedmcmc_common::data::Columns>,
    budget: fedmcmc_party::config::BudgetConfig,
    ledger_dir: Option<&std::path::Path>,
) -> anyhow::Result<Vec<(String, Arc<PartyNode>)>> {
    let budget = fedmcmc_party::budget::Budget::new(budget)?;
    let mut parties = Vec::with_capacity(parts.len());
    for (i, data) in parts.into_iter().enumerate() {
        let name = format!("party-{}", i + 1);
        let ledger = match ledger_dir {
            Some(dir) => {
                fedmcmc_party::ledger::Ledger::open(&dir.join(format!("{name}.ledger.sqlite")))?
            }
            None => (fedmcmc_party::ledger::Ledger::in_memory()?, Vec::new()),
        };
        let node = PartyNode::new(
            name.clone(),
            model.build()?,
            data,
            fedmcmc_common::neighbours::Neighbours::Substitute,
            budget,
            ledger,
        )?;
        parties.push((name, Arc::new(node)));
    }
    Ok(parties)
}
