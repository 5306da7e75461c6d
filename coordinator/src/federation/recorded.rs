//! A party's replies written down as they arrive, so that a coordinator killed mid-run can
//! start again on the same output directory and carry on (`--resume`).
//!
//! Given its settings, the coordinator is deterministic: the chains, proposals, adaptation
//! and the initialiser draw from seeded streams, and only the parties' replies come from
//! outside. So a resumed job runs again from the start, and every call whose reply is on
//! record gets that reply back without reaching the party; the first call that is not goes
//! to the party, and from there the job is live. The chains retrace the draws already
//! made exactly, no run is opened twice, and no step is asked for again except the last one
//! a party answered, which it replays bit for bit (`party/src/release/`) without charging
//! it again.
//!
//! Per party, in its own directory:
//! - `calls.jsonl`: Describe, OpenRun and CloseRun with their replies, in the order made (a
//!   job makes them one at a time per party);
//! - `<run id>.chain-<c>.jsonl`: each step of that chain, in order: the query's numbers and
//!   the answer. The run id is one the party answered, so it is checked first
//!   ([`super::ids`]); [`super::Federation::open`] refuses a party's repeated one, which
//!   would merge two runs' records.
//!
//! JSON lines whose floats read back exactly. Each line goes to the operating system in one
//! write as soon as the reply is in, so a killed coordinator loses no reply; a line cut short
//! is dropped (its call is made again). Step lines are not synced to the disk one by one: a
//! machine that loses power may lose the last few, and then the party refuses the resumed
//! chain's step as out of order, naming it. A replayed call whose arguments differ from the
//! recorded one stops the job: the settings or the program changed, and going on would
//! splice two different runs.
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{
    CallError, CallErrorKind, Closed, Contribution, Grant, PartyHandle, PartyInfo, Query, RunPlan,
    ids,
};

/// One of a party's calls other than a step, with its reply.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
enum Call {
    Describe {
        reply: PartyInfo,
    },
    OpenRun {
        /// The plan as the job made it (its `Debug` form), to check a replay against.
        plan: String,
        fingerprint: String,
        reply: Grant,
    },
    CloseRun {
        run_id: String,
        reply: Closed,
    },
    JoinAggregation {
        run_id: String,
        reply: f64,
    },
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::Describe { .. } => "Describe",
            Call::OpenRun { .. } => "OpenRun",
            Call::CloseRun { .. } => "CloseRun",
            Call::JoinAggregation { .. } => "JoinAggregation",
        }
    }
}

/// One step of one chain and its answer.
#[derive(Debug, Serialize, Deserialize)]
struct Step {
    step: u64,
    /// The query's numbers ([`Query::inputs`]).
    inputs: Vec<f64>,
    answer: Contribution,
}

/// A record file: what it held when opened (to replay), and the file to append to.
struct Log<T> {
    path: PathBuf,
    replay: VecDeque<T>,
    file: File,
}

impl<T: Serialize + DeserializeOwned> Log<T> {
    /// Opens (creating) the record at `path` and reads what it holds; a last line cut short
    /// is cut off.
    fn open(path: PathBuf) -> std::io::Result<Self> {
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        let replay = text[..complete]
            .lines()
            .enumerate()
            .map(|(i, line)| {
                serde_json::from_str(line).map_err(|e| {
                    std::io::Error::other(format!("{}: line {}: {e}", path.display(), i + 1))
                })
            })
            .collect::<std::io::Result<_>>()?;
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        file.set_len(complete as u64)?;
        Ok(Log { path, replay, file })
    }

    /// Appends `record` in one write.
    fn append(&mut self, record: &T) -> std::io::Result<()> {
        let mut line = serde_json::to_string(record).map_err(std::io::Error::other)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())
    }
}

/// Whether the record in `dir` holds an opened run.
pub fn opened_a_run(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join(CALLS)).is_ok_and(|text| {
        text.lines().any(|l| {
            serde_json::from_str::<Call>(l).is_ok_and(|c| matches!(c, Call::OpenRun { .. }))
        })
    })
}

const CALLS: &str = "calls.jsonl";

