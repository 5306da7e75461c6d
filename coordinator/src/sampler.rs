//! Chains over a federation: the bookkeeping every kernel shares. Each chain runs its kernel
//! (`kernels/`: the variant's, see `variant.rs`) once per iteration and
//! records θ, the acceptance and the noise. Chains run concurrently as tasks; during warm-up
//! each kernel adapts from its own chain's acceptance decisions, then is frozen. A [`Stop`] request, or another chain's failure, ends every
//! chain after its current step, so the traces hold whatever was sampled before.
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fedmcmc_common::barker::CorrectionFit;
use fedmcmc_common::models::Model;
use fedmcmc_common::proposal::{Proposal, ProposalKind};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::federation::{Federation, FederationError, PartyHandle};
use crate::interrupt::Stop;
use crate::kernels::{Barker, ChainLink, Hmc, Kernel, Penalty, Ratio};
use crate::variant::Variant;

#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Which kernel, with its parameters.
    pub variant: Variant,
    pub chains: u32,
    /// Iterations per chain, warm-up included; each is one release per party, or L + 2 for
    /// DP HMC.
    pub iterations: u64,
    /// Leading steps that adapt the walk and are not reported as draws.
    pub warmup: u64,
    /// How the penalty kernels propose θ′ (the others use the random walk).
    pub proposal: ProposalKind,
    /// Initial proposal standard deviation (the walk's, or one component's step).
    pub proposal_sd: f64,
    /// DP Barker's walk shape Σ (rows): θ′ ~ N(θ, proposal_sd²·Σ); `None`: isotropic.
    pub proposal_shape: Option<Vec<Vec<f64>>>,
    /// The run's per-row ratio clip coefficient (DP HMC rejects trajectories too long for
    /// it).
    pub clip: f64,
    /// Adapt the walk during warm-up.
    pub adapt: bool,
    /// Acceptance rate the adaptation aims for.
    pub target_accept: f64,
    /// Base seed; chain c uses [`chain_seed`]`(seed, c)`.
    pub seed: u64,
    /// Apply the −½Σσᵢ² penalty. Always true in real runs; tests turn it off to show that
    /// the uncorrected chain is wrong.
    pub penalise: bool,
}

/// The seed of chain `chain`: distinct streams from one recorded base seed (SplitMix64).
pub fn chain_seed(seed: u64, chain: u32) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(u64::from(chain) + 1));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SamplerConfig {
    /// What the sampler can check before any release is asked for: a proposal the variant
    /// takes, one finite initial point of the model's dimension per chain, and a warm-up
    /// shorter than the chain.
    pub fn check(&self, inits: &[Vec<f64>], dim: usize) -> Result<(), SampleError> {
        self.variant
            .check_proposal(self.proposal)
            .map_err(SampleError::Config)?;
        if let Some(shape) = &self.proposal_shape {
            if !matches!(self.variant, Variant::Barker { .. }) {
                return Err(SampleError::Config(format!(
                    "a shaped walk is DP Barker's, not the {} variant's",
                    self.variant.name()
                )));
            }
            Proposal::new(ProposalKind::Rw, self.proposal_sd, dim)
                .shaped(shape)
                .map_err(SampleError::Config)?;
        }
        if inits.len() != self.chains as usize {
            return Err(SampleError::Config(format!(
                "{} initial points for {} chains",
                inits.len(),
                self.chains
            )));
        }
        if self.warmup >= self.iterations {
            return Err(SampleError::Config(format!(
                "warm-up ({}) must be shorter than the chain ({} iterations)",
                self.warmup, self.iterations
            )));
        }
        if let Some(bad) = inits
            .iter()
            .find(|i| i.len() != dim || i.iter().any(|v| !v.is_finite()))
        {
            return Err(SampleError::Config(format!(
                "initial point {bad:?} is not a finite vector of dimension {dim}"
            )));
        }
        Ok(())
    }
}

/// Everything one chain produced, warm-up included (`warmup` says where draws begin). A
/// chain that was stopped early has fewer steps than planned, possibly fewer than `warmup`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainTrace {
    pub chain: u32,
    pub seed: u64,
    pub dim: usize,
    pub warmup: u64,
    /// θ after each step, row-major (steps × dim).
    pub theta: Vec<f64>,
    pub accept_stat: Vec<f64>,
    pub accepted: Vec<bool>,
    /// Σᵢ σᵢ² at each step.
    pub noise_variance: Vec<f64>,
    /// Random-walk scale at each step (constant after warm-up).
    pub scale: Vec<f64>,
}

