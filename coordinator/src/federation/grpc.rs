//! Parties over gRPC: the generated client, a bearer token, retries of idempotent calls.
//!
//! Steps travel on one long-lived stream per party (`StepStream`), which skips the per-call
//! setup of a unary call, in frames: the steps the chains ask while a frame is out go
//! together in the next ([`frames`]), so a run of C chains makes one round trip per step, and
//! the party one fsync, instead of C. A broken stream is reopened and the same step resent.
//!
//! Every call (Describe, OpenRun, Step, CloseRun) has a deadline per try and a bound on all
//! its tries ([`Deadlines`]): a party that stops answering ends the call within the bound,
//! with a sentence saying which call it did not answer.
use std::time::Duration;

use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::service::{variant_from_name, variant_name};
use fedmcmc_proto::v1 as pb;
use pb::party_client::PartyClient;
use tokio::sync::{mpsc, oneshot};
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};

mod frames;
mod retry;

use frames::{Framed, frames};

pub use retry::{DEADLINES, Deadlines};
use retry::{Tries, retried, shown, transient};

use super::{
    Announcement, CallError, CallErrorKind, Closed, Contribution, Grant, Masked, NoiseChoice,
    PartyHandle, PartyInfo, Query, RunPlan,
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

pub struct GrpcParty {
    client: Client,
    /// To the task that sends the chains' steps in frames ([`frames`]).
    steps: mpsc::UnboundedSender<Framed>,
    deadlines: Deadlines,
}

impl GrpcParty {
    /// Connects to the party at `address` (e.g. "http://127.0.0.1:50051"): over mutual TLS
    /// with `tls` (the address must be `https://`), or plaintext without (it must be
    /// `http://`), so a scheme never silently picks the transport. Its calls get [`DEADLINES`].
    pub async fn connect(
        address: &str,
        token: &str,
        tls: Option<ClientTlsConfig>,
    ) -> Result<Self, CallError> {
        Self::connect_with(address, token, tls, DEADLINES).await
    }

    /// [`GrpcParty::connect`], its calls (and the connection itself, as one try) under
    /// `deadlines`.
    pub async fn connect_with(
        address: &str,
        token: &str,
        tls: Option<ClientTlsConfig>,
        deadlines: Deadlines,
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
        let channel = tokio::time::timeout(deadlines.attempt, endpoint.connect())
            .await
            .map_err(|_| CallError {
                kind: CallErrorKind::Unavailable,
                message: format!(
                    "cannot connect to {address}: no answer within {}",
                    shown(deadlines.attempt)
                ),
            })?
            .map_err(|e| CallError {
                kind: CallErrorKind::Unavailable,
                message: format!("cannot connect to {address}: {}", causes(&e)),
            })?;
        let header = format!("Bearer {token}").parse().map_err(|_| CallError {
            kind: CallErrorKind::Other,
            message: "the token is not valid ASCII".into(),
        })?;
        let client = PartyClient::with_interceptor(channel, Bearer(header));
        let (steps, queue) = mpsc::unbounded_channel();
        tokio::spawn(frames(client.clone(), deadlines, queue));
        Ok(GrpcParty {
            client,
            steps,
            deadlines,
        })
    }

    /// The deadlines its calls get.
    pub fn deadlines(&self) -> Deadlines {
        self.deadlines
    }

    /// One try of a step: queued for the next frame, answered with it.
    async fn exchange(&self, request: pb::StepRequest) -> Result<pb::StepReply, Status> {
        let (reply, answer) = oneshot::channel();
        self.steps
            .send(Framed::Step(request, reply))
            .map_err(|_| Status::unavailable("the party's step frames have ended"))?;
        answer
            .await
            .unwrap_or_else(|_| Err(Status::unavailable("the step's frame was dropped")))
    }
}

/// An error with every cause beneath it ("transport error" alone named none), and, for a
/// TLS handshake the other side or this one refused, which check failed.
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !chain.contains(&text) {
            chain = format!("{chain}: {text}");
        }
        source = s.source();
    }
    // rustls's own words for the checks, as they appear in its errors and alerts.
    let checks = [
        (
            "UnknownIssuer",
            "the party's certificate is not issued by the CA the coordinator trusts (tls.ca)",
        ),
        // Every CA `coordinator certs` makes has the same name: another one's certificate
        // fails on its signature, not on its issuer's name.
        (
            "BadSignature",
            "the party's certificate is not issued by the CA the coordinator trusts (tls.ca)",
        ),
        (
            "NotValidForName",
            "the party's certificate does not name the party the coordinator asked for (tls_name or the party's name)",
        ),
        (
            "not valid for name",
            "the party's certificate does not name the party the coordinator asked for (tls_name or the party's name)",
        ),
        ("Expired", "a certificate has expired"),
        (
            "NotValidYet",
            "a certificate is not valid yet (check the clocks)",
        ),
        (
            "CertificateRequired",
            "the party asked for a client certificate and the coordinator sent none (tls.cert, tls.key)",
        ),
        (
            "BadCertificate",
            "the party refused the coordinator's certificate: not issued by the CA the party trusts, or not in its allowed_clients",
        ),
        (
            "UnknownCA",
            "the party does not trust the CA of the coordinator's certificate",
        ),
        (
            "InvalidContentType",
            "the party does not speak TLS here (a plaintext party? then --insecure on both sides)",
        ),
        (
            "CorruptMessage",
            "the party does not speak TLS here (a plaintext party? then --insecure on both sides)",
        ),
    ];
    match checks.iter().find(|(key, _)| chain.contains(key)) {
        Some((_, why)) => format!("{chain} ({why})"),
        None => chain,
    }
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
            Code::Aborted => CallErrorKind::Unjoined,
            _ => CallErrorKind::Other,
        };
        let message = match std::error::Error::source(&s) {
            Some(cause) => format!("{} ({:?}): {}", s.message(), s.code(), causes(cause)),
            None => format!("{} ({:?})", s.message(), s.code()),
        };
        CallError { kind, message }
    }
}

