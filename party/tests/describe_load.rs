//! A measurement, not a check (ignored; run it in release): Step latency over gRPC while 8
//! clients loop on Describe, on a party whose ledger holds many cheap closed minibatch runs,
//! each at its own noise (issue 23: one caller must not slow every other caller).
//!
//! `cargo test --release -p fedmcmc-party
//!  --test describe_load -- --ignored --nocapture`
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fedmcmc_common::accountant::Choice;
use fedmcmc_party::budget::Budget;
use fedmcmc_party::budget::NoiseRequest::Tau;
use fedmcmc_party::config::BudgetConfig;
use fedmcmc_party::ledger::{ClosedBy, Ledger, ReleaseRecord, RunTerms};
use fedmcmc_proto::v1 as pb;
use pb::party_client::PartyClient;
use tonic::transport::Channel;

mod support;

const ROWS: usize = 2_000;
const CLOSED_RUNS: usize = 200;
const DESCRIBERS: usize = 8;
const TOKEN: &str = "describe-load-token";
/// Steps measured under load.
const LOADED_STEPS: usize = 200;

/// `runs` closed minibatch runs of one release each, the i-th at multiplier 1 + i/100, written
/// straight to the ledger (as a caller's open/step/close loop would leave it, without the
/// minutes that loop takes on a party whose accounting grows with history).
async fn closed_history(ledger: &Ledger, runs: usize) {
    for i in 0..runs {
        let run_id = format!("{i:032x}");
        let s = 1.0 + i as f64 / 100.0;
        let terms = RunTerms {
            variant: "minibatch-penalty".into(),
            chains: 1,
            steps_per_chain: 1,
            planned_releases: 1,
            clip: 1.0,
            tau: s / (ROWS as f64).sqrt(),
            noise_multiplier: s,
            batch_size: Some(100),
            population: Some(ROWS as u64),
            barker_variance: None,
            hmc: None,
            aggregation: None,
        };
        ledger.open_run(&run_id, &terms).await.unwrap();
        let release = ReleaseRecord {
            run_id: run_id.clone(),
            chain: 0,
            step: 0,
            mechanism: "gaussian".into(),
            noise_multiplier: s,
            inputs: vec![0.0; 4],
            value: vec![0.0],
            noise_variance: 1.0,
            masked: None,
        };
        for outcome in ledger.record_releases(&[release]).await {
            outcome.unwrap();
        }
        ledger.close_run(&run_id, ClosedBy::CloseRun).await.unwrap();
    }
}

type Client = PartyClient<
    tonic::service::interceptor::InterceptedService<
        Channel,
        fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>,
    >,
>;

fn bearer(mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    let value = format!("Bearer {TOKEN}").parse().unwrap();
    req.metadata_mut().insert("authorization", value);
    Ok(req)
}

async fn client(addr: std::net::SocketAddr) -> Client {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    PartyClient::with_interceptor(channel, bearer as fn(_) -> _)
}

/// `steps` sequential Step calls from `next` on; each one's latency.
async fn steps(client: &mut Client, run_id: &str, next: &AtomicU64, steps: usize) -> Vec<f64> {
    let mut latencies = Vec::with_capacity(steps);
    for _ in 0..steps {
        let step = next.fetch_add(1, Ordering::SeqCst);
        let request = pb::StepRequest {
            key: Some(pb::StepKey {
                run_id: run_id.into(),
                chain: 0,
                step,
            }),
            query: Some(pb::step_request::Query::LogLikRatio(pb::LogLikRatioQuery {
                theta: vec![0.0, 3.0],
                theta_proposed: vec![0.01, 2.99],
            })),
        };
        let start = Instant::now();
        client.step(request).await.unwrap();
        latencies.push(start.elapsed().as_secs_f64() * 1e3);
    }
    latencies
}

fn summary(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "{what}: {} steps, p50 {:.2} ms, max {:.2} ms",
        ms.len(),
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    );
}

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn step_latency_while_clients_loop_on_describe() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let clients = tokio::runtime::Runtime::new().unwrap();
    clients.block_on(async {
        let (ledger, _) = Ledger::open(&path).unwrap();
        closed_history(&ledger, CLOSED_RUNS).await;
    });
    let budget = Budget::new(BudgetConfig {
        epsilon: 10.0,
        delta: 1e-6,
        accountant: Choice::Best,
    })
    .unwrap();
    // The party on a runtime of its own, as in its own process.
    let server = tokio::runtime::Runtime::new().unwrap();
    let (node, fp) = support::banana_party(ROWS, budget, Ledger::open(&path).unwrap());
    let node = Arc::new(node);
    let start = Instant::now();
    let closed = node.epsilon_closed();
    println!(
        "ε of the closed runs alone: {closed:.4}, composed in {:.0} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let start = Instant::now();
    let grant = server
        .block_on(support::open(&node, &fp, 1, 1 << 20, Tau(100.0)))
        .unwrap();
    println!(
        "{CLOSED_RUNS} closed runs at distinct noise; OpenRun took {:.0} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let listener = server
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = server.spawn(fedmcmc_party::service::serve(
        node,
        TOKEN,
        None,
        listener,
        None,
        async {
            let _ = stopped.await;
        },
    ));

    clients.block_on(async {
        let next = AtomicU64::new(0);
        let mut stepper = client(addr).await;
        steps(&mut stepper, &grant.run_id, &next, 20).await; // warm-up
        summary("idle", steps(&mut stepper, &grant.run_id, &next, 200).await);
        let done = Arc::new(AtomicBool::new(false));
        let described = Arc::new(AtomicU64::new(0));
        let mut loops = Vec::new();
        for _ in 0..DESCRIBERS {
            let (done, described) = (Arc::clone(&done), Arc::clone(&described));
            let mut c = client(addr).await;
            loops.push(tokio::spawn(async move {
                while !done.load(Ordering::SeqCst) {
                    c.describe(pb::DescribeRequest {}).await.unwrap();
                    described.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        // Let the describers fill the party's workers before measuring.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (loaded, before) = (Instant::now(), described.load(Ordering::SeqCst));
        let latencies = steps(&mut stepper, &grant.run_id, &next, LOADED_STEPS).await;
        // The describers are paced (`throttle.rs`): hold the load a second more to see at what rate.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let seconds = loaded.elapsed().as_secs_f64();
        done.store(true, Ordering::SeqCst);
        for l in loops {
            l.await.unwrap();
        }
        summary(
            &format!("{DESCRIBERS} clients looping on Describe"),
            latencies,
        );
        println!(
            "Describe answered {:.0} times per second meanwhile",
            (described.load(Ordering::SeqCst) - before) as f64 / seconds
        );
    });
    let _ = stop.send(());
    server.block_on(serving).unwrap().unwrap();
}
