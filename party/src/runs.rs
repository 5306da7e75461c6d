//! The runs a node holds: each open run's terms and chains, and the closed runs' charges
//! summed by mechanism (`fold` folds them further for the accountant).
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fedmcmc_common::accountant::{MechanismKind, Release};

use crate::aggregation::{Aggregation, refused};
use crate::error::PartyError;
use crate::fold::MAX_BARKER_GROUPS;
use crate::ledger::{ClosedBy, ReleaseRecord, RunRecord, RunTerms};
use crate::variants::mechanism_of;

/// Where one chain of a run stands: the next step it may ask for and the last answer given.
pub(crate) struct ChainState {
    pub next_step: u64,
    pub last: Option<ReleaseRecord>,
}

pub(crate) struct RunState {
    pub terms: RunTerms,
    /// Secure aggregation's session state; `None` for plain runs, and for a secure run read
    /// back after a restart (its secrets were not kept: its steps are refused).
    pub aggregation: Option<Aggregation>,
    /// What the accountant composes for each release of this run.
    pub mechanism: MechanismKind,
    pub closed: AtomicBool,
    /// Charged releases committed to the ledger so far.
    pub released: AtomicU64,
    /// Public answers committed to the ledger so far (ratios of θ to itself, `release/`):
    /// steps of the chains, never charged.
    pub public: AtomicU64,
    pub chains: Vec<tokio::sync::Mutex<ChainState>>,
    /// When the run was last looked up (a step, a close): the lease counts from here.
    pub(crate) last_active: Mutex<Instant>,
}

/// The mechanism of `count` releases of `variant` (with its batch, if any) at
/// `noise_multiplier`, or why the ledger's record of them (written by another version, or
/// edited) cannot be accounted for.
pub(crate) fn recorded_release(
    what: &str,
    variant: &str,
    (batch, population): (Option<u64>, Option<u64>),
    noise_multiplier: f64,
    count: u64,
) -> Result<MechanismKind, PartyError> {
    let bad = |why: String| {
        PartyError::FailedPrecondition(format!(
            "the ledger records {what} with {why}; this party cannot account for it"
        ))
    };
    let mechanism = mechanism_of(variant, batch, population).map_err(bad)?;
    Release {
        mechanism,
        noise_multiplier,
        count: count as f64,
    }
    .validate()
    .map_err(|e| bad(e.to_string()))?;
    Ok(mechanism)
}

impl RunState {
    /// A step or join of a secure run needs its session state; a plain run, or a secure run
    /// read back after a restart (its secrets were never written down), has none.
    pub(crate) fn session(&self, run_id: &str) -> Result<Option<&Aggregation>, PartyError> {
        match (&self.aggregation, &self.terms.aggregation) {
            (Some(a), _) => Ok(Some(a)),
            (None, None) => Ok(None),
            (None, Some(_)) => Err(refused(format_args!(
                "run {run_id}'s pairwise secrets are kept in memory only and this party has restarted since it opened: the run cannot go on; open a new one"
            ))),
        }
    }

