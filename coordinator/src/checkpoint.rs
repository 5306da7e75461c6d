//! Resumable runs. A job keeps in `OUT/checkpoint/` its settings (`job.json`) and every
//! party's replies (`parties/<name>/`, see `federation/recorded.rs`); the chains write their
//! draws to `OUT` as they go. A coordinator killed mid-run (SIGKILL, a crash, a lost
//! machine) is started again with `--resume OUT`: it reads the settings back, retraces the
//! run from the recorded replies, and carries on with the same run ids and step numbers.
//! Nothing sampled is lost and nothing released is charged twice.
//!
//! A job that ends any other way (completed, stopped by a signal, failed) has closed its runs
//! on every party, and marks the checkpoint ended: there is nothing left to resume. A job
//! refused before it opened any run leaves no checkpoint, so the same `OUT` can be used again.
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::federation::recorded::{self, Recorded};
use crate::federation::{PartyHandle, ids};
use crate::output::Report;

const DIR: &str = "checkpoint";
const JOB: &str = "job.json";
const ENDED: &str = "ended";
/// Locked (flock) by the coordinator whose job the checkpoint is, while it runs.
const LOCK: &str = "lock";

/// The job as `--resume` needs it: which command, with which settings.
#[derive(Serialize, Deserialize)]
struct JobFile<S> {
    command: String,
    settings: S,
}

/// A job's checkpoint directory, owned by this process while the value lives: a second
/// coordinator's `--resume` of a live job would cut its records and release its steps again.
pub struct Checkpoint {
    dir: PathBuf,
    _owner: std::fs::File,
}

/// Takes the checkpoint's lock, or says which coordinator holds it.
fn own(dir: &Path, out: &Path) -> anyhow::Result<std::fs::File> {
    let path = dir.join(LOCK);
    let file = std::fs::File::options()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "{} is the output directory of a coordinator that is still running (it holds {}): wait for it to end, or stop it, before resuming",
            out.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            anyhow::bail!("cannot lock {}: {e}", path.display())
        }
    }
}

/// Output files of a run, whichever way it ended: `OUT` holding one is not a new run's.
fn holds_outputs(out: &Path) -> bool {
    ["summary.json", "chain-1.csv"]
        .iter()
        .any(|f| out.join(f).exists())
}

impl Checkpoint {
    /// The checkpoint of a new job of `command` in `out`, with the `settings` `--resume`
    /// will read back. Refuses an `out` that already holds a run.
    pub fn start<S: Serialize>(out: &Path, command: &str, settings: &S) -> anyhow::Result<Self> {
        let dir = out.join(DIR);
        let shown = out.display();
        if dir.join(ENDED).exists() || holds_outputs(out) {
            anyhow::bail!(
                "{shown} holds the outputs of another run; choose another output directory"
            );
        }
        if dir.exists() {
            anyhow::bail!(
                "{shown} holds a run that did not finish: carry it on with `coordinator {command} --resume {shown}`, or choose another output directory"
            );
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        let owner = own(&dir, out)?;
        let job = JobFile {
            command: command.to_string(),
            settings,
        };
        write_synced(&dir.join(JOB), &serde_json::to_string_pretty(&job)?)?;
        Ok(Checkpoint { dir, _owner: owner })
    }

    /// The checkpoint of the `command` job in `out`, to carry on, and its settings.
    pub fn resume<S: DeserializeOwned>(out: &Path, command: &str) -> anyhow::Result<(Self, S)> {
        let dir = out.join(DIR);
        let shown = out.display();
        let path = dir.join(JOB);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            anyhow::anyhow!("{shown} holds no run to resume ({}: {e})", path.display())
        })?;
        let owner = own(&dir, out)?;
        if let Ok(ended) = std::fs::read_to_string(dir.join(ENDED)) {
            anyhow::bail!(
                "the run in {shown} ended ({}) and its runs are closed on every party: there is nothing to resume",
                ended.trim()
            );
        }
        let job: JobFile<S> = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a job this program can resume: {e}",
                path.display()
            )
        })?;
        if job.command != command {
            anyhow::bail!(
                "{shown} holds a `coordinator {}` run: resume it with `coordinator {} --resume {shown}`",
                job.command,
                job.command
            );
        }
        Ok((Checkpoint { dir, _owner: owner }, job.settings))
    }

    /// `handle` to party `name`, its replies recorded in (and replayed from) the checkpoint,
    /// in `parties/<name>/`: a name that could not be that directory is refused.
    pub fn party<P: PartyHandle>(&self, name: &str, handle: P) -> anyhow::Result<Recorded<P>> {
        ids::check_party_name(name).map_err(anyhow::Error::msg)?;
        let parties = self.dir.join("parties");
        let dir = parties.join(name);
        anyhow::ensure!(
            dir.parent() == Some(parties.as_path()),
            "{} is not a directory of {}",
            dir.display(),
            parties.display()
        );
        Recorded::new(handle, &dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot keep party {name}'s replies in {}: {e}",
                dir.display()
            )
        })
    }

    /// Marks the job ended with `outcome` (its runs are closed on every party). A job that
    /// failed before it opened a run on any party leaves no checkpoint, so that `OUT` can be
    /// used again.
    pub fn end(self, outcome: &anyhow::Result<Report>) -> anyhow::Result<()> {
        let opened = std::fs::read_dir(self.dir.join("parties"))
            .map(|dirs| dirs.flatten().any(|d| recorded::opened_a_run(&d.path())))
            .unwrap_or(false);
        let how = match outcome {
            Err(_) if !opened => {
                return std::fs::remove_dir_all(&self.dir)
                    .map_err(|e| anyhow::anyhow!("cannot remove {}: {e}", self.dir.display()));
            }
            Err(e) => format!("failed: {e:#}"),
            // A run left open on a party: `--resume` retraces the job and closes it.
            Ok(Report { unclosed, .. }) if !unclosed.is_empty() => return Ok(()),
            Ok(Report {
                partial: Some(p), ..
            }) => format!("stopped by {}", p.signal),
            Ok(_) => "completed".to_string(),
        };
        write_synced(&self.dir.join(ENDED), &(how + "\n"))
    }
}

/// Writes `text` to `path` and syncs it: the checkpoint's own files decide what a resumed
/// job does.
fn write_synced(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)
        .and_then(|mut f| f.write_all(text.as_bytes()).map(|()| f))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    file.flush()?;
    file.sync_all()
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}
