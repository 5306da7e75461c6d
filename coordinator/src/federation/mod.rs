//! The federation as the sampler sees it: the sum of the parties' answers.
//!
//! [`PartyHandle`] is one party reached somehow (in this process, or over gRPC);
//! [`Federation`] fans each request out to all parties at once and sums their contributions.
//! The sampler is written against `Federation<P>` only, so the same code path runs against
//! in-process parties (tests, benchmarks) and real gRPC servers.
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};

use fedmcmc_common::models::Model;
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::secure::{Announcement, Terms};
use futures::future::{join_all, try_join_all};
pub use secure::Masked;

pub mod audit;
pub mod grpc;
pub mod ids;
pub mod local;
pub mod recorded;
pub mod secure;

/// What a party tells about itself (DESIGN §2 `Describe`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartyInfo {
    pub name: String,
    pub model: String,
    pub model_fingerprint: String,
    pub dim: usize,
    pub rows: u64,
    /// Its neighbour relation: the sensitivities its answers are checked against follow.
    pub neighbours: Neighbours,
    pub epsilon: f64,
    pub delta: f64,
    pub epsilon_committed: f64,
    /// μ still available for Gaussian releases (k releases at multiplier s cost k/(2s²)).
    pub mu_remaining: f64,
    /// The variants it serves (the parties' names), so that a job it cannot serve is
    /// refused before anything is spent.
    #[serde(default)]
    pub variants: Vec<String>,
    /// Whether it takes part in secure aggregation.
    #[serde(default)]
    pub secure_aggregation: bool,
}

impl PartyInfo {
    /// Whether it serves `variant` (the parties' name).
    pub fn serves(&self, variant: &str) -> bool {
        self.variants.iter().any(|v| v == variant)
    }
}

/// The noise a plan asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NoiseChoice {
    /// The same τ for every party; each party's multiplier is τ·√nᵢ.
    Tau(f64),
    /// Each party calibrates the smallest τ that fits its own budget.
    Calibrate,
}

/// One party's run: `chains × steps_per_chain` releases of `variant` (the parties' name).
#[derive(Clone, Debug, PartialEq)]
pub struct RunPlan {
    pub variant: &'static str,
    pub chains: u32,
    pub steps_per_chain: u64,
    /// The per-row clip coefficient; 0 for DP Barker, whose clip the party fixes.
    pub clip: f64,
    pub noise: NoiseChoice,
    /// Minibatch variants: this party's rows per step.
    pub batch_size: Option<u64>,
    /// DP Barker: this party's share of the total noise variance C.
    pub barker_variance: Option<f64>,
    /// DP HMC: leapfrog steps and the gradient release's clip and τ.
    pub hmc: Option<HmcPlan>,
    /// Secure aggregation's session (set by [`Federation::open`] for a secure run).
    pub aggregation: Option<Terms>,
}

/// A party's grant and its final charge, and DP HMC's plan terms: the party's own types.
pub use fedmcmc_party::node::{Closed, Grant, HmcPlan};

/// A step's query, as the parties define it.
pub use fedmcmc_party::statistics::Query;

/// One party's release for one step, or the federation's sum of them: a vector (its length
/// fixed by the query) and the variance of the Gaussian noise in each entry.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Contribution {
    pub value: Vec<f64>,
    pub noise_variance: f64,
    /// Secure aggregation: this party's masked share instead of `value` (never in a sum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masked: Option<Masked>,
}

/// What went wrong with one call to one party.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct CallError {
    pub kind: CallErrorKind,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallErrorKind {
    /// The party's budget (or the run's plan) has no room.
    Budget,
    /// The party refused the request as malformed or out of order.
    Refused,
    /// The party could not be reached (retrying the same step is safe).
    Unavailable,
    /// A secure run the party has not joined since it (re)started: relay the announcements
    /// again, then ask again.
    Unjoined,
    Other,
}

impl std::fmt::Display for CallErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CallErrorKind::Budget => "budget",
            CallErrorKind::Refused => "refused",
            CallErrorKind::Unavailable => "unavailable",
            CallErrorKind::Other => "error",
            CallErrorKind::Unjoined => "not joined",
        })
    }
}

/// A failure attributed to a named party.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("party {party}: {error}")]
pub struct FederationError {
    pub party: String,
    pub error: CallError,
}

