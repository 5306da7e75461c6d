//! A party that stops answering cannot hold the coordinator (issue 23): every call to a party
//! over gRPC ends within its bound ([`Deadlines`], here a test's seconds instead of the
//! product's minute) with one sentence naming the call, and a job whose party freezes mid-run
//! ends with that sentence naming the party, its other parties' runs closed and the draws so
//! far written.
mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fedmcmc_common::models::ModelSpec;
use fedmcmc_common::proposal::ProposalKind;
use fedmcmc_coordinator::federation::grpc::{Deadlines, GrpcParty};
use fedmcmc_coordinator::federation::{
    CallError, CallErrorKind, Federation, NoiseChoice, PartyHandle, Query, RunPlan,
};
use fedmcmc_coordinator::interrupt::Stop;
use fedmcmc_coordinator::job::{self, Inits, JobSettings, Start};
use fedmcmc_coordinator::sampler::{ChainTrace, Progress};
use fedmcmc_coordinator::variant::Variant;
use fedmcmc_party::PartyNode;
use fedmcmc_party::variants::FULL_PENALTY;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const TOKEN: &str = "frozen-party-token-0123456789";

/// Tries of 400 ms, calls of 1.2 s: the product's 20 s and 60 s, scaled down.
const QUICK: Deadlines = Deadlines {
    attempt: Duration::from_millis(400),
    call: Duration::from_millis(1200),
};

/// How late past its bound a call may end on a loaded machine.
const SLACK: Duration = Duration::from_secs(2);

/// A party that accepts TCP connections and never writes a byte (as a SIGSTOPped process's
/// kernel does): returns its address.
async fn silent_party() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    address
}

/// Checks that `call` failed within the bound with the sentence naming `what`.
fn did_not_answer(what: &str, result: Result<(), CallError>, took: Duration) {
    let e = result.unwrap_err();
    assert_eq!(e.kind, CallErrorKind::Unavailable, "{e}");
    assert!(
        e.message
            .starts_with(&format!("did not answer {what} within 1.2 s (")),
        "{e}"
    );
    assert!(took <= QUICK.call + SLACK, "{what} took {took:?}");
}

#[tokio::test]
async fn a_party_that_accepts_but_never_answers_ends_every_call_within_its_bound() {
    let address = silent_party().await;
    let party = GrpcParty::connect_with(&address, TOKEN, None, QUICK)
        .await
        .unwrap();
    assert_eq!(party.deadlines(), QUICK);

    let start = Instant::now();
    let result = party.describe().await.map(drop);
    did_not_answer("Describe", result, start.elapsed());

    let plan = RunPlan {
        variant: FULL_PENALTY,
        chains: 1,
        steps_per_chain: 10,
        clip: 2.0,
        noise: NoiseChoice::Tau(1.0),
        batch_size: None,
        barker_variance: None,
        hmc: None,
        aggregation: None,
    };
    let start = Instant::now();
    let result = party.open_run(&plan, "fingerprint").await.map(drop);
    did_not_answer("OpenRun", result, start.elapsed());

    let query = Query::LogLikRatio {
        theta: &[0.0, 0.0],
        theta_proposed: &[0.1, 0.0],
    };
    let start = Instant::now();
    let result = party.step("r1", 0, 17, query).await.map(drop);
    did_not_answer("Step 17 of chain 0", result, start.elapsed());

    let start = Instant::now();
    let result = party.close_run("r1").await.map(drop);
    did_not_answer("CloseRun of run r1", result, start.elapsed());
}

/// Serves `node` on a loopback port for the rest of the test; returns its address.
async fn serve(node: Arc<PartyNode>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        fedmcmc_party::service::serve(node, TOKEN, None, listener, None, std::future::pending())
            .await
            .unwrap();
    });
    address
}

/// A TCP relay to `upstream` that, once `frozen` is set, moves no byte more and answers no
/// new connection, holding every connection open: the party as the coordinator sees it
/// when its process is stopped (SIGSTOP). Returns the relay's address.
async fn freezable(upstream: SocketAddr, frozen: watch::Receiver<bool>) -> String {
    async fn pump(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        frozen: watch::Receiver<bool>,
    ) {
        let mut buffer = vec![0; 64 * 1024];
        loop {
            let n = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if *frozen.borrow() {
                // Hold both ends open, and move nothing.
                let _held = (from, to);
                return std::future::pending().await;
            }
            if to.write_all(&buffer[..n]).await.is_err() {
                return;
            }
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((inbound, _)) = listener.accept().await {
            if *frozen.borrow() {
                held.push(inbound);
                continue;
            }
            let outbound = TcpStream::connect(upstream).await.unwrap();
            outbound.set_nodelay(true).unwrap();
            inbound.set_nodelay(true).unwrap();
            let (in_read, in_write) = inbound.into_split();
            let (out_read, out_write) = outbound.into_split();
            tokio::spawn(pump(in_read, out_write, frozen.clone()));
            tokio::spawn(pump(out_read, in_write, frozen.clone()));
        }
    });
    address
}

