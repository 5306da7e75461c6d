//! Refusals over real gRPC: a party served on a loopback port, called through the generated
//! client, exactly as a coordinator would.
use std::net::SocketAddr;
use std::path::Path;

use fedmcmc_common::models::ModelSpec;
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::config::{BudgetConfig, DataConfig, DataFormat, PartyConfig};
use fedmcmc_party::tls::TlsFiles;
use fedmcmc_proto::v1 as pb;
use pb::party_client::PartyClient;
use rand::SeedableRng;
use tokio::sync::oneshot;
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

const TOKEN: &str = "test-token-0123456789abcdef";
const ROWS: usize = 2_000;

type Auth = Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send>;
type Client = PartyClient<InterceptedService<Channel, Auth>>;

/// Writes a party directory (rows, token) and returns its config.
fn party_dir(dir: &Path, epsilon: f64, delta: f64) -> PartyConfig {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let data = model.simulate(&spec.true_theta(), ROWS, &mut rng);
    let rows = dir.join("rows.sqlite");
    if !rows.exists() {
        fedmcmc_party::store::write_sqlite(
            &rows,
            "rows",
            &data,
            &fedmcmc_party::store::column_names(2),
        )
        .unwrap();
    }
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    PartyConfig {
        name: "alpha".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        ledger: dir.join("ledger.sqlite"),
        auth_token_file: dir.join("token"),
        neighbours: Neighbours::Substitute,
        budget: BudgetConfig {
            epsilon,
            delta,
            accountant: Default::default(),
        },
        data: DataConfig {
            format: DataFormat::Sqlite,
            path: rows,
            table: "rows".into(),
        },
        model: Some(spec),
        tls: None,
        metrics_listen: None,
        insecure: true,
        limits: Default::default(),
    }
}

struct Running {
    addr: SocketAddr,
    /// Where `/health` and `/metrics` are served.
    metrics: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    fingerprint: String,
}

impl Running {
    async fn start(config: &PartyConfig) -> Running {
        Self::start_with(config, None).await
    }

    /// Serves with mutual TLS under `tls` (its CA, the party's certificate, its allow-list).
    async fn start_with(config: &PartyConfig, tls: Option<TlsFiles>) -> Running {
        let opened = fedmcmc_party::open(config).unwrap();
        let fingerprint = opened.node.describe().model_fingerprint;
        // As `party serve` does: idle runs are closed while the node lives.
        tokio::spawn(fedmcmc_party::PartyNode::keep_leases(
            std::sync::Arc::downgrade(&opened.node),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let metrics_addr = metrics.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let stopped = async {
                let _ = stopped.await;
            };
            let (node, token) = (opened.node, opened.token);
            let metrics = Some(metrics);
            fedmcmc_party::service::serve(node, &token, tls.as_ref(), listener, metrics, stopped)
                .await
                .unwrap();
        });
        Running {
            addr,
            metrics: metrics_addr,
            stop: Some(stop),
            task: Some(task),
            fingerprint,
        }
    }

    /// Graceful shutdown: the node (and its ledger writer) is dropped when this returns.
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap();
    }

    async fn client_with(&self, token: Option<&str>) -> Client {
        self.client_with_tokens(token.as_slice()).await
    }

    /// A client that sends one `authorization: Bearer <t>` entry per token, in order.
    async fn client_with_tokens(&self, tokens: &[&str]) -> Client {
        let channel = Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        authorised(channel, tokens)
    }

    /// A channel over mutual TLS to the party (named `alpha`), as the holder of the
    /// certificate `name` from the CA in `ca`.
    async fn tls_channel(&self, ca: &Path, name: &str) -> Channel {
        let tls = fedmcmc_party::tls::files_for(ca, name)
            .client("alpha")
            .unwrap();
        Channel::from_shared(format!("https://{}", self.addr))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    async fn client(&self) -> Client {
        self.client_with(Some(TOKEN)).await
    }

    /// `GET path` on the metrics port: (status code, body).
    async fn http_get(&self, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut socket = tokio::net::TcpStream::connect(self.metrics).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: party\r\nConnection: close\r\n\r\n");
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        socket.read_to_string(&mut response).await.unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (code, body.to_string())
    }
}

/// The value of the metric line that starts with `series` (name and labels).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

