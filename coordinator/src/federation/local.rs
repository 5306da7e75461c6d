//! Parties in this process: the sampler calls each node's methods directly, no sockets.
//! The release path, ledger and accountant are the same code a served party runs.
use std::sync::Arc;

use fedmcmc_party::PartyNode;
use fedmcmc_party::budget::NoiseRequest;
use fedmcmc_party::error::PartyError;
use fedmcmc_party::node::Plan;
use fedmcmc_party::release::StepKey;

use super::{
    Announcement, CallError, CallErrorKind, Closed, Contribution, Grant, Masked, NoiseChoice,
    PartyHandle, PartyInfo, Query, RunPlan,
};

impl From<PartyError> for CallError {
    fn from(e: PartyError) -> CallError {
        let kind = match &e {
            PartyError::BudgetExhausted(_) => CallErrorKind::Budget,
            PartyError::InvalidArgument(_)
            | PartyError::NotFound(_)
            | PartyError::FailedPrecondition(_)
            | PartyError::Unimplemented(_) => CallErrorKind::Refused,
            PartyError::Unjoined(_) => CallErrorKind::Unjoined,
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
            neighbours: d.neighbours,
            epsilon: d.epsilon,
            delta: d.delta,
            epsilon_committed: d.epsilon_committed,
            mu_remaining: d.mu_remaining,
            variants: d.variants.iter().map(|v| v.to_string()).collect(),
            secure_aggregation: d.secure_aggregation,
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
                aggregation: plan.aggregation.clone(),
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
            masked: c.masked.map(|m| Masked {
                steps: m.steps,
                grid: m.grid,
            }),
        })
    }

    /// A gradient's step in a task of its own, with its own copy of the run id and θ: its
    /// work is synchronous, so in the caller's task it would run only after the caller's.
    /// Other queries' steps run in place: a ratio's pass is shorter than a gradient's (d
    /// terms a row, not d²) and a batch's far shorter, and on two cores the hand-off to
    /// another thread (a spawn and a wake-up) cost more than it saved for them (measured
    /// with `benches/iterations.rs`). Each party's noise is its own, forked per (chain,
    /// step), so the answers do not depend on the order. A release under way completes even
    /// if the caller stops waiting, as a served party's does.
    async fn step_apart(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> Result<Contribution, CallError> {
        let Query::Gradient { theta } = query else {
            return PartyHandle::step(self, run_id, chain, step, query).await;
        };
        let (node, run_id, theta) = (Arc::clone(self), run_id.to_string(), theta.to_vec());
        let task = tokio::spawn(async move {
            let query = Query::Gradient { theta: &theta };
            PartyHandle::step(&node, &run_id, chain, step, query).await
        });
        match task.await {
            Ok(answer) => answer,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(CallError {
                kind: CallErrorKind::Other,
                message: format!("the release was cancelled: {e}"),
            }),
        }
    }

    async fn close_run(&self, run_id: &str) -> Result<Closed, CallError> {
        Ok(PartyNode::close_run(self, run_id).await?)
    }

    async fn join_aggregation(
        &self,
        run_id: &str,
        announcements: &[Announcement],
    ) -> Result<f64, CallError> {
        Ok(PartyNode::join_aggregation(self, run_id, announcements.to_vec()).await?)
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

/// The same in-process nodes, each given a TLS identity from a CA made in `dir` (for its
/// name), so that they take part in secure aggregation as served parties with TLS do. Each
/// node must have no other owner yet.
pub fn identified(
    parties: Vec<(String, Arc<PartyNode>)>,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<(String, Arc<PartyNode>)>> {
    let names: Vec<String> = parties.iter().map(|(n, _)| n.clone()).collect();
    fedmcmc_party::tls::issue(dir, &names)?;
    parties
        .into_iter()
        .map(|(name, node)| {
            let node = Arc::into_inner(node)
                .ok_or_else(|| anyhow::anyhow!("party {name} is shared already"))?;
            let identity = fedmcmc_party::aggregation::Identity::load(
                &fedmcmc_party::tls::files_for(dir, &name),
            )?;
            Ok((name, Arc::new(node.with_identity(identity))))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use fedmcmc_common::models::ModelSpec;
    use fedmcmc_party::config::BudgetConfig;
    use fedmcmc_party::node::INITIALISER;
    use rand::SeedableRng;

    use super::*;

    /// A step computed apart (a gradient's, in a task of its own) or in place (a ratio's)
    /// answers as the step in the caller's task: two like nodes with noise seeded per
    /// (chain, step) give the same releases either way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_apart_answers_as_the_step_in_place() {
        let spec = ModelSpec::flat_banana(2);
        let model = spec.build().unwrap();
        let rows = model.simulate(
            &spec.true_theta(),
            500,
            &mut rand_chacha::ChaCha8Rng::seed_from_u64(3),
        );
        let budget = BudgetConfig {
            epsilon: 1e3,
            delta: 1e-3,
            accountant: Default::default(),
        };
        let node = || {
            let (_, node) = nodes(&spec, vec![rows.clone()], budget, None)
                .unwrap()
                .remove(0);
            Arc::new(Arc::into_inner(node).unwrap().with_seeded_noise(11))
        };
        let penalty = Plan::full_penalty(1, 3, 2.0, NoiseRequest::Tau(0.5));
        let initialiser = Plan {
            variant: INITIALISER.into(),
            ..penalty.clone()
        };
        for plan in [initialiser, penalty] {
            let (here, apart) = (node(), node());
            let fingerprint = model.fingerprint();
            let run_here = PartyNode::open_run(&here, plan.clone(), &fingerprint).await;
            let run_apart = PartyNode::open_run(&apart, plan.clone(), &fingerprint).await;
            let (run_here, run_apart) = (run_here.unwrap().run_id, run_apart.unwrap().run_id);
            for step in 0..3 {
                let (theta, theta_proposed) = ([0.1 * step as f64, 3.0], [0.0, 2.9]);
                let query = match plan.variant.as_str() {
                    INITIALISER => Query::Gradient { theta: &theta },
                    _ => Query::LogLikRatio {
                        theta: &theta,
                        theta_proposed: &theta_proposed,
                    },
                };
                let expect = PartyHandle::step(&here, &run_here, 0, step, query).await;
                let got = apart.step_apart(&run_apart, 0, step, query).await;
                assert_eq!(
                    got.unwrap(),
                    expect.unwrap(),
                    "{}, step {step}",
                    plan.variant
                );
            }
        }
    }
}
