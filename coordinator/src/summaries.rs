//! The summaries route: pay for privacy once. One run of a few releases per party (the
//! pilots and the finals of `fedmcmc_common::noise_aware::rounds`), closed as soon as they
//! are made; then the noise-aware posterior of the final summary (Kulkarni et al. 2021;
//! Bernstein & Sheldon 2018) sampled by plain HMC with exact gradients until every chain
//! converges (R̂ ≤ 1.01, bulk and tail ESS ≥ 400), at no further privacy cost. The draws,
//! summary and privacy report are those of every variant.
use std::sync::Arc;

use fedmcmc_common::models::summaries::quadratic;
use fedmcmc_common::models::{Model, glm_prior};
use fedmcmc_common::noise_aware::hmc::{self, Sampled, Settings};
use fedmcmc_common::noise_aware::means::MeanPosterior;
use fedmcmc_common::noise_aware::quadratic::{Approximation, noise_aware};
use fedmcmc_common::noise_aware::rounds::{Final, Rounds, Schedule};
use fedmcmc_common::noise_aware::{LogDensity, spread};
use fedmcmc_common::proposal::ProposalKind;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::federation::{Federation, NoiseChoice, PartyHandle, PartyInfo, Query, RunPlan};
use crate::interrupt::Stop;
use crate::job::{INIT_STREAM, Inits, JobResult, JobSettings};
use crate::kernels::ChainLink;
use crate::output;
use crate::sampler::{ChainTrace, SamplerConfig, chain_seed};
use crate::variant::Variant;

/// The route's releases for `model`, or why it has none.
pub fn schedule(model: &dyn Model) -> Result<Schedule, String> {
    Schedule::default_for(model).ok_or_else(|| {
        format!(
            "the {} model has no summaries: the summaries route serves the GLMs, and gaussian and banana models with public bounds on their columns; choose a per-iteration variant (--variant penalty, hmc, …)",
            model.name()
        )
    })
}

/// The noise of `releases` Gaussian releases per party: τ checked against every party's
/// budget, or each party calibrating the smallest τ that fits what it has left.
pub fn plan_noise(
    parties: &[PartyInfo],
    releases: u64,
    tau: Option<f64>,
) -> Result<NoiseChoice, String> {
    for p in parties {
        if p.mu_remaining.is_nan() || p.mu_remaining <= 0.0 {
            return Err(format!(
                "party {} has no budget left (ε = {:.4} of {} committed)",
                p.name, p.epsilon_committed, p.epsilon
            ));
        }
    }
    let Some(tau) = tau else {
        return Ok(NoiseChoice::Calibrate);
    };
    if !(tau.is_finite() && tau > 0.0) {
        return Err(format!("tau must be a positive number, got {tau}"));
    }
    for p in parties {
        let mu = releases as f64
            * Variant::Summaries
                .mu_per_iteration(tau, p.rows)
                .expect("one Gaussian release per step");
        if mu > p.mu_remaining {
            return Err(format!(
                "the summaries route's {releases} releases at τ = {tau} do not fit the privacy budget of party {} (ε = {}, δ = {:e}, ε = {:.4} already committed): give a larger --tau, or leave it out and each party calibrates the noise to what it has left",
                p.name, p.epsilon, p.delta, p.epsilon_committed
            ));
        }
    }
    Ok(NoiseChoice::Tau(tau))
}

/// The route's releases and each party's plan for them, or why it cannot run: every check
/// `run` makes before it opens anything (a dry run stops here).
pub fn plan(
    model: &dyn Model,
    parties: &[PartyInfo],
    settings: &JobSettings,
) -> anyhow::Result<(Schedule, NoiseChoice, Vec<RunPlan>)> {
    let schedule = schedule(model).map_err(anyhow::Error::msg)?;
    if let Some(i) = settings.iterations {
        anyhow::bail!(
            "the summaries route takes no --iterations ({i}): it releases {} summaries and samples until the chains converge",
            schedule.releases()
        );
    }
    if settings.chains < 2 {
        anyhow::bail!(
            "the summaries route needs at least 2 chains to check convergence, got {}",
            settings.chains
        );
    }
    let noise =
        plan_noise(parties, schedule.releases(), settings.tau).map_err(anyhow::Error::msg)?;
    let plans = settings
        .variant
        .plans(parties, 1, schedule.releases(), 0.0, noise)
        .map_err(anyhow::Error::msg)?;
    Ok((schedule, noise, plans))
}