/// A party client on `channel` that sends one `authorization: Bearer <t>` entry per token.
fn authorised(channel: Channel, tokens: &[&str]) -> Client {
    let headers: Vec<tonic::metadata::MetadataValue<tonic::metadata::Ascii>> = tokens
        .iter()
        .map(|t| format!("Bearer {t}").parse().unwrap())
        .collect();
    let auth: Auth = Box::new(move |mut req: tonic::Request<()>| {
        for h in &headers {
            req.metadata_mut().append("authorization", h.clone());
        }
        Ok(req)
    });
    PartyClient::with_interceptor(channel, auth).max_encoding_message_size(16 << 20)
}

/// A party with ε = 1, δ = 1e-6 on a fresh directory, and a client for it.
async fn fresh() -> (tempfile::TempDir, Running, Client) {
    let dir = tempfile::tempdir().unwrap();
    let party = Running::start(&party_dir(dir.path(), 1.0, 1e-6)).await;
    let client = party.client().await;
    (dir, party, client)
}

fn tau(t: f64) -> pb::run_plan::Noise {
    pb::run_plan::Noise::Tau(t)
}

fn calibrate() -> pb::run_plan::Noise {
    pb::run_plan::Noise::Calibrate(true)
}

fn plan(chains: u32, steps: u64, noise: pb::run_plan::Noise) -> pb::RunPlan {
    pb::RunPlan {
        variant: pb::Variant::FullPenalty as i32,
        chains,
        steps_per_chain: steps,
        clip: 2.0,
        noise: Some(noise),
        ..Default::default()
    }
}

async fn open(
    client: &mut Client,
    fp: &str,
    p: pb::RunPlan,
) -> Result<pb::RunGrant, tonic::Status> {
    client
        .open_run(pb::OpenRunRequest {
            plan: Some(p),
            model_fingerprint: fp.into(),
        })
        .await
        .map(|r| r.into_inner())
}

/// A log-likelihood-ratio step request.
/// Closes `run_id` and returns the releases it was charged.
async fn releases_at_close(c: &mut Client, run_id: &str) -> u64 {
    let request = pb::CloseRunRequest {
        run_id: run_id.into(),
    };
    c.close_run(request).await.unwrap().into_inner().releases
}

fn step_request(
    run_id: &str,
    chain: u32,
    step: u64,
    theta: Vec<f64>,
    theta_proposed: Vec<f64>,
) -> pb::StepRequest {
    pb::StepRequest {
        key: Some(pb::StepKey {
            run_id: run_id.into(),
            chain,
            step,
        }),
        query: Some(pb::step_request::Query::LogLikRatio(pb::LogLikRatioQuery {
            theta,
            theta_proposed,
        })),
    }
}

async fn llr(
    client: &mut Client,
    run_id: &str,
    chain: u32,
    step: u64,
    theta: Vec<f64>,
    prop: Vec<f64>,
) -> Result<pb::Contribution, tonic::Status> {
    client
        .step(step_request(run_id, chain, step, theta, prop))
        .await
        .map(|r| r.into_inner())
}

async fn committed(client: &mut Client) -> f64 {
    client
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner()
        .epsilon_committed
}

const TH: [f64; 2] = [0.0, 3.0];
const PROP: [f64; 2] = [0.01, 2.99];

/// A call with two `authorization` entries is refused, saying two were sent, whichever comes
/// first: a check that read only the first (or the last) let a right token beside a wrong one
/// through. One right entry is still answered.
#[tokio::test]
async fn two_authorization_headers_are_refused_in_either_order() {
    let (_dir, party, mut c) = fresh().await;
    let wrong = "wrong-token-0123456789abcdef";
    for tokens in [[TOKEN, wrong], [wrong, TOKEN], [TOKEN, TOKEN]] {
        let mut two = party.client_with_tokens(&tokens).await;
        for err in [
            two.describe(pb::DescribeRequest {}).await.unwrap_err(),
            open(&mut two, &party.fingerprint, plan(1, 1, tau(1.0)))
                .await
                .unwrap_err(),
        ] {
            assert_eq!(err.code(), Code::Unauthenticated, "{tokens:?}: {err:?}");
            assert_eq!(
                err.message(),
                "the call carries 2 authorization headers; send exactly one bearer token",
                "{tokens:?}"
            );
        }
    }
    assert_eq!(committed(&mut c).await, 0.0);
    party.stop().await;
}

