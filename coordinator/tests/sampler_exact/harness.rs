//! The harness: model setups with their exact posteriors, and DP chains run over in-process
//! parties with seeded noise.
use std::sync::Arc;

use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{ExactPosterior, Model, ModelSpec};
use fedmcmc_common::proposal::ProposalKind;
use fedmcmc_coordinator::federation::local::{identified, nodes};
use fedmcmc_coordinator::federation::{Federation, NoiseChoice, secure};
use fedmcmc_coordinator::interrupt::Stop;
use fedmcmc_coordinator::sampler::{self, ChainTrace, Quiet, SamplerConfig};
use fedmcmc_coordinator::variant::Variant;
use fedmcmc_party::config::BudgetConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const CHAINS: u32 = 4;
pub(crate) const RW: ProposalKind = ProposalKind::Rw;
pub(crate) const ITERATIONS: u64 = 16_000;

pub(crate) struct Setup {
    pub(crate) spec: ModelSpec,
    pub(crate) model: Arc<dyn Model>,
    pub(crate) data: Columns,
    pub(crate) exact: Box<dyn ExactPosterior>,
}

/// Simulated rows at the spec's true θ.
pub(crate) fn simulated(spec: &ModelSpec, rows: usize, seed: u64) -> (Arc<dyn Model>, Columns) {
    let model = spec.build().unwrap();
    let data = model.simulate(
        &spec.true_theta(),
        rows,
        &mut ChaCha8Rng::seed_from_u64(seed),
    );
    (model, data)
}

pub(crate) fn setup(spec: ModelSpec, rows: usize, seed: u64) -> Setup {
    let (model, data) = simulated(&spec, rows, seed);
    let exact = model.exact_posterior(&data).unwrap();
    Setup {
        spec,
        model,
        data,
        exact,
    }
}

pub(crate) fn gaussian() -> ModelSpec {
    ModelSpec::gaussian(vec![vec![1.0, 0.0], vec![0.0, 1.0]], 1000.0)
}

/// A Gaussian spec at temperature T.
pub(crate) fn tempered(spec: ModelSpec, temperature: f64) -> ModelSpec {
    let ModelSpec::Gaussian(g) = spec else {
        panic!("only the Gaussian specs here are tempered: {spec:?}");
    };
    ModelSpec::Gaussian(fedmcmc_common::models::GaussianSpec { temperature, ..g })
}

/// A 10-d Gaussian with identity likelihood covariance.
pub(crate) fn gaussian_10() -> ModelSpec {
    let cov = (0..10)
        .map(|i| (0..10).map(|j| f64::from(u8::from(i == j))).collect())
        .collect();
    ModelSpec::gaussian(cov, 1000.0)
}

/// One run's knobs.
pub(crate) struct Run {
    pub(crate) variant: Variant,
    /// The penalty kernels' proposal ([`RW`] for the others).
    pub(crate) proposal: ProposalKind,
    /// Iterations per chain, a quarter of them warm-up.
    pub(crate) iterations: u64,
    pub(crate) parties: usize,
    pub(crate) tau: f64,
    pub(crate) clip: f64,
    pub(crate) proposal_sd: f64,
    pub(crate) adapt: bool,
    pub(crate) penalise: bool,
    pub(crate) seed: u64,
    /// Secure aggregation (t = 0) instead of plain releases, at the same τ: the same noise
    /// in the sum, each party adding a share of it.
    pub(crate) secure: bool,
}

/// Runs `CHAINS` chains over `parties` in-process parties, started at the exact mean.
pub(crate) async fn sample(s: &Setup, run: Run) -> Vec<ChainTrace> {
    sample_from(&s.spec, &s.model, &s.data, s.exact.mean(), run).await
}

/// Runs `CHAINS` chains of `model` over `data` split among `parties` in-process parties,
/// every chain started at `start`.
pub(crate) async fn sample_from(
    spec: &ModelSpec,
    model: &Arc<dyn Model>,
    data: &Columns,
    start: Vec<f64>,
    run: Run,
) -> Vec<ChainTrace> {
    let Run {
        variant,
        proposal,
        iterations,
        parties,
        tau,
        clip,
        proposal_sd,
        adapt,
        penalise,
        seed,
        secure,
    } = run;
    let budget = BudgetConfig {
        epsilon: 1e15,
        delta: 0.5,
        accountant: Default::default(),
    };
    // Each party's noise seeded from the run's seed: the whole run is reproducible.
    let nodes = nodes(spec, data.split(parties), budget, None)
        .unwrap()
        .into_iter()
        .zip(0..)
        .map(|((name, node), i)| {
            let node = Arc::into_inner(node).expect("a fresh node has one owner");
            (name, Arc::new(node.with_seeded_noise(seed ^ (i << 32))))
        })
        .collect();
    let certificates = tempfile::tempdir().unwrap();
    let nodes = if secure {
        identified(nodes, certificates.path()).unwrap()
    } else {
        nodes
    };
    let federation = Arc::new(Federation::new(nodes));
    let infos = federation.describe().await.unwrap();
    let noise = match variant {
        Variant::Barker { .. } => NoiseChoice::Calibrate,
        _ => NoiseChoice::Tau(tau),
    };
    let mut plans = variant
        .plans(&infos, CHAINS, iterations, clip, noise)
        .unwrap();
    if secure {
        federation.aggregate_securely(Some(0));
        for (plan, p) in plans.iter_mut().zip(&infos) {
            plan.noise = NoiseChoice::Tau(secure::tau_for(tau, p, &infos, 0));
            if let Some(h) = plan.hmc.as_mut() {
                h.gradient_tau = secure::tau_for(h.gradient_tau, p, &infos, 0);
            }
        }
    }
    federation.open(&plans, model).await.unwrap();
    let config = SamplerConfig {
        variant,
        chains: CHAINS,
        iterations,
        warmup: iterations / 4,
        proposal,
        proposal_sd,
        proposal_shape: None,
        clip,
        adapt,
        target_accept: proposal.default_target_accept(),
        seed,
        penalise,
    };
    let inits = vec![start; CHAINS as usize];
    let traces = sampler::sample(
        federation.clone(),
        model.clone(),
        &config,
        inits,
        Arc::new(Quiet),
        &Stop::new(),
    )
    .await
    .unwrap();
    federation.close().await.unwrap();
    traces
}
