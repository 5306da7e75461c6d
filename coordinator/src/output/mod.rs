//! What a job leaves in `--out DIR`: `chain-<c>.csv` per chain (Stan CSV layout),
//! `summary.json`, trace and pair plots; and the table printed on stdout. A job cut short by
//! a signal writes the same files through the same code, marked partial. The chain files
//! are written as the chains go, so a run killed outright keeps its draws so far.
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fedmcmc_common::models::Model;

use crate::federation::{Grant, PartyInfo, RunPlan};
use crate::interrupt::Signal;
use crate::job::JobResult;
use crate::sampler::{ChainTrace, Progress, SamplerConfig, chain_seed};
use summary::ExactReference;

pub mod draws_csv;
pub mod plots;
pub mod rebuild;
pub mod summary;
pub mod table;

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))
}

/// Creates `dir` and proves it writable by writing and removing a file, so that a job never
/// opens a run (and spends budget) whose draws it then cannot save.
pub fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    create_dir(dir)?;
    let probe = dir.join(".write-probe");
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| anyhow::anyhow!("cannot write into {}: {e}", dir.display()))
}

/// What a finished job reports: the table for stdout, and where its files are.
pub struct Report {
    pub table: String,
    pub out: PathBuf,
    /// Set when a signal cut the chains short.
    pub partial: Option<Partial>,
    /// A sentence per party whose run could not be closed (`job::JobResult::unclosed`).
    pub unclosed: Vec<String>,
}

/// How far the chains of a stopped job got.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Partial {
    pub signal: Signal,
    /// Fewest and most steps any chain took, warm-up included.
    pub fewest: u64,
    pub most: u64,
    pub planned: u64,
}

impl Report {
    /// The one line printed on stderr after `signal` asked the job to stop.
    pub fn interrupted_line(&self, signal: Signal) -> String {
        let out = self.out.display();
        match self.partial {
            Some(Partial {
                fewest,
                most,
                planned,
                ..
            }) => {
                let steps = if fewest == most {
                    fewest.to_string()
                } else {
                    format!("{fewest} to {most}")
                };
                format!(
                    "interrupted by {signal}: the chains stopped after {steps} of {planned} iterations and the run is closed on every party; partial draws and summary (\"partial\": true) are in {out}"
                )
            }
            None => format!(
                "interrupted by {signal} after the chains had finished: the output in {out} is complete"
            ),
        }
    }
}

/// Writes every output file into `dir` (created if missing) and reports the job. The chain
/// files, written as the chains went ([`LiveDraws`]), are rewritten whole with their closing
/// block, and a stopped job's marked partial.
pub fn finish(
    dir: &Path,
    model: &dyn Model,
    job: &JobResult,
    exact: Option<&ExactReference>,
) -> anyhow::Result<Report> {
    create_dir(dir)?;
    let mut comments = job.comments.clone();
    if let Some(signal) = job.interrupted {
        let (fewest, most) = job.steps_range();
        comments.push((
            "partial".to_string(),
            format!("stopped by {signal} after {fewest} to {most} iterations per chain"),
        ));
    }
    for t in &job.traces {
        let path = chain_file(dir, t.chain);
        let header = draws_csv::Header::of(t, model.name(), job.sampler.variant.name(), &comments);
        draws_csv::write_chain(&path, t, &header)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    let title = format!("{}, {}", model.name(), job.sampler.variant.name());
    // The draws and the summary are what the privacy was spent on: a plot that fails is
    // reported, and does not fail the job.
    if let Err(e) = plots::write(dir, &title, &job.traces, exact.map(|e| e.draws.as_slice())) {
        tracing::warn!(error = %format!("{e:#}"), "no plots");
    }
    let s = summary::summarise(model, job, exact)?;
    let path = dir.join("summary.json");
    std::fs::write(&path, serde_json::to_string_pretty(&s)? + "\n")
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    let (fewest, most) = job.steps_range();
    let mut table = table::table(&s);
    for u in &job.unclosed {
        table += &format!("\nNOT CLOSED: {u}\n");
    }
    Ok(Report {
        table,
        out: dir.to_path_buf(),
        unclosed: job.unclosed.clone(),
        partial: job.interrupted.map(|signal| Partial {
            signal,
            fewest,
            most,
            planned: job.sampler.iterations,
        }),
    })
}

/// Where chain `chain` (from 0) keeps its draws.
fn chain_file(dir: &Path, chain: u32) -> PathBuf {
    dir.join(format!("chain-{}.csv", chain + 1))
}

/// Header lines every job's CSV carries: the sampler configuration and the grants.
/// The product's version and the git revision it was built from (`build.rs`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("FEDMCMC_REVISION"),
    ")"
);

pub fn job_comments(
    model: &dyn Model,
    s: &SamplerConfig,
    parties: &[PartyInfo],
    grants: &[Grant],
    plans: &[RunPlan],
) -> Vec<(String, String)> {
    let mut c = vec![
        ("fedmcmc".to_string(), VERSION.to_string()),
        ("variant".to_string(), s.variant.describe()),
        ("proposal".to_string(), s.proposal.describe().to_string()),
        ("chains".to_string(), s.chains.to_string()),
        ("iterations".to_string(), s.iterations.to_string()),
        ("warmup".to_string(), s.warmup.to_string()),
        ("proposal_sd".to_string(), s.proposal_sd.to_string()),
        ("adapt".to_string(), s.adapt.to_string()),
        ("target_accept".to_string(), s.target_accept.to_string()),
        ("base_seed".to_string(), s.seed.to_string()),
        ("parameters".to_string(), model.parameter_names().join(",")),
    ];
    if let Some(sd) = model.prior_sd() {
        c.push(("prior_sd".to_string(), format!("{sd:?}")));
    }
    for ((p, g), plan) in parties.iter().zip(grants).zip(plans) {
        let mut line = format!(
            "rows={} tau={} noise_multiplier={} releases={}",
            p.rows, g.tau, g.noise_multiplier, g.releases
        );
        if let Some(b) = plan.batch_size {
            line += &format!(" batch_size={b}");
        }
        if let Some(c) = plan.barker_variance {
            line += &format!(" barker_variance={c}");
        }
        c.push((format!("party.{}", p.name), line));
    }
    c
}

/// The progress display, and every chain's draws written to its file as they come
/// ([`draws_csv::DrawFile`]).
pub struct LiveDraws {
    display: Arc<dyn Progress>,
    files: Vec<Mutex<draws_csv::DrawFile>>,
}

impl LiveDraws {
    /// Starts (or, for a resumed run, takes up) each chain's file in `dir`, with the header
    /// `comments` that [`finish`] will keep.
    pub fn open(
        dir: &Path,
        model: &dyn Model,
        config: &SamplerConfig,
        comments: &[(String, String)],
        display: Arc<dyn Progress>,
    ) -> anyhow::Result<Self> {
        let files = (0..config.chains)
            .map(|chain| {
                let header = draws_csv::Header {
                    model: model.name(),
                    algorithm: config.variant.name(),
                    comments,
                    chain,
                    seed: chain_seed(config.seed, chain),
                    dim: model.dim(),
                    warmup: config.warmup,
                    draws: config.iterations - config.warmup,
                };
                draws_csv::DrawFile::open(&chain_file(dir, chain), &header).map(Mutex::new)
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(LiveDraws { display, files })
    }
}

impl Progress for LiveDraws {
    fn step(&self, trace: &ChainTrace) -> anyhow::Result<()> {
        self.files[trace.chain as usize]
            .lock()
            .expect("draw file lock")
            .record(trace)?;
        self.display.step(trace)
    }
}
