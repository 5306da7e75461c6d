//! A party node's state and its run lifecycle: OpenRun (its plan checked in `plan.rs`),
//! the join of a secure run (`join.rs`), CloseRun, the lease that closes runs their
//! coordinator abandoned (`lease.rs`) and Describe's answer (`description.rs`); and the way
//! in to the per-step release path, which is in `release/`. The gRPC mapping is in
//! `service.rs`.
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fedmcmc_common::accountant::{Cancel, Composition, MechanismKind, Release};
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::Model;
use fedmcmc_common::neighbours::Neighbours;

use crate::aggregation::{Aggregation, Identity};
use crate::budget::{Budget, NoiseRequest};
use crate::config::RunLimits;
use crate::error::PartyError;
pub use crate::ledger::Closed;
use crate::ledger::{
    AggregationTerms, ClosedBy, ClosedCharge, ClosedRuns, Ledger, RunRecord, RunTerms,
};
use crate::noise::NoiseSource;
use crate::release::{Contribution, ReleasePath, StepKey};
use crate::runs::{RunState, Runs, closed_releases, recorded_release};
use crate::secure::Announcement;
use crate::statistics::Query;
pub use crate::variants::{
    BARKER, FULL_PENALTY, HMC, INITIALISER, MINIBATCH_PENALTY, NOISE_MULTIPLIERS,
    SUFFICIENT_STATISTICS, SUMMARIES, mechanism_of, variants_served,
};
pub use description::Description;
use description::{Figures, store};
use plan::Checked;
pub use plan::{HmcPlan, Plan};

mod description;
mod join;
mod lease;
mod plan;

/// Serialisable so that a coordinator can record it and resume a run.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Grant {
    pub run_id: String,
    pub tau: f64,
    pub noise_multiplier: f64,
    pub releases: u64,
    pub run_epsilon: f64,
    pub epsilon_committed: f64,
    /// The party closes the run after this long without a step.
    pub lease: Duration,
    /// Secure aggregation: this party's signed session key, for the coordinator to relay
    /// (recorded with the grant: a resumed coordinator relays it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub announcement: Option<Announcement>,
}

pub struct PartyNode {
    pub(crate) name: String,
    pub(crate) model: Arc<dyn Model>,
    pub(crate) data: Columns,
    /// The rows' sufficient statistics, summed once at start where the model has them:
    /// each `sufficient-statistics` release noises this sum afresh.
    pub(crate) sufficient: Option<Vec<f64>>,
    pub(crate) neighbours: Neighbours,
    pub(crate) budget: Budget,
    pub(crate) ledger: Ledger,
    pub(crate) noise: NoiseSource,
    pub(crate) runs: Mutex<Runs>,
    pub(crate) limits: RunLimits,
    /// Serialises OpenRun and CloseRun so admission sees a consistent total.
    admission: tokio::sync::Mutex<()>,
    /// Shared with the blocking task that computes them (see [`PartyNode::account`]).
    pub(crate) figures: Arc<Mutex<Figures>>,
    /// The TLS identity that signs secure aggregation's session keys; none without TLS.
    pub(crate) identity: Option<Arc<Identity>>,
    /// Set when the party is asked to stop: a calibration in progress ends, refused.
    cancel: Cancel,
}

impl PartyNode {
    /// Builds a node over loaded rows and an opened ledger, with OS-seeded noise.
    pub fn new(
        name: String,
        model: Arc<dyn Model>,
        data: Columns,
        neighbours: Neighbours,
        budget: Budget,
        ledger: (Ledger, Vec<RunRecord>),
    ) -> Result<Self, PartyError> {
        Self::with_noise(
            name,
            model,
            data,
            neighbours,
            budget,
            ledger,
            NoiseSource::from_os()?,
        )
    }

