//! `summary.json` and the table on stdout: per-parameter posterior summaries with R̂ and
//! ESS, per-chain acceptance, per-party privacy spent, and, in simulations, the distance to
//! the exact posterior.
use fedmcmc_common::accountant;
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

/// A table cell: the number as `show` writes it, or a dash where there is none.
fn cell(x: Option<f64>, show: impl Fn(f64) -> String) -> String {
    x.map_or_else(|| "–".to_string(), show)
}

/// One line per parameter: its statistics, and the exact posterior's where known.
pub fn parameter_table(parameters: &[ParameterSummary]) -> String {
    let mut out = String::new();
    // The first column fits the model's names for its coefficients (a GLM's features).
    let w = parameters
        .iter()
        .map(|p| p.label.chars().count())
        .fold(10, usize::max);
    out.push_str(&format!(
        "{:<w$} {:>10} {:>9} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6}",
        "parameter", "mean", "sd", "q5", "q50", "q95", "ess_bulk", "ess_tail", "r_hat"
    ));
    let with_exact = parameters.iter().any(|p| p.exact_mean.is_some());
    if with_exact {
        out.push_str(&format!(" {:>11} {:>9}", "exact mean", "exact sd"));
    }
    out.push('\n');
    let f4 = |x: f64| format!("{x:.4}");
    let f0 = |x: f64| format!("{x:.0}");
    for p in parameters {
        out.push_str(&format!(
            "{:<w$} {:>10} {:>9} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6}",
            p.label,
            cell(p.mean, f4),
            cell(p.sd, f4),
            cell(p.q5, f4),
            cell(p.q50, f4),
            cell(p.q95, f4),
            cell(p.ess_bulk, f0),
            cell(p.ess_tail, f0),
            cell(p.r_hat, |x| format!("{x:.3}")),
        ));
        if let (Some(m), Some(sd)) = (p.exact_mean, p.exact_sd) {
            out.push_str(&format!(" {m:>11.4} {sd:>9.4}"));
        }
        out.push('\n');
    }
    out
}

/// The human-readable table printed on stdout.
pub fn table(s: &Summary) -> String {
    let mut out = String::new();
    if let Some(signal) = &s.stopped_by {
        out.push_str(&format!(
            "PARTIAL: stopped by {signal}; statistics over the first {} post-warm-up draws of each chain\n",
            s.draws_per_chain
        ));
    }
    out.push_str(&format!(
        "model: {}   variant: {}   proposal: {}   init: {}   seed: {}\n\n",
        s.model,
        s.sampler.name(),
        s.proposal.name(),
        s.init,
        s.seed
    ));
    if let Some(a) = &s.aggregation {
        // Replace the blank line above: the aggregation belongs with the job's terms.
        out.pop();
        out.push_str(&format!("aggregation: {a}\n\n"));
    }
    if let Some(sd) = &s.prior_sd {
        out.pop();
        out.push_str(&format!("prior: independent normals, sds {sd:.3?}\n\n"));
    }
    out += &parameter_table(&s.parameters);
    out.push_str(&format!(
        "\n{:<7} {:>10} {:>8} {:>11} {:>14}\n",
        "chain",
        "iterations",
        "accept",
        match s.sampler {
            Variant::Hmc { .. } => "step size",
            _ => "proposal sd",
        },
        "mean Σσ²"
    ));
    for c in &s.chains {
        out.push_str(&format!(
            "{:<7} {:>10} {:>8} {:>11} {:>14}\n",
            c.chain,
            c.iterations,
            cell(c.acceptance_rate, |x| format!("{x:.3}")),
            cell(c.final_scale, |x| format!("{x:.3e}")),
            cell(c.mean_noise_variance, |x| format!("{x:.3}")),
        ));
    }
    out.push_str(&format!(
        "\n{:<12} {:>9} {:>9} {:>9} {:>10} {:>14} {:>9} {:>9}\n",
        "party", "rows", "releases", "tau", "ε spent", "ε committed", "ε left", "δ"
    ));
    for p in &s.parties {
        out.push_str(&format!(
            "{:<12} {:>9} {:>9} {:>9.4} {:>10.4} {:>14.4} {:>9.4} {:>9.1e}\n",
            p.name,
            p.rows,
            p.releases,
            p.tau,
            p.epsilon_spent,
            p.epsilon_committed,
            (p.epsilon - p.epsilon_committed).max(0.0),
            p.delta
        ));
    }
    if s.parties
        .iter()
        .any(|p| p.initialiser_epsilon_spent.is_some())
    {
        out.push_str(
            "(ε committed is less than the initialiser's ε plus the run's: releases compose through their privacy loss, not by adding ε)\n",
        );
    }
    if let (Some(m), Some(b)) = (s.mmd_to_exact, s.mmd_baseline) {
        out.push_str(&format!(
            "\nMMD to the exact posterior: {m:.4}   (exact vs exact baseline: {b:.4})\n"
        ));
    }
    if let Some(w) = convergence_warning(s) {
        out.push_str(&format!("\nwarning: {w}\n"));
    }
    if let Some(w) = &s.prior_warning {
        out.push_str(&format!("\nwarning: {w}\n"));
    }
    out
}

