//! The gRPC face of a party: authenticate, decode, call the node, map errors to statuses.
//! No business logic lives here.
use std::future::Future;
use std::hash::RandomState;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;

use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_proto::MAX_MESSAGE_BYTES;
use fedmcmc_proto::v1 as pb;
use pb::party_server::{Party, PartyServer};
use tokio::net::TcpListener;
use tonic::codegen::http;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::{BearerAuth, ClientCheck};
use crate::budget::NoiseRequest;
use crate::error::PartyError;
use crate::metrics::Metrics;
use crate::node::{HmcPlan, PartyNode, Plan};
use crate::release::StepKey;
use crate::secure::{Announcement, Terms};
use crate::statistics::Query;
use crate::throttle::{self, Caller, Throttle};
use crate::variants::{
    BARKER, FULL_PENALTY, HMC, INITIALISER, MINIBATCH_PENALTY, SUFFICIENT_STATISTICS, SUMMARIES,
};

pub const PROTOCOL_VERSION: &str = "fedmcmc.v1";

impl From<PartyError> for Status {
    fn from(e: PartyError) -> Status {
        match e {
            PartyError::InvalidArgument(m) => Status::invalid_argument(m),
            PartyError::NotFound(m) => Status::not_found(m),
            PartyError::BudgetExhausted(m) => Status::resource_exhausted(m),
            PartyError::FailedPrecondition(m) => Status::failed_precondition(m),
            PartyError::Unimplemented(m) => Status::unimplemented(m),
            PartyError::Unjoined(m) => Status::aborted(m),
            PartyError::Ledger(e) => {
                tracing::error!(error = %e, "ledger failure");
                Status::internal(
                    "the party could not record the charge durably; nothing was released",
                )
            }
        }
    }
}

/// Wire name of a variant, as the node and the ledger spell it.
pub fn variant_name(v: pb::Variant) -> &'static str {
    match v {
        pb::Variant::Unspecified => "unspecified",
        pb::Variant::FullPenalty => FULL_PENALTY,
        pb::Variant::MinibatchPenalty => MINIBATCH_PENALTY,
        pb::Variant::Barker => BARKER,
        pb::Variant::Hmc => HMC,
        pb::Variant::SufficientStatistics => SUFFICIENT_STATISTICS,
        pb::Variant::Summaries => SUMMARIES,
        pb::Variant::Initialiser => INITIALISER,
    }
}

/// The wire number of a variant name (`Unspecified` for a name that is none).
pub fn variant_from_name(name: &str) -> pb::Variant {
    match name {
        FULL_PENALTY => pb::Variant::FullPenalty,
        MINIBATCH_PENALTY => pb::Variant::MinibatchPenalty,
        BARKER => pb::Variant::Barker,
        HMC => pb::Variant::Hmc,
        INITIALISER => pb::Variant::Initialiser,
        SUFFICIENT_STATISTICS => pb::Variant::SufficientStatistics,
        SUMMARIES => pb::Variant::Summaries,
        _ => pb::Variant::Unspecified,
    }
}

pub struct PartyService {
    node: Arc<PartyNode>,
    /// Describe's pace per caller ([`crate::throttle`]).
    describe_pace: Throttle,
    callers: RandomState,
    metrics: Arc<Metrics>,
}

impl PartyService {
    pub fn new(node: Arc<PartyNode>) -> Self {
        Self::with_metrics(node, Arc::default())
    }

    /// The service counting its releases, refusals and step times into `metrics`.
    pub fn with_metrics(node: Arc<PartyNode>, metrics: Arc<Metrics>) -> Self {
        let limits = node.limits;
        PartyService {
            node,
            describe_pace: Throttle::new(limits.describe_per_second, limits.describe_burst),
            callers: RandomState::new(),
            metrics,
        }
    }
}

fn step_key(key: Option<&pb::StepKey>) -> Result<StepKey<'_>, Status> {
    let key = key.ok_or_else(|| Status::invalid_argument("the step key is missing"))?;
    if key.run_id.is_empty() {
        return Err(Status::invalid_argument("run_id is empty"));
    }
    Ok(StepKey {
        run_id: &key.run_id,
        chain: key.chain,
        step: key.step,
    })
}

