//! The table printed on stdout from a job's [`Summary`]: a line per parameter, per chain
//! and per party, and, where the chains did not converge, one warning naming what would
//! let them (more iterations at a stated budget, or, for the summaries route, the prior).
use fedmcmc_common::accountant;
use fedmcmc_common::diagnostics;

use super::summary::{ParameterSummary, PartySummary, Summary};
use crate::variant::Variant;

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
    use fedmcmc_common::proposal::ProposalKind;

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
