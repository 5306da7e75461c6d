//! The release path: the one place where anything derived from the rows leaves a party.
//!
//! # The contract
//!
//! Whether a request is answered or refused, and with which status and message, is a function
//! of public information only: the request, the run's terms and state, the public row count n
//! and the model's hyperparameters; never of row values. A refusal that depends on the rows
//! is a free, noiseless answer about them (an overflow check on the clipped sum once let a
//! caller bisect out the exact maximum of a column in 19 refusals).
//!
//! [`ReleasePath::steps`], every step's one way in (the node's `step` and `steps` hand it
//! their frames), enforces it by its structure, in two phases:
//!
//! 1. **Public checks, which may refuse.** The query's parameters, the run, the chain, the
//!    query's fit to the run's variant, the step's order or replay, a closed run, the steps
//!    left; then the query's [`Bound`] (per-row bound b, sensitivity Δ, cap on the
//!    statistic's magnitude) from [`Statistic::bound`](crate::statistics::Statistic::bound), which is given no rows; then
//!    [`Calibration::check`]: b finite, the statistic's cap (n·b for a sum) at most
//!    [`MAX_STATISTIC`], the noise variance σ² = (sΔ)² at most [`MAX_NOISE_VARIANCE`], and, for
//!    b > 0, not underflowing (a subnormal noise std would add almost no noise).
//! 2. **The rows, which cannot refuse.** [`Statistic::compute`](crate::statistics::Statistic::compute) maps the rows (or a batch of
//!    them drawn in secret) to a vector: it returns values, not a `Result`. Each row's term is
//!    clipped by the fixed rule of [`fedmcmc_common::clip::clip`] (±∞ → ±b, NaN → −b), so
//!    every term lies in [−b, b] whatever the row holds; the sensitivity argument holds
//!    unchanged and the statistic is finite because its public cap is. Gaussian noise from
//!    the OS-seeded CSPRNG follows (finite: σ is at most 1e150), topping up whatever variance
//!    the statistic carries to the public σ² (DP Barker's batch variance; nothing for the
//!    others); the release is charged to the ledger durably, and only then answered. The
//!    answer states σ², never the data-dependent split. Whether the ledger commit fails does
//!    not depend on the rows either.
//!
//! Every query goes through [`ReleasePath::steps`] (the statistics are in `statistics/`: the
//! full-data and minibatch log-likelihood ratios, DP Barker's, the clipped gradient and the
//! sufficient statistics) and is tested by the neighbouring-rows harness in
//! `party/tests/contract/`.
//!
//! A retry of the last (run, chain, step) with bit-identical inputs gets the stored answer,
//! charged once; fresh noise for a repeated query would let a caller average it away.
//!
//! # Public answers
//!
//! A ratio query whose θ′ is θ bit for bit ([`Query::is_public`]) has the true value 0 for
//! every dataset. It passes the same public checks as any step, then is answered without
//! reading a row: 0 plus the noise the run states, which is none for the penalty variants
//! (their sensitivity at ‖θ′ − θ‖ = 0 is 0, so σ² = 0) and the share Cᵢ for DP Barker (the
//! coordinator's Barker correction is fitted for ΣCᵢ and stops a chain whose noise adds up
//! to less). The answer's distribution is then the same for every dataset: it costs no
//! privacy and is not charged. It is still a step: recorded in the ledger as
//! [`PUBLIC_MECHANISM`] (never counted as a release, `ledger.rs`), the chain's step
//! advances, and a retry replays it. Answering rather than refusing keeps a chain going
//! whose proposal did not move (a move to θ itself is the same whether accepted or not),
//! and the ledger still holds exactly the composition of the charged releases.
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fedmcmc_common::data::Columns;
use fedmcmc_common::mechanism::{GaussianMechanism, GridGaussian, MAX_ENTRIES};
use fedmcmc_common::models::Model;
use fedmcmc_common::neighbours::Neighbours;

use crate::aggregation::{Joined, multiplier_for, share};
use crate::error::PartyError;
use crate::ledger::{Ledger, Masked, PUBLIC_MECHANISM, ReleaseRecord, RunTerms};
use crate::noise::NoiseSource;
use crate::runs::{ChainState, RunState};
pub use crate::statistics::Bound;
use crate::statistics::{Computed, Public, Query, Statistic};

