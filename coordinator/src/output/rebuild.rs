//! `coordinator summarise DIR`: summary.json and the plots rebuilt from the chains' files
//! alone, for a directory whose job was killed before it wrote them, or whose summary was
//! lost. The draws are all it reads: the statistics are those the job would have written
//! ([`summary::parameters`]); what the draws cannot say (ε spent, the exact posterior) is
//! kept from a summary.json already there, else left out, and the summary says so.
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::draws_csv::{ReadChain, read_chain};
use super::summary::{self, ChainSummary};
use super::{VERSION, plots};

/// What `summarise` did: the parameter table and a line saying what was rebuilt.
pub struct Rebuilt {
    pub table: String,
    pub out: PathBuf,
}

/// Rebuilds `dir/summary.json` and the plots from `dir/chain-*.csv`.
pub fn summarise(dir: &Path) -> anyhow::Result<Rebuilt> {
    let chains = read_chains(dir)?;
    let first = &chains[0];
    let dim = first.trace.dim;
    for c in &chains[1..] {
        if c.trace.dim != dim || c.comment("model") != first.comment("model") {
            anyhow::bail!(
                "the chains in {} are not of one job: chain {} has {} parameters of model {:?}, chain {} {} of {:?}",
                dir.display(),
                first.trace.chain + 1,
                dim,
                first.comment("model"),
                c.trace.chain + 1,
                c.trace.dim,
                c.comment("model")
            );
        }
    }
    let labels: Vec<String> = match first.comment("parameters") {
        Some(names) if names.split(',').count() == dim => {
            names.split(',').map(str::to_string).collect()
        }
        _ => (1..=dim).map(|j| format!("theta.{j}")).collect(),
    };
    let traces: Vec<_> = chains.iter().map(|c| c.trace.clone()).collect();
    let path = dir.join("summary.json");
    let before = read_summary(&path)?;
    // The exact posterior's mean and sd, where the job's summary had them, stay beside the
    // rebuilt statistics.
    let (mut parameters, draws) = summary::parameters(&labels, &traces, None)?;
    if let Some(Value::Array(old)) = before.as_ref().and_then(|b| b.get("parameters")) {
        for (p, o) in parameters.iter_mut().zip(old) {
            p.exact_mean = o.get("exact_mean").and_then(Value::as_f64);
            p.exact_sd = o.get("exact_sd").and_then(Value::as_f64);
        }
    }
    let partial = chains.iter().any(|c| !c.closed);
    let chain_summaries: Vec<ChainSummary> = chains.iter().map(chain_summary).collect();
    let rebuilt = format!(
        "by fedmcmc {VERSION} (`coordinator summarise`) from the draws of {} chains",
        chains.len()
    );
    let mut s = match before {
        Some(Value::Object(old)) => old,
        _ => from_header(first),
    };
    s.insert("rebuilt".into(), json!(rebuilt));
    s.insert(
        "partial".into(),
        json!(partial || s.get("partial") == Some(&json!(true))),
    );
    s.insert("draws_per_chain".into(), json!(draws));
    s.insert("parameters".into(), serde_json::to_value(&parameters)?);
    s.insert("chains".into(), serde_json::to_value(&chain_summaries)?);
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&Value::Object(s))? + "\n",
    )
    .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    let title = format!(
        "{}, {}",
        first.comment("model").unwrap_or("model"),
        first.comment("algorithm").unwrap_or("sampler")
    );
    if let Err(e) = plots::write(dir, &title, &traces, None) {
        tracing::warn!(error = %format!("{e:#}"), "no plots");
    }
    let mut table = format!("summary.json and plots rebuilt {rebuilt}");
    if partial {
        table += " (some chains were cut short: \"partial\": true)";
    }
    table += &format!(
        "; statistics over the first {draws} draws of each chain\n\n{}",
        super::table::parameter_table(&parameters)
    );
    Ok(Rebuilt {
        table,
        out: dir.to_path_buf(),
    })
}

/// Every `chain-<c>.csv` in `dir`, in chain order.
fn read_chains(dir: &Path) -> anyhow::Result<Vec<ReadChain>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("cannot read the directory {}: {e}", dir.display()))?;
    let mut files: Vec<(u32, PathBuf)> = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if let Some(c) = name
            .strip_prefix("chain-")
            .and_then(|rest| rest.strip_suffix(".csv"))
            .and_then(|c| c.parse().ok())
        {
            files.push((c, path));
        }
    }
    if files.is_empty() {
        anyhow::bail!(
            "{} holds no chain-<c>.csv: nothing to summarise",
            dir.display()
        );
    }
    files.sort();
    files.iter().map(|(_, path)| read_chain(path)).collect()
}

/// The summary.json already in the directory, if any; one that does not parse is an error
/// (it is not overwritten unread).
fn read_summary(path: &Path) -> anyhow::Result<Option<Value>> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
            anyhow::anyhow!(
                "{} does not parse ({e}); move it away to rebuild it",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
    }
}

fn chain_summary(c: &ReadChain) -> ChainSummary {
    let t = &c.trace;
    let draws = t.draws() as u64;
    ChainSummary {
        chain: t.chain + 1,
        seed: t.seed,
        acceptance_rate: t.acceptance_rate(),
        iterations: c.warmup + draws,
        planned_iterations: c.warmup + c.planned_draws,
        warmup: c.warmup,
        status: if c.closed {
            "completed".to_string()
        } else {
            format!(
                "cut short after {draws} of {} draws (its file has no closing block)",
                c.planned_draws
            )
        },
        final_scale: t.scale.first().copied(),
        mean_noise_variance: summary::mean(&t.noise_variance),
    }
}

/// Without the job's summary.json, what the chain's header says of the job: the model, the
/// variant, the seed, and each party's grant (rows, τ, noise multiplier, releases). The
/// privacy spent is each party's to say (`party status`, its ledger).
fn from_header(chain: &ReadChain) -> serde_json::Map<String, Value> {
    let mut s = serde_json::Map::new();
    for (key, field) in [
        ("fedmcmc", "fedmcmc"),
        ("model", "model"),
        ("algorithm", "variant"),
        ("variant", "variant_description"),
        ("init", "init"),
        ("aggregation", "aggregation"),
    ] {
        if let Some(v) = chain.comment(key) {
            s.insert(field.into(), json!(v));
        }
    }
    if let Some(seed) = chain
        .comment("base_seed")
        .and_then(|v| v.parse::<u64>().ok())
    {
        s.insert("seed".into(), json!(seed));
    }
    let parties: Vec<Value> = chain
        .comments
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("party.")?, v)))
        .map(|(name, grant)| {
            let mut p = serde_json::Map::new();
            p.insert("name".into(), json!(name));
            for (k, v) in grant.split_whitespace().filter_map(|kv| kv.split_once('=')) {
                let value = v
                    .parse::<u64>()
                    .map(|x| json!(x))
                    .or_else(|_| v.parse::<f64>().map(|x| json!(x)))
                    .unwrap_or_else(|_| json!(v));
                p.insert(k.into(), value);
            }
            Value::Object(p)
        })
        .collect();
    s.insert("parties".into(), Value::Array(parties));
    s.insert(
        "privacy".into(),
        json!("not in the draws: each party's ledger has what it spent (`party status`)"),
    );
    s
}