impl ChainTrace {
    pub fn steps(&self) -> usize {
        self.accepted.len()
    }

    /// θ after step `i`.
    pub fn draw(&self, i: usize) -> &[f64] {
        &self.theta[i * self.dim..(i + 1) * self.dim]
    }

    /// Indices of the post-warm-up steps (empty for a chain stopped during warm-up).
    pub fn kept(&self) -> Range<usize> {
        (self.warmup as usize).min(self.steps())..self.steps()
    }

    /// Number of post-warm-up draws.
    pub fn draws(&self) -> usize {
        self.kept().len()
    }

    /// Post-warm-up draws of parameter `j`.
    pub fn parameter(&self, j: usize) -> Vec<f64> {
        self.kept().map(|i| self.theta[i * self.dim + j]).collect()
    }

    /// Post-warm-up acceptance rate; `None` without post-warm-up draws.
    pub fn acceptance_rate(&self) -> Option<f64> {
        let kept = &self.accepted[self.kept()];
        (!kept.is_empty()).then(|| kept.iter().filter(|&&a| a).count() as f64 / kept.len() as f64)
    }
}

/// Sees each chain's trace after every one of its iterations: the progress display, and the
/// draw files written as the chains go. An error (a draw file that cannot be written) stops
/// every chain: draws that cannot be kept must not be paid for.
pub trait Progress: Send + Sync {
    fn step(&self, trace: &ChainTrace) -> anyhow::Result<()>;
}

/// No progress display.
pub struct Quiet;

impl Progress for Quiet {
    fn step(&self, _: &ChainTrace) -> anyhow::Result<()> {
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("chain {chain} stopped at step {step}: {source}")]
    Federation {
        chain: u32,
        step: u64,
        source: FederationError,
    },
    #[error("{0}")]
    Config(String),
    #[error("chain {chain} was cancelled: the program is shutting down")]
    Cancelled { chain: u32 },
    #[error("chain {chain}: {source:#}")]
    Output { chain: u32, source: anyhow::Error },
}

/// When every chain should end early: the caller's [`Stop`], or a failed chain (the others
/// must not go on asking a federation whose run is about to be closed).
struct Halt {
    stop: Stop,
    failed: AtomicBool,
}

impl Halt {
    fn now(&self) -> bool {
        self.stop.is_requested() || self.failed.load(Ordering::SeqCst)
    }
}

/// Runs one chain of `kernel` from `init` until its last step or a halt.
#[allow(clippy::too_many_arguments)] // one chain's whole context, passed into its task
async fn run_chain<P: PartyHandle, K: Kernel>(
    federation: Arc<Federation<P>>,
    mut kernel: K,
    config: SamplerConfig,
    chain: u32,
    init: Vec<f64>,
    progress: Arc<dyn Progress>,
    halt: Arc<Halt>,
) -> Result<ChainTrace, SampleError> {
    let dim = init.len();
    let seed = chain_seed(config.seed, chain);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let steps = config.iterations as usize;
    let mut trace = ChainTrace {
        chain,
        seed,
        dim,
        warmup: config.warmup,
        theta: Vec::with_capacity(steps * dim),
        accept_stat: Vec::with_capacity(steps),
        accepted: Vec::with_capacity(steps),
        noise_variance: Vec::with_capacity(steps),
        scale: Vec::with_capacity(steps),
    };
    let mut link = ChainLink::new(&federation, chain);
    let mut theta = init;
    for iteration in 0..config.iterations {
        if halt.now() {
            break;
        }
        let transition = kernel
            .transition(&mut link, &mut theta, &mut rng)
            .await
            .map_err(|e| {
                halt.failed.store(true, Ordering::SeqCst);
                SampleError::Federation {
                    chain,
                    step: e.step,
                    source: e.source,
                }
            })?;
        if config.adapt && iteration < config.warmup {
            kernel.adapt(&transition);
        }
        trace.theta.extend_from_slice(&theta);
        trace.accept_stat.push(transition.accept_stat);
        trace.accepted.push(transition.accepted);
        trace.noise_variance.push(transition.noise_variance);
        trace.scale.push(kernel.scale());
        progress.step(&trace).map_err(|source| {
            halt.failed.store(true, Ordering::SeqCst);
            SampleError::Output { chain, source }
        })?;
    }
    Ok(trace)
}