/// A [`PartyHandle`] whose replies are recorded under a directory of its own, and replayed
/// from there first.
pub struct Recorded<P> {
    inner: P,
    dir: PathBuf,
    calls: Mutex<Log<Call>>,
    /// Each chain's step record, by (run id, chain), opened at its first step.
    steps: Mutex<HashMap<(String, u32), Log<Step>>>,
}

fn record_error(path: &Path, e: impl std::fmt::Display) -> CallError {
    CallError {
        kind: CallErrorKind::Other,
        message: format!("cannot record the reply in {}: {e}", path.display()),
    }
}

/// `<run id>.chain-<c>.jsonl` in `dir`, of a run id that is one ([`ids::check_run_id`]):
/// the file is `dir`'s own, whatever the party answered.
fn step_file(dir: &Path, run_id: &str, chain: u32) -> Result<PathBuf, CallError> {
    let refused = |message| CallError {
        kind: CallErrorKind::Other,
        message,
    };
    ids::check_run_id(run_id).map_err(refused)?;
    let path = dir.join(format!("{run_id}.chain-{chain}.jsonl"));
    if path.parent() != Some(dir) {
        let shown = path.display();
        return Err(refused(format!(
            "{shown} is not a file of {}",
            dir.display()
        )));
    }
    Ok(path)
}

fn diverged(path: &Path, what: String) -> CallError {
    CallError {
        kind: CallErrorKind::Other,
        message: format!(
            "the resumed job does not retrace the recorded one ({}): {what}",
            path.display()
        ),
    }
}

impl<P: PartyHandle> Recorded<P> {
    /// `inner`, recorded in (and replayed from) `dir`, which is created if missing.
    pub fn new(inner: P, dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Recorded {
            inner,
            dir: dir.to_path_buf(),
            calls: Mutex::new(Log::open(dir.join(CALLS))?),
            steps: Mutex::new(HashMap::new()),
        })
    }

    /// The next recorded call, if any is left, after `check` has found it the one asked.
    fn replayed<T>(&self, check: impl FnOnce(Call) -> Option<T>) -> Result<Option<T>, CallError> {
        let mut calls = self.calls.lock().expect("calls lock");
        let Some(call) = calls.replay.pop_front() else {
            return Ok(None);
        };
        let name = call.name();
        check(call)
            .map(Some)
            .ok_or_else(|| diverged(&calls.path, format!("the next recorded call is {name}")))
    }

    /// Records a live call's reply.
    fn record(&self, call: &Call) -> Result<(), CallError> {
        let mut calls = self.calls.lock().expect("calls lock");
        // Calls are rare and decide what is spent: each one is on the disk before the job
        // goes on.
        calls
            .append(call)
            .and_then(|()| calls.file.sync_data())
            .map_err(|e| record_error(&calls.path, e))
    }

    /// The recorded answer to `chain`'s `step` of `run_id`, if there is one.
    fn replayed_step(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: &Query<'_>,
    ) -> Result<Option<Contribution>, CallError> {
        let mut steps = self.steps.lock().expect("steps lock");
        let key = (run_id.to_string(), chain);
        if !steps.contains_key(&key) {
            let path = step_file(&self.dir, run_id, chain)?;
            let log = Log::open(path.clone()).map_err(|e| record_error(&path, e))?;
            steps.insert(key.clone(), log);
        }
        let log = steps.get_mut(&key).expect("just inserted");
        let Some(recorded) = log.replay.pop_front() else {
            return Ok(None);
        };
        let inputs = query.inputs();
        let same = recorded.step == step
            && recorded.inputs.len() == inputs.len()
            && recorded
                .inputs
                .iter()
                .zip(&inputs)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        if !same {
            return Err(diverged(
                &log.path,
                format!(
                    "chain {chain} asks step {step} with other numbers than recorded for step {}",
                    recorded.step
                ),
            ));
        }
        Ok(Some(recorded.answer))
    }

    fn record_step(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: &Query<'_>,
        answer: &Contribution,
    ) -> Result<(), CallError> {
        let mut steps = self.steps.lock().expect("steps lock");
        let log = steps
            .get_mut(&(run_id.to_string(), chain))
            .expect("opened by replayed_step");
        let record = Step {
            step,
            inputs: query.inputs(),
            answer: answer.clone(),
        };
        log.append(&record).map_err(|e| record_error(&log.path, e))
    }

    /// A step from the record, else from the party (computed apart from this task if
    /// `apart`) and then recorded.
    async fn answer(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
        apart: bool,
    ) -> Result<Contribution, CallError> {
        if let Some(answer) = self.replayed_step(run_id, chain, step, &query)? {
            return Ok(answer);
        }
        let answer = if apart {
            self.inner.step_apart(run_id, chain, step, query).await?
        } else {
            self.inner.step(run_id, chain, step, query).await?
        };
        self.record_step(run_id, chain, step, &query, &answer)?;
        Ok(answer)
    }
}

