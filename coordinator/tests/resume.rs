//! A job whose coordinator dies at random points (its task dropped mid-step, as a killed
//! process's would be) and is resumed from its checkpoint each time ends with exactly the
//! draws of the same job run straight through, and every party charged each step once.
//! The parties' noise is seeded per (chain, step), so the two runs can be compared bit for
//! bit; the private initialiser runs first, so its retracing is tested too.
mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fedmcmc_common::models::{Model, ModelSpec};
use fedmcmc_common::noise_aware::rounds::DEFAULT_RELEASES;
use fedmcmc_common::proposal::ProposalKind;
use fedmcmc_coordinator::checkpoint::Checkpoint;
use fedmcmc_coordinator::federation::recorded::Recorded;
use fedmcmc_coordinator::federation::{
    CallError, Closed, Contribution, Federation, Grant, PartyHandle, PartyInfo, Query, RunPlan,
};
use fedmcmc_coordinator::initialiser::InitialiserSettings;
use fedmcmc_coordinator::interrupt::Stop;
use fedmcmc_coordinator::job::{self, JobResult, JobSettings, Start};
use fedmcmc_coordinator::sampler::Quiet;
use fedmcmc_coordinator::variant::Variant;
use fedmcmc_party::PartyNode;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CHAINS: u32 = 2;
const ITERATIONS: u64 = 3000;
const ABORTS: usize = 20;

/// Two parties of 300 flat-banana rows each with seeded noise.
fn parties(model: &ModelSpec) -> Vec<(String, Arc<PartyNode>)> {
    support::parties(model, 2)
        .into_iter()
        .zip(0..)
        .map(|((name, node), i)| {
            let node = Arc::into_inner(node).expect("a fresh node has one owner");
            (name, Arc::new(node.with_seeded_noise(40 + i)))
        })
        .collect()
}

fn settings() -> JobSettings {
    JobSettings {
        aggregation: Default::default(),
        collusion: 0,
        variant: Variant::Penalty,
        proposal: ProposalKind::Rw,
        chains: CHAINS,
        iterations: Some(ITERATIONS),
        tau: Some(1.0),
        warmup: Some(500),
        clip: 2.0,
        proposal_sd: Some(0.05),
        adapt: true,
        target_accept: 0.25,
        seed: 3,
    }
}

fn start() -> Start {
    Start::Private(InitialiserSettings {
        share: 0.1,
        steps: 40,
        gradient_clip: 2.0,
    })
}

async fn job<P: PartyHandle>(
    federation: Federation<P>,
    model: &Arc<dyn Model>,
    out: &Path,
) -> anyhow::Result<JobResult> {
    job::run(
        Arc::new(federation),
        Arc::clone(model),
        &settings(),
        start(),
        out,
        Vec::new(),
        |_, _| Arc::new(Quiet),
        &Stop::new(),
    )
    .await
}

/// A party handle that, once `dead` is set, never answers again: the job stops where it
/// is, as a killed coordinator does, and does nothing on the way out (a dropped runtime would
/// wake some of its tasks first, which then close runs as after an error). With `after`,
/// it sets `dead` itself once the federation's steps so far (the shared count) reach the
/// limit: a kill at a known point.
struct Killable<P> {
    inner: P,
    dead: Arc<AtomicBool>,
    after: Option<(Arc<std::sync::atomic::AtomicUsize>, usize)>,
}

impl<P: PartyHandle> Killable<P> {
    async fn unless_dead<T>(&self, call: impl Future<Output = T>) -> T {
        if !self.dead.load(Ordering::SeqCst) {
            let answer = call.await;
            if !self.dead.load(Ordering::SeqCst) {
                return answer;
            }
        }
        std::future::pending().await
    }
}