/// The largest magnitude a statistic may reach (n·b for a clipped sum): far from f64's
/// 1.8e308, so the value, its noise and the coordinator's sum over parties stay finite.
pub const MAX_STATISTIC: f64 = 1e300;
/// The largest noise variance a release may carry (σ at most 1e150).
pub const MAX_NOISE_VARIANCE: f64 = 1e300;

/// Addresses one step of one chain of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepKey<'a> {
    pub run_id: &'a str,
    pub chain: u32,
    pub step: u64,
}

/// A released value and the variance of the noise in it; under secure aggregation the
/// masked grid steps instead of the value, and the variance of this party's share.
#[derive(Clone, Debug, PartialEq)]
pub struct Contribution {
    pub value: Vec<f64>,
    pub noise_variance: f64,
    pub replayed: bool,
    pub masked: Option<Masked>,
}

impl Contribution {
    fn from_record(r: &ReleaseRecord, replayed: bool) -> Self {
        Contribution {
            value: r.value.clone(),
            noise_variance: r.noise_variance,
            replayed,
            masked: r.masked.clone(),
        }
    }
}

/// A [`Bound`] that passed the public caps, with the mechanism that will noise it on its
/// public grid (for a bound of sensitivity 0, which needs no noise, the unrounded mechanism).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    pub bound: Bound,
    pub mechanism: GridGaussian,
}

impl Calibration {
    /// Refuses, from public numbers only, a query whose statistic or noise could overflow or
    /// whose noise would underflow, or whose `entries` exceed what one release may carry;
    /// otherwise the mechanism on its public grid ([`GaussianMechanism::on_grid`]: the
    /// sensitivity grows by the rounding, √entries·γ).
    pub fn check(
        bound: Bound,
        noise_multiplier: f64,
        entries: usize,
    ) -> Result<Calibration, PartyError> {
        let refuse = |m: String| Err(PartyError::InvalidArgument(m));
        if entries > MAX_ENTRIES {
            return refuse(format!(
                "a release of {entries} entries is more than the {MAX_ENTRIES} this party releases at once"
            ));
        }
        if !bound.row.is_finite() {
            return refuse(
                "the per-row clip bound clip · ‖θ′ − θ‖ overflows: the proposal is too far from θ"
                    .into(),
            );
        }
        if !at_most(bound.statistic, MAX_STATISTIC) {
            return refuse(format!(
                "the clipped statistic could reach {:e} (per-row bound {:e}), beyond the {MAX_STATISTIC:e} this party releases: the step is too long for this run's clip",
                bound.statistic, bound.row
            ));
        }
        let continuous = GaussianMechanism {
            sensitivity: bound.sensitivity,
            noise_multiplier,
        };
        let spread = noise_multiplier * (entries as f64).sqrt();
        if bound.sensitivity > 0.0 && (spread.is_nan() || spread >= 2f64.powi(29)) {
            return refuse(format!(
                "a noise multiplier of {noise_multiplier:e} over {entries} entries is beyond what this party releases on its grid (s·√entries below 2^29)"
            ));
        }
        let mechanism = if bound.rounding_covered {
            continuous.on_grid(0).map(|g| GridGaussian {
                mechanism: continuous,
                grid: g.grid,
            })
        } else {
            continuous.on_grid(entries)
        };
        let variance = mechanism.map_or(0.0, |m| m.variance());
        if !at_most(variance, MAX_NOISE_VARIANCE) {
            return refuse(format!(
                "the noise variance would be {variance:e}, beyond the {MAX_NOISE_VARIANCE:e} this party releases: the step is too long for this run's clip and noise"
            ));
        }
        if bound.row > 0.0 && (mechanism.is_none() || variance < f64::MIN_POSITIVE) {
            return refuse(format!(
                "the step is so short (per-row bound {:e}) that the noise would underflow: take a longer step",
                bound.row
            ));
        }
        Ok(Calibration {
            bound,
            mechanism: mechanism.unwrap_or(GridGaussian {
                mechanism: continuous,
                grid: 1.0,
            }),
        })
    }
}

