//! One sampling job against any federation: check the parties, plan the privacy, check
//! everything else that can be checked, open the run, sample, close, and hand back
//! everything the outputs need. `simulate` and `run` both end here, so a simulated
//! federation and a real one take the same path.
//!
//! Every refusal the coordinator can decide on its own comes before OpenRun: a run opened
//! and then abandoned spends nothing, but one that is refused after sampling would have.
use std::path::Path;
use std::sync::Arc;

use fedmcmc_common::accountant;
use fedmcmc_common::diagnostics::MIN_DRAWS;
use fedmcmc_common::models::Model;
use fedmcmc_common::proposal::ProposalKind;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::federation::{
    Closed, Federation, Grant, NoiseChoice, PartyHandle, PartyInfo, RunPlan, secure,
};
use crate::initialiser::{self, Initialised, InitialiserSettings};
use crate::interrupt::{Signal, Stop};
use crate::kernels;
use crate::output;
use crate::planning::{self, Planned};
use crate::sampler::{self, ChainTrace, Progress, SamplerConfig};
use crate::variant::Variant;
use fedmcmc_party::node::SUMMARIES;

/// What the analyst chose; `None` for iterations or τ lets planning decide.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSettings {
    pub variant: Variant,
    pub chains: u32,
    pub iterations: Option<u64>,
    pub tau: Option<f64>,
    /// Warm-up steps; `None` means the first half of each chain (as in the thesis).
    pub warmup: Option<u64>,
    pub clip: f64,
    /// The penalty kernels' proposal.
    pub proposal: ProposalKind,
    /// The walk's initial sd. `None` only for DP Barker: the longest step its clip allows
    /// ([`crate::kernels::barker::step_within_clip`]), from the private initialiser's fit.
    pub proposal_sd: Option<f64>,
    pub adapt: bool,
    pub target_accept: f64,
    pub seed: u64,
    /// Secure aggregation or plain releases (`auto`: secure where every party and the
    /// variant allow), and the parties that may collude with the coordinator.
    pub aggregation: secure::Aggregation,
    pub collusion: u32,
}

/// Where the chains start, and how the output should label it.
#[derive(Clone, Debug, PartialEq)]
pub struct Inits {
    pub points: Vec<Vec<f64>>,
    pub label: String,
}

/// How the chains' starting points are found.
#[derive(Clone, Debug, PartialEq)]
pub enum Start {
    /// Points the analyst gave (or a simulation protocol chose), one per chain.
    Given(Inits),
    /// The private initialiser, before the sampling run, at its share of the budget.
    Private(InitialiserSettings),
}

pub struct JobResult {
    pub parties: Vec<PartyInfo>,
    /// Each party's run plan, in party order.
    pub plans: Vec<RunPlan>,
    pub grants: Vec<Grant>,
    /// Each party's final charge; for a party whose CloseRun failed, its grant's
    /// reservation (what stays charged until it is closed), named in `unclosed`.
    pub closed: Vec<Closed>,
    /// A sentence per party whose CloseRun failed after every retry.
    pub unclosed: Vec<String>,
    pub sampler: SamplerConfig,
    pub noise: NoiseChoice,
    pub traces: Vec<ChainTrace>,
    pub inits: Inits,
    /// What the private initialiser did, if it chose the starts.
    pub initialiser: Option<Initialised>,
    /// Set when a stop request cut some chain short of `sampler.iterations`.
    pub interrupted: Option<Signal>,
    /// The `key = value` lines the chain files carry: the caller's, where the chains
    /// started, then [`output::job_comments`].
    pub comments: Vec<(String, String)>,
}

impl JobResult {
    /// Fewest and most steps any chain took (warm-up included).
    pub fn steps_range(&self) -> (u64, u64) {
        let steps = self.traces.iter().map(|t| t.steps() as u64);
        (steps.clone().min().unwrap_or(0), steps.max().unwrap_or(0))
    }
}

