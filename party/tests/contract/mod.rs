//! The release path's contract as a reusable test (DESIGN §1; the contract itself is written
//! at the top of `party/src/release/`).
//!
//! Two parties that differ in one substituted row receive the same calls. Whether each call
//! is answered or refused, and with which status and message, must be the same for both, and
//! every answer must be finite: a decision that differs is a free, noiseless answer about
//! that row. Public parts of an answer (a grant's terms, a release's noise variance) must be
//! equal too. Every release path reuses this: a new query is a new [`Call`] variant.
#![allow(dead_code)] // each test binary that includes this module uses a different part of it

use std::sync::Arc;

use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{Model, ModelSpec};
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::PartyNode;
use fedmcmc_party::budget::Budget;
use fedmcmc_party::config::BudgetConfig;
use fedmcmc_party::ledger::Ledger;
use fedmcmc_party::service::PartyService;
use fedmcmc_proto::v1 as pb;
use pb::party_server::Party;
use rand::SeedableRng;
use tonic::{Code, Request};

pub mod plans;

/// One request, with runs named by the order in which they were opened (`run` slots), since
/// each party draws its own run ids.
#[derive(Clone, Debug)]
pub enum Call {
    Open(pb::RunPlan),
    /// A step of one of the queries (a gradient query sends `theta` only).
    Step {
        kind: QueryKind,
        run: RunRef,
        chain: u32,
        step: StepAt,
        theta: Vec<f64>,
        theta_proposed: Vec<f64>,
    },
    Close(RunRef),
    /// Secure aggregation: relay the run's announcements, the subject's own and its peer's.
    Join(RunRef),
}

/// Which query a step asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryKind {
    Full,
    Minibatch,
    Barker,
    Gradient,
    /// The sufficient statistics, which carry no θ.
    Sufficient,
    /// A quadratic summary: `theta` is its centre, `theta_proposed` holds its window (one
    /// entry; none sends the wire default 0).
    Summary,
}

/// Which run a call names.
#[derive(Clone, Copy, Debug)]
pub enum RunRef {
    /// The k-th run granted so far (an unknown id if fewer were granted).
    Slot(usize),
    /// An id no party ever issued.
    Unknown,
}

/// Which step of a chain a call asks for, relative to where the chain stands on party A
/// (the parties' chains stand alike as long as their decisions do).
#[derive(Clone, Copy, Debug)]
pub enum StepAt {
    /// The chain's next step.
    Next,
    /// The step last answered: a replay.
    Last,
    /// `k` steps past the next one: out of order.
    Ahead(u64),
    /// An absolute step number.
    At(u64),
}

/// What a party decided, without the noisy value (which differs even for equal rows).
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// A grant with its public terms.
    Granted {
        tau: u64,
        noise_multiplier: u64,
        releases: u64,
    },
    /// A release with its public noise variance (bits, so −0.0 and NaN compare exactly).
    Released {
        noise_variance: u64,
        replayed: bool,
    },
    Closed {
        releases: u64,
    },
    /// A join, with the run's common multiplier.
    Joined {
        multiplier: u64,
    },
    Refused {
        code: Code,
        message: String,
    },
}

/// A party's node behind its gRPC service, called without a socket: what the service decides
/// is what a remote caller sees (transport limits aside).
pub struct Subject {
    pub service: PartyService,
    runs: Vec<String>,
    next_step: std::collections::HashMap<(usize, u32), u64>,
    /// Secure aggregation: the subject's announcement per granted run, its peer (a second
    /// party of the roster, certified by the same CA) and the peer's announcement per plan.
    announcements: Vec<Option<pb::KeyAnnouncement>>,
    peer: Option<(PartyService, tempfile::TempDir)>,
    peer_announcements: Vec<Option<pb::KeyAnnouncement>>,
}

/// The names on the certificates of a secure subject and its peer: the roster of
/// [`secure_terms`].
pub const SUBJECT: &str = "subject";
pub const PEER: &str = "peer";

/// The session terms a secure battery's plans carry.
pub fn secure_terms() -> pb::AggregationTerms {
    pb::AggregationTerms {
        session: vec![5; 32],
        roster: vec![PEER.into(), SUBJECT.into()],
        threshold: 0,
    }
}

impl Subject {
    pub fn new(rows: Columns, spec: &ModelSpec, budget: BudgetConfig) -> Subject {
        let model = spec.build().unwrap();
        let node = PartyNode::new(
            "subject".into(),
            model,
            rows,
            Neighbours::Substitute,
            Budget::new(budget).unwrap(),
            (Ledger::in_memory().unwrap(), Vec::new()),
        )
        .unwrap();
        Subject {
            service: PartyService::new(Arc::new(node)),
            runs: Vec::new(),
            next_step: Default::default(),
            announcements: Vec::new(),
            peer: None,
            peer_announcements: Vec::new(),
        }
    }