/// Freezes the relay once a chain has taken `after` steps.
struct FreezeAfter {
    after: usize,
    freeze: watch::Sender<bool>,
    at: std::sync::Mutex<Option<Instant>>,
    steps: AtomicBool,
}

impl Progress for FreezeAfter {
    fn step(&self, trace: &ChainTrace) -> anyhow::Result<()> {
        if trace.steps() >= self.after && !self.steps.swap(true, Ordering::SeqCst) {
            *self.at.lock().unwrap() = Some(Instant::now());
            self.freeze.send_replace(true);
        }
        Ok(())
    }
}

/// Draw rows (not `#` comments, not the header) in each chain's file.
fn draws_written(out: &Path, chains: u32) -> Vec<usize> {
    (1..=chains)
        .map(|c| {
            let csv = std::fs::read_to_string(out.join(format!("chain-{c}.csv"))).unwrap();
            csv.lines().filter(|l| !l.starts_with('#')).count() - 1
        })
        .collect()
}

/// The frozen job's warm-up: its chain files hold the draws after it.
const WARMUP: u64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_frozen_mid_run_ends_the_job_within_the_bound_naming_it() {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let parties = support::parties(&spec, 3);
    let (freeze, frozen) = watch::channel(false);
    let mut handles = Vec::new();
    for (i, (name, node)) in parties.iter().enumerate() {
        let served = serve(Arc::clone(node)).await;
        let address = if i == 1 {
            freezable(served, frozen.clone()).await
        } else {
            format!("http://{served}")
        };
        let party = GrpcParty::connect_with(&address, TOKEN, None, QUICK)
            .await
            .unwrap();
        handles.push((name.clone(), party));
    }
    let federation = Arc::new(Federation::new(handles));
    let chains = 2;
    let settings = JobSettings {
        aggregation: Default::default(),
        collusion: 0,
        variant: Variant::Penalty,
        chains,
        iterations: Some(2000),
        tau: Some(1.0),
        warmup: Some(WARMUP),
        clip: 2.0,
        proposal: ProposalKind::Rw,
        proposal_sd: Some(0.05),
        adapt: true,
        target_accept: 0.25,
        seed: 3,
    };
    let start = Start::Given(Inits {
        points: vec![spec.true_theta(); chains as usize],
        label: "test".into(),
    });
    let progress = Arc::new(FreezeAfter {
        after: 30,
        freeze,
        at: Default::default(),
        steps: AtomicBool::new(false),
    });
    let out = tempfile::tempdir().unwrap();
    let err = job::run(
        federation,
        Arc::clone(&model),
        &settings,
        start,
        out.path(),
        Vec::new(),
        {
            let progress = Arc::clone(&progress);
            move |_, _| progress as Arc<dyn Progress>
        },
        &Stop::new(),
    )
    .await
    .err()
    .expect("the job fails")
    .to_string();
    let frozen_at = progress.at.lock().unwrap().expect("the party froze");
    let took = frozen_at.elapsed();

    // One sentence naming the party and the step it did not answer.
    assert!(
        err.contains("party party-2: unavailable: did not answer Step ")
            && err.contains(" within 1.2 s ("),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
    // Its step's bound, then its CloseRun's: the job does not wait longer.
    assert!(
        took <= 2 * QUICK.call + SLACK,
        "the job ended {took:?} after the freeze"
    );
    // The other parties' runs are closed; the frozen party's is left to its lease.
    let open: Vec<u32> = parties
        .iter()
        .map(|(_, node)| PartyNode::describe(node).open_runs)
        .collect();
    assert_eq!(open, [0, 1, 0], "{err}");
    // The draws before the freeze are written.
    let written = draws_written(out.path(), chains);
    assert!(
        written.iter().max() >= Some(&(30 - WARMUP as usize)),
        "{written:?}"
    );
}