/// Describe is paced per caller (20 a second after a burst of 20; waits over 2 s are refused):
/// of a flood of 200, the burst and 2 s of the pace are answered (60 if all arrive at one
/// instant: 20 at once and 40 spaced 50 ms apart; one more per 50 ms of spread) and the rest
/// refused as RESOURCE_EXHAUSTED with a sentence, while the same caller's Step is answered.
#[tokio::test]
async fn a_describe_flood_is_paced_and_steps_go_on() {
    let (_dir, party, mut c) = fresh().await;
    let grant = open(&mut c, &party.fingerprint, plan(1, 4, tau(1.0)))
        .await
        .unwrap();
    let mut clients = Vec::new();
    for _ in 0..200 {
        clients.push(party.client().await); // other connections from the same address
    }
    let flood: Vec<_> = clients
        .into_iter()
        .map(|mut c| tokio::spawn(async move { c.describe(pb::DescribeRequest {}).await }))
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    llr(&mut c, &grant.run_id, 0, 0, vec![0.0, 3.0], vec![0.1, 3.0])
        .await
        .unwrap();
    let (mut answered, mut refused) = (0, 0);
    for call in flood {
        match call.await.unwrap() {
            Ok(_) => answered += 1,
            Err(e) => {
                assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
                assert!(
                    e.message()
                        .starts_with("Describe is paced at 20 calls per second per caller"),
                    "{}",
                    e.message()
                );
                refused += 1;
            }
        }
    }
    // At least the burst and 2 s of the pace; at most that and 5 s of spread (a slow machine).
    assert!((60..=160).contains(&answered), "{answered} answered");
    assert_eq!(answered + refused, 200);
    party.stop().await;
}

/// Describe over mutual TLS as the holder of certificate `name` from the CA in `ca`, dialling
/// the party as `party_name`: its name, or why the handshake or the call failed.
async fn tls_describe(
    addr: SocketAddr,
    ca: &Path,
    name: &str,
    party_name: &str,
) -> Result<String, String> {
    let config = fedmcmc_party::tls::files_for(ca, name)
        .client(party_name)
        .unwrap();
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(config)
        .unwrap()
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    authorised(channel, &[TOKEN])
        .describe(pb::DescribeRequest {})
        .await
        .map(|d| d.into_inner().party_name)
        .map_err(|e| format!("{e:?}"))
}

/// Certificates expire, are renewed and revoked: a coordinator certificate whose validity has
/// passed is refused at the handshake; without renewal an existing certificate is never
/// overwritten; renewed (a new key and certificate, `coordinator certs --renew`), the same
/// name is answered; revoked (`--revoke`), it is refused by a party given the CA's list, and
/// renewed again, answered. The party's own certificate names an IP address, as the
/// coordinator dials it.
#[tokio::test]
async fn certificates_expire_are_renewed_and_revoked_and_may_name_an_ip_address() {
    use fedmcmc_party::tls::{self, Issuing};
    use std::time::{Duration, SystemTime};

    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("tls");
    let (party_name, coordinator) = ("127.0.0.1".to_string(), "coordinator".to_string());
    tls::issue(&ca, std::slice::from_ref(&party_name)).unwrap();
    let (now, day) = (SystemTime::now(), Duration::from_secs(86_400));
    let lapsed = Issuing {
        valid: now - 2 * day..now - day,
        renew: false,
    };
    tls::issue_with(&ca, std::slice::from_ref(&coordinator), &lapsed).unwrap();
    let files = tls::files_for(&ca, &party_name);
    let party = Running::start_with(&party_dir(dir.path(), 1.0, 1e-6), Some(files)).await;
    let as_coordinator = || tls_describe(party.addr, &ca, &coordinator, &party_name);
    as_coordinator().await.expect_err("an expired certificate");
    let again = tls::issue(&ca, std::slice::from_ref(&coordinator)).unwrap_err();
    assert!(
        again
            .to_string()
            .ends_with("was issued already (renew it with --renew)"),
        "{again}"
    );
    as_coordinator()
        .await
        .expect_err("still the expired certificate");
    let bad = tls::issue(&ca, &["not a name!".to_string()]).unwrap_err();
    assert_eq!(
        bad.to_string(),
        "\"not a name!\" is neither a DNS name nor an IP address"
    );
    let renewed = tls::issue_with(
        &ca,
        std::slice::from_ref(&coordinator),
        &Issuing::days(30, true),
    )
    .unwrap();
    assert!(renewed[0].not_after > now + 29 * day);
    assert_eq!(as_coordinator().await.unwrap(), "alpha");
    party.stop().await;

    // Revoked: a party given the CA's list refuses the certificate; renewed again (a new
    // serial), the name is answered.
    let crl = tls::revoke(&ca, std::slice::from_ref(&coordinator)).unwrap();
    let with_crl = || TlsFiles {
        crl: Some(crl.clone()),
        ..tls::files_for(&ca, &party_name)
    };
    let party = Running::start_with(&party_dir(dir.path(), 1.0, 1e-6), Some(with_crl())).await;
    let as_coordinator = || tls_describe(party.addr, &ca, &coordinator, &party_name);
    as_coordinator().await.expect_err("a revoked certificate");
    tls::issue_with(
        &ca,
        std::slice::from_ref(&coordinator),
        &Issuing::days(30, true),
    )
    .unwrap();
    assert_eq!(as_coordinator().await.unwrap(), "alpha");
    party.stop().await;
}