/// Runs the route against `parties` (described and checked by the caller): plans, opens,
/// releases, closes, samples. Every refusal it can decide comes before the run is opened.
#[allow(clippy::too_many_arguments)] // the whole job, as `job::run` gives it
pub async fn run<P: PartyHandle>(
    federation: &Federation<P>,
    model: Arc<dyn Model>,
    parties: Vec<PartyInfo>,
    settings: &JobSettings,
    out: &std::path::Path,
    mut comments: Vec<(String, String)>,
    stop: &Stop,
) -> anyhow::Result<JobResult> {
    let (schedule, noise, plans) = plan(model.as_ref(), &parties, settings)?;
    output::prepare_dir(out)?;
    if stop.is_requested() {
        anyhow::bail!("stopped before any run was opened; nothing was released");
    }
    let grants = federation.open(&plans, &model).await?;
    let released = release(federation, &model, schedule, stop).await;
    // Close at once, also after a failure: the sampling needs no party.
    let closed = federation.close().await?;
    let (fin, rounds_line) = released?;

    let rows = parties.iter().map(|p| p.rows).sum();
    let start = Start::of(&model, &fin, rows, settings);
    let d = model.dim();
    let seeds: Vec<u64> = (0..settings.chains)
        .map(|c| chain_seed(settings.seed, c))
        .collect();
    let hmc_settings = Settings::default();
    let sampled = tokio::task::spawn_blocking({
        let (target, inits) = (start.target, start.inits.clone());
        move || {
            hmc::sample_until_converged(target.as_ref(), inits, &seeds, hmc_settings, &|x| {
                x[..d].to_vec()
            })
        }
    })
    .await?
    .map_err(anyhow::Error::msg)?;
    let iterations = sampled.chains[0].states.len() as u64;
    let sampler = SamplerConfig {
        variant: Variant::Summaries,
        chains: settings.chains,
        iterations,
        warmup: sampled.warmup as u64,
        proposal: ProposalKind::Rw,
        proposal_sd: 0.0,
        proposal_shape: None,
        clip: 0.0,
        adapt: true,
        target_accept: hmc::TARGET_ACCEPT,
        seed: settings.seed,
        penalise: false,
    };
    let traces = traces(&sampled, d, fin.noise_variance, &sampler);
    let inits = Inits {
        points: start.inits.iter().map(|x| x[..d].to_vec()).collect(),
        label: start.label,
    };
    comments.push(("init".to_string(), inits.label.clone()));
    comments.extend(output::job_comments(
        model.as_ref(),
        &sampler,
        &parties,
        &grants,
        &plans,
    ));
    comments.push(("summaries".to_string(), rounds_line));
    if let Some(warning) = prior_warning(model.as_ref(), &sampled) {
        comments.push(("prior".to_string(), warning));
    }
    comments.push((
        "convergence".to_string(),
        format!(
            "{} draws per chain after {} of warm-up: worst R̂ {:.4}, least bulk/tail ESS {:.0}{}{}",
            iterations - sampled.warmup as u64,
            sampled.warmup,
            sampled.rhat,
            sampled.ess,
            match sampled.divergences() {
                (0, _) => String::new(),
                (d, n) => format!(
                    "; {d} of {n} trajectories diverged ({:.1} %: a posterior whose curvature \
                     changes faster than one step size follows, as where a budget hardly \
                     measures the curvature)",
                    100.0 * d as f64 / n as f64
                ),
            },
            if sampled.converged {
                ""
            } else {
                " (NOT converged: the most draws were reached)"
            }
        ),
    ));
    Ok(JobResult {
        parties,
        plans,
        grants,
        closed,
        unclosed: Vec::new(),
        sampler,
        noise,
        traces,
        inits,
        initialiser: None,
        interrupted: None,
        comments,
    })
}