/// Stan's rule of thumb (R̂ < 1.01, bulk and tail ESS ≥ 100 in all): below it the summaries
/// above are not to be trusted, and the table must say so rather than let them pass.
fn convergence_warning(s: &Summary) -> Option<String> {
    if (s.draws_per_chain as usize) < diagnostics::MIN_DRAWS {
        return Some(format!(
            "only {} post-warm-up draws per chain: too few for R-hat and ESS, so convergence cannot be judged",
            s.draws_per_chain
        ));
    }
    let undefined = |p: &ParameterSummary| [p.r_hat, p.ess_bulk, p.ess_tail].contains(&None);
    if s.parameters.iter().any(undefined) {
        return Some(
            "R-hat or ESS is undefined (a chain never moved): the chains have not converged".into(),
        );
    }
    let worst_rhat = s
        .parameters
        .iter()
        .filter_map(|p| p.r_hat)
        .fold(f64::NAN, f64::max);
    let least_ess = s
        .parameters
        .iter()
        .filter_map(|p| Some(p.ess_bulk?.min(p.ess_tail?)))
        .fold(f64::NAN, f64::min);
    (worst_rhat > 1.01 || least_ess < 100.0).then(|| {
        // Named for both commands: simulate's flags are a run.toml's keys (and each party's
        // own budget); fewer chains only where there are several.
        let fewer = if s.chains.len() > 1 {
            ", fewer chains (chains)"
        } else {
            ""
        };
        // DP Barker's noise is fixed by its batch and C: it takes no τ.
        let tau = if matches!(s.sampler, Variant::Barker { .. }) {
            ""
        } else {
            ", or a larger τ (tau)"
        };
        let advice = match budget_for_ess(&s.parties, least_ess) {
            // Its draws cost nothing: more iterations are not what it lacks.
            _ if s.sampler == Variant::Summaries => summaries_advice(s.draws_per_chain),
            Some((times, epsilon)) => format!(
                "ESS 100 needs at least {times:.0} times the iterations (more while R-hat is \
                 high), so at this τ at least ε = {epsilon:.0} per party (simulate's --epsilon; \
                 in a federation, each party's budget.epsilon){fewer}{tau}"
            ),
            None => format!(
                "the privacy budget may allow too few iterations: consider a larger ε per party \
                 (simulate's --epsilon; each party's budget.epsilon){fewer}{tau}"
            ),
        };
        format!(
            "the chains have not converged (largest R-hat {worst_rhat:.3}, smallest ESS {least_ess:.0}); {advice}"
        )
    })
}

/// Why the summaries route's chains may not converge: they sampled its noise-aware
/// posterior, for free, as long as the sampler goes, so the posterior itself is hard.
fn summaries_advice(draws_per_chain: u64) -> String {
    format!(
        "the summaries route sampled its noise-aware posterior for {draws_per_chain} draws per \
         chain, the most it takes: at this budget the posterior is wide (much of it the \
         prior's) or has several modes; a larger ε per party (simulate's --epsilon; each \
         party's budget.epsilon) or a tighter prior narrows it"
    )
}