/// What an honest party's answer to `query` at `step` of a run with `terms` is bound by, from
/// public facts only: the statistic's [`Bound`] and the mechanism whose variance the answer
/// states. [`ReleasePath::steps`] calibrates each release by the same two functions
/// (`Query::statistic`, then [`Calibration::check`] of its bound); the coordinator, which knows
/// the run's terms, checks every answer against this (a stated variance other than σ² =
/// (sΔ)², or a value beyond the statistic's bound by more than its noise could carry, is
/// no honest party's answer).
pub fn expected(
    model: &dyn Model,
    terms: &RunTerms,
    rows: usize,
    neighbours: Neighbours,
    step: u64,
    query: Query<'_>,
) -> Result<Calibration, PartyError> {
    // A sufficient-statistics release's bound does not read the sums, only their count.
    let zeros = match query {
        Query::SufficientStatistics { entries } => vec![0.0; entries],
        _ => Vec::new(),
    };
    let summed = matches!(query, Query::SufficientStatistics { .. }).then_some(zeros.as_slice());
    let (statistic, noise_multiplier) = query.statistic(model, terms, step, summed)?;
    let public = Public {
        model,
        rows,
        neighbours,
        clip: terms.clip,
    };
    Calibration::check(
        statistic.bound(&public),
        noise_multiplier,
        query.released_len(),
    )
}

/// `x ≤ cap`, false for NaN: a cap check that no NaN slips through.
fn at_most(x: f64, cap: f64) -> bool {
    x <= cap
}

/// The mechanism name the ledger records for a clipped-sum Gaussian release.
const GAUSSIAN: &str = "gaussian";

/// One step past its checks and its computation, its chain held until it is answered.
struct Pending<'a> {
    /// Its place in the frame.
    index: usize,
    run: &'a RunState,
    chain: tokio::sync::MutexGuard<'a, ChainState>,
    public_answer: bool,
}

/// A step past its public checks (phase 1): everything its release needs, fixed before a
/// row is read.
struct Checked<'a> {
    key: StepKey<'a>,
    released_len: usize,
    inputs: Vec<f64>,
    statistic: Box<dyn Statistic + Send + Sync + 'a>,
    calibration: Calibration,
    /// Under secure aggregation: the run's join and this party's share of its noise.
    secure: Option<(&'a Joined, Option<GridGaussian>)>,
}

/// What a step is after its checks: answered already (a replay), or a release to compute
/// and charge, its chain held.
enum Prepared<'a> {
    Answered(Contribution),
    Release(Pending<'a>, Checked<'a>),
}

type Answers = Vec<Option<Result<Contribution, PartyError>>>;

/// What the release path reads and writes: the party's model and rows, its noise source and
/// its ledger, borrowed from the node that owns them ([`crate::node::PartyNode::steps`]), so
/// that every release of the party goes through [`ReleasePath::steps`] and nothing here
/// reaches back into the node.
pub(crate) struct ReleasePath<'n> {
    pub(crate) model: &'n dyn Model,
    pub(crate) data: &'n Columns,
    /// The rows' sufficient statistics, summed once at start where the model has them.
    pub(crate) sufficient: Option<&'n [f64]>,
    pub(crate) neighbours: Neighbours,
    pub(crate) noise: &'n NoiseSource,
    pub(crate) ledger: &'n Ledger,
}

