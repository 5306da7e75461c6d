//! A party node's state and its run lifecycle (Describe, OpenRun, CloseRun). The per-step
//! release path is in `release.rs`; the gRPC mapping in `service.rs`.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fedmcmc_common::accountant::{Composition, MechanismKind, Release};
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::Model;
use fedmcmc_common::neighbours::Neighbours;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

use crate::budget::{Budget, NoiseRequest};
use crate::error::PartyError;
use crate::ledger::{Ledger, ReleaseRecord, RunRecord, RunTerms};

/// Variants this party serves (the wire names of `fedmcmc.v1.Variant`).
pub const FULL_PENALTY: &str = "full-penalty";

/// The mechanism a variant's releases are, as the accountant composes them; `None` for a
/// variant this party does not serve. The one place a variant maps to a [`MechanismKind`].
pub fn mechanism_of(variant: &str) -> Option<MechanismKind> {
    match variant {
        // Σ clip(r_x) over all rows plus Gaussian noise (Yıldırım & Ermiş 2019, Alg. 2).
        FULL_PENALTY => Some(MechanismKind::Gaussian),
        _ => None,
    }
}

/// Noise multipliers s = τ·√n a requested τ may give. Below, one release's privacy loss
/// μ = 1/(2s²) is beyond any budget and overflows the accountant for tiny τ; above, the noise
/// is pointless and its variance overflows. (Calibration searches inside this range.)
pub const NOISE_MULTIPLIERS: (f64, f64) = (1e-9, 1e12);

/// Most chains one run may hold.
pub const MAX_CHAINS: u32 = 1024;

/// Where the noise comes from: ChaCha20 seeded from the operating system, never from a
/// caller. Test builds alone may seed it, to make statistical tests reproducible.
pub(crate) struct NoiseSource(Mutex<ChaCha20Rng>);

impl NoiseSource {
    fn from_os() -> Result<Self, PartyError> {
        let rng = ChaCha20Rng::try_from_rng(&mut rand::rngs::SysRng).map_err(|e| {
            PartyError::FailedPrecondition(format!("the OS random source failed: {e}"))
        })?;
        Ok(NoiseSource(Mutex::new(rng)))
    }

    #[cfg(test)]
    pub(crate) fn seeded(seed: u64) -> Self {
        NoiseSource(Mutex::new(ChaCha20Rng::seed_from_u64(seed)))
    }

    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut ChaCha20Rng) -> T) -> T {
        f(&mut self.0.lock().expect("noise source lock"))
    }
}

/// Where one chain of a run stands: the next step it may ask for and the last answer given.
pub(crate) struct ChainState {
    pub next_step: u64,
    pub last: Option<ReleaseRecord>,
}

pub(crate) struct RunState {
    pub terms: RunTerms,
    /// What the accountant composes for each release of this run.
    pub mechanism: MechanismKind,
    pub closed: AtomicBool,
    /// Releases committed to the ledger so far.
    pub released: AtomicU64,
    pub chains: Vec<tokio::sync::Mutex<ChainState>>,
}

impl RunState {
    /// Refuses a run whose variant or noise the accountant could not compose (a ledger
    /// written by another version, or edited).
    fn from_record(record: RunRecord) -> Result<Self, PartyError> {
        let bad = |what: String| {
            PartyError::FailedPrecondition(format!(
                "the ledger records run {} with {what}; this party cannot account for it",
                record.run_id
            ))
        };
        let mechanism = mechanism_of(&record.terms.variant)
            .ok_or_else(|| bad(format!("the unknown variant {:?}", record.terms.variant)))?;
        Release {
            mechanism,
            noise_multiplier: record.terms.noise_multiplier,
            count: record.terms.planned_releases as f64,
        }
        .validate()
        .map_err(|e| bad(e.to_string()))?;
        Ok(RunState {
            mechanism,
            closed: AtomicBool::new(record.closed),
            released: AtomicU64::new(record.released),
            chains: record
                .last
                .into_iter()
                .map(|last| {
                    tokio::sync::Mutex::new(ChainState {
                        next_step: last.as_ref().map_or(0, |r| r.step + 1),
                        last,
                    })
                })
                .collect(),
            terms: record.terms,
        })
    }

    /// What this run is charged: its whole plan while open, what it released once closed.
    fn charged(&self) -> Release {
        let count = if self.closed.load(Ordering::SeqCst) {
            self.released.load(Ordering::SeqCst)
        } else {
            self.terms.planned_releases
        };
        Release {
            mechanism: self.mechanism,
            noise_multiplier: self.terms.noise_multiplier,
            count: count as f64,
        }
    }
}

