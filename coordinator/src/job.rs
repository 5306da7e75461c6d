//! One sampling job against any federation: check the parties, plan the privacy, open the
//! run, sample, close, and hand back everything the outputs need. `simulate` and `run` both
//! end here, so a simulated federation and a real one take the same path.
use std::sync::Arc;

use fedmcmc_common::models::Model;

use crate::federation::{Closed, Federation, Grant, NoiseChoice, PartyHandle, PartyInfo, RunPlan};
use crate::planning;
use crate::sampler::{self, ChainTrace, Progress, SamplerConfig};

/// What the analyst chose; `None` for iterations or τ lets planning decide.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSettings {
    pub chains: u32,
    pub iterations: Option<u64>,
    pub tau: Option<f64>,
    /// Warm-up steps; `None` means the first half of each chain (as in the thesis).
    pub warmup: Option<u64>,
    pub clip: f64,
    pub proposal_sd: f64,
    pub adapt: bool,
    pub target_accept: f64,
    pub seed: u64,
}

/// Where the chains start, and how the output should label it.
#[derive(Clone, Debug, PartialEq)]
pub struct Inits {
    pub points: Vec<Vec<f64>>,
    pub label: String,
}

pub struct JobResult {
    pub parties: Vec<PartyInfo>,
    pub grants: Vec<Grant>,
    pub closed: Vec<Closed>,
    pub sampler: SamplerConfig,
    pub noise: NoiseChoice,
    pub traces: Vec<ChainTrace>,
    pub inits: Inits,
}

/// Runs the job; every refusal comes back as one sentence naming the party.
pub async fn run<P: PartyHandle>(
    federation: Arc<Federation<P>>,
    model: Arc<dyn Model>,
    settings: &JobSettings,
    inits: Inits,
    progress: impl FnOnce(u32, u64) -> Arc<dyn Progress>,
) -> anyhow::Result<JobResult> {
    let parties = federation.describe().await?;
    for p in &parties {
        if p.model_fingerprint != model.fingerprint() || p.dim != model.dim() {
            anyhow::bail!(
                "party {} serves model {} (fingerprint {}, dimension {}), but this job's model is {} (fingerprint {}, dimension {})",
                p.name,
                p.model,
                p.model_fingerprint,
                p.dim,
                model.name(),
                model.fingerprint(),
                model.dim()
            );
        }
    }
    let planned = planning::plan(&parties, settings.chains, settings.tau, settings.iterations)
        .map_err(anyhow::Error::msg)?;
    let warmup = settings.warmup.unwrap_or(planned.iterations / 2);
    let config = SamplerConfig {
        chains: settings.chains,
        iterations: planned.iterations,
        warmup,
        proposal_sd: settings.proposal_sd,
        adapt: settings.adapt,
        target_accept: settings.target_accept,
        seed: settings.seed,
        penalise: true,
    };
    let plan = RunPlan {
        chains: settings.chains,
        steps_per_chain: planned.iterations,
        clip: settings.clip,
        noise: planned.noise,
    };
    let grants = federation.open(&plan, &model.fingerprint()).await?;
    for (p, g) in parties.iter().zip(&grants) {
        tracing::info!(party = %p.name, tau = g.tau, releases = g.releases, run_epsilon = g.run_epsilon, "run granted");
    }
    let progress = progress(config.chains, config.iterations);
    let sampled = sampler::sample(
        Arc::clone(&federation),
        model,
        &config,
        inits.points.clone(),
        progress,
    )
    .await;
    // Close even after a failure, so unused reservations go back to the parties.
    let closed = federation.close().await;
    let traces = sampled?;
    Ok(JobResult {
        parties,
        grants,
        closed: closed?,
        sampler: config,
        noise: planned.noise,
        traces,
        inits,
    })
}
