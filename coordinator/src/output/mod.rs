//! What a job leaves in `--out DIR`: `chain-<c>.csv` per chain (CmdStan layout) and
//! `summary.json`; and the table printed on stdout.
use std::path::Path;

pub mod draws_csv;
pub mod summary;

use crate::job::JobResult;
use summary::{ExactReference, Summary};

/// Writes every output file into `dir` (created if missing) and returns the summary.
pub fn write_all(
    dir: &Path,
    model: &str,
    job: &JobResult,
    comments: &[(String, String)],
    exact: Option<&ExactReference>,
) -> anyhow::Result<Summary> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    for t in &job.traces {
        let path = dir.join(format!("chain-{}.csv", t.chain + 1));
        draws_csv::write_chain(&path, t, comments)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    let s = summary::summarise(model, job, exact)?;
    let path = dir.join("summary.json");
    std::fs::write(&path, serde_json::to_string_pretty(&s)? + "\n")
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(s)
}

/// Header lines every job's CSV carries: the sampler configuration and the grants.
pub fn job_comments(result: &JobResult) -> Vec<(String, String)> {
    let s = &result.sampler;
    let mut c = vec![
        ("chains".to_string(), s.chains.to_string()),
        ("iterations".to_string(), s.iterations.to_string()),
        ("warmup".to_string(), s.warmup.to_string()),
        ("proposal_sd".to_string(), s.proposal_sd.to_string()),
        ("adapt".to_string(), s.adapt.to_string()),
        ("target_accept".to_string(), s.target_accept.to_string()),
        ("base_seed".to_string(), s.seed.to_string()),
    ];
    for (p, g) in result.parties.iter().zip(&result.grants) {
        c.push((
            format!("party.{}", p.name),
            format!(
                "rows={} tau={} noise_multiplier={} releases={}",
                p.rows, g.tau, g.noise_multiplier, g.releases
            ),
        ));
    }
    c
}