/// The most steps one frame of `StepStream` may carry (a run's chains, usually a few).
pub const MAX_FRAME_STEPS: usize = 1024;

/// A frame of steps (one for the unary call), answered together by [`PartyNode::steps`]:
/// one answer per request, in order, each timed into `metrics`.
async fn steps(
    node: &PartyNode,
    metrics: &Metrics,
    requests: &[pb::StepRequest],
) -> Vec<Result<pb::Contribution, Status>> {
    let start = std::time::Instant::now();
    let answers: Vec<Result<pb::Contribution, Status>> = if requests.len() > MAX_FRAME_STEPS {
        let refusal = format!(
            "a frame of {} steps is more than the {MAX_FRAME_STEPS} this party answers at once",
            requests.len()
        );
        requests
            .iter()
            .map(|_| Err(Status::resource_exhausted(refusal.clone())))
            .collect()
    } else {
        let parsed: Vec<_> = requests.iter().map(|r| parse_step(node, r)).collect();
        let valid: Vec<_> = parsed
            .iter()
            .filter_map(|p| p.as_ref().ok().copied())
            .collect();
        let mut answered = node.steps(&valid).await.into_iter();
        parsed
            .into_iter()
            .map(|p| {
                p?;
                let answer = answered.next().expect("an answer for every valid step");
                Ok(wire_contribution(answer?))
            })
            .collect()
    };
    for answer in &answers {
        match answer {
            Ok(c) => metrics.answered(c.replayed, start.elapsed()),
            Err(_) => metrics.step_refused(start.elapsed()),
        }
    }
    answers
}

/// A request's key and query, read from the wire; a malformed one is refused.
fn parse_step<'a>(
    node: &PartyNode,
    req: &'a pb::StepRequest,
) -> Result<(StepKey<'a>, Query<'a>), Status> {
    let key = step_key(req.key.as_ref())?;
    let query = match &req.query {
        Some(pb::step_request::Query::LogLikRatio(q)) => Query::LogLikRatio {
            theta: &q.theta,
            theta_proposed: &q.theta_proposed,
        },
        Some(pb::step_request::Query::MinibatchLogLikRatio(q)) => Query::MinibatchLogLikRatio {
            theta: &q.theta,
            theta_proposed: &q.theta_proposed,
        },
        Some(pb::step_request::Query::BarkerLogLikRatio(q)) => Query::BarkerLogLikRatio {
            theta: &q.theta,
            theta_proposed: &q.theta_proposed,
        },
        Some(pb::step_request::Query::Gradient(q)) => Query::Gradient { theta: &q.theta },
        Some(pb::step_request::Query::SufficientStatistics(_)) => Query::SufficientStatistics {
            entries: node.sufficient.as_ref().map_or(0, Vec::len),
        },
        Some(pb::step_request::Query::Summary(q)) => Query::Summary {
            centre: &q.centre,
            window: q.window,
            curvature_weight: q.curvature_weight,
            entries: node.summary_entries(),
        },
        None => {
            return Err(Status::invalid_argument(
                "the step request carries no query",
            ));
        }
    };
    Ok((key, query))
}

fn wire_contribution(c: crate::release::Contribution) -> pb::Contribution {
    let (masked, grid) = c.masked.map_or((Vec::new(), 0.0), |m| {
        (
            m.steps.iter().flat_map(|x| x.to_le_bytes()).collect(),
            m.grid,
        )
    });
    pb::Contribution {
        value: c.value,
        noise_variance: c.noise_variance,
        replayed: c.replayed,
        masked,
        grid,
    }
}

/// A plan's secure-aggregation terms, checked (a 32-byte session, a roster of at least two
/// DNS names, a threshold below it).
fn terms_from_pb(t: pb::AggregationTerms) -> Result<Terms, Status> {
    let session: [u8; 32] = t.session.try_into().map_err(|s: Vec<u8>| {
        Status::invalid_argument(format!(
            "a secure-aggregation session is 32 bytes, got {}",
            s.len()
        ))
    })?;
    Terms::new(session, t.roster, t.threshold).map_err(|e| Status::invalid_argument(e.to_string()))
}

