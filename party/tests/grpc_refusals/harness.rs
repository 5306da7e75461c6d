//! The test harness: a party directory, a party served on loopback ports, clients with
//! chosen tokens, and shorthands for plans, runs and steps.
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
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub(crate) const TOKEN: &str = "test-token-0123456789abcdef";
pub(crate) const ROWS: usize = 2_000;

pub(crate) type Auth =
    Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send>;
pub(crate) type Client = PartyClient<InterceptedService<Channel, Auth>>;

/// Writes a party directory (rows, token) and returns its config.
pub(crate) fn party_dir(dir: &Path, epsilon: f64, delta: f64) -> PartyConfig {
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

pub(crate) struct Running {
    pub(crate) addr: SocketAddr,
    /// Where `/health` and `/metrics` are served.
    metrics: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    pub(crate) fingerprint: String,
}

impl Running {
    pub(crate) async fn start(config: &PartyConfig) -> Running {
        Self::start_with(config, None).await
    }

    /// Serves with mutual TLS under `tls` (its CA, the party's certificate, its allow-list).
    pub(crate) async fn start_with(config: &PartyConfig, tls: Option<TlsFiles>) -> Running {
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
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap();
    }

    pub(crate) async fn client_with(&self, token: Option<&str>) -> Client {
        self.client_with_tokens(token.as_slice()).await
    }

    /// A client that sends one `authorization: Bearer <t>` entry per token, in order.
    pub(crate) async fn client_with_tokens(&self, tokens: &[&str]) -> Client {
        let channel = Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        authorised(channel, tokens)
    }

    /// A channel over mutual TLS to the party (named `alpha`), as the holder of the
    /// certificate `name` from the CA in `ca`.
    pub(crate) async fn tls_channel(&self, ca: &Path, name: &str) -> Channel {
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

    pub(crate) async fn client(&self) -> Client {
        self.client_with(Some(TOKEN)).await
    }

    /// `GET path` on the metrics port: (status code, body).
    pub(crate) async fn http_get(&self, path: &str) -> (u16, String) {
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

/// A party client on `channel` that sends one `authorization: Bearer <t>` entry per token.
pub(crate) fn authorised(channel: Channel, tokens: &[&str]) -> Client {
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
pub(crate) async fn fresh() -> (tempfile::TempDir, Running, Client) {
    let dir = tempfile::tempdir().unwrap();
    let party = Running::start(&party_dir(dir.path(), 1.0, 1e-6)).await;
    let client = party.client().await;
    (dir, party, client)
}

pub(crate) fn tau(t: f64) -> pb::run_plan::Noise {
    pb::run_plan::Noise::Tau(t)
}

pub(crate) fn calibrate() -> pb::run_plan::Noise {
    pb::run_plan::Noise::Calibrate(true)
}

pub(crate) fn plan(chains: u32, steps: u64, noise: pb::run_plan::Noise) -> pb::RunPlan {
    pb::RunPlan {
        variant: pb::Variant::FullPenalty as i32,
        chains,
        steps_per_chain: steps,
        clip: 2.0,
        noise: Some(noise),
        ..Default::default()
    }
}

pub(crate) async fn open(
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

/// Closes `run_id` and returns the releases it was charged.
pub(crate) async fn releases_at_close(c: &mut Client, run_id: &str) -> u64 {
    let request = pb::CloseRunRequest {
        run_id: run_id.into(),
    };
    c.close_run(request).await.unwrap().into_inner().releases
}

/// A log-likelihood-ratio step request.
pub(crate) fn step_request(
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

pub(crate) async fn llr(
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

pub(crate) async fn committed(client: &mut Client) -> f64 {
    client
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner()
        .epsilon_committed
}

pub(crate) const TH: [f64; 2] = [0.0, 3.0];
pub(crate) const PROP: [f64; 2] = [0.01, 2.99];

/// Frames of one step each, as a single chain sends them.
pub(crate) fn one_per_frame(
    steps: Vec<pb::StepRequest>,
) -> impl futures::Stream<Item = pb::StepFrame> {
    futures::stream::iter(steps.into_iter().map(|s| pb::StepFrame { steps: vec![s] }))
}

/// The replies of each frame, in order, until the stream ends.
pub(crate) async fn replies_of(
    mut replies: tonic::Streaming<pb::StepReplies>,
) -> Vec<Vec<pb::step_reply::Result>> {
    let mut got = Vec::new();
    while let Some(r) = replies.message().await.unwrap() {
        got.push(r.replies.into_iter().map(|r| r.result.unwrap()).collect());
    }
    got
}