    /// A subject with a TLS identity, and a peer party over `peer_rows` certified by the
    /// same CA, so that its plans may aggregate securely.
    pub fn secure(
        rows: Columns,
        peer_rows: Columns,
        spec: &ModelSpec,
        budget: BudgetConfig,
    ) -> Subject {
        let dir = tempfile::tempdir().unwrap();
        fedmcmc_party::tls::issue(dir.path(), &[SUBJECT.into(), PEER.into()]).unwrap();
        let node = |name: &str, rows| {
            let identity = fedmcmc_party::aggregation::Identity::load(
                &fedmcmc_party::tls::files_for(dir.path(), name),
            )
            .unwrap();
            let node = PartyNode::new(
                name.into(),
                spec.build().unwrap(),
                rows,
                Neighbours::Substitute,
                Budget::new(budget).unwrap(),
                (Ledger::in_memory().unwrap(), Vec::new()),
            )
            .unwrap()
            .with_identity(identity);
            PartyService::new(Arc::new(node))
        };
        let (subject, peer) = (node(SUBJECT, rows), node(PEER, peer_rows));
        Subject {
            service: subject,
            runs: Vec::new(),
            next_step: Default::default(),
            announcements: Vec::new(),
            peer: Some((peer, dir)),
            peer_announcements: Vec::new(),
        }
    }

    /// What the party says of itself.
    pub async fn describe(&self) -> pb::DescribeResponse {
        let req = Request::new(pb::DescribeRequest {});
        self.service.describe(req).await.unwrap().into_inner()
    }

    fn run_id(&self, run: RunRef) -> String {
        match run {
            RunRef::Slot(k) => self.runs.get(k).cloned(),
            RunRef::Unknown => None,
        }
        .unwrap_or_else(|| "00000000000000000000000000000000".into())
    }