impl ReleasePath<'_> {
    /// Answers a frame of steps (every chain's step of a run, in one message), each checked,
    /// computed and answered exactly as alone, with the frame's releases charged in one
    /// ledger commit before any of them is answered. The statistic is
    /// `statistics/`'s for the query, in a run of the query's variant. `lookup` finds a
    /// step's run, as the node holds it (or says why it cannot).
    ///
    /// Each step holds its chain from its checks to its answer. A frame takes its chains in
    /// the order of (run, chain), so two frames never wait on each other; a chain that is
    /// asked twice in one frame has its first step charged before its second is checked.
    pub(crate) async fn steps(
        &self,
        requests: &[(StepKey<'_>, Query<'_>)],
        lookup: impl Fn(&str) -> Result<Arc<RunState>, PartyError>,
    ) -> Vec<Result<Contribution, PartyError>> {
        let mut answers: Answers = requests.iter().map(|_| None).collect();
        let mut runs = Vec::with_capacity(requests.len());
        for (i, (key, _)) in requests.iter().enumerate() {
            match lookup(key.run_id) {
                Ok(run) => runs.push(Some(run)),
                Err(e) => {
                    answers[i] = Some(Err(e));
                    runs.push(None);
                }
            }
        }
        let mut order: Vec<usize> = (0..requests.len()).filter(|&i| runs[i].is_some()).collect();
        order.sort_by_key(|&i| (requests[i].0.run_id, requests[i].0.chain));
        let mut pending: Vec<(Pending<'_>, Checked<'_>)> = Vec::new();
        for i in order {
            let (key, query) = &requests[i];
            let run = runs[i].as_deref().expect("a known run");
            let again = pending
                .iter()
                .any(|(p, c)| std::ptr::eq(p.run, run) && c.key.chain == key.chain);
            if again {
                self.release(std::mem::take(&mut pending), &mut answers)
                    .await;
            }
            match self.check(i, key, *query, run).await {
                Ok(Prepared::Answered(c)) => answers[i] = Some(Ok(c)),
                Ok(Prepared::Release(step, checked)) => pending.push((step, checked)),
                Err(e) => answers[i] = Some(Err(e)),
            }
        }
        self.release(pending, &mut answers).await;
        answers
            .into_iter()
            .map(|a| a.expect("every step is answered"))
            .collect()
    }

    /// Phase 1 of the contract for the step at `index` of a frame: its public checks, the
    /// only place a step is refused.
    async fn check<'a>(
        &'a self,
        index: usize,
        key: &StepKey<'a>,
        query: Query<'a>,
        run: &'a RunState,
    ) -> Result<Prepared<'a>, PartyError> {
        let inputs = query.inputs();
        let chain = run.chains.get(key.chain as usize).ok_or_else(|| {
            PartyError::InvalidArgument(format!(
                "chain {} does not exist: run {} has {} chains",
                key.chain,
                key.run_id,
                run.chains.len()
            ))
        })?;
        let (statistic, noise_multiplier) =
            query.statistic(self.model, &run.terms, key.step, self.sufficient)?;
        let chain = chain.lock().await;
        if let Some(answer) = replay(&chain, key, &inputs)? {
            return Ok(Prepared::Answered(answer));
        }
        if run.closed.load(Ordering::SeqCst) {
            return Err(PartyError::FailedPrecondition(format!(
                "run {} is closed",
                key.run_id
            )));
        }
        if key.step >= run.terms.steps_per_chain {
            return Err(PartyError::BudgetExhausted(format!(
                "budget: run {} was admitted for {} steps per chain and chain {} has used them all",
                key.run_id, run.terms.steps_per_chain, key.chain
            )));
        }
        let public = Public {
            model: self.model,
            rows: self.data.n(),
            neighbours: self.neighbours,
            clip: run.terms.clip,
        };
        let calibration = Calibration::check(
            statistic.bound(&public),
            noise_multiplier,
            query.released_len(),
        )?;
        // Secure aggregation: the run must be joined, and every party adds the same share.
        let secure = match run.session(key.run_id)? {
            Some(aggregation) => {
                let joined = aggregation.joined()?;
                let multipliers = (joined.multiplier, joined.gradient_multiplier);
                let share = share(
                    &calibration.bound,
                    self.neighbours,
                    multiplier_for(&query, &run.terms, multipliers),
                    aggregation.honest(),
                    query.released_len(),
                )?;
                Some((joined, share))
            }
            None => None,
        };
        // A ratio of θ to itself: 0 for every dataset, answered without the rows and not
        // charged (the module's "Public answers").
        let public_answer = query.is_public();
        Ok(Prepared::Release(
            Pending {
                index,
                run,
                chain,
                public_answer,
            },
            Checked {
                key: *key,
                released_len: query.released_len(),
                inputs,
                statistic,
                calibration,
                secure,
            },
        ))
    }

    /// Phase 2 for a frame's checked steps, then their charge: each release computed,
    /// then all charged durably in one commit, and only then answered.
    async fn release(&self, pending: Vec<(Pending<'_>, Checked<'_>)>, answers: &mut Answers) {
        let released = pending
            .into_iter()
            .map(|(step, checked)| {
                let record = self.compute(checked, step.public_answer);
                (step, record)
            })
            .collect();
        self.charge(released, answers).await;
    }

    /// Phase 2 of the contract for one checked step: its statistic and noise, which cannot
    /// refuse (a public answer: its zeros, without the rows). One generator per release,
    /// forked from the node's CSPRNG, draws the batch (if any) and the noise.
    fn compute(&self, checked: Checked<'_>, public_answer: bool) -> ReleaseRecord {
        let Checked {
            key,
            released_len,
            inputs,
            statistic,
            calibration,
            secure,
        } = checked;
        let mut rng = self.noise.fork(key.chain, key.step);
        let exact = if public_answer {
            Computed {
                value: vec![0.0; released_len],
                inherent_variance: 0.0,
            }
        } else {
            statistic.compute(self.model, self.data, &calibration.bound, &mut rng)
        };
        debug_assert!(
            // Slack for the rounding of a long sum.
            exact
                .value
                .iter()
                .all(|v| v.abs() <= calibration.bound.statistic * (1.0 + 1e-6)),
            "a statistic left its public bound: {exact:?} vs {:?}",
            calibration.bound
        );
        let mechanism = calibration.mechanism;
        let (value, masked, variance) = match secure {
            None => {
                let variance = mechanism.variance();
                // The noise tops what the statistic carries up to σ² (all of σ² for the
                // penalty variants); a statistic's bound keeps its own part within σ²/2
                // (`statistics/`). Exact discrete noise on the public grid
                // (`fedmcmc_common::mechanism`).
                let top_up = (variance - exact.inherent_variance).max(0.0).sqrt();
                let value = mechanism.release(&exact.value, top_up, &mut rng);
                (value, None, variance)
            }
            // This party's share of the run's noise, on the run's grid, masked (no variant
            // with an inherent variance aggregates securely: `aggregation.rs`).
            Some((joined, Some(share))) => {
                let std = share.mechanism.std();
                let steps = share.release_steps(&exact.value, std, &mut rng);
                let masked = Masked {
                    steps: joined.mask(key.chain, key.step, &steps),
                    grid: share.grid,
                };
                (Vec::new(), Some(masked), share.variance())
            }
            // Sensitivity 0 (a public answer): the exact zeros, masked.
            Some((joined, None)) => {
                let steps: Vec<i128> = exact.value.iter().map(|v| v.round() as i128).collect();
                let masked = Masked {
                    steps: joined.mask(key.chain, key.step, &steps),
                    grid: 1.0,
                };
                (Vec::new(), Some(masked), 0.0)
            }
        };
        ReleaseRecord {
            run_id: key.run_id.to_string(),
            chain: key.chain,
            step: key.step,
            mechanism: if public_answer {
                PUBLIC_MECHANISM
            } else {
                GAUSSIAN
            }
            .to_string(),
            noise_multiplier: mechanism.mechanism.noise_multiplier,
            inputs,
            value,
            noise_variance: variance,
            masked,
        }
    }

    /// Charges `pending` durably in one commit (a public answer: records it), then answers
    /// each; nothing leaves for a release whose commit failed.
    async fn charge(&self, pending: Vec<(Pending<'_>, ReleaseRecord)>, answers: &mut Answers) {
        let (steps, records): (Vec<_>, Vec<_>) = pending.into_iter().unzip();
        let outcomes = self.ledger.record_releases(&records).await;
        for ((mut step, record), outcome) in steps.into_iter().zip(records).zip(outcomes) {
            answers[step.index] = Some(match outcome {
                Ok(()) => {
                    let counter = if step.public_answer {
                        &step.run.public
                    } else {
                        &step.run.released
                    };
                    counter.fetch_add(1, Ordering::SeqCst);
                    let answer = Contribution::from_record(&record, false);
                    step.chain.next_step = record.step + 1;
                    step.chain.last = Some(record);
                    Ok(answer)
                }
                Err(e) => Err(e.into()),
            });
        }
    }
}