    pub(crate) fn with_noise(
        name: String,
        model: Arc<dyn Model>,
        data: Columns,
        neighbours: Neighbours,
        budget: Budget,
        (ledger, records): (Ledger, Vec<RunRecord>),
        noise: NoiseSource,
    ) -> Result<Self, PartyError> {
        if data.d() != model.row_dim() {
            return Err(PartyError::InvalidArgument(format!(
                "the data have {} columns but the {} model expects {}",
                data.d(),
                model.name(),
                model.row_dim()
            )));
        }
        // Open runs found at start get a fresh lease: the coordinator may not know yet that
        // the party is back.
        let now = Instant::now();
        let open = records
            .into_iter()
            .map(|r| Ok((r.run_id.clone(), Arc::new(RunState::from_record(r, now)?))))
            .collect::<Result<_, PartyError>>()?;
        let ClosedRuns {
            runs: closed,
            charges,
        } = ledger.closed_runs()?;
        let mut runs = Runs {
            open,
            closed,
            charges: Vec::new(),
            snapshots: 0,
        };
        for ClosedCharge {
            variant,
            noise_multiplier,
            batch_size,
            population,
            releases,
        } in charges
        {
            let what = format!("{releases} releases of closed runs");
            let mechanism = recorded_release(
                &what,
                &variant,
                (batch_size, population),
                noise_multiplier,
                releases,
            )?;
            runs.charge(&variant, mechanism, noise_multiplier, releases);
        }
        let sufficient = model.sufficient_statistics().map(|s| s.sum(&data));
        let node = PartyNode {
            name,
            model,
            data,
            sufficient,
            neighbours,
            budget,
            ledger,
            noise,
            runs: Mutex::new(runs),
            limits: RunLimits::default(),
            admission: tokio::sync::Mutex::new(()),
            figures: Arc::new(Mutex::new(Figures {
                snapshot: 0,
                epsilon_committed: f64::INFINITY,
                mu_remaining: 0.0,
            })),
            identity: None,
            cancel: Cancel::new(),
        };
        let (snapshot, committed) = node.snapshot();
        *node.figures.lock().expect("figures lock") = Figures::of(snapshot, &budget, &committed);
        Ok(node)
    }

    /// The same node with predictable, seeded noise, for reproducible statistical tests of
    /// the sampler over in-process parties. Never for a served party: anyone who knows the
    /// seed can subtract the noise.
    #[cfg(feature = "seeded-noise")]
    pub fn with_seeded_noise(mut self, seed: u64) -> Self {
        self.noise = NoiseSource::seeded(seed);
        self
    }

    /// The same node with a TLS identity, which secure aggregation signs its keys with.
    pub fn with_identity(mut self, identity: Identity) -> Self {
        self.identity = Some(Arc::new(identity));
        self
    }

    /// Cancelled, it ends the calibration of any plan in progress, and of every later one,
    /// refused with nothing reserved: for a party that is stopping (a plan of 10⁶
    /// subsampled releases at ε = 100 takes 8 s to calibrate). Steps and closes go on.
    pub fn calibrations(&self) -> Cancel {
        self.cancel.clone()
    }