/// How many times the iterations would bring the smallest ESS to 100 if it grew in
/// proportion, and the ε per party that many releases at the same multipliers need. A lower
/// bound, stated as one: the ESS of chains that have not converged grows more slowly (on the
/// default simulation, 8.5 times the iterations gave 2.7 times the ESS). Each
/// party's sampling releases are Gaussian, whose privacy-loss parameter μ adds over
/// releases, so the sampling run's μ (from the ε it spent at δ) scales with the count and
/// the initialiser's is added as spent. Post-processing of the run's outputs only. None for
/// the subsampled variants (their loss does not scale so) or when nothing would grow.
fn budget_for_ess(parties: &[PartySummary], least_ess: f64) -> Option<(f64, f64)> {
    let times = 100.0 / least_ess;
    if !(times.is_finite() && times > 1.0) {
        return None;
    }
    parties
        .iter()
        .map(|p| {
            if p.batch_size.is_some() || p.barker_variance.is_some() {
                return None;
            }
            let mu = |epsilon: f64| accountant::max_mu(epsilon, p.delta).ok();
            let init = p.initialiser_epsilon_spent.map_or(Some(0.0), mu)?;
            let total = mu(p.epsilon_spent)? * times + init;
            Some(
                accountant::GaussianComposition::from_mu(total)
                    .ok()?
                    .epsilon(p.delta),
            )
        })
        .try_fold(0.0, |most: f64, e| Some(most.max(e?)))
        .map(|epsilon| (times, epsilon))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn party(epsilon_spent: f64, initialiser: Option<f64>) -> PartySummary {
        PartySummary {
            name: "p".into(),
            rows: 1000,
            batch_size: None,
            barker_variance: None,
            releases: 400,
            tau: 0.1,
            noise_multiplier: 3.0,
            initialiser_epsilon_spent: initialiser,
            epsilon_spent,
            epsilon_committed: epsilon_spent + initialiser.unwrap_or(0.0),
            epsilon: 10.0,
            delta: 1e-6,
        }
    }

    /// The budget named for more iterations is the Gaussian composition of the sampling
    /// releases scaled by the factor, plus the initialiser's: checked against the composition
    /// of the releases themselves, for the neediest party.
    #[test]
    fn the_budget_named_for_ess_100_composes_the_scaled_releases() {
        let per_release = accountant::mu_per_release(3.0);
        let epsilon = |releases: f64| {
            accountant::GaussianComposition::from_mu(releases * per_release)
                .unwrap()
                .epsilon(1e-6)
        };
        let (sampling, init) = (epsilon(400.0), epsilon(100.0));
        let parties = [party(sampling, Some(init)), party(epsilon(200.0), None)];
        let (times, needed) = budget_for_ess(&parties, 10.0).unwrap();
        assert_eq!(times, 10.0);
        let expect = epsilon(4000.0 + 100.0);
        assert!(
            (needed - expect).abs() < 1e-6 * expect,
            "{needed} vs {expect}"
        );
        // Enough ESS already, an undefined one, or a subsampled variant: no budget named.
        assert_eq!(budget_for_ess(&parties, 150.0), None);
        assert_eq!(budget_for_ess(&parties, 0.0), None);
        let mut minibatch = party(sampling, None);
        minibatch.batch_size = Some(100);
        assert_eq!(budget_for_ess(&[minibatch], 10.0), None);
    }

    /// A summary of one unconverged parameter under `sampler`.
    fn unconverged(sampler: Variant) -> Summary {
        Summary {
            fedmcmc: "test".into(),
            model: "glm".into(),
            prior_sd: None,
            sampler,
            proposal: ProposalKind::Rw,
            init: "given".into(),
            aggregation: None,
            prior_warning: None,
            initialiser: None,
            seed: 1,
            partial: false,
            stopped_by: None,
            draws_per_chain: 64_000,
            parameters: vec![ParameterSummary {
                name: "theta.1".into(),
                label: "x".into(),
                mean: Some(0.0),
                sd: Some(1.0),
                q5: Some(-1.6),
                q50: Some(0.0),
                q95: Some(1.6),
                ess_bulk: Some(7.0),
                ess_tail: Some(11.0),
                r_hat: Some(1.5),
                exact_mean: None,
                exact_sd: None,
            }],
            chains: Vec::new(),
            parties: vec![party(1.0, None)],
            mmd_to_exact: None,
            mmd_baseline: None,
        }
    }

    /// The summaries route's draws cost nothing, so its warning does not ask for more
    /// iterations at a larger budget; the per-iteration variants' does.
    #[test]
    fn the_summaries_route_is_not_told_to_buy_iterations() {
        let w = convergence_warning(&unconverged(Variant::Summaries)).unwrap();
        assert!(
            w.contains("sampled its noise-aware posterior for 64000 draws per chain"),
            "{w}"
        );
        assert!(!w.contains("times the iterations"), "{w}");
        let w = convergence_warning(&unconverged(Variant::Penalty)).unwrap();
        assert!(w.contains("times the iterations"), "{w}");
    }
}