/// The summary splits every chain in two for R̂ and ESS (Vehtari et al. 2021), which needs
/// `MIN_DRAWS` post-warm-up draws per chain.
fn check_draws(settings: &JobSettings, iterations: u64) -> anyhow::Result<()> {
    let warmup = warmup(settings, iterations);
    let draws = iterations.saturating_sub(warmup);
    if draws < MIN_DRAWS as u64 {
        anyhow::bail!(
            "{iterations} iterations per chain with {warmup} of warm-up leave {draws} draws per chain; at least {MIN_DRAWS} draws are needed to split chains"
        );
    }
    Ok(())
}

/// Runs the job, whose outputs go to `out`, the chains' draws written there as they come
/// with the caller's header lines `comments` first; every refusal comes back as one sentence
/// naming the party. After `stop` the chains end early and the result holds what they
/// sampled.
#[allow(clippy::too_many_arguments)] // the whole job, as simulate and run give it
pub async fn run<P: PartyHandle>(
    federation: Arc<Federation<P>>,
    model: Arc<dyn Model>,
    settings: &JobSettings,
    start: Start,
    out: &Path,
    mut comments: Vec<(String, String)>,
    progress: impl FnOnce(u32, u64) -> Arc<dyn Progress>,
    stop: &Stop,
) -> anyhow::Result<JobResult> {
    let (parties, threshold, aggregation) = admit(&federation, model.as_ref(), settings).await?;
    tracing::info!(%aggregation, "aggregation");
    federation.aggregate_securely(threshold);
    comments.push(("aggregation".to_string(), aggregation));
    if settings.variant == Variant::Summaries {
        if let Start::Given(inits) = &start {
            anyhow::bail!(
                "the summaries route starts its chains from its own releases; a start ({}) applies to the per-iteration variants",
                inits.label
            );
        }
        return crate::summaries::run(&federation, model, parties, settings, out, comments, stop)
            .await;
    }
    let plan = |parties: &[PartyInfo]| plan_for(parties, threshold, settings);
    let (parties, inits, initialised) = match start {
        Start::Given(inits) => (parties, inits, None),
        Start::Private(init) => {
            // Plan the sampling on what the initialiser will leave first: a job that cannot
            // fit then spends nothing.
            let left: Vec<PartyInfo> = parties
                .iter()
                .map(|p| PartyInfo {
                    mu_remaining: (1.0 - init.share) * p.mu_remaining,
                    ..p.clone()
                })
                .collect();
            let planned = plan(&left)?;
            check_draws(settings, planned.iterations)?;
            // The parties' plans too (DP Barker's batch is fitted to the budgets here).
            run_plans(&left, threshold, settings, &planned)?;
            output::prepare_dir(out)?;
            if stop.is_requested() {
                anyhow::bail!("stopped before any run was opened; nothing was released");
            }
            // A model with summaries starts from them: a few releases whose rows the model's
            // public bounds bound, where the climb's noise follows the gradient clip.
            let done = if parties.iter().all(|p| p.serves(SUMMARIES)) {
                initialiser::from_summaries(&federation, &model, &parties, init, stop).await?
            } else {
                initialiser::run(&federation, &model, &parties, init).await?
            };
            let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
            rng.set_stream(INIT_STREAM);
            let inits = Inits {
                points: initialiser::disperse(&done, settings.chains, &mut rng),
                label: initialiser_label(&done),
            };
            (federation.describe().await?, inits, Some(done))
        }
    };
    let planned = plan(&parties)?;
    check_draws(settings, planned.iterations)?;
    let plans = run_plans(&parties, threshold, settings, &planned)?;
    // DP Barker's default walk: shaped by the initialiser's fit, its step within the clip.
    let (proposal_sd, shape) = match (settings.proposal_sd, &initialised) {
        (Some(sd), _) => (sd, None),
        (None, Some(init)) => {
            let step = kernels::barker::step_within_clip(
                &plans,
                &parties,
                model.temperature(),
                model.dim(),
            )
            .map_err(anyhow::Error::msg)?;
            comments.push((
                "walk".to_string(),
                format!(
                    "N(0, s²·Σ) with s = {step:e}, the longest step within DP Barker's clip, and Σ the initialiser's fitted covariance {:?}",
                    init.covariance
                ),
            ));
            (step, Some(init.covariance.clone()))
        }
        (None, None) => anyhow::bail!(
            "DP Barker's default walk is shaped by the posterior covariance the private initialiser fits; with {} give the walk's sd (--proposal-sd, or proposal_sd in [sampler])",
            inits.label
        ),
    };
    let config = sampler_config(settings, planned.iterations, proposal_sd, shape);
    config.check(&inits.points, model.dim())?;
    output::prepare_dir(out)?;
    if stop.is_requested() {
        anyhow::bail!("stopped before any run was opened; nothing was released");
    }
    let grants = federation.open(&plans, &model).await?;
    for (p, g) in parties.iter().zip(&grants) {
        tracing::info!(party = %p.name, tau = g.tau, releases = g.releases, run_epsilon = g.run_epsilon, "run granted");
    }
    comments.push(("init".to_string(), inits.label.clone()));
    comments.extend(output::job_comments(
        model.as_ref(),
        &config,
        &parties,
        &grants,
        &plans,
    ));
    let sampled = async {
        let live = output::LiveDraws::open(
            out,
            model.as_ref(),
            &config,
            &comments,
            progress(config.chains, config.iterations),
        )?;
        let traces = sampler::sample(
            Arc::clone(&federation),
            model,
            &config,
            inits.points.clone(),
            Arc::new(live),
            stop,
        )
        .await?;
        anyhow::Ok(traces)
    }
    .await;
    // Close even after a failure or a stop, so unused reservations go back to the parties.
    let closing = federation.close_each().await;
    let traces = sampled?;
    // The draws are what the privacy was spent on: a close that failed (a party away) is
    // reported beside them, at the run's reservation, not instead of them.
    let mut unclosed = Vec::new();
    let closed = closing
        .into_iter()
        .zip(&grants)
        .map(|(c, g)| {
            c.unwrap_or_else(|e| {
                unclosed.push(format!(
                    "{e}; its run stays open, reserved at ε = {:.4}, until its lease ends ({} s) or a resumed job closes it",
                    g.run_epsilon,
                    g.lease.as_secs()
                ));
                Closed {
                    releases: g.releases,
                    run_epsilon: g.run_epsilon,
                    epsilon_committed: g.epsilon_committed,
                }
            })
        })
        .collect();
    let cut_short = traces
        .iter()
        .any(|t| (t.steps() as u64) < config.iterations);
    Ok(JobResult {
        interrupted: stop.signal().filter(|_| cut_short),
        parties,
        plans,
        grants,
        closed,
        unclosed,
        sampler: config,
        noise: planned.noise,
        traces,
        inits,
        initialiser: initialised,
        comments,
    })
}