impl<P: PartyHandle> PartyHandle for Killable<P> {
    async fn describe(&self) -> Result<PartyInfo, CallError> {
        self.unless_dead(self.inner.describe()).await
    }
    async fn open_run(&self, plan: &RunPlan, fingerprint: &str) -> Result<Grant, CallError> {
        self.unless_dead(self.inner.open_run(plan, fingerprint))
            .await
    }
    async fn step(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> Result<Contribution, CallError> {
        if let Some((steps, limit)) = &self.after
            && steps.fetch_add(1, Ordering::SeqCst) >= *limit
        {
            self.dead.store(true, Ordering::SeqCst);
        }
        self.unless_dead(self.inner.step(run_id, chain, step, query))
            .await
    }
    async fn close_run(&self, run_id: &str) -> Result<Closed, CallError> {
        self.unless_dead(self.inner.close_run(run_id)).await
    }
}

/// The federation of `nodes`, its replies kept in (and replayed from) `checkpoint`, dead
/// once `dead` is set.
fn recorded(
    checkpoint: &Checkpoint,
    nodes: &[(String, Arc<PartyNode>)],
    dead: &Arc<AtomicBool>,
) -> Federation<Killable<Recorded<Arc<PartyNode>>>> {
    Federation::new(
        nodes
            .iter()
            .map(|(name, node)| {
                let inner = checkpoint.party(name, Arc::clone(node)).unwrap();
                let dead = Arc::clone(dead);
                (
                    name.clone(),
                    Killable {
                        inner,
                        dead,
                        after: None,
                    },
                )
            })
            .collect(),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_job_aborted_at_random_points_and_resumed_gives_the_draws_of_one_run_straight_through() {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();

    let straight_dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let straight = runtime()
        .block_on(job(
            Federation::new(parties(&spec)),
            &model,
            straight_dir.path(),
        ))
        .unwrap();
    // Abort at random within a sixteenth of the job's length, so that the aborts fall all
    // along it (each attempt retraces what the last one did before it goes on).
    let slice = (started.elapsed().as_micros() as u64 / 16).max(1);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let nodes = parties(&spec);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut aborted = 0;
    for attempt in 0..4 * ABORTS {
        // Each attempt reads the checkpoint afresh, as a new process would, and runs in a
        // runtime of its own: dropping it stops every task of the job at once, its chains'
        // included, as a kill would.
        let checkpoint = if attempt == 0 {
            Checkpoint::start(out, "test", &()).unwrap()
        } else {
            Checkpoint::resume::<()>(out, "test").unwrap().0
        };
        let dead = Arc::new(AtomicBool::new(false));
        let federation = recorded(&checkpoint, &nodes, &dead);
        let (model, dir) = (Arc::clone(&model), out.to_path_buf());
        let runtime = runtime();
        let task = runtime.spawn(async move { job(federation, &model, &dir).await });
        std::thread::sleep(Duration::from_micros(rng.random_range(0..slice)));
        if task.is_finished() {
            runtime.block_on(task).unwrap().unwrap();
            break;
        }
        dead.store(true, Ordering::SeqCst);
        drop(runtime);
        aborted += 1;
        if aborted == ABORTS {
            break;
        }
    }
    assert_eq!(aborted, ABORTS, "the job ended after {aborted} aborts");
    let checkpoint = Checkpoint::resume::<()>(out, "test").unwrap().0;
    let resumed = runtime()
        .block_on(job(
            recorded(&checkpoint, &nodes, &Arc::new(AtomicBool::new(false))),
            &model,
            out,
        ))
        .unwrap();

    // The same draws, bit for bit, and the same starting points.
    assert_eq!(resumed.inits, straight.inits);
    for (r, s) in resumed.traces.iter().zip(&straight.traces) {
        assert_eq!(r.steps() as u64, ITERATIONS);
        assert_eq!(r, s, "chain {}", r.chain);
    }
    // Each party charged every step once: the sampling run's releases and the ε committed
    // (initialiser included) equal the straight run's.
    for ((r, s), (_, node)) in resumed.closed.iter().zip(&straight.closed).zip(&nodes) {
        assert_eq!(r.releases, u64::from(CHAINS) * ITERATIONS);
        assert_eq!(r.releases, s.releases);
        assert_eq!(r.run_epsilon, s.run_epsilon);
        assert_eq!(
            PartyNode::describe(node).epsilon_committed,
            s.epsilon_committed
        );
        assert_eq!(PartyNode::describe(node).open_runs, 0);
    }
    // The chain files written along the way are the straight run's.
    for c in 1..=CHAINS {
        let name = format!("chain-{c}.csv");
        let a = std::fs::read_to_string(out.join(&name)).unwrap();
        let b = std::fs::read_to_string(straight_dir.path().join(&name)).unwrap();
        assert_eq!(a, b, "{name}");
    }
}

/// [`job`] on the summaries route at its defaults.
async fn summaries_job<P: PartyHandle>(
    federation: Federation<P>,
    model: Arc<dyn Model>,
    out: std::path::PathBuf,
) -> anyhow::Result<JobResult> {
    let settings = JobSettings {
        aggregation: Default::default(),
        collusion: 0,
        variant: Variant::Summaries,
        chains: 4,
        iterations: None,
        tau: None,
        warmup: None,
        clip: 0.0,
        proposal_sd: Some(0.0),
        ..settings()
    };
    job::run(
        Arc::new(federation),
        model,
        &settings,
        start(),
        &out,
        Vec::new(),
        |_, _| Arc::new(Quiet),
        &Stop::new(),
    )
    .await
}

/// The summaries route resumes too: killed in the middle of its releases, the job carried
/// on from its checkpoint replays the releases made, makes the rest, and samples exactly
/// the straight run's draws, each party charged once.
#[test]
fn the_summaries_route_killed_mid_release_resumes_to_the_straight_runs_draws() {
    use fedmcmc_common::models::{Family, GlmSpec};
    let spec = ModelSpec::Glm(GlmSpec::example(Family::Logistic, 3));
    let model = spec.build().unwrap();
    let straight_dir = tempfile::tempdir().unwrap();
    let straight = runtime()
        .block_on(summaries_job(
            Federation::new(parties(&spec)),
            Arc::clone(&model),
            straight_dir.path().to_path_buf(),
        ))
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let nodes = parties(&spec);
    let checkpoint = Checkpoint::start(dir.path(), "test", &()).unwrap();
    let dead = Arc::new(AtomicBool::new(false));
    let steps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Two parties, eight releases each: dead after the sixth step, in the third release.
    let federation = Federation::new(
        nodes
            .iter()
            .map(|(name, node)| {
                let killable = Killable {
                    inner: checkpoint.party(name, Arc::clone(node)).unwrap(),
                    dead: Arc::clone(&dead),
                    after: Some((Arc::clone(&steps), 6)),
                };
                (name.clone(), killable)
            })
            .collect(),
    );
    let killed = runtime();
    let task = killed.spawn(summaries_job(
        federation,
        Arc::clone(&model),
        dir.path().to_path_buf(),
    ));
    while !dead.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    assert!(!task.is_finished());
    drop(killed);
    // While the first coordinator's checkpoint lives, a second cannot take the job over.
    let e = Checkpoint::resume::<()>(dir.path(), "test").err().unwrap();
    assert!(
        format!("{e}").contains("a coordinator that is still running"),
        "{e}"
    );
    drop(checkpoint);

    let checkpoint = Checkpoint::resume::<()>(dir.path(), "test").unwrap().0;
    let resumed = runtime()
        .block_on(summaries_job(
            recorded(&checkpoint, &nodes, &Arc::new(AtomicBool::new(false))),
            Arc::clone(&model),
            dir.path().to_path_buf(),
        ))
        .unwrap();
    assert_eq!(resumed.inits, straight.inits);
    assert_eq!(resumed.traces, straight.traces);
    for ((r, s), (_, node)) in resumed.closed.iter().zip(&straight.closed).zip(&nodes) {
        assert_eq!(r.releases, u64::from(DEFAULT_RELEASES));
        assert_eq!(r.run_epsilon, s.run_epsilon);
        assert_eq!(
            PartyNode::describe(node).epsilon_committed,
            s.epsilon_committed
        );
    }
}