/// Makes the schedule's releases, in order, as one chain of the open run: the final summary
/// averaged, and one line saying where each release was centred.
pub(crate) async fn release<P: PartyHandle>(
    federation: &Federation<P>,
    model: &Arc<dyn Model>,
    schedule: Schedule,
    stop: &Stop,
) -> anyhow::Result<(Final, String)> {
    let entries = model.summaries().expect("a model with summaries").entries();
    let mut rounds = Rounds::new(Arc::clone(model), schedule);
    let mut link = ChainLink::new(federation, 0);
    while let Some((centre, window, curvature_weight)) = rounds.next() {
        if stop.is_requested() {
            anyhow::bail!(
                "stopped after {} of the summaries route's {} releases; the run is closed and charged what it released",
                link.next_step(),
                schedule.releases()
            );
        }
        let centre = centre.to_vec();
        let answer = link
            .ask(Query::Summary {
                centre: &centre,
                window,
                curvature_weight,
                entries,
            })
            .await
            .map_err(|e| anyhow::anyhow!("summary release {}: {}", e.step, e.source))?;
        rounds.record(&answer.value, answer.noise_variance);
    }
    let fin = rounds.finish().expect("every release recorded");
    let pilots: Vec<String> = rounds
        .pilots()
        .iter()
        .map(|p| format!("at {:?} (window {})", p.centre, p.window))
        .collect();
    let line = format!(
        "{} pilot release(s) {}; {} final release(s) at {:?} (Taylor's, window 0) averaged and pooled with {} Taylor pilot(s), noise variance {:e} per entry",
        pilots.len(),
        pilots.join(", "),
        schedule.releases() - pilots.len() as u64,
        fin.centre,
        fin.pooled,
        fin.noise_variance
    );
    Ok((fin, line))
}

/// A point of the final summary's noise-aware posterior and its approximate covariance
/// (rows): the mode of a quadratic summary's [`Approximation`] with its H⁻¹, or θ of the
/// mean a mean summary estimates with that estimate's variances (in u, which is θ up to the
/// banana's shear; their correlation is not estimated).
pub(crate) fn approximate(
    model: &Arc<dyn Model>,
    fin: &Final,
    rows: u64,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    match quadratic(model.as_ref()) {
        Some(_) => {
            let approximation = Approximation::of(model.as_ref(), &fin.quadratic());
            let d = approximation.mode.len();
            let covariance = approximation
                .covariance()
                .map(|c| c.row_iter().map(|r| r.iter().copied().collect()).collect())
                .unwrap_or_else(|| vec![vec![0.0; d]; d]);
            (approximation.mode, covariance)
        }
        None => {
            let posterior =
                MeanPosterior::new(Arc::clone(model), &fin.value, fin.noise_variance, rows);
            let (u, sds) = posterior.u_estimate();
            let covariance = (0..sds.len())
                .map(|i| {
                    (0..sds.len())
                        .map(|j| if i == j { sds[i] * sds[i] } else { 0.0 })
                        .collect()
                })
                .collect();
            (posterior.theta_of(u), covariance)
        }
    }
}

/// What the sampler runs on: the noise-aware posterior of the final summary, one start
/// per chain and the line that says where they are.
struct Start {
    target: Box<dyn LogDensity + Send>,
    inits: Vec<Vec<f64>>,
    label: String,
}

impl Start {
    /// The target for the model's kind of summary, with one start per chain: the
    /// approximation's point spread by twice its sds, from the job's seeded stream.
    fn of(model: &Arc<dyn Model>, fin: &Final, rows: u64, settings: &JobSettings) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
        rng.set_stream(INIT_STREAM);
        let d = model.dim();
        match quadratic(model.as_ref()) {
            Some(_) => {
                let release = fin.quadratic();
                let sds = Approximation::of(model.as_ref(), &release).sds();
                let aware = noise_aware(model, release, rows);
                // θ spread about the approximation's mode, A's coordinates where Â is.
                let inits = (0..settings.chains)
                    .map(|_| aware.start(&spread(&sds, &mut rng)))
                    .collect();
                Start {
                    label: format!(
                        "the mode of the final summary's noise-aware approximation {:?}, each chain's θ spread by twice its sds",
                        &aware.initial[..d]
                    ),
                    target: aware.target,
                    inits,
                }
            }
            None => {
                let posterior =
                    MeanPosterior::new(Arc::clone(model), &fin.value, fin.noise_variance, rows);
                let (u, sds) = posterior.u_estimate();
                let inits = (0..settings.chains)
                    .map(|_| {
                        let moved = u.iter().zip(spread(&sds, &mut rng)).map(|(c, o)| c + o);
                        posterior.theta_of(moved.collect())
                    })
                    .collect();
                Start {
                    label: format!(
                        "θ of the released mean {:?}, each chain's mean spread by twice its sds",
                        posterior.theta_of(u)
                    ),
                    target: Box::new(posterior),
                    inits,
                }
            }
        }
    }
}