    /// Makes one call and reduces the answer to its decision; panics on a non-finite answer.
    pub async fn call(&mut self, call: &Call, fingerprint: &str) -> Decision {
        // Run ids are each party's own random strings: name them by slot in messages.
        let runs = self.runs.clone();
        let refused = |s: tonic::Status| Decision::Refused {
            code: s.code(),
            message: runs
                .iter()
                .enumerate()
                .fold(s.message().to_string(), |m, (k, id)| {
                    m.replace(id, &format!("<run {k}>"))
                }),
        };
        match call {
            Call::Open(plan) => {
                let req = pb::OpenRunRequest {
                    plan: Some(plan.clone()),
                    model_fingerprint: fingerprint.into(),
                };
                // The peer is asked the same plan; its decision is not the subject's.
                if let (Some((peer, _)), Some(_)) = (&self.peer, &plan.aggregation) {
                    let g = peer.open_run(Request::new(req.clone())).await;
                    let a = g.ok().and_then(|g| g.into_inner().announcement);
                    self.peer_announcements.push(a);
                }
                match self.service.open_run(Request::new(req)).await {
                    Ok(g) => {
                        let g = g.into_inner();
                        for (what, v) in [
                            ("tau", g.tau),
                            ("noise multiplier", g.noise_multiplier),
                            ("run epsilon", g.run_epsilon),
                        ] {
                            assert!(v.is_finite(), "grant with {what} = {v} for {plan:?}");
                        }
                        self.runs.push(g.run_id);
                        self.announcements.push(g.announcement);
                        Decision::Granted {
                            tau: g.tau.to_bits(),
                            noise_multiplier: g.noise_multiplier.to_bits(),
                            releases: g.releases,
                        }
                    }
                    Err(s) => refused(s),
                }
            }
            Call::Step {
                kind,
                run,
                chain,
                step,
                theta,
                theta_proposed,
            } => {
                let slot = match run {
                    RunRef::Slot(k) => *k,
                    RunRef::Unknown => usize::MAX,
                };
                let run_id = self.run_id(*run);
                let next = self.next_step.entry((slot, *chain)).or_insert(0);
                let step = match *step {
                    StepAt::Next => *next,
                    StepAt::Last => next.saturating_sub(1),
                    StepAt::Ahead(k) => *next + k,
                    StepAt::At(k) => k,
                };
                let req = pb::StepRequest {
                    key: Some(pb::StepKey {
                        run_id,
                        chain: *chain,
                        step,
                    }),
                    query: Some({
                        let q = pb::LogLikRatioQuery {
                            theta: theta.clone(),
                            theta_proposed: theta_proposed.clone(),
                        };
                        match kind {
                            QueryKind::Full => pb::step_request::Query::LogLikRatio(q),
                            QueryKind::Minibatch => {
                                pb::step_request::Query::MinibatchLogLikRatio(q)
                            }
                            QueryKind::Barker => pb::step_request::Query::BarkerLogLikRatio(q),
                            QueryKind::Gradient => {
                                pb::step_request::Query::Gradient(pb::GradientQuery {
                                    theta: theta.clone(),
                                })
                            }
                            QueryKind::Sufficient => pb::step_request::Query::SufficientStatistics(
                                pb::SufficientStatisticsQuery {},
                            ),
                            QueryKind::Summary => {
                                pb::step_request::Query::Summary(pb::SummaryQuery {
                                    centre: theta.clone(),
                                    window: theta_proposed.first().copied().unwrap_or(0.0),
                                    curvature_weight: theta_proposed.get(1).copied().unwrap_or(1.0),
                                })
                            }
                        }
                    }),
                };
                match self.service.step(Request::new(req)).await {
                    Ok(c) => {
                        let c = c.into_inner();
                        assert!(
                            c.value.iter().all(|v| v.is_finite())
                                && c.noise_variance.is_finite()
                                && c.noise_variance >= 0.0,
                            "non-finite release {:?} (σ² = {}) for {call:?}",
                            c.value,
                            c.noise_variance
                        );
                        if step == *next {
                            *next += 1;
                        }
                        Decision::Released {
                            noise_variance: c.noise_variance.to_bits(),
                            replayed: c.replayed,
                        }
                    }
                    Err(s) => refused(s),
                }
            }
            Call::Join(run) => {
                // The k-th grant's announcement and the peer's for the same plan (the peer
                // granted its plans in the subject's order where both did).
                let own = match run {
                    RunRef::Slot(k) => self.announcements.get(*k).cloned().flatten(),
                    RunRef::Unknown => None,
                };
                let peer = own.as_ref().and_then(|o| {
                    self.peer_announcements
                        .iter()
                        .flatten()
                        .find(|p| p.multiplier == o.multiplier && p.roster == o.roster)
                        .cloned()
                });
                let req = pb::JoinAggregationRequest {
                    run_id: self.run_id(*run),
                    announcements: own.into_iter().chain(peer).collect(),
                };
                match self.service.join_aggregation(Request::new(req)).await {
                    Ok(j) => Decision::Joined {
                        multiplier: j.into_inner().multiplier.to_bits(),
                    },
                    Err(s) => refused(s),
                }
            }
            Call::Close(run) => {
                let req = pb::CloseRunRequest {
                    run_id: self.run_id(*run),
                };
                match self.service.close_run(Request::new(req)).await {
                    Ok(c) => Decision::Closed {
                        releases: c.into_inner().releases,
                    },
                    Err(s) => refused(s),
                }
            }
        }
    }
}

/// Substitutes for one row: extreme but finite values, and the domain's edges.
pub const SUBSTITUTES: [[f64; 2]; 4] = [
    [1e200, -1e200],
    [-3e150, 7e300],
    [f64::MAX, -f64::MAX],
    [-f64::MAX, f64::MAX],
];

/// The substituted row (a middle one, so neither the first nor the last block is special).
pub const ROW: usize = 137;

/// How one pair of neighbouring parties decided a battery.
#[derive(Debug)]
pub struct Tally {
    pub granted: usize,
    pub released: usize,
    pub refused: usize,
    pub decisions: Vec<Decision>,
}

/// Runs `calls` on pairs of parties over `rows` banana rows that differ in row [`ROW`], one
/// pair per [`SUBSTITUTES`] entry, failing at the first call a pair decides differently;
/// returns each pair's tally, for assertions that the battery exercised both outcomes.
pub async fn decided_alike(rows: usize, calls: &[Call], budget: BudgetConfig) -> Vec<Tally> {
    let substitutes = SUBSTITUTES.map(|s| s.to_vec());
    decided_alike_for(
        &ModelSpec::flat_banana(2),
        &substitutes,
        rows,
        calls,
        budget,
    )
    .await
}

