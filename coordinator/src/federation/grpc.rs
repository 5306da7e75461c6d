//! Parties over gRPC: the generated client, a bearer token, retries of idempotent calls.
//!
//! Steps travel on one long-lived stream per chain (`StepStream`), which skips the
//! per-call setup of a unary call; a broken stream is reopened and the same step resent.
//!
//! Every call (Describe, OpenRun, Step, CloseRun) has a deadline per try and a bound on all
//! its tries ([`Deadlines`]): a party that stops answering ends the call within the bound,
//! with a sentence saying which call it did not answer.
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fedmcmc_common::neighbours::Neighbours;
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
    deadlines: Deadlines,
}

/// How long the coordinator waits for a party: per try of a call, and per call in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// One try of a call, from sending it to its answer, connecting included when the try
    /// must connect.
    pub attempt: Duration,
    /// One call: all its tries and the waits between them. The longest a party that stops
    /// answering holds a call, and so the job.
    pub call: Duration,
}

/// The deadlines a party gets unless told otherwise.
///
/// 20 s a try: far beyond the work of any call a party answers (a step is at most one pass
/// over its rows), so only a party that has stopped answering, or a connection that has
/// died, meets it. OpenRun, tried once when it may
/// have reached the party, gets the whole 60 s for that try.
///
/// 60 s a call: a party killed and started again (its process, its rows read) is back within
/// it, and is retried meanwhile at waits doubling from 100 ms up to [`MAX_BACKOFF`], while a
/// party that accepts the connection but never answers holds one call for 3 tries of 20 s.
/// A job whose party freezes mid-run thus ends within two such calls, about 2 minutes: the
/// step it did not answer, then its CloseRun (the other parties' runs are closed at once,
/// each under the same bound). Against a run's lease (10 minutes by default) 60 s is short:
/// a retried step still finds its run open.
pub const DEADLINES: Deadlines = Deadlines {
    attempt: Duration::from_secs(20),
    call: Duration::from_secs(60),
};

impl Default for Deadlines {
    fn default() -> Self {
        DEADLINES
    }
}