    /// The same node under the operator's caps and lease instead of the defaults.
    pub fn with_limits(mut self, limits: RunLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Everything committed: closed runs' releases folded, then one release per open run,
    /// in run-id order, so that the same runs always compose in the same order.
    fn committed(&self) -> Composition {
        self.snapshot().1
    }

    /// [`PartyNode::committed`], numbered in the order the runs were read.
    fn snapshot(&self) -> (u64, Composition) {
        let mut runs = self.runs.lock().expect("runs lock");
        runs.snapshots += 1;
        let mut open: Vec<_> = runs.open.iter().map(|(id, r)| (id, r.charged())).collect();
        open.sort_by(|a, b| a.0.cmp(b.0));
        let committed = self.composition(
            closed_releases(&runs)
                .into_iter()
                .chain(open.into_iter().map(|(_, r)| r)),
        );
        (runs.snapshots, committed)
    }

    /// Recomputes Describe's figures from the runs as they are now, on the blocking pool, and
    /// returns ε committed. The blocking task stores them itself, so they are stored even if
    /// the caller goes away meanwhile; an earlier snapshot's never replace a later one's.
    async fn account(&self) -> f64 {
        let (snapshot, committed) = self.snapshot();
        let (budget, figures) = (self.budget, Arc::clone(&self.figures));
        crate::accounting(move || {
            let computed = Figures::of(snapshot, &budget, &committed);
            store(&figures, computed);
            computed.epsilon_committed
        })
        .await
    }

    /// Describe's figures once a run is open, from the ε committed its admission computed
    /// with the run's reservation (μ is a sum): no second composition, and no await between
    /// opening the run and answering its grant, where a caller gone meanwhile would leave
    /// the run open, unknown to it, until its lease.
    fn admitted(&self, epsilon_committed: f64) {
        let (snapshot, committed) = self.snapshot();
        let mu_remaining = self.budget.mu_remaining(&committed);
        let figures = Figures {
            snapshot,
            epsilon_committed,
            mu_remaining,
        };
        store(&self.figures, figures);
    }

    /// ε at the party's δ of one run's charged releases, given per noise multiplier: the one
    /// computation of a close's `run_epsilon`, at the close or made again from the ledger.
    async fn run_epsilon(&self, mechanism: MechanismKind, mut released: Vec<(f64, u64)>) -> f64 {
        released.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut groups: Vec<(f64, u64)> = Vec::with_capacity(released.len());
        for (s, count) in released {
            match groups.last_mut() {
                Some(last) if last.0 == s => last.1 += count,
                _ => groups.push((s, count)),
            }
        }
        let composition = self.composition(groups.into_iter().map(|(s, count)| Release {
            mechanism,
            noise_multiplier: s,
            count: count as f64,
        }));
        let budget = self.budget;
        crate::accounting(move || budget.epsilon_of(&composition)).await
    }

    /// ε at the party's δ charged to closed runs alone: spent for good, with no reservation
    /// that a run's close could give back (`party status`).
    pub fn epsilon_closed(&self) -> f64 {
        let runs = self.runs.lock().expect("runs lock");
        self.budget
            .epsilon_of(&self.composition(closed_releases(&runs)))
    }

    /// Releases under this party's neighbour relation, leaving out empty ones.
    fn composition(&self, releases: impl IntoIterator<Item = Release>) -> Composition {
        let releases = releases.into_iter().filter(|r| r.count > 0.0).collect();
        // Each release was checked when its run was admitted or read from the ledger.
        Composition::new(releases, self.neighbours).expect("checked releases")
    }

    /// Runs admitted and not closed (a run whose close was cancelled half-way is closed).
    pub(crate) fn open_runs(&self) -> usize {
        self.runs
            .lock()
            .expect("runs lock")
            .open
            .values()
            .filter(|r| !r.closed.load(Ordering::SeqCst))
            .count()
    }

    /// Answers one step's query: the one entry point of every release (`release/`'s
    /// contract), as a frame of one ([`PartyNode::steps`]).
    pub async fn step(
        &self,
        key: &StepKey<'_>,
        query: Query<'_>,
    ) -> Result<Contribution, PartyError> {
        let mut answers = self.steps(&[(*key, query)]).await;
        answers.pop().expect("one step, one answer")
    }

    /// Answers a frame of steps, every chain's step of a run in one message, on the release
    /// path ([`ReleasePath::steps`]): each step's run is looked up (renewing its lease), and
    /// the path is handed the node's model, rows, noise and ledger.
    pub async fn steps(
        &self,
        requests: &[(StepKey<'_>, Query<'_>)],
    ) -> Vec<Result<Contribution, PartyError>> {
        let path = ReleasePath {
            model: self.model.as_ref(),
            data: &self.data,
            sufficient: self.sufficient.as_deref(),
            neighbours: self.neighbours,
            noise: &self.noise,
            ledger: &self.ledger,
        };
        path.steps(requests, |run_id| self.run(run_id)).await
    }

    /// Looks up an open run for a step or a close, renewing its lease; a closed run is
    /// refused with why it was closed.
    pub(crate) fn run(&self, run_id: &str) -> Result<Arc<RunState>, PartyError> {
        let runs = self.runs.lock().expect("runs lock");
        if let Some(run) = runs.open.get(run_id) {
            run.touch(Instant::now());
            return Ok(Arc::clone(run));
        }
        Err(match runs.closed.get(run_id) {
            Some(ClosedBy::CloseRun) => {
                PartyError::FailedPrecondition(format!("run {run_id} is closed"))
            }
            Some(ClosedBy::Lease { idle_seconds }) => PartyError::FailedPrecondition(format!(
                "run {run_id} was closed after {idle_seconds} s idle (the party's lease); \
                 open a new run"
            )),
            Some(ClosedBy::Restart) => PartyError::FailedPrecondition(format!(
                "run {run_id} was open when this party's machine stopped without a clean stop \
                 of its ledger; it is closed and charged its whole plan (releases not yet on \
                 disk may be missing, and none may be made again with fresh noise); open a \
                 new run"
            )),
            None => PartyError::NotFound(format!("no run with id {run_id:?} on this party")),
        })
    }

    /// The variants this node serves: those of its neighbour relation, less
    /// `sufficient-statistics` where the model has none.
    pub fn variants(&self) -> Vec<&'static str> {
        variants_served(self.neighbours)
            .iter()
            .copied()
            .filter(|v| *v != SUFFICIENT_STATISTICS || self.sufficient.is_some())
            .filter(|v| *v != SUMMARIES || self.model.summaries().is_some())
            .collect()
    }