    /// Refuses a run whose variant or noise the accountant could not compose.
    pub(crate) fn from_record(record: RunRecord, now: Instant) -> Result<Self, PartyError> {
        let mechanism = recorded_release(
            &format!("run {}", record.run_id),
            &record.terms.variant,
            (record.terms.batch_size, record.terms.population),
            record.terms.noise_multiplier,
            record.terms.planned_releases,
        )?;
        if let Some(h) = record.terms.hmc {
            let (units, s) = record.terms.reservation();
            for (multiplier, count) in [(h.gradient_multiplier, 1), (s, units)] {
                recorded_release(
                    &format!("run {}", record.run_id),
                    &record.terms.variant,
                    (None, None),
                    multiplier,
                    count,
                )?;
            }
        }
        let aggregation = match (&record.terms.aggregation, record.aggregation_secret) {
            (Some(terms), Some(secret)) => Aggregation::restore(terms, secret),
            _ => None,
        };
        Ok(RunState {
            aggregation,
            mechanism,
            closed: AtomicBool::new(false),
            released: AtomicU64::new(record.released),
            public: AtomicU64::new(record.public),
            last_active: Mutex::new(now),
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

    pub(crate) fn touch(&self, now: Instant) {
        *self.last_active.lock().expect("lease lock") = now;
    }

    pub(crate) fn idle_since(&self) -> Instant {
        *self.last_active.lock().expect("lease lock")
    }

    /// What this run is charged while open: its whole plan (a DP HMC run's, which stays
    /// reserved until its close completes).
    pub(crate) fn charged(&self) -> Release {
        let (count, noise_multiplier) = match self.terms.hmc {
            Some(_) => self.terms.reservation(),
            None if self.closed.load(Ordering::SeqCst) => (
                self.released.load(Ordering::SeqCst),
                self.terms.noise_multiplier,
            ),
            None => (self.terms.planned_releases, self.terms.noise_multiplier),
        };
        Release {
            mechanism: self.mechanism,
            noise_multiplier,
            count: count as f64,
        }
    }

    /// What a closed run released and was charged for, by noise multiplier, given each
    /// chain's steps: a DP HMC chain's steps are its iterations' L + 1 gradients and one
    /// ratio each, in order, and its public answers are ratios (a gradient is never public).
    pub(crate) fn released_by_multiplier(&self, steps: &[u64]) -> Vec<(f64, u64)> {
        let released = self.released.load(Ordering::SeqCst);
        match self.terms.hmc {
            Some(h) => {
                let per = self.terms.releases_per_iteration();
                let public = self.public.load(Ordering::SeqCst);
                let ratios = steps
                    .iter()
                    .map(|s| s / per)
                    .sum::<u64>()
                    .saturating_sub(public);
                vec![
                    (self.terms.noise_multiplier, ratios),
                    (h.gradient_multiplier, released - ratios),
                ]
            }
            None => vec![(self.terms.noise_multiplier, released)],
        }
    }
}

/// A closed run's releases, summed with those of every closed run of the same variant,
/// noise multiplier and batch.
pub(crate) struct Charge {
    pub(crate) variant: String,
    pub(crate) mechanism: MechanismKind,
    pub(crate) noise_multiplier: f64,
    pub(crate) releases: u64,
}

/// The batch and population of a mechanism, for ordering charges.
pub(crate) fn batch_of(mechanism: MechanismKind) -> (u64, u64) {
    match mechanism {
        MechanismKind::BatchGaussian { batch, population }
        | MechanismKind::DpBarker { batch, population } => (batch, population),
        MechanismKind::Gaussian | MechanismKind::PoissonGaussian { .. } => (0, 0),
    }
}

/// The runs a node knows. Open runs keep their chains; closed runs keep only their id (so a
/// late step hears "closed", not "unknown") and their releases folded into `charges`.
#[derive(Default)]
pub(crate) struct Runs {
    pub(crate) open: HashMap<String, Arc<RunState>>,
    pub(crate) closed: HashMap<String, ClosedBy>,
    /// Sorted by (variant, noise multiplier, batch, population), so a node composes the same releases in the same
    /// order whether they were folded as runs closed or read back at start.
    pub(crate) charges: Vec<Charge>,
    /// Snapshots of the committed total taken so far (Describe's figures are the latest's).
    pub(crate) snapshots: u64,
}

impl Runs {
    pub(crate) fn charge(
        &mut self,
        variant: &str,
        mechanism: MechanismKind,
        noise_multiplier: f64,
        n: u64,
    ) {
        if n == 0 {
            return;
        }
        let cmp = |c: &Charge| {
            (c.variant.as_str().cmp(variant))
                .then(c.noise_multiplier.total_cmp(&noise_multiplier))
                .then(batch_of(c.mechanism).cmp(&batch_of(mechanism)))
        };
        match self.charges.binary_search_by(cmp) {
            Ok(i) => self.charges[i].releases += n,
            Err(i) => self.charges.insert(
                i,
                Charge {
                    variant: variant.to_string(),
                    mechanism,
                    noise_multiplier,
                    releases: n,
                },
            ),
        }
    }

    /// Why a run releasing `mechanism` may not open: it is DP Barker at a batch new to its
    /// population, which already has [`MAX_BARKER_GROUPS`] batches among closed and open runs
    /// (each batch is one group the accountant composes with no cheaper form, `fold`). Public:
    /// the batches come from the plans.
    pub(crate) fn new_barker_batch_refused(&self, mechanism: MechanismKind) -> Option<String> {
        let MechanismKind::DpBarker { batch, population } = mechanism else {
            return None;
        };
        let mut batches: Vec<u64> = (self.charges.iter().map(|c| c.mechanism))
            .chain(self.open.values().map(|r| r.mechanism))
            .filter_map(|m| match m {
                MechanismKind::DpBarker {
                    batch,
                    population: p,
                } if p == population => Some(batch),
                _ => None,
            })
            .collect();
        batches.sort_unstable();
        batches.dedup();
        (batches.len() >= MAX_BARKER_GROUPS && batches.binary_search(&batch).is_err()).then(|| {
            format!(
                "this party has run DP Barker at {MAX_BARKER_GROUPS} batch sizes, the most it composes; \
                 plan a batch of one of {batches:?} rows, not {batch}"
            )
        })
    }
}

/// The closed runs' charges as the accountant composes them: folded into a bounded number of
/// groups, exactly or conservatively (`fold`).
pub(crate) fn closed_releases(runs: &Runs) -> Vec<Release> {
    crate::fold::folded(&runs.charges)
}
