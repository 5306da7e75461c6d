//! Parties over gRPC: the generated client, a bearer token, retries of idempotent steps.
//!
//! Steps travel on one long-lived stream per chain (`StepStream`), which skips the
//! per-call setup of a unary call; a broken stream is reopened and the same step resent.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedmcmc_party::service::{variant_from_name, variant_name};
use fedmcmc_proto::v1 as pb;
use pb::party_client::PartyClient;
use tokio::sync::{Mutex as AsyncMutex, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};

use super::{
    CallError, CallErrorKind, Closed, Contribution, Grant, NoiseChoice, PartyHandle, PartyInfo,
    Query, RunPlan,
};

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct Bearer(MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        Ok(request)
    }
}

type Client = PartyClient<InterceptedService<Channel, Bearer>>;

/// An open step stream: requests go in through `requests`, replies come back in order.
struct StepStream {
    requests: mpsc::Sender<pb::StepRequest>,
    replies: tonic::Streaming<pb::StepReply>,
}

/// The stream of one chain, opened on first use.
type StreamSlot = Arc<AsyncMutex<Option<StepStream>>>;

pub struct GrpcParty {
    client: Client,
    streams: Mutex<HashMap<u32, StreamSlot>>,
}

/// How often a step is tried when its stream fails or its deadline passes, with waits
/// doubling from 100 ms up to [`MAX_BACKOFF`] between tries (about 20 s in all: long enough for
/// a party to restart). Resending the same (run, chain, step) is safe: the party answers a
/// retry with its stored answer, charged once, after a restart too.
const STEP_ATTEMPTS: u32 = 9;
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long one try of a step may take before it is abandoned and tried again: far beyond
/// any step's work, so only a hung connection or party meets it.
const STEP_DEADLINE: Duration = Duration::from_secs(30);

impl GrpcParty {
    /// Connects to `address` (e.g. "http://127.0.0.1:50051").
    /// Connects to the party at `address`: over mutual TLS with `tls` (the address must be
    /// `https://`), or plaintext without (it must be `http://`), so a scheme never silently
    /// picks the transport.
    pub async fn connect(
        address: &str,
        token: &str,
        tls: Option<ClientTlsConfig>,
    ) -> Result<Self, CallError> {
        let bad = |message: String| CallError {
            kind: CallErrorKind::Other,
            message,
        };
        let mut endpoint = Endpoint::from_shared(address.to_string())
            .map_err(|e| bad(format!("bad party address {address:?}: {e}")))?
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(10));
        let scheme = endpoint.uri().scheme_str().unwrap_or_default().to_string();
        match (tls, scheme.as_str()) {
            (Some(tls), "https") => {
                endpoint = endpoint
                    .tls_config(tls)
                    .map_err(|e| bad(format!("TLS settings for {address}: {e}")))?;
            }
            (None, "http") => {}
            (Some(_), _) => {
                return Err(bad(format!(
                    "{address} is not an https:// address, and TLS is on"
                )));
            }
            (None, _) => {
                return Err(bad(format!(
                    "{address} is not an http:// address, and TLS is off (--insecure)"
                )));
            }
        }
        let channel = endpoint.connect().await.map_err(|e| CallError {
            kind: CallErrorKind::Unavailable,
            message: format!("cannot connect to {address}: {e}"),
        })?;
        let header = format!("Bearer {token}").parse().map_err(|_| CallError {
            kind: CallErrorKind::Other,
            message: "the token is not valid ASCII".into(),
        })?;
        Ok(GrpcParty {
            client: PartyClient::with_interceptor(channel, Bearer(header)),
            streams: Mutex::new(HashMap::new()),
        })
    }

    fn slot(&self, chain: u32) -> StreamSlot {
        let mut streams = self.streams.lock().expect("streams lock");
        Arc::clone(streams.entry(chain).or_default())
    }

    /// Sends one request on the chain's stream (opening it if needed) and waits for its
    /// reply. Any transport failure drops the stream, so a retry starts a fresh one.
    async fn exchange(
        &self,
        slot: &mut Option<StepStream>,
        request: pb::StepRequest,
    ) -> Result<pb::StepReply, Status> {
        if slot.is_none() {
            let (requests, inbound) = mpsc::channel(1);
            let replies = self
                .client
                .clone()
                .step_stream(ReceiverStream::new(inbound))
                .await?
                .into_inner();
            *slot = Some(StepStream { requests, replies });
        }
        let stream = slot.as_mut().expect("stream just opened");
        let reply = match stream.requests.send(request).await {
            Ok(()) => stream.replies.message().await,
            Err(_) => Err(Status::unavailable("the step stream is closed")),
        };
        match reply {
            Ok(Some(r)) => Ok(r),
            Ok(None) => {
                *slot = None;
                Err(Status::unavailable("the party ended the step stream"))
            }
            Err(e) => {
                *slot = None;
                Err(e)
            }
        }
    }
}