/// One party, however it is reached.
pub trait PartyHandle: Send + Sync + 'static {
    fn describe(&self) -> impl Future<Output = Result<PartyInfo, CallError>> + Send;
    fn open_run(
        &self,
        plan: &RunPlan,
        fingerprint: &str,
    ) -> impl Future<Output = Result<Grant, CallError>> + Send;
    /// One step's release; a well-formed answer has `query.released_len()` finite entries
    /// and a finite, non-negative noise variance.
    fn step(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> impl Future<Output = Result<Contribution, CallError>> + Send;
    fn close_run(&self, run_id: &str) -> impl Future<Output = Result<Closed, CallError>> + Send;
    /// Secure aggregation: relays every party's announcement; the party answers the run's
    /// common noise multiplier. A handle that cannot says so.
    fn join_aggregation(
        &self,
        _run_id: &str,
        _announcements: &[Announcement],
    ) -> impl Future<Output = Result<f64, CallError>> + Send {
        async {
            Err(CallError {
                kind: CallErrorKind::Refused,
                message: "this party handle does not take part in secure aggregation".into(),
            })
        }
    }
    /// The same join relayed again mid-run to a party that restarted: never part of a
    /// job's record (a recorded job replays its first join, and the party may or may not
    /// restart again).
    fn rejoin_aggregation(
        &self,
        run_id: &str,
        announcements: &[Announcement],
    ) -> impl Future<Output = Result<f64, CallError>> + Send {
        self.join_aggregation(run_id, announcements)
    }
    /// [`PartyHandle::step`], computed apart from the caller's task where the handle can (an
    /// in-process party), so that the caller meanwhile computes another party's step; by
    /// default the step itself (a remote party computes apart anyway).
    fn step_apart(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> impl Future<Output = Result<Contribution, CallError>> + Send {
        self.step(run_id, chain, step, query)
    }
}

/// All parties, addressed together.
pub struct Federation<P> {
    parties: Vec<(String, P)>,
    /// The open run, while there is one.
    run: RwLock<Option<Arc<OpenRun>>>,
    /// The parties' last answers to Describe: each grant and answer is checked against
    /// their row counts and neighbour relations.
    described: Mutex<Option<Vec<PartyInfo>>>,
    /// Every run id each party has granted in this job, in party order, in lower case: a
    /// repeated one would merge two runs' records (on a file system that ignores case too).
    granted: Mutex<Vec<HashSet<String>>>,
    /// Secure aggregation's threshold t for the runs opened next; `None` for plain releases.
    threshold: Mutex<Option<u32>>,
}

/// A run open on every party: its model, and each party's run id and granted terms, in
/// party order.
struct OpenRun {
    model: Arc<dyn Model>,
    ids: Vec<String>,
    audits: Vec<audit::Audit>,
    /// Secure aggregation: the run's common noise multipliers (the release's and DP HMC's
    /// gradient's), its honest parties P − t and P.
    secure: Option<((f64, f64), u32, usize)>,
    /// Secure aggregation: every party's announcement, relayed again to a party that
    /// restarted mid-run.
    announcements: Vec<Announcement>,
}

fn at(party: &str) -> impl Fn(CallError) -> FederationError + '_ {
    move |error| FederationError {
        party: party.to_string(),
        error,
    }
}

impl<P: PartyHandle> Federation<P> {
    /// `parties` are (name, handle); names label errors and outputs.
    pub fn new(parties: Vec<(String, P)>) -> Self {
        let granted = Mutex::new(vec![HashSet::new(); parties.len()]);
        Federation {
            parties,
            run: RwLock::new(None),
            described: Mutex::new(None),
            granted,
            threshold: Mutex::new(None),
        }
    }

    /// Opens the runs that follow under secure aggregation tolerating `threshold` parties
    /// colluding with the coordinator, or (`None`) with plain releases.
    pub fn aggregate_securely(&self, threshold: Option<u32>) {
        *self.threshold.lock().expect("threshold lock") = threshold;
    }

    /// The threshold the next runs open under, if secure.
    pub fn threshold(&self) -> Option<u32> {
        *self.threshold.lock().expect("threshold lock")
    }

    pub fn len(&self) -> usize {
        self.parties.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parties.is_empty()
    }

    pub async fn describe(&self) -> Result<Vec<PartyInfo>, FederationError> {
        let infos = try_join_all(
            self.parties
                .iter()
                .map(|(name, p)| async move { p.describe().await.map_err(at(name)) }),
        )
        .await?;
        *self.described.lock().expect("described lock") = Some(infos.clone());
        Ok(infos)
    }