impl<P: PartyHandle> PartyHandle for Recorded<P> {
    async fn describe(&self) -> Result<PartyInfo, CallError> {
        let replayed = self.replayed(|call| match call {
            Call::Describe { reply } => Some(reply),
            _ => None,
        })?;
        if let Some(reply) = replayed {
            return Ok(reply);
        }
        let reply = self.inner.describe().await?;
        self.record(&Call::Describe {
            reply: reply.clone(),
        })?;
        Ok(reply)
    }

    async fn open_run(&self, plan: &RunPlan, fingerprint: &str) -> Result<Grant, CallError> {
        // A secure run's session is drawn afresh for each open: a resumed job's open is the
        // recorded one whatever its session (the recorded grant's announcement carries the
        // session the party holds).
        let unsessioned = RunPlan {
            aggregation: plan
                .aggregation
                .as_ref()
                .map(|t| fedmcmc_party::secure::Terms {
                    session: [0; 32],
                    ..t.clone()
                }),
            ..plan.clone()
        };
        let asked = format!("{unsessioned:?}");
        let replayed = self.replayed(|call| match call {
            Call::OpenRun {
                plan,
                fingerprint: f,
                reply,
            } if plan == asked && f == fingerprint => Some(reply),
            _ => None,
        })?;
        if let Some(reply) = replayed {
            return Ok(reply);
        }
        let reply = self.inner.open_run(plan, fingerprint).await?;
        self.record(&Call::OpenRun {
            plan: asked,
            fingerprint: fingerprint.to_string(),
            reply: reply.clone(),
        })?;
        Ok(reply)
    }

    async fn step(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> Result<Contribution, CallError> {
        self.answer(run_id, chain, step, query, false).await
    }

    async fn step_apart(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> Result<Contribution, CallError> {
        self.answer(run_id, chain, step, query, true).await
    }

    async fn rejoin_aggregation(
        &self,
        run_id: &str,
        announcements: &[fedmcmc_party::secure::Announcement],
    ) -> Result<f64, CallError> {
        self.inner.rejoin_aggregation(run_id, announcements).await
    }

    /// Always sent on (a join is idempotent, and a party restarted since needs it), and
    /// recorded: a resumed job whose run the party has closed since gets the recorded
    /// answer instead of the party's refusal; an answer other than the recorded one stops it.
    async fn join_aggregation(
        &self,
        run_id: &str,
        announcements: &[fedmcmc_party::secure::Announcement],
    ) -> Result<f64, CallError> {
        let recorded = self.replayed(|call| match call {
            Call::JoinAggregation { run_id: r, reply } if r == run_id => Some(reply),
            _ => None,
        })?;
        let answer = self.inner.join_aggregation(run_id, announcements).await;
        if let Some(reply) = recorded {
            return match answer {
                Ok(m) if m != reply => Err(CallError {
                    kind: CallErrorKind::Other,
                    message: format!(
                        "joined run {run_id} again with the common multiplier {m}, where the record holds {reply}"
                    ),
                }),
                _ => Ok(reply),
            };
        }
        let reply = answer?;
        self.record(&Call::JoinAggregation {
            run_id: run_id.to_string(),
            reply,
        })?;
        Ok(reply)
    }

    async fn close_run(&self, run_id: &str) -> Result<Closed, CallError> {
        let replayed = self.replayed(|call| match call {
            Call::CloseRun { run_id: r, reply } if r == run_id => Some(reply),
            _ => None,
        })?;
        if let Some(reply) = replayed {
            return Ok(reply);
        }
        let reply = self.inner.close_run(run_id).await?;
        self.record(&Call::CloseRun {
            run_id: run_id.to_string(),
            reply: reply.clone(),
        })?;
        Ok(reply)
    }
}