/// The longest wait between two tries of a call; the waits double from 100 ms up to it.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A duration as a sentence gives it: "20 s", "19.7 s", "300 ms".
fn shown(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// The tries of one call, under its [`Deadlines`].
struct Tries {
    deadlines: Deadlines,
    start: Instant,
    attempt: u32,
}

impl Tries {
    fn new(deadlines: Deadlines) -> Self {
        Tries {
            deadlines,
            start: Instant::now(),
            attempt: 1,
        }
    }

    /// Runs one try under its deadline: the try's own, or what is left of the call's.
    async fn run<T>(&self, tried: impl Future<Output = Result<T, Status>>) -> Result<T, Status> {
        let left = self.deadlines.call.saturating_sub(self.start.elapsed());
        let limit = self.deadlines.attempt.min(left);
        tokio::time::timeout(limit, tried)
            .await
            .unwrap_or_else(|_| {
                Err(Status::deadline_exceeded(format!(
                    "no answer within {}",
                    shown(limit)
                )))
            })
    }

    /// After a try failed with `error`, which a retry may cure: waits before the next try and
    /// returns true, or returns false at once when the wait and a fair try (a quarter of a
    /// try's deadline) no longer fit in the call's bound.
    async fn wait(&mut self, what: &str, error: &Status) -> bool {
        let wait = MAX_BACKOFF.min(Duration::from_millis(50 << self.attempt.min(7)));
        if self.start.elapsed() + wait + self.deadlines.attempt / 4 > self.deadlines.call {
            return false;
        }
        tracing::warn!(call = what, attempt = self.attempt, error = %error, "party call failed, resending the same call");
        tokio::time::sleep(wait).await;
        self.attempt += 1;
        true
    }

    /// The call's failure after its last try failed with `last`: one that ends the call for
    /// want of time (the party did not answer, or could not be reached, within the bound)
    /// says so and how often it was tried; any other is the party's own answer.
    fn failed(&self, what: &str, last: Status, retried: bool) -> CallError {
        if !transient(&last) || !(retried || last.code() == Code::DeadlineExceeded) {
            return last.into();
        }
        let attempts = match self.attempt {
            1 => "1 attempt".to_string(),
            n => format!("{n} attempts"),
        };
        CallError {
            kind: CallErrorKind::Unavailable,
            message: format!(
                "did not answer {what} within {} ({attempts}; the last: {} ({:?}))",
                shown(self.deadlines.call),
                last.message(),
                last.code()
            ),
        }
    }
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
        Ok(GrpcParty {
            client: PartyClient::with_interceptor(channel, Bearer(header)),
            streams: Mutex::new(HashMap::new()),
            deadlines,
        })
    }

    /// The deadlines its calls get.
    pub fn deadlines(&self) -> Deadlines {
        self.deadlines
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

/// Makes one call by tries of `attempt` until one answers, trying again after a failure a
/// retry may cure (one `retry` admits) while the call's bound allows. `what` names the call
/// in warnings and errors.
async fn retried<T, F>(
    what: &str,
    retry: fn(&Status) -> bool,
    deadlines: Deadlines,
    mut attempt: impl FnMut() -> F,
) -> Result<T, CallError>
where
    F: Future<Output = Result<T, Status>>,
{
    let mut tries = Tries::new(deadlines);
    loop {
        match tries.run(attempt()).await {
            Ok(answer) => return Ok(answer),
            Err(s) if transient(&s) && retry(&s) => {
                if !tries.wait(what, &s).await {
                    return Err(tries.failed(what, s, true));
                }
            }
            Err(s) => return Err(tries.failed(what, s, false)),
        }
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
        let slot = self.slot(chain);
        let mut stream = slot.lock().await;
        // Resending the same (run, chain, step) is safe: the party answers a retry with its
        // stored answer, charged once, after a restart too.
        let what = format!("Step {step} of chain {chain}");
        let mut tries = Tries::new(self.deadlines);
        let reply = loop {
            let tried = tries.run(self.exchange(&mut stream, request.clone())).await;
            match tried {
                Ok(reply) => break reply,
                Err(s) => {
                    // A try past its deadline leaves a stream that may hold its late reply:
                    // never read it for another step.
                    *stream = None;
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
        // End the step streams: the run's steps are over, and a party shutting down
        // gracefully waits for open streams.
        self.streams.lock().expect("streams lock").clear();
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
        Query::Summary { centre, window, .. } => Wire::Summary(pb::SummaryQuery {
            centre: centre.to_vec(),
            window,
        }),
        Query::SufficientStatistics { .. } => {
            Wire::SufficientStatistics(pb::SufficientStatisticsQuery {})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Deadlines short enough for a test: tries of 200 ms, calls of 1 s.
    const QUICK: Deadlines = Deadlines {
        attempt: Duration::from_millis(200),
        call: Duration::from_secs(1),
    };

    /// Runs `retried` on `answer`, returning its result, its tries and how long it took.
    async fn tried<F: Future<Output = Result<(), Status>>>(
        retry: fn(&Status) -> bool,
        answer: impl Fn() -> F,
    ) -> (Result<(), CallError>, u32, Duration) {
        let tries = AtomicU32::new(0);
        let start = Instant::now();
        let result = retried("Step 17 of chain 0", retry, QUICK, || {
            tries.fetch_add(1, Ordering::SeqCst);
            answer()
        })
        .await;
        (result, tries.into_inner(), start.elapsed())
    }

    #[test]
    fn the_default_bounds_are_a_minute_of_twenty_second_tries() {
        assert_eq!(Deadlines::default(), DEADLINES);
        assert_eq!(DEADLINES.call, 3 * DEADLINES.attempt);
        assert_eq!(shown(DEADLINES.call), "60 s");
        assert_eq!(shown(Duration::from_millis(19_700)), "19.7 s");
        assert_eq!(shown(Duration::from_millis(300)), "300 ms");
    }

    #[tokio::test]
    async fn a_call_never_answered_ends_within_its_bound_naming_the_call() {
        let (result, tries, took) = tried(transient, std::future::pending).await;
        let e = result.unwrap_err();
        assert_eq!(e.kind, CallErrorKind::Unavailable);
        assert!(
            e.message.starts_with(&format!(
                "did not answer Step 17 of chain 0 within 1 s ({tries} attempts; the last: no answer within"
            )),
            "{}",
            e.message
        );
        assert!(tries >= 2, "{tries} tries");
        assert!(took <= QUICK.call + Duration::from_millis(300), "{took:?}");
    }

    #[tokio::test]
    async fn an_unreachable_party_is_tried_until_the_bound_then_named() {
        let (result, tries, took) = tried(transient, || async {
            Err(Status::unavailable("connection refused"))
        })
        .await;
        let e = result.unwrap_err();
        assert_eq!(e.kind, CallErrorKind::Unavailable);
        assert!(
            e.message.ends_with(&format!(
                "within 1 s ({tries} attempts; the last: connection refused (Unavailable))"
            )),
            "{}",
            e.message
        );
        // Waits of 100, 200, 400 ms fit in 1 s with a fair try after each.
        assert!(tries >= 3, "{tries} tries");
        assert!(took >= Duration::from_millis(500), "{took:?}");
        assert!(took <= QUICK.call + Duration::from_millis(300), "{took:?}");
    }

    #[tokio::test]
    async fn a_refusal_is_not_tried_again_and_keeps_its_words() {
        let (result, tries, _) = tried(transient, || async {
            Err(Status::failed_precondition("run r1 is closed"))
        })
        .await;
        let e = result.unwrap_err();
        assert_eq!(tries, 1);
        assert_eq!(e.kind, CallErrorKind::Refused);
        assert_eq!(e.message, "run r1 is closed (FailedPrecondition)");
    }

    #[tokio::test]
    async fn a_call_that_may_have_arrived_is_tried_once_and_a_silent_one_named() {
        // OpenRun's rule: only an unreached party is tried again.
        let unreached = |s: &Status| s.code() == Code::Unavailable;
        let (result, tries, _) = tried(unreached, || async {
            Err(Status::unknown("connection reset"))
        })
        .await;
        assert_eq!(tries, 1);
        assert_eq!(result.unwrap_err().message, "connection reset (Unknown)");
        let (result, tries, took) = tried(unreached, std::future::pending).await;
        assert_eq!(tries, 1);
        assert!(took < QUICK.call, "{took:?}");
        assert!(
            result
                .unwrap_err()
                .message
                .contains("within 1 s (1 attempt; the last: no answer within 200 ms"),
        );
    }
}
