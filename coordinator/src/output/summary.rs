//! `summary.json`: per-parameter posterior summaries with R̂ and ESS, per-chain
//! acceptance, per-party privacy spent, and, in simulations, the distance to the exact
//! posterior (`table.rs` prints it on stdout).
use fedmcmc_common::diagnostics::{self, DiagnosticsError};
use fedmcmc_common::models::Model;
use fedmcmc_common::proposal::ProposalKind;
use serde::Serialize;

use crate::initialiser::InitialiserSettings;
use crate::job::JobResult;
use crate::sampler::ChainTrace;
use crate::variant::Variant;

/// One parameter. The statistics are those of `diagnostics::summary` over the first
/// `Summary::draws_per_chain` draws of every chain, and absent (`null`) when there are too
/// few of them to split chains, as after an early stop.
#[derive(Clone, Debug, Serialize)]
pub struct ParameterSummary {
    /// The draws' column (`theta.j`).
    pub name: String,
    /// What the model calls the coefficient (`Model::parameter_names`: a GLM's feature).
    pub label: String,
    pub mean: Option<f64>,
    pub sd: Option<f64>,
    pub q5: Option<f64>,
    pub q50: Option<f64>,
    pub q95: Option<f64>,
    pub ess_bulk: Option<f64>,
    pub ess_tail: Option<f64>,
    pub r_hat: Option<f64>,
    /// Exact posterior mean and sd, when the model has a closed form (simulations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact_sd: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChainSummary {
    pub chain: u32,
    pub seed: u64,
    /// Post-warm-up acceptance rate (`null` without post-warm-up draws).
    pub acceptance_rate: Option<f64>,
    /// Steps completed, warm-up included (each one release per party).
    pub iterations: u64,
    /// Steps the run was planned (and the parties reserved) for.
    pub planned_iterations: u64,
    pub warmup: u64,
    /// Why the chain ended: "completed", or "stopped by SIGINT" (SIGTERM).
    pub status: String,
    /// The kernel's scale after warm-up: the random walk's sd, or DP HMC's leapfrog step size
    /// (`null` before any step).
    pub final_scale: Option<f64>,
    /// Mean of Σᵢ σᵢ² over post-warm-up steps (`null` without any).
    pub mean_noise_variance: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PartySummary {
    pub name: String,
    pub rows: u64,
    /// Minibatch variants: this party's rows per step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u64>,
    /// DP Barker: this party's share of C.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barker_variance: Option<f64>,
    pub releases: u64,
    pub tau: f64,
    pub noise_multiplier: f64,
    /// ε the private initialiser's run spent at the party's δ, if it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initialiser_epsilon_spent: Option<f64>,
    /// ε the sampling run spent at the party's δ.
    pub epsilon_spent: f64,
    /// ε at δ of everything the party has spent so far, this run included.
    pub epsilon_committed: f64,
    /// The party's budget ε (at `delta`).
    pub epsilon: f64,
    pub delta: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// The product's version and git revision ([`super::VERSION`]).
    pub fedmcmc: String,
    pub model: String,
    /// Each coefficient's prior sd where the prior is independent normals (the GLMs, the
    /// logistic family's default included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior_sd: Option<Vec<f64>>,
    /// The sampler: `variant` and its parameters.
    #[serde(flatten)]
    pub sampler: Variant,
    /// The proposal: `rw`, `ocu` or `gwmh`.
    pub proposal: ProposalKind,
    pub init: String,
    /// How the parties' releases were summed (secure aggregation or plain), and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregation: Option<String>,
    /// Why the posterior's extent is the prior's, where a logistic GLM's summaries route
    /// ran past the weakly informative prior under a vaguer one (`summaries.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior_warning: Option<String>,
    /// The private initialiser's settings, the point it found and the sd it estimated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initialiser: Option<InitialiserSummary>,
    pub seed: u64,
    /// True when a signal stopped the chains before their planned iterations.
    pub partial: bool,
    /// The signal that stopped them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// Post-warm-up draws per chain that the parameter statistics use: all of them, or after
    /// an early stop those of the shortest chain.
    pub draws_per_chain: u64,
    pub parameters: Vec<ParameterSummary>,
    pub chains: Vec<ChainSummary>,
    pub parties: Vec<PartySummary>,
    /// MMD (Räisä 2020, Sec. 5.3) between the pooled draws and an exact posterior sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mmd_to_exact: Option<f64>,
    /// MMD between two independent exact samples of the same size: the noise floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mmd_baseline: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct InitialiserSummary {
    #[serde(flatten)]
    pub settings: InitialiserSettings,
    pub point: Vec<f64>,
    pub scale: Vec<f64>,
}

/// Exact-posterior facts a simulation knows.
pub struct ExactReference {
    pub mean: Vec<f64>,
    pub sd: Vec<f64>,
    /// `None` when too few draws were made for the statistic (an early stop).
    pub mmd_to_exact: Option<f64>,
    pub mmd_baseline: Option<f64>,
    /// An exact posterior sample, overlaid on the pair plot.
    pub draws: Vec<Vec<f64>>,
}

/// The mean of `xs`, `None` when there are none (a chain without post-warm-up steps).
pub(super) fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// A number for JSON: `None` rather than a NaN or an infinity.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// `diagnostics::summary` of parameter `j` over the first `draws` draws of every chain, or
/// `None` when that is too few to split chains.
fn parameter_stats(
    traces: &[ChainTrace],
    j: usize,
    draws: usize,
) -> Result<Option<diagnostics::Summary>, DiagnosticsError> {
    if draws < diagnostics::MIN_DRAWS {
        return Ok(None);
    }
    let chains: Vec<Vec<f64>> = traces
        .iter()
        .map(|t| t.parameter(j)[..draws].to_vec())
        .collect();
    diagnostics::summary(&chains).map(Some)
}

/// Every parameter's statistics over the first `draws_per_chain` post-warm-up draws of each
/// chain, which is returned beside them: chains stopped early may differ by a step or two,
/// and the diagnostics need equal lengths. `labels` are the model's names for them.
pub fn parameters(
    labels: &[String],
    traces: &[ChainTrace],
    exact: Option<&ExactReference>,
) -> Result<(Vec<ParameterSummary>, usize), DiagnosticsError> {
    let dim = traces.first().map_or(0, |t| t.dim);
    let draws = traces.iter().map(|t| t.draws()).min().unwrap_or(0);
    let parameters = (0..dim)
        .map(|j| {
            let s = parameter_stats(traces, j, draws)?;
            let stat = |f: fn(&diagnostics::Summary) -> f64| s.as_ref().and_then(|s| finite(f(s)));
            Ok(ParameterSummary {
                name: format!("theta.{}", j + 1),
                label: labels[j].clone(),
                mean: stat(|s| s.mean),
                sd: stat(|s| s.sd),
                q5: stat(|s| s.q5),
                q50: stat(|s| s.q50),
                q95: stat(|s| s.q95),
                ess_bulk: stat(|s| s.ess_bulk),
                ess_tail: stat(|s| s.ess_tail),
                r_hat: stat(|s| s.rhat),
                exact_mean: exact.map(|e| e.mean[j]),
                exact_sd: exact.map(|e| e.sd[j]),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((parameters, draws))
}

pub fn summarise(
    model: &dyn Model,
    job: &JobResult,
    exact: Option<&ExactReference>,
) -> Result<Summary, DiagnosticsError> {
    let (parameters, draws) = parameters(&model.parameter_names(), &job.traces, exact)?;
    let planned = job.sampler.iterations;
    let stopped_by = job.interrupted.map(|s| s.to_string());
    let chains = job
        .traces
        .iter()
        .map(|t| {
            let kept = &t.noise_variance[t.kept()];
            ChainSummary {
                chain: t.chain + 1,
                seed: t.seed,
                acceptance_rate: t.acceptance_rate(),
                iterations: t.steps() as u64,
                planned_iterations: planned,
                warmup: t.warmup,
                status: match &stopped_by {
                    Some(signal) if (t.steps() as u64) < planned => format!("stopped by {signal}"),
                    _ => "completed".to_string(),
                },
                final_scale: t.scale.last().copied(),
                mean_noise_variance: mean(kept),
            }
        })
        .collect();
    let parties = job
        .parties
        .iter()
        .zip(&job.grants)
        .zip(&job.closed)
        .zip(&job.plans)
        .enumerate()
        .map(|(i, (((p, g), c), plan))| PartySummary {
            name: p.name.clone(),
            rows: p.rows,
            batch_size: plan.batch_size,
            barker_variance: plan.barker_variance,
            releases: c.releases,
            tau: g.tau,
            noise_multiplier: g.noise_multiplier,
            initialiser_epsilon_spent: job
                .initialiser
                .as_ref()
                .map(|init| init.closed[i].run_epsilon),
            epsilon_spent: c.run_epsilon,
            epsilon_committed: c.epsilon_committed,
            epsilon: p.epsilon,
            delta: p.delta,
        })
        .collect();
    let comment = |key: &str| {
        job.comments
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    Ok(Summary {
        fedmcmc: super::VERSION.to_string(),
        model: model.name().to_string(),
        prior_sd: model.prior_sd(),
        sampler: job.sampler.variant,
        proposal: job.sampler.proposal,
        init: job.inits.label.clone(),
        aggregation: comment("aggregation"),
        prior_warning: comment("prior"),
        initialiser: job.initialiser.as_ref().map(|init| InitialiserSummary {
            settings: init.settings,
            point: init.point.clone(),
            scale: init.scale.clone(),
        }),
        seed: job.sampler.seed,
        partial: stopped_by.is_some(),
        stopped_by,
        draws_per_chain: draws as u64,
        parameters,
        chains,
        parties,
        mmd_to_exact: exact.and_then(|e| e.mmd_to_exact),
        mmd_baseline: exact.and_then(|e| e.mmd_baseline),
    })
}