/// One sentence when a logistic GLM's posterior slopes run past what the weakly informative
/// prior of its bounds reaches, under a vaguer prior (`glm_prior::past_weakly_informative`):
/// its intervals are then the prior's. Post-processing of the draws only.
fn prior_warning(model: &dyn Model, sampled: &Sampled) -> Option<String> {
    let q = quadratic(model)?;
    q.sigmoid()?;
    let design = q.design_box();
    let intercept = q.intercept();
    let features = &design[usize::from(intercept)..];
    let prior_sd = model.prior_sd()?;
    let draws = sampled
        .chains
        .iter()
        .flat_map(|c| &c.states[sampled.warmup..])
        .map(|x| &x[..prior_sd.len()]);
    let (reached, bound) =
        glm_prior::past_weakly_informative(intercept, features, &prior_sd, draws)?;
    let default = glm_prior::weakly_informative_sd(intercept, features);
    let beyond = 100.0 * (1.0 - glm_prior::REACH_QUANTILE);
    Some(format!(
        "the posterior's slopes move a row's log-odds by {reached:.1} within the public bounds ({beyond:.0} % of the draws further), past the {bound:.1} that the weakly informative prior of these bounds reaches (Gelman et al. 2008; prior_sd = {default:.3?}, the logistic family's default): where a release this noisy cannot tell the slopes from their multiples, a vaguer prior lets the posterior run out along them, and its intervals are then the prior's, not the data's; that prior, or a larger budget, keeps them in range"
    ))
}

/// The chains as the outputs take them: θ at every iteration, warm-up included.
fn traces(
    sampled: &Sampled,
    d: usize,
    noise_variance: f64,
    config: &SamplerConfig,
) -> Vec<ChainTrace> {
    sampled
        .chains
        .iter()
        .enumerate()
        .map(|(c, chain)| ChainTrace {
            chain: c as u32,
            seed: chain_seed(config.seed, c as u32),
            dim: d,
            warmup: config.warmup,
            theta: chain.states.iter().flat_map(|x| x[..d].to_vec()).collect(),
            accept_stat: chain.transitions.iter().map(|t| t.accept_stat).collect(),
            accepted: chain.transitions.iter().map(|t| t.accepted).collect(),
            noise_variance: vec![noise_variance; chain.states.len()],
            scale: chain.transitions.iter().map(|t| t.step_size).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedmcmc_common::models::{Family, GlmSpec, ModelSpec};
    use fedmcmc_common::noise_aware::hmc::ChainDraws;

    fn sampled(states: Vec<Vec<f64>>) -> Sampled {
        Sampled {
            chains: vec![ChainDraws {
                states,
                transitions: Vec::new(),
            }],
            warmup: 1,
            rhat: 1.0,
            ess: 1000.0,
            converged: true,
        }
    }

    /// The logistic preset under a vague prior sd of 10: draws out along (7, 8.5, −6.5), as
    /// such a posterior ran, are named with the prior that keeps them in range; the warm-up's
    /// draw is not counted, the same draws under the default prior are not named, and the
    /// gaussian family is never.
    #[test]
    fn a_vague_prior_s_runaway_slopes_are_named_with_the_default_prior() {
        let far = vec![
            vec![0.0, 100.0, 100.0],
            vec![7.0, 8.5, -6.5],
            vec![6.0, 9.5, -5.5],
            vec![8.0, 7.5, -7.5],
        ];
        let model = |family, prior_sd: Vec<f64>| {
            let mut spec = GlmSpec::example(family, 3);
            spec.prior_sd = prior_sd;
            ModelSpec::Glm(spec).build().unwrap()
        };
        let vague = model(Family::Logistic, vec![10.0]);
        let warning = prior_warning(vague.as_ref(), &sampled(far.clone())).unwrap();
        assert!(
            warning.starts_with("the posterior's slopes move a row's log-odds by 30.0 ")
                && warning.contains("past the 9.0 ")
                && warning.contains("prior_sd = [10.000, 1.083, 1.083]"),
            "{warning}"
        );
        let default = model(Family::Logistic, Vec::new());
        assert_eq!(prior_warning(default.as_ref(), &sampled(far.clone())), None);
        let gaussian = model(Family::Gaussian, vec![10.0]);
        assert_eq!(prior_warning(gaussian.as_ref(), &sampled(far)), None);
    }
}