/// A failure a retry may cure: the party unreachable or restarting (UNAVAILABLE), the
/// deadline passed, or the connection broken mid-call (UNKNOWN, as tonic reports a reset).
fn transient(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Unknown
    )
}

impl From<Status> for CallError {
    fn from(s: Status) -> CallError {
        let kind = match s.code() {
            Code::ResourceExhausted => CallErrorKind::Budget,
            Code::InvalidArgument
            | Code::NotFound
            | Code::FailedPrecondition
            | Code::Unimplemented
            | Code::Unauthenticated
            | Code::PermissionDenied => CallErrorKind::Refused,
            Code::Unavailable | Code::DeadlineExceeded => CallErrorKind::Unavailable,
            _ => CallErrorKind::Other,
        };
        CallError {
            kind,
            message: format!("{} ({:?})", s.message(), s.code()),
        }
    }
}

impl PartyHandle for GrpcParty {
    async fn describe(&self) -> Result<PartyInfo, CallError> {
        let d = self
            .client
            .clone()
            .describe(pb::DescribeRequest {})
            .await?
            .into_inner();
        let budget = d.budget.unwrap_or_default();
        Ok(PartyInfo {
            name: d.party_name,
            model: d.model,
            model_fingerprint: d.model_fingerprint,
            dim: d.dim as usize,
            rows: d.rows,
            epsilon: budget.epsilon,
            delta: budget.delta,
            epsilon_committed: d.epsilon_committed,
            mu_remaining: d.mu_remaining,
            variants: d
                .variants
                .iter()
                .map(|&v| {
                    let v = pb::Variant::try_from(v).unwrap_or(pb::Variant::Unspecified);
                    variant_name(v).to_string()
                })
                .collect(),
        })
    }

    async fn open_run(&self, plan: &RunPlan, fingerprint: &str) -> Result<Grant, CallError> {
        let g = self
            .client
            .clone()
            .open_run(pb::OpenRunRequest {
                plan: Some(pb::RunPlan {
                    variant: variant_from_name(plan.variant) as i32,
                    chains: plan.chains,
                    steps_per_chain: plan.steps_per_chain,
                    clip: plan.clip,
                    noise: Some(match plan.noise {
                        NoiseChoice::Tau(t) => pb::run_plan::Noise::Tau(t),
                        NoiseChoice::Calibrate => pb::run_plan::Noise::Calibrate(true),
                    }),
                    batch_size: plan.batch_size.unwrap_or(0),
                    barker_variance: plan.barker_variance.unwrap_or(0.0),
                    leapfrog_steps: plan.hmc.map_or(0, |h| h.leapfrog_steps),
                    gradient_clip: plan.hmc.map_or(0.0, |h| h.gradient_clip),
                    gradient_tau: plan.hmc.map_or(0.0, |h| h.gradient_tau),
                }),
                model_fingerprint: fingerprint.to_string(),
            })
            .await?
            .into_inner();
        Ok(Grant {
            run_id: g.run_id,
            tau: g.tau,
            noise_multiplier: g.noise_multiplier,
            releases: g.releases,
            run_epsilon: g.run_epsilon,
            epsilon_committed: g.epsilon_committed,
            lease: std::time::Duration::from_secs(g.lease_seconds),
        })
    }