/// [`decided_alike`] for any model, its row [`ROW`] replaced by each of `substitutes`.
pub async fn decided_alike_for(
    spec: &ModelSpec,
    substitutes: &[Vec<f64>],
    rows: usize,
    calls: &[Call],
    budget: BudgetConfig,
) -> Vec<Tally> {
    let mut tallies = Vec::with_capacity(substitutes.len());
    for substitute in substitutes {
        let mut pair = Neighbouring::new(spec, rows, ROW, substitute, budget);
        let decisions = pair.same_decisions(calls).await;
        let count = |f: fn(&Decision) -> bool| decisions.iter().filter(|d| f(d)).count();
        tallies.push(Tally {
            granted: count(|d| matches!(d, Decision::Granted { .. })),
            released: count(|d| matches!(d, Decision::Released { .. })),
            refused: count(|d| matches!(d, Decision::Refused { .. })),
            decisions,
        });
    }
    tallies
}

/// Two parties whose rows differ in exactly one substituted row.
pub struct Neighbouring {
    pub a: Subject,
    pub b: Subject,
    fingerprint: String,
}

impl Neighbouring {
    /// `n` rows of the flat banana (d = 2); party B's row `row` is replaced by `substitute`.
    pub fn banana(n: usize, row: usize, substitute: [f64; 2], budget: BudgetConfig) -> Self {
        Self::new(&ModelSpec::flat_banana(2), n, row, &substitute, budget)
    }

    /// `n` rows simulated from `spec`; party B's row `row` is replaced by `substitute`.
    pub fn new(
        spec: &ModelSpec,
        n: usize,
        row: usize,
        substitute: &[f64],
        budget: BudgetConfig,
    ) -> Self {
        Self::with(spec, n, row, substitute, budget, false)
    }

    /// [`Neighbouring::new`] with TLS identities and a peer each, for secure plans.
    pub fn new_secure(
        spec: &ModelSpec,
        n: usize,
        row: usize,
        substitute: &[f64],
        budget: BudgetConfig,
    ) -> Self {
        Self::with(spec, n, row, substitute, budget, true)
    }

    fn with(
        spec: &ModelSpec,
        n: usize,
        row: usize,
        substitute: &[f64],
        budget: BudgetConfig,
        secure: bool,
    ) -> Self {
        let model: Arc<dyn Model> = spec.build().unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
        let rows = model.simulate(&spec.true_theta(), n, &mut rng);
        let mut columns: Vec<Vec<f64>> = (0..rows.d()).map(|j| rows.col(j).to_vec()).collect();
        for (j, v) in substitute.iter().enumerate() {
            columns[j][row] = *v;
        }
        let other = Columns::from_columns(columns).unwrap();
        let (a, b) = if secure {
            (
                Subject::secure(rows.clone(), rows.clone(), spec, budget),
                Subject::secure(other, rows, spec, budget),
            )
        } else {
            (
                Subject::new(rows, spec, budget),
                Subject::new(other, spec, budget),
            )
        };
        Neighbouring {
            a,
            b,
            fingerprint: model.fingerprint(),
        }
    }

    /// Runs the calls on both parties in the same order; fails at the first call whose
    /// decisions differ. Returns A's decisions, for assertions on what was exercised.
    pub async fn same_decisions(&mut self, calls: &[Call]) -> Vec<Decision> {
        let mut decisions = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            let a = self.a.call(call, &self.fingerprint).await;
            let b = self.b.call(call, &self.fingerprint).await;
            assert_eq!(
                a, b,
                "call {i} ({call:?}) was decided differently for neighbouring rows"
            );
            decisions.push(a);
        }
        decisions
    }
}

/// Whether a decision is a fresh release (not a replay).
pub fn fresh(d: &Decision) -> bool {
    matches!(
        d,
        Decision::Released {
            replayed: false,
            ..
        }
    )
}

/// Whether a decision is the stored answer to a retried step.
pub fn replayed(d: &Decision) -> bool {
    matches!(d, Decision::Released { replayed: true, .. })
}

/// Whether a decision is a refusal with `code` whose message holds `contains`.
pub fn refused(code: Code, contains: &str) -> impl Fn(&Decision) -> bool + '_ {
    move |d| matches!(d, Decision::Refused { code: c, message } if *c == code && message.contains(contains))
}

/// The next full-data step of `chain` in run slot `run` at (θ, θ′).
pub fn step(run: usize, chain: u32, theta: &[f64], theta_proposed: &[f64]) -> Call {
    step_as(QueryKind::Full, run, chain, theta, theta_proposed)
}

/// The next step of `chain` in run slot `run` at (θ, θ′), asking query `kind`.
pub fn step_as(
    kind: QueryKind,
    run: usize,
    chain: u32,
    theta: &[f64],
    theta_proposed: &[f64],
) -> Call {
    Call::Step {
        kind,
        run: RunRef::Slot(run),
        chain,
        step: StepAt::Next,
        theta: theta.to_vec(),
        theta_proposed: theta_proposed.to_vec(),
    }
}
