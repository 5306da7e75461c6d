//! Ids from outside never become paths unchecked: a party answering OpenRun with a path-like
//! run id, or with a run id it gave before, is refused by name before any step is recorded,
//! and nothing is written outside the job's output directory. The parties here are stubs
//! that answer whatever run ids they are given.
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedmcmc_common::models::{Model, ModelSpec};
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_coordinator::checkpoint::Checkpoint;
use fedmcmc_coordinator::federation::recorded::Recorded;
use fedmcmc_coordinator::federation::{
    CallError, Closed, Contribution, Federation, Grant, NoiseChoice, PartyHandle, PartyInfo, Query,
    RunPlan,
};

/// A party of one row that grants the run ids it is given, in turn, answers every step with
/// zeros (the honest answer to the ratio of θ to itself), and notes the runs it is asked to
/// close.
struct Stub {
    ids: Mutex<VecDeque<String>>,
    closed: Arc<Mutex<Vec<String>>>,
}

fn stub(ids: &[&str]) -> (Stub, Arc<Mutex<Vec<String>>>) {
    let closed = Arc::new(Mutex::new(Vec::new()));
    let ids = Mutex::new(ids.iter().map(|s| s.to_string()).collect());
    let closed_too = Arc::clone(&closed);
    (Stub { ids, closed }, closed_too)
}

impl PartyHandle for Stub {
    async fn describe(&self) -> Result<PartyInfo, CallError> {
        Ok(PartyInfo {
            name: "stub".into(),
            model: "banana".into(),
            model_fingerprint: model().fingerprint(),
            dim: 2,
            rows: 1,
            neighbours: Neighbours::Substitute,
            epsilon: 1.0,
            delta: 1e-5,
            epsilon_committed: 0.0,
            mu_remaining: 1.0,
            variants: vec!["full-penalty".into()],
            secure_aggregation: false,
        })
    }
    async fn open_run(&self, _: &RunPlan, _: &str) -> Result<Grant, CallError> {
        let run_id = self.ids.lock().unwrap().pop_front().expect("an id left");
        Ok(Grant {
            run_id,
            tau: 1.0,
            noise_multiplier: 1.0,
            releases: 2,
            run_epsilon: 0.1,
            epsilon_committed: 0.0,
            lease: Duration::from_secs(60),
            announcement: None,
        })
    }
    async fn step(&self, _: &str, _: u32, _: u64, q: Query<'_>) -> Result<Contribution, CallError> {
        Ok(Contribution {
            value: vec![0.0; q.released_len()],
            noise_variance: 0.0,
            masked: None,
        })
    }
    async fn close_run(&self, run_id: &str) -> Result<Closed, CallError> {
        self.closed.lock().unwrap().push(run_id.to_string());
        Ok(Closed {
            releases: 0,
            run_epsilon: 0.0,
            epsilon_committed: 0.0,
        })
    }
}

const PLAN: RunPlan = RunPlan {
    variant: "full-penalty",
    chains: 1,
    steps_per_chain: 2,
    clip: 1.0,
    noise: NoiseChoice::Tau(1.0),
    batch_size: None,
    barker_variance: None,
    hmc: None,
    aggregation: None,
};

const QUERY: Query<'static> = Query::LogLikRatio {
    theta: &[0.0, 0.0],
    theta_proposed: &[0.0, 0.0],
};

fn model() -> Arc<dyn Model> {
    ModelSpec::flat_banana(2).build().unwrap()
}

const HONEST: &str = "0123456789abcdef0123456789abcdef";

/// A job's output directory `root/out` with its checkpoint started: `root` is the temp dir,
/// which must hold nothing else when the test ends.
fn out_dir() -> (tempfile::TempDir, PathBuf, Checkpoint) {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("out");
    let checkpoint = Checkpoint::start(&out, "test", &()).unwrap();
    (root, out, checkpoint)
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all.extend(files(&path));
        } else {
            all.push(path);
        }
    }
    all
}

/// Nothing outside `root/out`, and no step record in it.
fn nothing_written_outside(root: &Path, out: &Path) {
    let entries: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        entries,
        vec![out.to_path_buf()],
        "only out/ in the temp dir"
    );
    let steps: Vec<_> = files(out)
        .into_iter()
        .filter(|f| f.to_string_lossy().contains(".chain-"))
        .collect();
    assert!(steps.is_empty(), "no step recorded: {steps:?}");
}