/// The allow-list of client certificate names holds for the health service as for the
/// party's own: a certificate from the federation's CA whose name the party does not admit is
/// refused by both (PERMISSION_DENIED), and the admitted one gets the health answer without
/// a token (operators' probes carry none) and the party's answers with it.
#[tokio::test]
async fn the_health_service_admits_only_the_allowed_client_names() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("tls");
    let names = ["alpha", "coordinator", "intruder"].map(String::from);
    fedmcmc_party::tls::issue(&ca, &names).unwrap();
    let tls = TlsFiles {
        allowed_clients: vec!["coordinator".into()],
        ..fedmcmc_party::tls::files_for(&ca, "alpha")
    };
    let party = Running::start_with(&party_dir(dir.path(), 1.0, 1e-6), Some(tls)).await;
    let check = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    let party_service = "fedmcmc.v1.Party";

    let admitted = party.tls_channel(&ca, "coordinator").await;
    let mut health = HealthClient::new(admitted.clone());
    for service in ["", party_service] {
        let status = health
            .check(check(service))
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    let d = authorised(admitted, &[TOKEN])
        .describe(pb::DescribeRequest {})
        .await
        .unwrap();
    assert_eq!(d.into_inner().party_name, "alpha");

    let excluded = party.tls_channel(&ca, "intruder").await;
    let mut health = HealthClient::new(excluded.clone());
    for service in ["", party_service] {
        let err = health.check(check(service)).await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{service:?}: {err:?}");
        assert_eq!(
            err.message(),
            "this party does not admit the caller's certificate name"
        );
    }
    let err = authorised(excluded, &[TOKEN])
        .describe(pb::DescribeRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    party.stop().await;
}

#[tokio::test]
async fn over_budget_open_run_is_refused_with_what_is_left() {
    let (_dir, party, mut c) = fresh().await;
    // τ = 0.01 with n = 2000 gives s ≈ 0.447: a million releases cannot fit ε = 1.
    let err = open(&mut c, &party.fingerprint, plan(1, 1_000_000, tau(0.01)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message().contains("budget") && err.message().contains("at most"),
        "{}",
        err.message()
    );
    // Reservations of open runs count: once one open run has reserved everything, nothing
    // more is admitted.
    let first = open(&mut c, &party.fingerprint, plan(1, 10, calibrate()))
        .await
        .unwrap();
    assert!(
        (committed(&mut c).await - 1.0).abs() < 1e-6,
        "calibration takes all that is left"
    );
    let err = open(&mut c, &party.fingerprint, plan(1, 1, calibrate()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    // Closing after 2 of 10 releases frees the rest of the reservation.
    for step in 0..2 {
        llr(&mut c, &first.run_id, 0, step, TH.to_vec(), PROP.to_vec())
            .await
            .unwrap();
    }
    assert_eq!(releases_at_close(&mut c, &first.run_id).await, 2);
    assert!(committed(&mut c).await < 1.0);
    assert!(
        open(&mut c, &party.fingerprint, plan(1, 1, calibrate()))
            .await
            .is_ok()
    );
    party.stop().await;
}

#[tokio::test]
async fn replayed_step_returns_the_stored_answer_and_is_charged_once() {
    let (_dir, party, mut c) = fresh().await;
    let grant = open(&mut c, &party.fingerprint, plan(2, 5, tau(0.5)))
        .await
        .unwrap();
    let first = llr(&mut c, &grant.run_id, 1, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    let again = llr(&mut c, &grant.run_id, 1, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    assert_eq!(first.value, again.value);
    assert_eq!(first.noise_variance, again.noise_variance);
    assert!(!first.replayed && again.replayed);
    // A reused step with a new θ is refused, whichever entry differs.
    let err = llr(
        &mut c,
        &grant.run_id,
        1,
        0,
        vec![0.0, 3.0],
        vec![0.01, 2.98],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("already answered"),
        "{}",
        err.message()
    );
    // Out of order: skipping ahead, or going back past the last step.
    let err = llr(&mut c, &grant.run_id, 1, 2, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    llr(&mut c, &grant.run_id, 1, 1, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    let err = llr(&mut c, &grant.run_id, 1, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    // Charged once per step: two releases in all.
    assert_eq!(releases_at_close(&mut c, &grant.run_id).await, 2);
    // A closed run answers nothing new.
    let err = llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    party.stop().await;
}

#[tokio::test]
async fn malformed_theta_is_invalid_and_costs_nothing() {
    let (_dir, party, mut c) = fresh().await;
    let grant = open(&mut c, &party.fingerprint, plan(1, 5, tau(0.5)))
        .await
        .unwrap();
    for (theta, prop) in [
        (vec![f64::NAN, 3.0], PROP.to_vec()),
        (TH.to_vec(), vec![0.0, f64::INFINITY]),
        (TH.to_vec(), vec![f64::NEG_INFINITY, 3.0]),
        (vec![0.0, 3.0, 1.0], vec![0.0, 3.0, 1.0]),
        (vec![0.0], PROP.to_vec()),
        (vec![], vec![]),
        (vec![-1e300, 3.0], vec![1e300, 3.0]),
    ] {
        let err = llr(&mut c, &grant.run_id, 0, 0, theta.clone(), prop.clone())
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Code::InvalidArgument,
            "{theta:?} {prop:?}: {}",
            err.message()
        );
    }
    let err = llr(&mut c, &grant.run_id, 7, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "chain out of range");
    // None of that was charged: step 0 is still fresh.
    let ok = llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    assert!(!ok.replayed);
    party.stop().await;
}

#[tokio::test]
async fn unknown_runs_unauthenticated_callers_oversize_messages_and_bad_plans_are_refused() {
    let (_dir, party, mut c) = fresh().await;
    let err = llr(&mut c, "0123456789abcdef", 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = c
        .close_run(pb::CloseRunRequest {
            run_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    for token in [None, Some("wrong-token-0123456789abcdef")] {
        let mut anon = party.client_with(token).await;
        let err = anon.describe(pb::DescribeRequest {}).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated);
        let err = open(&mut anon, &party.fingerprint, plan(1, 1, tau(1.0)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated);
    }

    let grant = open(&mut c, &party.fingerprint, plan(1, 5, tau(0.5)))
        .await
        .unwrap();
    let huge = vec![0.5; 100_000];
    let err = llr(&mut c, &grant.run_id, 0, 0, huge.clone(), huge)
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::ResourceExhausted,
        "oversize: {}",
        err.message()
    );
    assert!(
        !llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
            .await
            .unwrap()
            .replayed
    );

    // Plans: wrong model, unsupported variant, no noise choice, nonsense numbers.
    let err = open(&mut c, "not-the-model", plan(1, 1, tau(1.0)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let mut unserved = plan(1, 1, tau(1.0));
    unserved.variant = pb::Variant::SufficientStatistics as i32;
    assert_eq!(
        open(&mut c, &party.fingerprint, unserved)
            .await
            .unwrap_err()
            .code(),
        Code::Unimplemented
    );
    let mut hmc = plan(1, 1, tau(1.0));
    hmc.variant = pb::Variant::Hmc as i32;
    let err = open(&mut c, &party.fingerprint, hmc).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("leapfrog"), "{}", err.message());
    let mut none = plan(1, 1, tau(1.0));
    none.noise = None;
    assert_eq!(
        open(&mut c, &party.fingerprint, none)
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    let mut unknown = plan(1, 1, tau(1.0));
    unknown.variant = 99;
    let err = open(&mut c, &party.fingerprint, unknown).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    assert!(err.message().contains("99"), "{}", err.message());
    // τ that the accountant cannot take: a sentence about τ, not the accountant's internals.
    for t in [1e-300, 5e-324, 1e308] {
        let err = open(&mut c, &party.fingerprint, plan(1, 1, tau(t)))
            .await
            .unwrap_err();
        assert!(
            matches!(err.code(), Code::InvalidArgument | Code::ResourceExhausted),
            "τ = {t}: {err:?}"
        );
        assert!(
            err.message().starts_with("tau = "),
            "τ = {t}: {}",
            err.message()
        );
    }
    for bad in [
        plan(0, 1, tau(1.0)),
        plan(1, 0, tau(1.0)),
        plan(1, 1, tau(f64::NAN)),
        plan(1, 1, tau(-1.0)),
    ] {
        assert_eq!(
            open(&mut c, &party.fingerprint, bad)
                .await
                .unwrap_err()
                .code(),
            Code::InvalidArgument
        );
    }
    // A run cannot release more than it planned.
    let small = open(&mut c, &party.fingerprint, plan(1, 1, tau(0.5)))
        .await
        .unwrap();
    llr(&mut c, &small.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    let err = llr(&mut c, &small.run_id, 0, 1, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    party.stop().await;
}

#[tokio::test]
async fn a_restarted_party_remembers_what_it_spent_and_answered() {
    let dir = tempfile::tempdir().unwrap();
    let config = party_dir(dir.path(), 1.0, 1e-6);
    let party = Running::start(&config).await;
    let mut c = party.client().await;
    let grant = open(&mut c, &party.fingerprint, plan(1, 100, calibrate()))
        .await
        .unwrap();
    let answer = llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    let before = committed(&mut c).await;
    drop(c);
    party.stop().await;

    let party = Running::start(&config).await;
    let mut c = party.client().await;
    assert_eq!(committed(&mut c).await, before);
    let err = open(&mut c, &party.fingerprint, plan(1, 1, calibrate()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    let again = llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    assert_eq!(again.value, answer.value);
    assert!(again.replayed);
    let err = llr(&mut c, &grant.run_id, 0, 0, vec![0.0, 3.5], PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let next = llr(&mut c, &grant.run_id, 0, 1, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    assert!(!next.replayed);
    party.stop().await;
}

/// Frames of one step each, as a single chain sends them.
fn one_per_frame(steps: Vec<pb::StepRequest>) -> impl futures::Stream<Item = pb::StepFrame> {
    futures::stream::iter(steps.into_iter().map(|s| pb::StepFrame { steps: vec![s] }))
}

/// The replies of each frame, in order, until the stream ends.
async fn replies_of(
    mut replies: tonic::Streaming<pb::StepReplies>,
) -> Vec<Vec<pb::step_reply::Result>> {
    let mut got = Vec::new();
    while let Some(r) = replies.message().await.unwrap() {
        got.push(r.replies.into_iter().map(|r| r.result.unwrap()).collect());
    }
    got
}

#[tokio::test]
async fn the_step_stream_answers_in_order_and_refusals_do_not_end_it() {
    let (_dir, party, mut c) = fresh().await;
    let grant = open(&mut c, &party.fingerprint, plan(1, 5, tau(0.5)))
        .await
        .unwrap();
    let req =
        |step: u64, theta: Vec<f64>| step_request(&grant.run_id, 0, step, theta, PROP.to_vec());
    let requests = vec![
        req(0, TH.to_vec()),
        req(1, vec![f64::NAN, 3.0]),
        req(0, TH.to_vec()),
        req(1, TH.to_vec()),
        req(3, TH.to_vec()),
    ];
    let replies = c
        .step_stream(one_per_frame(requests))
        .await
        .unwrap()
        .into_inner();
    let got: Vec<_> = replies_of(replies).await.into_iter().flatten().collect();
    use pb::step_reply::Result as R;
    assert_eq!(got.len(), 5);
    let first = match &got[0] {
        R::Contribution(c) => c.clone(),
        other => panic!("{other:?}"),
    };
    assert!(matches!(&got[1], R::Refusal(r) if r.code == Code::InvalidArgument as i32));
    assert!(matches!(&got[2], R::Contribution(c) if c.replayed && c.value == first.value));
    assert!(matches!(&got[3], R::Contribution(c) if !c.replayed));
    assert!(matches!(&got[4], R::Refusal(r) if r.code == Code::FailedPrecondition as i32));

    // An oversize message ends a stream with RESOURCE_EXHAUSTED, as it fails a unary call.
    let huge = vec![0.5; 100_000];
    let oversize = step_request(&grant.run_id, 0, 2, huge.clone(), huge);
    let mut replies = c
        .step_stream(one_per_frame(vec![oversize]))
        .await
        .unwrap()
        .into_inner();
    let err = replies.message().await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{}", err.message());

    let mut anon = party.client_with(None).await;
    let err = anon
        .step_stream(one_per_frame(vec![req(2, TH.to_vec())]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    party.stop().await;
}

/// One frame carries every chain's step: each is answered as alone, in the frame's order,
/// whatever the order of its chains; a chain asked twice in a frame gets its steps in turn
/// (the second a replay of the first); a refusal fails only its own step; a frame of more
/// than the party's limit is refused step by step; every release is in the ledger once.
#[tokio::test]
async fn a_frame_answers_every_chain_as_alone() {
    let (_dir, party, mut c) = fresh().await;
    let grant = open(&mut c, &party.fingerprint, plan(4, 5, tau(0.5)))
        .await
        .unwrap();
    let req = |chain: u32, step: u64, theta: Vec<f64>| {
        step_request(&grant.run_id, chain, step, theta, PROP.to_vec())
    };
    let frames = vec![
        pb::StepFrame {
            steps: vec![
                req(2, 0, TH.to_vec()),
                req(0, 0, TH.to_vec()),
                req(3, 0, vec![f64::NAN, 3.0]),
                req(1, 0, TH.to_vec()),
                req(0, 0, TH.to_vec()),
                req(9, 0, TH.to_vec()),
                step_request("0123456789abcdef", 0, 0, TH.to_vec(), PROP.to_vec()),
            ],
        },
        pb::StepFrame {
            steps: (0..4).map(|chain| req(chain, 1, TH.to_vec())).collect(),
        },
        pb::StepFrame {
            // Small enough to pass the message size limit: refused for the count alone.
            steps: (0..1025)
                .map(|_| step_request(&grant.run_id, 0, 2, vec![], vec![]))
                .collect(),
        },
    ];
    let replies = c
        .step_stream(futures::stream::iter(frames))
        .await
        .unwrap()
        .into_inner();
    let got = replies_of(replies).await;
    use pb::step_reply::Result as R;
    let value = |r: &R| match r {
        R::Contribution(c) => (c.value.clone(), c.replayed),
        R::Refusal(r) => panic!("refused: {r:?}"),
    };
    let code = |r: &R| match r {
        R::Refusal(r) => Code::from(r.code),
        R::Contribution(c) => panic!("answered: {c:?}"),
    };
    assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [7, 4, 1025]);
    let (first, replayed) = value(&got[0][1]);
    assert!(!replayed);
    assert_eq!(
        value(&got[0][4]),
        (first, true),
        "the same step again: its stored answer"
    );
    assert!(!value(&got[0][0]).1 && !value(&got[0][3]).1);
    assert_eq!(code(&got[0][2]), Code::InvalidArgument);
    assert_eq!(code(&got[0][5]), Code::InvalidArgument, "chain 9 of 4");
    assert_eq!(code(&got[0][6]), Code::NotFound);
    // Chain 3's step 0 was refused, so its step 1 is out of order; the others go on.
    assert_eq!(code(&got[1][3]), Code::FailedPrecondition);
    for r in &got[1][..3] {
        assert!(!value(r).1);
    }
    assert!(got[2].iter().all(|r| code(r) == Code::ResourceExhausted));
    assert_eq!(releases_at_close(&mut c, &grant.run_id).await, 6);
    party.stop().await;
}

/// A coordinator that vanishes leaves its run open: the lease keeper closes it once it has
/// been idle for the lease, charging the one release made, and a late step is told so.
#[tokio::test]
async fn the_lease_keeper_closes_an_abandoned_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = party_dir(dir.path(), 1.0, 1e-6);
    config.limits.lease_seconds = 1;
    let party = Running::start(&config).await;
    let mut c = party.client().await;
    let grant = open(&mut c, &party.fingerprint, plan(1, 20, tau(0.5)))
        .await
        .unwrap();
    assert_eq!(grant.lease_seconds, 1);
    llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    // Wait for the keeper (it checks four times per lease); the bound only stops a hang.
    let mut d = c
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    for _ in 0..300 {
        if d.open_runs == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        d = c
            .describe(pb::DescribeRequest {})
            .await
            .unwrap()
            .into_inner();
    }
    assert_eq!(d.open_runs, 0, "the idle run was not closed");
    let one = fedmcmc_party::budget::Budget::new(config.budget)
        .unwrap()
        .epsilon_of(
            &fedmcmc_common::accountant::Composition::new(
                vec![fedmcmc_common::accountant::Release {
                    mechanism: fedmcmc_common::accountant::MechanismKind::Gaussian,
                    noise_multiplier: grant.noise_multiplier,
                    count: 1.0,
                }],
                Neighbours::Substitute,
            )
            .unwrap(),
        );
    assert!(
        (d.epsilon_committed / one - 1.0).abs() < 1e-12,
        "{} vs {one}",
        d.epsilon_committed
    );
    let err = llr(&mut c, &grant.run_id, 0, 1, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("was closed after 1 s idle"),
        "{}",
        err.message()
    );
    party.stop().await;
}

/// The metrics port says the party is serving and counts what the calls did: releases,
/// replays, refusals by code (interceptors', handlers' and in-stream ones alike), step
/// times, and the ledger's ε as Describe gives it.
#[tokio::test]
async fn metrics_count_releases_and_refusals_by_code_and_health_says_serving() {
    let (_dir, party, mut c) = fresh().await;
    assert_eq!(
        party.http_get("/health").await,
        (200, "SERVING\n".to_string())
    );
    let grant = open(&mut c, &party.fingerprint, plan(1, 5, tau(0.5)))
        .await
        .unwrap();
    for step in 0..3 {
        llr(&mut c, &grant.run_id, 0, step, TH.to_vec(), PROP.to_vec())
            .await
            .unwrap();
    }
    // A replay, two bad θ, an unknown run, and an unauthenticated caller.
    llr(&mut c, &grant.run_id, 0, 2, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    for theta in [vec![f64::NAN, 3.0], vec![0.0]] {
        llr(&mut c, &grant.run_id, 0, 3, theta, PROP.to_vec())
            .await
            .unwrap_err();
    }
    llr(&mut c, "0123456789abcdef", 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    let mut anon = party.client_with(None).await;
    anon.describe(pb::DescribeRequest {}).await.unwrap_err();
    // One refusal inside a stream (a step out of the run's range).
    let late = step_request(&grant.run_id, 0, 99, TH.to_vec(), PROP.to_vec());
    let mut replies = c
        .step_stream(one_per_frame(vec![late]))
        .await
        .unwrap()
        .into_inner();
    let reply = replies.message().await.unwrap().unwrap().replies.remove(0);
    let Some(pb::step_reply::Result::Refusal(refusal)) = reply.result else {
        panic!("step 99 of 5 was answered");
    };
    assert_eq!(Code::from(refusal.code), Code::FailedPrecondition);

    let (code, text) = party.http_get("/metrics").await;
    assert_eq!(code, 200);
    assert_eq!(metric(&text, "fedmcmc_party_releases_total"), 3.0);
    assert_eq!(metric(&text, "fedmcmc_party_replays_total"), 1.0);
    let refused = |code: &str| {
        metric(
            &text,
            &format!("fedmcmc_party_refusals_total{{code=\"{code}\"}}"),
        )
    };
    assert_eq!(refused("InvalidArgument"), 2.0, "{text}");
    assert_eq!(refused("NotFound"), 1.0);
    assert_eq!(refused("Unauthenticated"), 1.0);
    assert_eq!(
        refused("FailedPrecondition"),
        1.0,
        "the refusal in the stream"
    );
    // Every step, answered or refused, was timed: 3 + 1 + 2 + 1 + 1.
    assert_eq!(metric(&text, "fedmcmc_party_step_seconds_count"), 8.0);
    let d = c
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        metric(&text, "fedmcmc_party_epsilon_committed"),
        d.epsilon_committed
    );
    assert_eq!(metric(&text, "fedmcmc_party_epsilon_budget"), 1.0);
    assert_eq!(metric(&text, "fedmcmc_party_open_runs"), 1.0);
    assert_eq!(metric(&text, "fedmcmc_party_rows"), ROWS as f64);
    assert_eq!(party.http_get("/nowhere").await.0, 404);
    party.stop().await;
}