    /// Opens the run of `model` on every party, party i with `plans[i]`. If any party
    /// refuses, or answers a run id that is not one ([`ids::check_run_id`]) or that it gave
    /// an earlier run of this job, or grants other terms than its plan's
    /// ([`audit::check_grant`]), the grants given are closed again (their reservations
    /// released) and the first such failure is returned, before any record is made of the
    /// run's steps.
    pub async fn open(
        &self,
        plans: &[RunPlan],
        model: &Arc<dyn Model>,
    ) -> Result<Vec<Grant>, FederationError> {
        assert_eq!(plans.len(), self.parties.len(), "one plan per party");
        let described = self.described.lock().expect("described lock").clone();
        let infos = match described {
            Some(infos) => infos,
            None => self.describe().await?,
        };
        let fingerprint = model.fingerprint();
        let threshold = self.threshold();
        let session = threshold
            .map(|t| secure::session(&infos, t))
            .transpose()
            .map_err(|message| FederationError {
                party: "(every party)".into(),
                error: CallError {
                    kind: CallErrorKind::Refused,
                    message,
                },
            })?;
        let plans: Vec<RunPlan> = plans
            .iter()
            .map(|p| RunPlan {
                aggregation: session.clone(),
                ..p.clone()
            })
            .collect();
        let results = join_all(
            self.parties
                .iter()
                .zip(&plans)
                .map(|((_, p), plan)| p.open_run(plan, &fingerprint)),
        )
        .await;
        let checked = match results.iter().position(|r| r.is_err()) {
            Some(i) => Err((i, results[i].as_ref().unwrap_err().clone())),
            None => self
                .new_run_ids(&results)
                .map_or_else(|| Self::audits(&plans, &infos, &results), Err),
        };
        let checked = match (checked, threshold) {
            (Ok(audits), Some(t)) => self.join(&results).await.map(|(m, announcements)| {
                let p = self.parties.len();
                let gradient = fedmcmc_party::aggregation::common_multipliers(&announcements).1;
                (
                    audits,
                    Some(((m, gradient), p as u32 - t, p)),
                    announcements,
                )
            }),
            (checked, _) => checked.map(|audits| (audits, None, Vec::new())),
        };
        let (audits, secure, announcements) = match checked {
            Ok(audited) => audited,
            Err((i, error)) => {
                for ((_, p), r) in self.parties.iter().zip(&results) {
                    if let Ok(g) = r {
                        let _ = p.close_run(&g.run_id).await;
                    }
                }
                return Err(at(&self.parties[i].0)(error));
            }
        };
        let grants: Vec<Grant> = results.into_iter().map(Result::unwrap).collect();
        *self.run.write().expect("run lock") = Some(Arc::new(OpenRun {
            model: Arc::clone(model),
            ids: grants.iter().map(|g| g.run_id.clone()).collect(),
            audits,
            secure,
            announcements,
        }));
        Ok(grants)
    }

    /// Relays every grant's announcement to every party and takes the run's common noise
    /// multiplier, which all must answer alike; or the first party that refused (a party
    /// that finds a key substituted closes its run) or disagreed.
    async fn join(
        &self,
        results: &[Result<Grant, CallError>],
    ) -> Result<(f64, Vec<Announcement>), (usize, CallError)> {
        let grants: Vec<Grant> = results.iter().flatten().cloned().collect();
        let announcements = secure::announcements(&grants)?;
        let joined = join_all(self.parties.iter().zip(&grants).map(|((_, p), g)| {
            let announcements = &announcements;
            async move { p.join_aggregation(&g.run_id, announcements).await }
        }))
        .await;
        let mut common = None;
        for (i, j) in joined.into_iter().enumerate() {
            let m = j.map_err(|e| (i, e))?;
            match common {
                None => common = Some(m),
                Some(c) if c == m => {}
                Some(c) => {
                    let message = format!(
                        "answered the common noise multiplier {m}, where the parties before it answered {c}"
                    );
                    let kind = CallErrorKind::Other;
                    return Err((i, CallError { kind, message }));
                }
            }
        }
        Ok((common.expect("a secure run has parties"), announcements))
    }

    /// Each grant checked against its plan and party, or the first party whose is not one.
    fn audits(
        plans: &[RunPlan],
        infos: &[PartyInfo],
        results: &[Result<Grant, CallError>],
    ) -> Result<Vec<audit::Audit>, (usize, CallError)> {
        let granted = plans.iter().zip(infos).zip(results).enumerate();
        granted
            .map(|(i, ((plan, info), r))| {
                let grant = r.as_ref().expect("every party granted");
                audit::check_grant(plan, info, grant).map_err(|message| {
                    let kind = CallErrorKind::Other;
                    (i, CallError { kind, message })
                })
            })
            .collect()
    }

