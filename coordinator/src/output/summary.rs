//! `summary.json` and the table on stdout: per-parameter posterior summaries with R̂ and
//! ESS, per-chain acceptance, per-party privacy spent, and, in simulations, the distance to
//! the exact posterior.
use fedmcmc_common::diagnostics::{self, DiagnosticsError};
use serde::Serialize;

use crate::job::JobResult;

#[derive(Clone, Debug, Serialize)]
pub struct ParameterSummary {
    pub name: String,
    pub mean: f64,
    pub sd: f64,
    pub q5: f64,
    pub q50: f64,
    pub q95: f64,
    pub ess_bulk: f64,
    pub ess_tail: f64,
    pub r_hat: f64,
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
    /// Post-warm-up acceptance rate.
    pub acceptance_rate: f64,
    /// Steps in all, warm-up included (each one release per party).
    pub iterations: u64,
    pub warmup: u64,
    /// The random-walk sd after warm-up.
    pub proposal_sd: f64,
    /// Mean of Σᵢ σᵢ² over post-warm-up steps.
    pub mean_noise_variance: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PartySummary {
    pub name: String,
    pub rows: u64,
    pub releases: u64,
    pub tau: f64,
    pub noise_multiplier: f64,
    /// ε this run spent at the party's δ.
    pub epsilon_spent: f64,
    /// ε at δ of everything the party has spent so far, this run included.
    pub epsilon_committed: f64,
    pub delta: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub model: String,
    pub init: String,
    pub seed: u64,
    pub parameters: Vec<ParameterSummary>,
    pub chains: Vec<ChainSummary>,
    pub parties: Vec<PartySummary>,
    /// MMD (seed 003 Sec. 5.3) between the pooled draws and an exact posterior sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mmd_to_exact: Option<f64>,
    /// MMD between two independent exact samples of the same size: the noise floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mmd_baseline: Option<f64>,
}

/// Exact-posterior facts a simulation knows.
pub struct ExactReference {
    pub mean: Vec<f64>,
    pub sd: Vec<f64>,
    pub mmd_to_exact: f64,
    pub mmd_baseline: f64,
}

pub fn summarise(
    model: &str,
    job: &JobResult,
    exact: Option<&ExactReference>,
) -> Result<Summary, DiagnosticsError> {
    let dim = job.traces.first().map_or(0, |t| t.dim);
    let parameters = (0..dim)
        .map(|j| {
            let chains: Vec<Vec<f64>> = job.traces.iter().map(|t| t.parameter(j)).collect();
            let s = diagnostics::summary(&chains)?;
            Ok(ParameterSummary {
                name: format!("theta.{}", j + 1),
                mean: s.mean,
                sd: s.sd,
                q5: s.q5,
                q50: s.q50,
                q95: s.q95,
                ess_bulk: s.ess_bulk,
                ess_tail: s.ess_tail,
                r_hat: s.rhat,
                exact_mean: exact.map(|e| e.mean[j]),
                exact_sd: exact.map(|e| e.sd[j]),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let chains = job
        .traces
        .iter()
        .map(|t| {
            let kept = &t.noise_variance[t.warmup as usize..];
            ChainSummary {
                chain: t.chain + 1,
                seed: t.seed,
                acceptance_rate: t.acceptance_rate(),
                iterations: t.steps() as u64,
                warmup: t.warmup,
                proposal_sd: *t.scale.last().unwrap_or(&f64::NAN),
                mean_noise_variance: kept.iter().sum::<f64>() / kept.len().max(1) as f64,
            }
        })
        .collect();
    let parties = job
        .parties
        .iter()
        .zip(&job.grants)
        .zip(&job.closed)
        .map(|((p, g), c)| PartySummary {
            name: p.name.clone(),
            rows: p.rows,
            releases: c.releases,
            tau: g.tau,
            noise_multiplier: g.noise_multiplier,
            epsilon_spent: c.run_epsilon,
            epsilon_committed: c.epsilon_committed,
            delta: p.delta,
        })
        .collect();
    Ok(Summary {
        model: model.to_string(),
        init: job.inits.label.clone(),
        seed: job.sampler.seed,
        parameters,
        chains,
        parties,
        mmd_to_exact: exact.map(|e| e.mmd_to_exact),
        mmd_baseline: exact.map(|e| e.mmd_baseline),
    })
}

/// The human-readable table printed on stdout.
pub fn table(s: &Summary) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "model: {}   init: {}   seed: {}\n\n",
        s.model, s.init, s.seed
    ));
    out.push_str(&format!(
        "{:<10} {:>10} {:>9} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6}",
        "parameter", "mean", "sd", "q5", "q50", "q95", "ess_bulk", "ess_tail", "r_hat"
    ));
    let with_exact = s.parameters.iter().any(|p| p.exact_mean.is_some());
    if with_exact {
        out.push_str(&format!(" {:>11} {:>9}", "exact mean", "exact sd"));
    }
    out.push('\n');
    for p in &s.parameters {
        out.push_str(&format!(
            "{:<10} {:>10.4} {:>9.4} {:>10.4} {:>10.4} {:>10.4} {:>8.0} {:>8.0} {:>6.3}",
            p.name, p.mean, p.sd, p.q5, p.q50, p.q95, p.ess_bulk, p.ess_tail, p.r_hat
        ));
        if let (Some(m), Some(sd)) = (p.exact_mean, p.exact_sd) {
            out.push_str(&format!(" {m:>11.4} {sd:>9.4}"));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "\n{:<7} {:>10} {:>8} {:>10} {:>14}\n",
        "chain", "iterations", "accept", "final sd", "mean Σσ²"
    ));
    for c in &s.chains {
        out.push_str(&format!(
            "{:<7} {:>10} {:>8.3} {:>10.3e} {:>14.3}\n",
            c.chain, c.iterations, c.acceptance_rate, c.proposal_sd, c.mean_noise_variance
        ));
    }
    out.push_str(&format!(
        "\n{:<12} {:>9} {:>9} {:>9} {:>10} {:>14} {:>9}\n",
        "party", "rows", "releases", "tau", "ε spent", "ε committed", "δ"
    ));
    for p in &s.parties {
        out.push_str(&format!(
            "{:<12} {:>9} {:>9} {:>9.4} {:>10.4} {:>14.4} {:>9.1e}\n",
            p.name, p.rows, p.releases, p.tau, p.epsilon_spent, p.epsilon_committed, p.delta
        ));
    }
    if let (Some(m), Some(b)) = (s.mmd_to_exact, s.mmd_baseline) {
        out.push_str(&format!(
            "\nMMD to the exact posterior: {m:.4}   (exact vs exact baseline: {b:.4})\n"
        ));
    }
    if let Some(w) = convergence_warning(s) {
        out.push_str(&format!("\nwarning: {w}\n"));
    }
    out
}

/// Stan's rule of thumb (R̂ < 1.01, bulk and tail ESS ≥ 100 in all): below it the summaries
/// above are not to be trusted, and the table must say so rather than let them pass.
fn convergence_warning(s: &Summary) -> Option<String> {
    let worst_rhat = s
        .parameters
        .iter()
        .map(|p| p.r_hat)
        .fold(f64::NAN, f64::max);
    let least_ess = s
        .parameters
        .iter()
        .map(|p| p.ess_bulk.min(p.ess_tail))
        .fold(f64::NAN, f64::min);
    (worst_rhat > 1.01 || least_ess < 100.0).then(|| {
        format!(
            "the chains have not converged (largest R-hat {worst_rhat:.3}, smallest ESS {least_ess:.0}); \
             the privacy budget may allow too few iterations: consider a larger --epsilon, fewer \
             --chains, or a larger --tau"
        )
    })
}