    /// Entries of this party's summary release (0 where its model has none).
    pub fn summary_entries(&self) -> usize {
        self.model.summaries().map_or(0, |s| s.entries())
    }

    /// Admits a run if its whole plan fits what is left (other open runs' reservations
    /// counted), calibrating or checking τ, and reserves it durably before answering.
    pub async fn open_run(&self, plan: Plan, fingerprint: &str) -> Result<Grant, PartyError> {
        let Checked {
            mechanism,
            releases,
            noise,
            population,
            hmc,
        } = self.check_plan(&plan, fingerprint)?;
        let sqrt_n = (self.data.n() as f64).sqrt();
        let terms = |tau: f64, noise_multiplier: f64| RunTerms {
            variant: plan.variant.clone(),
            chains: plan.chains,
            steps_per_chain: plan.steps_per_chain,
            planned_releases: releases,
            clip: plan.clip,
            tau,
            noise_multiplier,
            batch_size: plan.batch_size,
            population,
            barker_variance: plan.barker_variance,
            hmc,
            aggregation: None,
        };
        // What the accountant admits: the plan's releases, or a DP HMC plan's iterations as
        // the one Gaussian release each is equivalent to (`reservation`).
        let (reserved, noise) = match (hmc, noise) {
            (Some(_), NoiseRequest::Tau(tau)) => {
                let (units, s) = terms(tau, tau * sqrt_n).reservation();
                (units, NoiseRequest::Tau(s / sqrt_n))
            }
            _ => (releases, noise),
        };
        let _admission = self.admission.lock().await;
        let max_open_runs = self.limits.max_open_runs;
        if self.open_runs() >= max_open_runs as usize {
            return Err(PartyError::BudgetExhausted(format!(
                "this party holds at most {max_open_runs} open runs (max_open_runs); close one, \
                 or wait for an idle one's lease ({} s) to end",
                self.limits.lease_seconds
            )));
        }
        let refused = self
            .runs
            .lock()
            .expect("runs lock")
            .new_barker_batch_refused(mechanism);
        if let Some(why) = refused {
            return Err(PartyError::BudgetExhausted(why));
        }
        let (budget, committed, rows) = (self.budget, self.committed(), self.data.n() as u64);
        let cancel = self.cancel.clone();
        let admitted = crate::accounting(move || {
            budget.admit(&committed, mechanism, reserved, rows, noise, &cancel)
        })
        .await?;
        let run_id = new_run_id()?;
        let terms = match plan.noise {
            NoiseRequest::Tau(tau) if hmc.is_some() => terms(tau, tau * sqrt_n),
            _ => terms(admitted.tau, admitted.noise_multiplier),
        };
        // Signed before anything is recorded: a party that cannot sign holds no run.
        let aggregation = plan
            .aggregation
            .map(|t| {
                let c = self.neighbours.clipped_sum_sensitivity(1.0);
                let gradient = terms.hmc.map_or(0.0, |h| h.gradient_multiplier * c);
                let unit = (terms.noise_multiplier * c, gradient);
                Aggregation::open(self.identity.as_deref(), &self.name, t, unit)
            })
            .transpose()?;
        let announcement = aggregation.as_ref().map(|a| a.announcement.clone());
        let terms = RunTerms {
            aggregation: aggregation
                .as_ref()
                .map(|a| AggregationTerms::of(&a.terms, &a.announcement)),
            ..terms
        };
        match aggregation.as_ref().and_then(Aggregation::secret) {
            Some(secret) => {
                self.ledger
                    .open_secure_run(&run_id, &terms, &secret)
                    .await?
            }
            None => self.ledger.open_run(&run_id, &terms).await?,
        }
        let (terms_tau, terms_multiplier) = (terms.tau, terms.noise_multiplier);
        let mut state = RunState::from_record(
            RunRecord {
                run_id: run_id.clone(),
                last: vec![None; terms.chains as usize],
                terms,
                released: 0,
                public: 0,
                aggregation_secret: None,
            },
            Instant::now(),
        )?;
        state.aggregation = aggregation;
        self.runs
            .lock()
            .expect("runs lock")
            .open
            .insert(run_id.clone(), Arc::new(state));
        self.admitted(admitted.epsilon_committed);
        tracing::info!(
            party = %self.name, %run_id, releases, tau = admitted.tau,
            accountant = %admitted.method, requested = %self.budget.accountant,
            "run opened"
        );
        Ok(Grant {
            run_id,
            tau: terms_tau,
            noise_multiplier: terms_multiplier,
            releases,
            run_epsilon: admitted.run_epsilon,
            epsilon_committed: admitted.epsilon_committed,
            lease: self.limits.lease(),
            announcement,
        })
    }