    async fn step(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> Result<Contribution, CallError> {
        let request = pb::StepRequest {
            key: Some(pb::StepKey {
                run_id: run_id.to_string(),
                chain,
                step,
            }),
            query: Some(wire_query(query)),
        };
        let slot = self.slot(chain);
        let mut stream = slot.lock().await;
        let mut attempt = 1;
        let reply = loop {
            let tried =
                tokio::time::timeout(STEP_DEADLINE, self.exchange(&mut stream, request.clone()))
                    .await
                    .unwrap_or_else(|_| {
                        // The stream may hold a late reply: never read it for another step.
                        *stream = None;
                        Err(Status::deadline_exceeded(format!(
                            "no answer within {} s",
                            STEP_DEADLINE.as_secs()
                        )))
                    });
            match tried {
                Ok(reply) => break reply,
                Err(s) if attempt < STEP_ATTEMPTS && transient(&s) => {
                    tracing::warn!(run_id, chain, step, attempt, error = %s, "step failed, resending the same step");
                    tokio::time::sleep(MAX_BACKOFF.min(Duration::from_millis(50 << attempt))).await;
                    attempt += 1;
                }
                Err(s) => return Err(s.into()),
            }
        };
        let c = match reply.result {
            Some(pb::step_reply::Result::Contribution(c)) => c,
            Some(pb::step_reply::Result::Refusal(r)) => {
                return Err(Status::new(Code::from_i32(r.code), r.message).into());
            }
            None => {
                return Err(CallError {
                    kind: CallErrorKind::Other,
                    message: "empty step reply".into(),
                });
            }
        };
        if c.value.len() != query.released_len() || !c.value.iter().all(|v| v.is_finite()) {
            return Err(CallError {
                kind: CallErrorKind::Other,
                message: format!("malformed contribution {:?}", c.value),
            });
        }
        if !(c.noise_variance.is_finite() && c.noise_variance >= 0.0) {
            return Err(CallError {
                kind: CallErrorKind::Other,
                message: format!("malformed noise variance {}", c.noise_variance),
            });
        }
        Ok(Contribution {
            value: c.value,
            noise_variance: c.noise_variance,
        })
    }

    async fn close_run(&self, run_id: &str) -> Result<Closed, CallError> {
        // End the step streams: the run's steps are over, and a party shutting down
        // gracefully waits for open streams.
        self.streams.lock().expect("streams lock").clear();
        let c = self
            .client
            .clone()
            .close_run(pb::CloseRunRequest {
                run_id: run_id.to_string(),
            })
            .await?
            .into_inner();
        Ok(Closed {
            releases: c.releases,
            run_epsilon: c.run_epsilon,
            epsilon_committed: c.epsilon_committed,
        })
    }
}

/// A query as the wire carries it.
fn wire_query(query: Query<'_>) -> pb::step_request::Query {
    use pb::step_request::Query as Wire;
    let ratio = |theta: &[f64], theta_proposed: &[f64]| pb::LogLikRatioQuery {
        theta: theta.to_vec(),
        theta_proposed: theta_proposed.to_vec(),
    };
    match query {
        Query::LogLikRatio {
            theta,
            theta_proposed,
        } => Wire::LogLikRatio(ratio(theta, theta_proposed)),
        Query::MinibatchLogLikRatio {
            theta,
            theta_proposed,
        } => Wire::MinibatchLogLikRatio(ratio(theta, theta_proposed)),
        Query::BarkerLogLikRatio {
            theta,
            theta_proposed,
        } => Wire::BarkerLogLikRatio(ratio(theta, theta_proposed)),
        Query::Gradient { theta } => Wire::Gradient(pb::GradientQuery {
            theta: theta.to_vec(),
        }),
        Query::Summary { centre, window, .. } => Wire::Summary(pb::SummaryQuery {
            centre: centre.to_vec(),
            window,
        }),
        Query::SufficientStatistics { .. } => {
            Wire::SufficientStatistics(pb::SufficientStatisticsQuery {})
        }
    }
}