/// The federation of an honest party and a stub answering `hostile`'s ids, recorded in
/// `checkpoint`; and the runs each was asked to close.
type Closes = Arc<Mutex<Vec<String>>>;
fn federation(
    checkpoint: &Checkpoint,
    honest: &[&str],
    hostile: &[&str],
) -> (Federation<Recorded<Stub>>, Closes, Closes) {
    let (a, a_closed) = stub(honest);
    let (b, b_closed) = stub(hostile);
    let parties = vec![
        ("honest".to_string(), checkpoint.party("honest", a).unwrap()),
        (
            "hostile".to_string(),
            checkpoint.party("hostile", b).unwrap(),
        ),
    ];
    (Federation::new(parties), a_closed, b_closed)
}

#[tokio::test]
async fn path_like_run_ids_are_refused_by_name_and_nothing_is_written_outside_the_output() {
    let long = "a".repeat(200);
    for bad in [
        "../x",
        "a/b",
        "",
        "a\0b",
        "a b",
        "../../../../victim",
        &long,
        "/",
    ] {
        let (root, out, checkpoint) = out_dir();
        // "/" stands for the temp dir's own absolute path.
        let absolute = root.path().join("victim").display().to_string();
        let bad = if bad == "/" { &absolute } else { bad };
        let (fed, honest_closed, _) = federation(&checkpoint, &[HONEST], &[bad]);
        let e = fed
            .open(&[PLAN, PLAN], &model())
            .await
            .unwrap_err()
            .to_string();
        let shown = format!("{bad:?}");
        let shown = &shown[..shown.len().min(60)];
        assert!(
            e.starts_with("party hostile: ")
                && e.contains(&format!("answered OpenRun with the run id {shown}"))
                && e.contains("which is not one: a run id is 1 to 64 of A-Z, a-z, 0-9"),
            "{e}"
        );
        // The honest party's grant is released, not left reserved.
        assert_eq!(*honest_closed.lock().unwrap(), vec![HONEST.to_string()]);
        nothing_written_outside(root.path(), &out);
    }
}

/// A step asked of a recorded party under an id that is not one (past the federation's
/// check) is refused too, before its record is opened.
#[tokio::test]
async fn a_recorded_step_under_a_path_like_run_id_writes_nothing() {
    let (root, out, checkpoint) = out_dir();
    let party = checkpoint.party("p", stub(&[]).0).unwrap();
    let e = party
        .step("../../../../victim", 0, 0, QUERY)
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains(r#"the run id "../../../../victim", which is not one"#),
        "{e}"
    );
    nothing_written_outside(root.path(), &out);
}

#[tokio::test]
async fn a_run_id_a_party_repeats_is_refused_and_two_parties_ids_are_kept_apart() {
    let (root, out, checkpoint) = out_dir();
    let (fed, honest_closed, _) = federation(
        &checkpoint,
        &["same", "other", "third"],
        &["same", "same", "SAME"],
    );
    // Two parties answering the same id: each party's steps are in its own directory.
    let grants = fed.open(&[PLAN, PLAN], &model()).await.unwrap();
    assert_eq!(
        (grants[0].run_id.as_str(), grants[1].run_id.as_str()),
        ("same", "same")
    );
    fed.step(0, 0, QUERY).await.unwrap();
    fed.close().await.unwrap();
    let parties = out.join("checkpoint").join("parties");
    for name in ["honest", "hostile"] {
        let steps = std::fs::read_to_string(parties.join(name).join("same.chain-0.jsonl")).unwrap();
        assert_eq!(steps.lines().count(), 1, "{name}: {steps}");
    }
    // The same party answering a run id of this job again, in any case, is refused.
    for _ in 0..2 {
        honest_closed.lock().unwrap().clear();
        let e = fed
            .open(&[PLAN, PLAN], &model())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("party hostile: ")
                && e.contains(
                    "which it gave an earlier run of this job: the two runs' records would merge"
                ),
            "{e}"
        );
        assert_eq!(
            honest_closed.lock().unwrap().len(),
            1,
            "the honest grant is released"
        );
    }
    assert_eq!(
        files(&parties.join("hostile")).len(),
        2,
        "calls and one chain's steps"
    );
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1);
}

#[test]
fn a_party_name_that_is_a_path_is_refused_before_its_directory_is_made() {
    let (root, out, checkpoint) = out_dir();
    for bad in ["../x", "..", "a/b", "", ".hidden"] {
        let e = checkpoint
            .party(bad, stub(&[]).0)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cannot name its checkpoint directory"), "{e}");
    }
    nothing_written_outside(root.path(), &out);
    assert!(!out.join("checkpoint").join("parties").exists());
}