/// The public facts of `Describe`.
#[derive(Clone, Debug)]
pub struct Description {
    pub name: String,
    pub model: String,
    pub model_fingerprint: String,
    pub dim: usize,
    pub rows: u64,
    pub variants: Vec<&'static str>,
    pub neighbours: Neighbours,
    pub epsilon: f64,
    pub delta: f64,
    pub epsilon_committed: f64,
    pub open_runs: u32,
    /// See [`Budget::mu_remaining`].
    pub mu_remaining: f64,
}

/// A run plan as the party reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub variant: String,
    pub chains: u32,
    pub steps_per_chain: u64,
    pub clip: f64,
    pub noise: NoiseRequest,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    pub run_id: String,
    pub tau: f64,
    pub noise_multiplier: f64,
    pub releases: u64,
    pub run_epsilon: f64,
    pub epsilon_committed: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Closed {
    pub releases: u64,
    pub run_epsilon: f64,
    pub epsilon_committed: f64,
}

pub struct PartyNode {
    pub(crate) name: String,
    pub(crate) model: Arc<dyn Model>,
    pub(crate) data: Columns,
    pub(crate) neighbours: Neighbours,
    pub(crate) budget: Budget,
    pub(crate) ledger: Ledger,
    pub(crate) noise: NoiseSource,
    pub(crate) runs: Mutex<HashMap<String, Arc<RunState>>>,
    /// Serialises OpenRun and CloseRun so admission sees a consistent total.
    admission: tokio::sync::Mutex<()>,
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
        let runs = records
            .into_iter()
            .map(|r| Ok((r.run_id.clone(), Arc::new(RunState::from_record(r)?))))
            .collect::<Result<_, PartyError>>()?;
        Ok(PartyNode {
            name,
            model,
            data,
            neighbours,
            budget,
            ledger,
            noise,
            runs: Mutex::new(runs),
            admission: tokio::sync::Mutex::new(()),
        })
    }

    /// Everything committed: one release per run that is charged anything, in run-id order
    /// so that the same runs always compose in the same order.
    fn committed(&self) -> Composition {
        let runs = self.runs.lock().expect("runs lock");
        let mut charged: Vec<_> = runs.iter().map(|(id, r)| (id, r.charged())).collect();
        charged.sort_by(|a, b| a.0.cmp(b.0));
        self.composition(charged.into_iter().map(|(_, r)| r))
    }

    /// Releases under this party's neighbour relation, leaving out empty ones.
    fn composition(&self, releases: impl IntoIterator<Item = Release>) -> Composition {
        let releases = releases.into_iter().filter(|r| r.count > 0.0).collect();
        // Each release was checked when its run was admitted or read from the ledger.
        Composition::new(releases, self.neighbours).expect("checked releases")
    }

    pub fn describe(&self) -> Description {
        let open_runs = self
            .runs
            .lock()
            .expect("runs lock")
            .values()
            .filter(|r| !r.closed.load(Ordering::SeqCst))
            .count() as u32;
        let committed = self.committed();
        Description {
            name: self.name.clone(),
            model: self.model.name().to_string(),
            model_fingerprint: self.model.fingerprint(),
            dim: self.model.dim(),
            rows: self.data.n() as u64,
            variants: vec![FULL_PENALTY],
            neighbours: self.neighbours,
            epsilon: self.budget.epsilon,
            delta: self.budget.delta,
            epsilon_committed: self.budget.epsilon_of(&committed),
            open_runs,
            mu_remaining: self.budget.mu_remaining(&committed),
        }
    }

    pub(crate) fn run(&self, run_id: &str) -> Result<Arc<RunState>, PartyError> {
        self.runs
            .lock()
            .expect("runs lock")
            .get(run_id)
            .cloned()
            .ok_or_else(|| PartyError::NotFound(format!("no run with id {run_id:?} on this party")))
    }

    /// The plan's mechanism and its number of releases, or why it is refused.
    fn check_plan(
        &self,
        plan: &Plan,
        fingerprint: &str,
    ) -> Result<(MechanismKind, u64), PartyError> {
        if fingerprint != self.model.fingerprint() {
            return Err(PartyError::FailedPrecondition(format!(
                "model mismatch: this party serves {} with fingerprint {}, the request expects {fingerprint:?}",
                self.model.name(),
                self.model.fingerprint()
            )));
        }
        let mechanism = mechanism_of(&plan.variant).ok_or_else(|| {
            PartyError::Unimplemented(format!(
                "this party serves only the {FULL_PENALTY} variant, not {:?}",
                plan.variant
            ))
        })?;
        if plan.chains == 0 || plan.chains > MAX_CHAINS {
            return Err(PartyError::InvalidArgument(format!(
                "chains must be between 1 and {MAX_CHAINS}, got {}",
                plan.chains
            )));
        }
        if plan.steps_per_chain == 0 {
            return Err(PartyError::InvalidArgument(
                "steps_per_chain must be at least 1".into(),
            ));
        }
        if !(plan.clip.is_finite() && plan.clip > 0.0) {
            return Err(PartyError::InvalidArgument(format!(
                "clip must be a positive number, got {}",
                plan.clip
            )));
        }
        if let NoiseRequest::Tau(tau) = plan.noise {
            let n = self.data.n();
            let s = tau * (n as f64).sqrt();
            let (low, high) = NOISE_MULTIPLIERS;
            if !(tau.is_finite() && tau > 0.0) {
                return Err(PartyError::InvalidArgument(format!(
                    "tau must be a positive number, got {tau}"
                )));
            }
            if !(low..=high).contains(&s) {
                return Err(PartyError::InvalidArgument(format!(
                    "tau = {tau:e} gives a noise multiplier τ·√n = {s:e} over this party's {n} rows; it accepts multipliers from {low:e} to {high:e}"
                )));
            }
        }
        let releases = (plan.chains as u64)
            .checked_mul(plan.steps_per_chain)
            .filter(|&k| k <= 1 << 53)
            .ok_or_else(|| PartyError::InvalidArgument("the plan has too many steps".into()))?;
        Ok((mechanism, releases))
    }

    /// Admits a run if its whole plan fits what is left (other open runs' reservations
    /// counted), calibrating or checking τ, and reserves it durably before answering.
    pub async fn open_run(&self, plan: Plan, fingerprint: &str) -> Result<Grant, PartyError> {
        let (mechanism, releases) = self.check_plan(&plan, fingerprint)?;
        let _admission = self.admission.lock().await;
        let admit = || {
            self.budget.admit(
                &self.committed(),
                mechanism,
                releases,
                self.data.n() as u64,
                plan.noise,
            )
        };
        // A numerical accountant (a PLD calibration) may compute for seconds.
        let admitted = crate::blocking(admit)?;
        let run_id = new_run_id()?;
        let terms = RunTerms {
            variant: plan.variant,
            chains: plan.chains,
            steps_per_chain: plan.steps_per_chain,
            planned_releases: releases,
            clip: plan.clip,
            tau: admitted.tau,
            noise_multiplier: admitted.noise_multiplier,
        };
        self.ledger.open_run(&run_id, &terms).await?;
        let state = RunState::from_record(RunRecord {
            run_id: run_id.clone(),
            last: vec![None; terms.chains as usize],
            terms,
            closed: false,
            released: 0,
        })?;
        self.runs
            .lock()
            .expect("runs lock")
            .insert(run_id.clone(), Arc::new(state));
        tracing::info!(
            party = %self.name, %run_id, releases, tau = admitted.tau,
            accountant = %admitted.method, requested = %self.budget.accountant,
            "run opened"
        );
        Ok(Grant {
            run_id,
            tau: admitted.tau,
            noise_multiplier: admitted.noise_multiplier,
            releases,
            run_epsilon: admitted.run_epsilon,
            epsilon_committed: admitted.epsilon_committed,
        })
    }

    /// Closes a run; from then on it is charged for what it released, not what it planned.
    pub async fn close_run(&self, run_id: &str) -> Result<Closed, PartyError> {
        let _admission = self.admission.lock().await;
        let run = self.run(run_id)?;
        if run.closed.load(Ordering::SeqCst) {
            return Err(PartyError::FailedPrecondition(format!(
                "run {run_id} is already closed"
            )));
        }
        self.ledger.close_run(run_id).await?;
        run.closed.store(true, Ordering::SeqCst);
        // Wait for releases in flight so the count below is final.
        for chain in &run.chains {
            drop(chain.lock().await);
        }
        let releases = run.released.load(Ordering::SeqCst);
        tracing::info!(party = %self.name, %run_id, releases, "run closed");
        Ok(Closed {
            releases,
            run_epsilon: self.budget.epsilon_of(&self.composition([run.charged()])),
            epsilon_committed: self.budget.epsilon_of(&self.committed()),
        })
    }
}

/// 128 random bits from the OS, hex-encoded: run ids are not guessable.
fn new_run_id() -> Result<String, PartyError> {
    let mut bytes = [0u8; 16];
    rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut bytes)
        .map_err(|e| PartyError::FailedPrecondition(format!("the OS random source failed: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