impl PartyHandle for GrpcParty {
    async fn describe(&self) -> Result<PartyInfo, CallError> {
        let d = retried("Describe", transient, self.deadlines, || {
            let mut client = self.client.clone();
            async move { client.describe(pb::DescribeRequest {}).await }
        })
        .await?
        .into_inner();
        let budget = d.budget.unwrap_or_default();
        Ok(PartyInfo {
            name: d.party_name,
            model: d.model,
            model_fingerprint: d.model_fingerprint,
            dim: d.dim as usize,
            rows: d.rows,
            neighbours: match pb::Neighbours::try_from(d.neighbours) {
                Ok(pb::Neighbours::Substitute) => Neighbours::Substitute,
                Ok(pb::Neighbours::AddRemove) => Neighbours::AddRemove,
                _ => {
                    return Err(CallError {
                        kind: CallErrorKind::Other,
                        message: format!(
                            "Describe states no neighbour relation ({}), so its answers' sensitivities cannot be checked",
                            d.neighbours
                        ),
                    });
                }
            },
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
            secure_aggregation: d.secure_aggregation,
        })
    }

    async fn open_run(&self, plan: &RunPlan, fingerprint: &str) -> Result<Grant, CallError> {
        let request = pb::OpenRunRequest {
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
                aggregation: plan.aggregation.as_ref().map(|t| pb::AggregationTerms {
                    session: t.session.to_vec(),
                    roster: t.roster.clone(),
                    threshold: t.threshold,
                }),
            }),
            model_fingerprint: fingerprint.to_string(),
        };
        // OpenRun is not idempotent: a try that reached the party may have opened a run, and
        // another try would open a second one, reserved until its lease ends. So it is tried
        // again only when the party could not be reached (UNAVAILABLE), and its one try that
        // is answered gets the call's whole bound.
        let deadlines = Deadlines {
            attempt: self.deadlines.call,
            ..self.deadlines
        };
        let unreached = |s: &Status| s.code() == Code::Unavailable;
        let g = retried("OpenRun", unreached, deadlines, || {
            let mut client = self.client.clone();
            let request = request.clone();
            async move { client.open_run(request).await }
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
            announcement: g
                .announcement
                .map(fedmcmc_party::service::announcement_from_pb)
                .transpose()
                .map_err(CallError::from)?,
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
        // Resending the same (run, chain, step) is safe: the party answers a retry with its
        // stored answer, charged once, after a restart too.
        let what = format!("Step {step} of chain {chain}");
        let mut tries = Tries::new(self.deadlines);
        let reply = loop {
            let tried = tries.run(self.exchange(request.clone())).await;
            match tried {
                Ok(reply) => break reply,
                Err(s) => {
                    if !transient(&s) {
                        return Err(tries.failed(&what, s, false));
                    }
                    if !tries.wait(&what, &s).await {
                        return Err(tries.failed(&what, s, true));
                    }
                }
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
        let masked = (!c.masked.is_empty()).then(|| Masked {
            steps: c
                .masked
                .chunks_exact(16)
                .map(|b| u128::from_le_bytes(b.try_into().expect("16 bytes")))
                .collect(),
            grid: c.grid,
        });
        if let Some(m) = &masked
            && (c.masked.len() != 16 * query.released_len() || !c.value.is_empty())
        {
            return Err(CallError {
                kind: CallErrorKind::Other,
                message: format!(
                    "malformed masked contribution of {} bytes with {} plain entries, grid {}",
                    c.masked.len(),
                    c.value.len(),
                    m.grid
                ),
            });
        }
        if masked.is_none()
            && (c.value.len() != query.released_len() || !c.value.iter().all(|v| v.is_finite()))
        {
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
            masked,
        })
    }

    async fn join_aggregation(
        &self,
        run_id: &str,
        announcements: &[Announcement],
    ) -> Result<f64, CallError> {
        let request = pb::JoinAggregationRequest {
            run_id: run_id.to_string(),
            announcements: announcements
                .iter()
                .cloned()
                .map(fedmcmc_party::service::announcement_to_pb)
                .collect(),
        };
        // Idempotent: a party answers a repeated join with the same announcements alike.
        let what = format!("JoinAggregation of run {run_id}");
        let r = retried(&what, transient, self.deadlines, || {
            let mut client = self.client.clone();
            let request = request.clone();
            async move { client.join_aggregation(request).await }
        })
        .await?
        .into_inner();
        Ok(r.multiplier)
    }

    async fn close_run(&self, run_id: &str) -> Result<Closed, CallError> {
        // End the step stream: the run's steps are over, and a party shutting down
        // gracefully waits for open streams.
        let _ = self.steps.send(Framed::EndStream);
        // A repeated CloseRun is answered with the first one's charge.
        let what = format!("CloseRun of run {run_id}");
        let c = retried(&what, transient, self.deadlines, || {
            let mut client = self.client.clone();
            let request = pb::CloseRunRequest {
                run_id: run_id.to_string(),
            };
            async move { client.close_run(request).await }
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
        Query::Summary {
            centre,
            window,
            curvature_weight,
            ..
        } => Wire::Summary(pb::SummaryQuery {
            centre: centre.to_vec(),
            window,
            curvature_weight,
        }),
        Query::SufficientStatistics { .. } => {
            Wire::SufficientStatistics(pb::SufficientStatisticsQuery {})
        }
    }
}