/// What every chain task of one `sample` call shares.
struct Chains<'a, P> {
    federation: &'a Arc<Federation<P>>,
    config: &'a SamplerConfig,
    inits: &'a [Vec<f64>],
    progress: &'a Arc<dyn Progress>,
    halt: &'a Arc<Halt>,
}

impl<P: PartyHandle> Chains<'_, P> {
    /// One task per initial point, each with its own kernel from `kernel`.
    fn spawn<K: Kernel + 'static>(
        &self,
        kernel: impl Fn() -> K,
    ) -> Vec<tokio::task::JoinHandle<Result<ChainTrace, SampleError>>> {
        self.inits
            .iter()
            .enumerate()
            .map(|(c, init)| {
                tokio::spawn(run_chain(
                    Arc::clone(self.federation),
                    kernel(),
                    self.config.clone(),
                    c as u32,
                    init.clone(),
                    Arc::clone(self.progress),
                    Arc::clone(self.halt),
                ))
            })
            .collect()
    }
}

/// Runs `config.chains` chains concurrently, chain c from `inits[c]`. The federation's run
/// must already be open with at least `chains × iterations` releases per party. Once `stop`
/// is requested every chain ends after its current step and the traces so far come back;
/// if a chain fails the others end likewise and the first failure comes back. Either way no
/// chain is still asking the federation when this returns.
pub async fn sample<P: PartyHandle>(
    federation: Arc<Federation<P>>,
    model: Arc<dyn Model>,
    config: &SamplerConfig,
    inits: Vec<Vec<f64>>,
    progress: Arc<dyn Progress>,
    stop: &Stop,
) -> Result<Vec<ChainTrace>, SampleError> {
    config.check(&inits, model.dim())?;
    let halt = Arc::new(Halt {
        stop: stop.clone(),
        failed: AtomicBool::new(false),
    });
    let chains = Chains {
        federation: &federation,
        config,
        inits: &inits,
        progress: &progress,
        halt: &halt,
    };
    let (sd, target) = (config.proposal_sd, config.target_accept);
    let tasks = match config.variant {
        Variant::Summaries => {
            return Err(SampleError::Config(
                "the summaries route samples its noise-aware posterior after its releases, not chains over the federation".into(),
            ));
        }
        Variant::Penalty | Variant::MinibatchPenalty { .. } | Variant::SufficientStatistics => {
            let ratio = match config.variant {
                Variant::Penalty => Ratio::Full,
                Variant::MinibatchPenalty { .. } => Ratio::Minibatch,
                _ => {
                    if model.sufficient_statistics().is_none() {
                        return Err(SampleError::Config(format!(
                            "the sufficient-statistics variant needs a model with sufficient statistics (the gaussian GLM); the {} model has none",
                            model.name()
                        )));
                    }
                    Ratio::Sufficient
                }
            };
            let proposal = config.proposal;
            chains.spawn(|| {
                Penalty::new(
                    Arc::clone(&model),
                    proposal,
                    sd,
                    target,
                    config.penalise,
                    ratio,
                )
            })
        }
        Variant::Barker { c, .. } => {
            let fit =
                Arc::new(CorrectionFit::load(c).map_err(|e| SampleError::Config(e.to_string()))?);
            let shape = config.proposal_shape.as_deref();
            // The shape was checked with the config (`SamplerConfig::check`).
            chains.spawn(|| {
                Barker::new(Arc::clone(&model), Arc::clone(&fit), sd, target, shape)
                    .expect("a checked shape")
            })
        }
        Variant::Hmc {
            leapfrog_steps,
            step_size,
            ..
        } => {
            let adapted = if config.adapt { config.warmup } else { 0 };
            chains.spawn(|| {
                Hmc::new(
                    Arc::clone(&model),
                    leapfrog_steps,
                    step_size,
                    config.clip,
                    adapted,
                    config.penalise,
                )
            })
        }
    };
    let mut traces = Vec::with_capacity(tasks.len());
    for (chain, task) in tasks.into_iter().enumerate() {
        traces.push(match task.await {
            Ok(trace) => trace,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // The runtime is shutting down under us: nothing will read the result.
            Err(_) => Err(SampleError::Cancelled {
                chain: chain as u32,
            }),
        });
    }
    traces.into_iter().collect()
}