    /// Closes a run; from then on it is charged for what it released, not what it planned.
    pub async fn close_run(&self, run_id: &str) -> Result<Closed, PartyError> {
        let _admission = self.admission.lock().await;
        let closed = self
            .runs
            .lock()
            .expect("runs lock")
            .closed
            .contains_key(run_id);
        if closed {
            return self.answer_again(run_id).await;
        }
        let run = self.run(run_id)?;
        self.close(run_id, run, ClosedBy::CloseRun).await
    }

    /// A repeated CloseRun of a closed run (a retry whose first answer was lost, a resumed
    /// coordinator; after a restart or the lease's close too) gets the answer its close
    /// recorded. A run closed without one was never answered (its close was cut short: the
    /// caller went away or the party stopped; or the ledger predates recorded answers), so its
    /// answer is made now from the ledger as [`PartyNode::close`] makes it, with the total
    /// committed now, and recorded for every later CloseRun.
    async fn answer_again(&self, run_id: &str) -> Result<Closed, PartyError> {
        if let Some(closed) = self.ledger.answer(run_id)? {
            return Ok(closed);
        }
        let (terms, released) = self.ledger.released(run_id)?.ok_or_else(|| {
            PartyError::NotFound(format!("no run with id {run_id:?} on this party"))
        })?;
        let mechanism = recorded_release(
            &format!("run {run_id}"),
            &terms.variant,
            (terms.batch_size, terms.population),
            terms.noise_multiplier,
            terms.planned_releases,
        )?;
        let closed = Closed {
            releases: released.iter().map(|&(_, count)| count).sum(),
            run_epsilon: self.run_epsilon(mechanism, released).await,
            epsilon_committed: self.account().await,
        };
        self.ledger.record_answer(run_id, &closed).await?;
        Ok(closed)
    }

    /// Commits the close, waits for releases in flight, then folds the run into the closed
    /// runs' aggregate charge and records the answer. The caller holds the admission lock. A
    /// close cancelled while it waited (its caller went away) is committed already: a second
    /// close finishes it.
    async fn close(
        &self,
        run_id: &str,
        run: Arc<RunState>,
        by: ClosedBy,
    ) -> Result<Closed, PartyError> {
        if !run.closed.load(Ordering::SeqCst) {
            self.ledger.close_run(run_id, by).await?;
            run.closed.store(true, Ordering::SeqCst);
        }
        // Wait for releases in flight so the counts below are final.
        let mut steps = Vec::with_capacity(run.chains.len());
        for chain in &run.chains {
            steps.push(chain.lock().await.next_step);
        }
        let releases = run.released.load(Ordering::SeqCst);
        let released = run.released_by_multiplier(&steps);
        {
            let mut runs = self.runs.lock().expect("runs lock");
            runs.open.remove(run_id);
            runs.closed.insert(run_id.to_string(), by);
            for &(noise_multiplier, count) in &released {
                runs.charge(&run.terms.variant, run.mechanism, noise_multiplier, count);
            }
        }
        tracing::info!(party = %self.name, %run_id, releases, ?by, "run closed");
        let closed = Closed {
            releases,
            run_epsilon: self.run_epsilon(run.mechanism, released).await,
            epsilon_committed: self.account().await,
        };
        self.ledger.record_answer(run_id, &closed).await?;
        Ok(closed)
    }
}

/// 128 random bits from the OS, hex-encoded: run ids are not guessable.
fn new_run_id() -> Result<String, PartyError> {
    let mut bytes = [0u8; 16];
    rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut bytes)
        .map_err(|e| PartyError::FailedPrecondition(format!("the OS random source failed: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