pub fn announcement_to_pb(a: Announcement) -> pb::KeyAnnouncement {
    pb::KeyAnnouncement {
        session: a.session.to_vec(),
        roster: a.roster,
        threshold: a.threshold,
        party: a.party,
        key: a.key.to_vec(),
        multiplier: a.multiplier,
        gradient_multiplier: a.gradient_multiplier,
        cert_chain: a.cert_chain,
        signature: a.signature,
    }
}

pub fn announcement_from_pb(a: pb::KeyAnnouncement) -> Result<Announcement, Status> {
    let bytes32 = |what: &str, v: Vec<u8>| -> Result<[u8; 32], Status> {
        v.try_into().map_err(|v: Vec<u8>| {
            Status::invalid_argument(format!("{what} is 32 bytes, got {}", v.len()))
        })
    };
    Ok(Announcement {
        session: bytes32("a session", a.session)?,
        roster: a.roster,
        threshold: a.threshold,
        key: bytes32(&format!("party {}'s key", a.party), a.key)?,
        party: a.party,
        multiplier: a.multiplier,
        gradient_multiplier: a.gradient_multiplier,
        cert_chain: a.cert_chain,
        signature: a.signature,
    })
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<pb::StepReplies, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Party for PartyService {
    type StepStreamStream = ReplyStream;

    async fn describe(
        &self,
        request: Request<pb::DescribeRequest>,
    ) -> Result<Response<pb::DescribeResponse>, Status> {
        if !self
            .describe_pace
            .turn(Caller::of(&request, &self.callers))
            .await
        {
            return Err(Status::resource_exhausted(format!(
                "Describe is paced at {} calls per second per caller and this caller's queue is over {} s long; call again later",
                self.describe_pace.per_second(),
                throttle::MAX_WAIT.as_secs()
            )));
        }
        let d = self.node.describe();
        Ok(Response::new(pb::DescribeResponse {
            protocol_version: PROTOCOL_VERSION.into(),
            party_name: d.name,
            model: d.model,
            model_fingerprint: d.model_fingerprint,
            dim: d.dim as u32,
            rows: d.rows,
            variants: d
                .variants
                .iter()
                .map(|v| variant_from_name(v) as i32)
                .collect(),
            neighbours: match d.neighbours {
                Neighbours::Substitute => pb::Neighbours::Substitute,
                Neighbours::AddRemove => pb::Neighbours::AddRemove,
            } as i32,
            budget: Some(pb::PrivacyBudget {
                epsilon: d.epsilon,
                delta: d.delta,
            }),
            epsilon_committed: d.epsilon_committed,
            open_runs: d.open_runs,
            mu_remaining: d.mu_remaining,
            secure_aggregation: d.secure_aggregation,
        }))
    }

    async fn open_run(
        &self,
        request: Request<pb::OpenRunRequest>,
    ) -> Result<Response<pb::RunGrant>, Status> {
        let req = request.into_inner();
        let plan = req
            .plan
            .ok_or_else(|| Status::invalid_argument("the run plan is missing"))?;
        let noise = match plan.noise {
            Some(pb::run_plan::Noise::Tau(t)) => NoiseRequest::Tau(t),
            Some(pb::run_plan::Noise::Calibrate(true)) => NoiseRequest::Calibrate,
            _ => {
                return Err(Status::invalid_argument(
                    "the plan must either request a tau or ask the party to calibrate",
                ));
            }
        };
        let variant = pb::Variant::try_from(plan.variant).map_err(|_| {
            Status::unimplemented(format!(
                "variant number {} is not a variant of {PROTOCOL_VERSION}; this party serves {}",
                plan.variant,
                self.node.variants().join(", ")
            ))
        })?;
        let grant = self
            .node
            .open_run(
                Plan {
                    variant: variant_name(variant).to_string(),
                    chains: plan.chains,
                    steps_per_chain: plan.steps_per_chain,
                    clip: plan.clip,
                    noise,
                    // proto3 has no absent numbers: 0 means not given.
                    batch_size: (plan.batch_size != 0).then_some(plan.batch_size),
                    barker_variance: (plan.barker_variance != 0.0).then_some(plan.barker_variance),
                    hmc: (plan.leapfrog_steps != 0
                        || plan.gradient_clip != 0.0
                        || plan.gradient_tau != 0.0)
                        .then_some(HmcPlan {
                            leapfrog_steps: plan.leapfrog_steps,
                            gradient_clip: plan.gradient_clip,
                            gradient_tau: plan.gradient_tau,
                        }),
                    aggregation: plan.aggregation.map(terms_from_pb).transpose()?,
                },
                &req.model_fingerprint,
            )
            .await?;
        let d = self.node.describe();
        Ok(Response::new(pb::RunGrant {
            run_id: grant.run_id,
            tau: grant.tau,
            noise_multiplier: grant.noise_multiplier,
            releases: grant.releases,
            run_epsilon: grant.run_epsilon,
            epsilon_committed: grant.epsilon_committed,
            lease_seconds: grant.lease.as_secs(),
            budget: Some(pb::PrivacyBudget {
                epsilon: d.epsilon,
                delta: d.delta,
            }),
            announcement: grant.announcement.map(announcement_to_pb),
        }))
    }

    async fn join_aggregation(
        &self,
        request: Request<pb::JoinAggregationRequest>,
    ) -> Result<Response<pb::JoinAggregationResponse>, Status> {
        let req = request.into_inner();
        let announcements = req
            .announcements
            .into_iter()
            .map(announcement_from_pb)
            .collect::<Result<_, _>>()?;
        let multiplier = self
            .node
            .join_aggregation(&req.run_id, announcements)
            .await?;
        Ok(Response::new(pb::JoinAggregationResponse { multiplier }))
    }

    async fn step(
        &self,
        request: Request<pb::StepRequest>,
    ) -> Result<Response<pb::Contribution>, Status> {
        let request = request.into_inner();
        let mut answers = steps(&self.node, &self.metrics, std::slice::from_ref(&request)).await;
        Ok(Response::new(answers.pop().expect("one step, one answer")?))
    }

    async fn step_stream(
        &self,
        request: Request<Streaming<pb::StepFrame>>,
    ) -> Result<Response<ReplyStream>, Status> {
        let state = Some((
            Arc::clone(&self.node),
            Arc::clone(&self.metrics),
            request.into_inner(),
        ));
        // Frames are answered one at a time, in order; a transport error ends the stream.
        let replies = futures::stream::unfold(state, |state| async move {
            let (node, metrics, mut inbound) = state?;
            match inbound.message().await {
                Ok(Some(frame)) => {
                    let answers = steps(&node, &metrics, &frame.steps).await;
                    let replies = answers
                        .into_iter()
                        .map(|answer| {
                            let result = match answer {
                                Ok(c) => pb::step_reply::Result::Contribution(c),
                                Err(s) => {
                                    // In the stream, not in a status the router's layer sees.
                                    metrics.refused(s.code());
                                    pb::step_reply::Result::Refusal(pb::Refusal {
                                        code: s.code() as i32,
                                        message: s.message().to_string(),
                                    })
                                }
                            };
                            pb::StepReply {
                                result: Some(result),
                            }
                        })
                        .collect();
                    let reply = pb::StepReplies { replies };
                    Some((Ok(reply), Some((node, metrics, inbound))))
                }
                Ok(None) => None,
                Err(status) => Some((Err(oversize_is_exhaustion(status)), None)),
            }
        });
        Ok(Response::new(Box::pin(replies)))
    }

    async fn close_run(
        &self,
        request: Request<pb::CloseRunRequest>,
    ) -> Result<Response<pb::CloseRunResponse>, Status> {
        let closed = self.node.close_run(&request.into_inner().run_id).await?;
        Ok(Response::new(pb::CloseRunResponse {
            releases: closed.releases,
            run_epsilon: closed.run_epsilon,
            epsilon_committed: closed.epsilon_committed,
        }))
    }
}

/// An oversize request is RESOURCE_EXHAUSTED, as gRPC's reference servers report it. Tonic's
/// decoder says OUT_OF_RANGE, a code this service never answers otherwise.
fn oversize_is_exhaustion(status: Status) -> Status {
    if status.code() == tonic::Code::OutOfRange {
        Status::resource_exhausted(status.message())
    } else {
        status
    }
}

/// [`oversize_is_exhaustion`] for a unary call, which tonic refuses before any handler runs:
/// the status travels in the response headers (a trailers-only response). Every refusal
/// that is not inside a stream leaves this way (interceptors', decoding's and handlers'),
/// so it is counted here, once, into `metrics`.
fn oversize_is_exhaustion_in_headers(
    metrics: &Metrics,
    mut response: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    let status = response.headers().get("grpc-status");
    if status.is_some_and(|code| code.as_bytes() == b"11") {
        let code = http::HeaderValue::from(tonic::Code::ResourceExhausted as i32);
        response.headers_mut().insert("grpc-status", code);
    }
    let code = response
        .headers()
        .get("grpc-status")
        .and_then(|c| c.to_str().ok()?.parse::<i32>().ok())
        .map(tonic::Code::from);
    if let Some(code) = code.filter(|c| *c != tonic::Code::Ok) {
        metrics.refused(code);
    }
    response
}

/// The service with its limits: authentication first, then a cap on message size so an
/// oversize request is refused before it is decoded.
pub fn service(
    node: Arc<PartyNode>,
    token: &str,
    allowed_clients: &[String],
    metrics: Arc<Metrics>,
) -> InterceptedService<PartyServer<PartyService>, BearerAuth> {
    InterceptedService::new(
        PartyServer::new(PartyService::with_metrics(node, metrics))
            .max_decoding_message_size(MAX_MESSAGE_BYTES),
        BearerAuth::new(token, allowed_clients),
    )
}

/// Serves until `shutdown` resolves, then finishes the calls in flight (graceful shutdown;
/// a plan still calibrating is refused at once, [`PartyNode::calibrations`]).
/// With `tls`, only callers whose certificates chain to its CA complete a handshake
/// ([`crate::tls::accept`], which logs each refusal); without, plaintext (an operator's
/// explicit `insecure`, or a test). Plaintext sockets get TCP_NODELAY as TLS ones do.
/// With `metrics`, `/health` and `/metrics` are served on it ([`crate::metrics`]) as long.
pub async fn serve(
    node: Arc<PartyNode>,
    token: &str,
    tls: Option<&crate::tls::TlsFiles>,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let counts = Arc::new(Metrics::default());
    let endpoint = metrics.map(|listener| {
        tokio::spawn(crate::metrics::serve(
            listener,
            Arc::clone(&counts),
            Arc::clone(&node),
        ))
    });
    let served = serve_grpc(node, token, tls, listener, Arc::clone(&counts), shutdown).await;
    if let Some(endpoint) = endpoint {
        endpoint.abort();
    }
    served
}

async fn serve_grpc(
    node: Arc<PartyNode>,
    token: &str,
    tls: Option<&crate::tls::TlsFiles>,
    listener: TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let allowed = tls
        .map(|t| t.allowed_clients.as_slice())
        .unwrap_or_default();
    // The standard gRPC health service (behind TLS, without the token), so that operators'
    // probes need no party credentials: SERVING until shutdown begins. It admits the same
    // client certificate names as the party's service.
    let (health, health_service) = tonic_health::server::health_reporter();
    let health_service = InterceptedService::new(health_service, ClientCheck::new(allowed));
    health.set_serving::<PartyServer<PartyService>>().await;
    let stopping = Arc::clone(&metrics);
    let calibrating = Arc::clone(&node);
    let shutdown = async move {
        shutdown.await;
        // An OpenRun still calibrating would hold the graceful shutdown for its seconds.
        calibrating.calibrations().cancel();
        stopping.stopping();
        health.set_not_serving::<PartyServer<PartyService>>().await;
    };
    let counts = Arc::clone(&metrics);
    let router = tonic::transport::Server::builder()
        .layer(tower::util::MapResponseLayer::new(move |response| {
            oversize_is_exhaustion_in_headers(&counts, response)
        }))
        .add_service(health_service)
        .add_service(service(node, token, allowed, metrics));
    match tls {
        Some(tls) => {
            let incoming = crate::tls::accept(listener, tls.acceptor()?);
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await?
        }
        None => {
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await?
        }
    }
    Ok(())
}