/// Warm-up iterations of a chain of `iterations`: the analyst's, else the first half.
fn warmup(settings: &JobSettings, iterations: u64) -> u64 {
    settings.warmup.unwrap_or(iterations / 2)
}

/// The sampler's configuration for `iterations` per chain: what it can check before
/// anything is released.
fn sampler_config(
    settings: &JobSettings,
    iterations: u64,
    proposal_sd: f64,
    proposal_shape: Option<Vec<Vec<f64>>>,
) -> SamplerConfig {
    SamplerConfig {
        variant: settings.variant,
        chains: settings.chains,
        iterations,
        warmup: warmup(settings, iterations),
        proposal_sd,
        proposal_shape,
        clip: settings.clip,
        proposal: settings.proposal,
        adapt: settings.adapt && settings.variant.adapts(),
        target_accept: settings.target_accept,
        seed: settings.seed,
        penalise: true,
    }
}

/// What the job would ask of each party, decided as [`run`] decides it, with nothing opened
/// or released: the dry run. With the private initialiser the sampling is planned on what
/// the initialiser's share leaves, as `run` plans it before the initialiser spends. The ε
/// after the job is the Gaussian composition of the planned releases (each party's
/// accountant may state less); a variant its parties plan at OpenRun (the subsampled ones)
/// says so instead.
pub async fn preview<P: PartyHandle>(
    federation: &Federation<P>,
    model: &Arc<dyn Model>,
    settings: &JobSettings,
    start: &Start,
) -> anyhow::Result<String> {
    let (parties, threshold, aggregation) = admit(federation, model.as_ref(), settings).await?;
    let mut out = format!(
        "dry run: nothing was opened or released\nvariant: {}\naggregation: {aggregation}\n",
        settings.variant.describe()
    );
    let mut init_share = 0.0;
    let plans = if settings.variant == Variant::Summaries {
        if let Start::Given(inits) = start {
            anyhow::bail!(
                "the summaries route starts its chains from its own releases; a start ({}) applies to the per-iteration variants",
                inits.label
            );
        }
        let (schedule, _, plans) = crate::summaries::plan(model.as_ref(), &parties, settings)?;
        out += &format!(
            "releases: {} per party, then the noise-aware posterior is sampled until every chain converges, at no further cost\n",
            schedule.releases()
        );
        plans
    } else {
        let planned_on = match start {
            Start::Given(inits) => {
                out += &format!("start: {}\n", inits.label);
                parties.clone()
            }
            Start::Private(init) => {
                init_share = init.share;
                let how = if parties.iter().all(|p| p.serves(SUMMARIES)) {
                    "the summaries route's releases".to_string()
                } else {
                    format!("{} gradient releases", init.steps)
                };
                out += &format!(
                    "initialiser: first, {:.0}% of each party's remaining budget ({how})\n",
                    100.0 * init.share
                );
                parties
                    .iter()
                    .map(|p| PartyInfo {
                        mu_remaining: (1.0 - init.share) * p.mu_remaining,
                        ..p.clone()
                    })
                    .collect()
            }
        };
        let planned = plan_for(&planned_on, threshold, settings)?;
        check_draws(settings, planned.iterations)?;
        out += &format!(
            "sampling: {} chains × {} iterations ({} of warm-up)\n",
            settings.chains,
            planned.iterations,
            warmup(settings, planned.iterations)
        );
        run_plans(&planned_on, threshold, settings, &planned)?
    };
    let batches: Vec<String> = plans
        .iter()
        .filter_map(|p| p.batch_size.map(|b| b.to_string()))
        .collect();
    if !batches.is_empty() {
        out += &format!("batch per step: {} rows\n", batches.join(" + "));
    }
    out += &format!(
        "\n{:<16} {:>9} {:>10} {:>12} {:>9} {:>10} {:>16}\n",
        "party", "rows", "ε budget", "ε committed", "steps", "tau", "ε after (≈)"
    );
    for (p, plan) in parties.iter().zip(&plans) {
        let steps = u64::from(plan.chains) * plan.steps_per_chain;
        let (tau, after) = match plan.noise {
            NoiseChoice::Tau(tau) => {
                let run_mu = settings.variant.mu_per_iteration(tau, p.rows);
                let after = run_mu.and_then(|per_step| {
                    let run = per_step * steps as f64;
                    let budget = accountant::max_mu(p.epsilon, p.delta).ok()?;
                    let spent = budget - p.mu_remaining + init_share * p.mu_remaining + run;
                    let epsilon = accountant::GaussianComposition::from_mu(spent)
                        .ok()?
                        .epsilon(p.delta);
                    Some(format!("{epsilon:.4}"))
                });
                (
                    format!("{tau:.4}"),
                    after.unwrap_or_else(|| "at OpenRun".into()),
                )
            }
            NoiseChoice::Calibrate => ("at OpenRun".into(), format!("≤ {}", p.epsilon)),
        };
        out += &format!(
            "{:<16} {:>9} {:>10} {:>12.4} {:>9} {:>10} {:>16}\n",
            p.name, p.rows, p.epsilon, p.epsilon_committed, steps, tau, after
        );
    }
    Ok(out)
}