    /// Takes every grant's run id as the party's new run, or names the first party whose
    /// id is not one or repeats one it gave before.
    fn new_run_ids(&self, results: &[Result<Grant, CallError>]) -> Option<(usize, CallError)> {
        let mut granted = self.granted.lock().expect("granted lock");
        results.iter().enumerate().find_map(|(i, r)| {
            let id = &r.as_ref().ok()?.run_id;
            let message = match ids::check_run_id(id) {
                Err(message) => message,
                Ok(()) if granted[i].insert(id.to_ascii_lowercase()) => return None,
                Ok(()) => format!(
                    "answered OpenRun with the run id {id:?}, which it gave an earlier run of this job: the two runs' records would merge"
                ),
            };
            let kind = CallErrorKind::Other;
            Some((i, CallError { kind, message }))
        })
    }

    /// Σᵢ of the parties' released vectors and Σᵢ σᵢ² for one step of one chain: for the
    /// log-likelihood ratio, Σᵢ d̂ᵢ of Yıldırım & Ermiş 2019, Alg. 2.
    pub async fn step(
        &self,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> Result<Contribution, FederationError> {
        let run = self.open_run();
        // The last party's step runs in this task and the others' apart, started first (the
        // join polls in order): in-process parties then compute at once, and if no other
        // core is free the steps started apart wait for this task's thread, not it for them.
        let last = self.parties.len().saturating_sub(1);
        let announcements = &run.announcements;
        let answers = try_join_all(self.parties.iter().zip(&run.ids).enumerate().map(
            |(i, ((name, p), id))| async move {
                let ask = || async {
                    if i < last {
                        p.step_apart(id, chain, step, query).await
                    } else {
                        p.step(id, chain, step, query).await
                    }
                };
                let answer = match ask().await {
                    // A party restarted mid-run reads its session back from its ledger and
                    // needs the announcements again before it answers.
                    Err(e) if e.kind == CallErrorKind::Unjoined && !announcements.is_empty() => {
                        p.rejoin_aggregation(id, announcements)
                            .await
                            .map_err(at(name))?;
                        ask().await
                    }
                    answer => answer,
                };
                answer.map_err(at(name))
            },
        ))
        .await?;
        let refused = |name: &str, message: String| {
            let kind = CallErrorKind::Other;
            at(name)(CallError { kind, message })
        };
        if let Some(secure) = run.secure {
            let mut statistic = 0.0;
            for ((name, _), (answer, audit)) in
                self.parties.iter().zip(answers.iter().zip(&run.audits))
            {
                statistic += audit
                    .check_share(run.model.as_ref(), step, query, answer, secure)
                    .map_err(|m| refused(name, m))?;
            }
            let shares: Vec<&Masked> = answers.iter().flat_map(|a| a.masked.as_ref()).collect();
            let sum = Contribution {
                value: secure::decode(&shares).map_err(|m| refused("(every party)", m))?,
                noise_variance: answers.iter().map(|a| a.noise_variance).sum(),
                masked: None,
            };
            audit::check_sum(step, &sum, statistic).map_err(|m| refused("(every party)", m))?;
            return Ok(sum);
        }
        for ((name, _), (answer, audit)) in self.parties.iter().zip(answers.iter().zip(&run.audits))
        {
            audit
                .check_answer(run.model.as_ref(), step, query, answer)
                .map_err(|message| refused(name, message))?;
        }
        let mut sum = Contribution {
            value: vec![0.0; query.released_len()],
            noise_variance: 0.0,
            masked: None,
        };
        for a in &answers {
            for (s, v) in sum.value.iter_mut().zip(&a.value) {
                *s += v;
            }
            sum.noise_variance += a.noise_variance;
        }
        Ok(sum)
    }

    /// Closes the open run on every party; returns each party's final charge, or the first
    /// party's failure in party order. Every party's close runs to its end (each under the
    /// handle's own bound, [`grpc::DEADLINES`] over gRPC): one party that fails or does not
    /// answer does not cut short the others', whose reservations go back.
    pub async fn close(&self) -> Result<Vec<Closed>, FederationError> {
        self.close_each().await.into_iter().collect()
    }

    /// [`Federation::close`], each party's outcome in party order.
    pub async fn close_each(&self) -> Vec<Result<Closed, FederationError>> {
        let run = self.run.write().expect("run lock").take();
        let ids = run.map(|r| r.ids.clone()).unwrap_or_default();
        join_all(
            self.parties
                .iter()
                .zip(&ids)
                .map(|((name, p), id)| async move { p.close_run(id).await.map_err(at(name)) }),
        )
        .await
    }

    /// The open run; a step without one is the caller's bug.
    fn open_run(&self) -> Arc<OpenRun> {
        let run = self.run.read().expect("run lock");
        Arc::clone(run.as_ref().expect("a step is asked of an open run"))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.parties.iter().map(|(n, _)| n.as_str())
    }
}