/// Decides what a step that is not the chain's next one gets: the stored answer for an exact
/// retry of the last step, a refusal for anything else. `None` means "a fresh step".
fn replay(
    chain: &ChainState,
    key: &StepKey<'_>,
    inputs: &[f64],
) -> Result<Option<Contribution>, PartyError> {
    if key.step == chain.next_step {
        return Ok(None);
    }
    if key.step > chain.next_step {
        return Err(PartyError::FailedPrecondition(format!(
            "out of order: chain {} of run {} is at step {}, not {}",
            key.chain, key.run_id, chain.next_step, key.step
        )));
    }
    match &chain.last {
        Some(last) if last.step == key.step => {
            let same = last.inputs.len() == inputs.len()
                && last
                    .inputs
                    .iter()
                    .zip(inputs)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            if same {
                Ok(Some(Contribution::from_record(last, true)))
            } else {
                Err(PartyError::FailedPrecondition(format!(
                    "step {} of chain {} in run {} was already answered for different inputs",
                    key.step, key.chain, key.run_id
                )))
            }
        }
        _ => Err(PartyError::FailedPrecondition(format!(
            "out of order: step {} of chain {} in run {} was answered long ago; the chain is at step {}",
            key.step, key.chain, key.run_id, chain.next_step
        ))),
    }
}

#[cfg(test)]
mod tests;