/// The parties, described and checked against the job (model, variant), and how their
/// releases will be summed: secure aggregation's threshold, and the line that says so.
async fn admit<P: PartyHandle>(
    federation: &Federation<P>,
    model: &dyn Model,
    settings: &JobSettings,
) -> anyhow::Result<(Vec<PartyInfo>, Option<u32>, String)> {
    let parties = federation.describe().await?;
    check_parties(&parties, model, &settings.variant)?;
    let (threshold, aggregation) = secure::choose(
        &parties,
        settings.variant.party_variant(),
        settings.aggregation,
        settings.collusion,
    )
    .map_err(anyhow::Error::msg)?;
    Ok((parties, threshold, aggregation))
}

/// Iterations and noise for `parties`. Under secure aggregation a party's multiplier is τ
/// over the rows whose pooled noise protects it (`federation::secure`): planned as if it
/// held them.
fn plan_for(
    parties: &[PartyInfo],
    threshold: Option<u32>,
    settings: &JobSettings,
) -> anyhow::Result<Planned> {
    let protected: Vec<PartyInfo> = match threshold {
        Some(t) => parties
            .iter()
            .map(|p| PartyInfo {
                rows: secure::protecting_rows(parties, t).floor() as u64,
                ..p.clone()
            })
            .collect(),
        None => parties.to_vec(),
    };
    planning::plan(
        &protected,
        &settings.variant,
        settings.chains,
        settings.tau,
        settings.iterations,
    )
    .map_err(anyhow::Error::msg)
}

/// Each party's run plan for `planned`, τ made each party's own under secure aggregation.
fn run_plans(
    parties: &[PartyInfo],
    threshold: Option<u32>,
    settings: &JobSettings,
    planned: &Planned,
) -> anyhow::Result<Vec<RunPlan>> {
    let mut plans = settings
        .variant
        .plans(
            parties,
            settings.chains,
            planned.iterations,
            settings.clip,
            planned.noise,
        )
        .map_err(anyhow::Error::msg)?;
    if let (Some(t), NoiseChoice::Tau(tau)) = (threshold, planned.noise) {
        for (plan, p) in plans.iter_mut().zip(parties) {
            plan.noise = NoiseChoice::Tau(secure::tau_for(tau, p, parties, t));
            // DP HMC's gradient τ means the same: the noise in the summed gradient.
            if let Some(h) = plan.hmc.as_mut() {
                h.gradient_tau = secure::tau_for(h.gradient_tau, p, parties, t);
            }
        }
    }
    Ok(plans)
}

/// The parties serve this job's model (fingerprint and dimension) and its variant: checked
/// from their descriptions before anything is opened, so a job they cannot serve spends
/// nothing (an initialiser run before a refused sampling run would).
fn check_parties(
    parties: &[PartyInfo],
    model: &dyn Model,
    variant: &Variant,
) -> anyhow::Result<()> {
    for p in parties {
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
        if !p.serves(variant.party_variant()) {
            anyhow::bail!(
                "party {} does not serve the {} variant for its {} model (it serves {}); nothing was released",
                p.name,
                variant.name(),
                p.model,
                p.variants.join(", ")
            );
        }
    }
    Ok(())
}

/// The random stream of the chains' starting points, whichever protocol draws them (the
/// base seed's other streams belong to the chains and, in simulations, the data).
pub const INIT_STREAM: u64 = 2;

/// One line naming the initialiser, its cost and where the chains start.
fn initialiser_label(init: &Initialised) -> String {
    let epsilons: Vec<String> = init
        .closed
        .iter()
        .map(|c| format!("{:.4}", c.run_epsilon))
        .collect();
    format!(
        "private initialiser: {}, {:.0}% of each party's remaining budget (ε = {} per party); chains start at its point {:?} + N(0, diag({:?})²), twice the fitted posterior sds",
        init.method,
        100.0 * init.settings.share,
        epsilons.join(", "),
        init.point,
        init.scale
    )
}
