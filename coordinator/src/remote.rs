//! `coordinator run --config run.toml`: the same job against parties already running
//! elsewhere, reached by address with their bearer tokens.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fedmcmc_common::models::{Model, ModelSpec};
use fedmcmc_common::proposal::ProposalKind;
use fedmcmc_party::tls::TlsFiles;
use serde::{Deserialize, Serialize};
use tonic::transport::ClientTlsConfig;

use crate::checkpoint::Checkpoint;
use crate::federation::Federation;
use crate::federation::grpc::GrpcParty;
use crate::federation::secure::Aggregation;
use crate::initialiser::{self, InitChoice, InitialiserSettings};
use crate::interrupt::Stop;
use crate::job::{self, Inits, JobSettings, Start};
use crate::output::{self, Report};
use crate::variant::{HmcOptions, Variant, VariantName};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Output directory (relative to the config file); `--out` overrides it.
    pub out: Option<PathBuf>,
    /// The likelihood must match every party's (checked by fingerprint); the prior is the
    /// coordinator's own. Absent when the program samples a model written in Rust
    /// ([`run_with`]).
    pub model: Option<ModelSpec>,
    pub sampler: SamplerSection,
    pub parties: Vec<RemoteParty>,
    /// Mutual TLS: the coordinator's certificate and key, and the CA every party's
    /// certificate must chain to. Required unless `insecure` is set.
    pub tls: Option<TlsFiles>,
    /// Plaintext gRPC to every party (`--insecure`): for a closed test network only.
    #[serde(default)]
    pub insecure: bool,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SamplerSection {
    /// `summaries`, `penalty`, `minibatch-penalty`, `barker`, `hmc` or
    /// `sufficient-statistics`; without one the route is chosen from the model
    /// ([`choose_route`]).
    pub variant: Option<VariantName>,
    /// The penalty variants' proposal: `rw` (default), `ocu` or `gwmh` (Räisä 2020, Sec. 3.1).
    #[serde(default)]
    pub proposal: ProposalKind,
    /// Minibatch variants: rows per step over the federation, split in proportion to the
    /// parties' rows (default 1000; for DP Barker the largest batch the budgets allow).
    pub batch_size: Option<u64>,
    /// DP Barker: the total noise variance C (default 2; 0.5, 1 and 2 have fits).
    pub barker_c: Option<f64>,
    /// DP HMC: leapfrog steps (default 10), initial step size (default 1e-3, adapted in
    /// warm-up), clip on each row's gradient norm (default 2) and gradient τ (default 0.5).
    pub leapfrog_steps: Option<u32>,
    pub step_size: Option<f64>,
    pub gradient_clip: Option<f64>,
    pub gradient_tau: Option<f64>,
    #[serde(default = "default_chains")]
    pub chains: u32,
    pub iterations: Option<u64>,
    pub tau: Option<f64>,
    pub warmup: Option<u64>,
    /// Required by the per-iteration variants except DP Barker, whose clip the parties fix;
    /// not taken by the summaries route, whose rows the model's bounds bound.
    pub clip: Option<f64>,
    /// The walk's initial sd: required by the per-iteration variants except DP Barker (whose
    /// default is the longest step its clip allows), not taken by the summaries route.
    pub proposal_sd: Option<f64>,
    #[serde(default = "default_true")]
    pub adapt: bool,
    /// The acceptance rate warm-up adapts the scale to (default 0.25 for `rw`, 0.44 for a
    /// one-component proposal).
    pub target_accept: Option<f64>,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Where the chains start: `"private"` (the default: the private initialiser) or one
    /// point `[x, y, …]` for every chain.
    pub init: Option<InitChoice>,
    /// The private initialiser's share of each party's remaining budget (default 0.1) and
    /// its gradient releases (default 40 + 30·d: [`initialiser::default_steps`]).
    pub init_share: Option<f64>,
    pub init_steps: Option<u64>,
    /// `"auto"` (the default: secure aggregation where every party and the variant allow),
    /// `"secure"` or `"plain"`; and the parties that may collude with the coordinator
    /// (default 0: each of P parties adds 1/P of the noise).
    #[serde(default)]
    pub aggregation: Aggregation,
    #[serde(default)]
    pub collusion: u32,
}

/// The route when the run config names no variant, from public facts alone (the model):
/// the summaries route where the model has summaries (it pays once, for a few releases,
/// and its chains then run until they converge), the full-data DP penalty otherwise. The
/// variant and one sentence saying why.
pub fn choose_route(model: &dyn Model) -> (VariantName, String) {
    match crate::summaries::schedule(model) {
        Ok(schedule) => (
            VariantName::Summaries,
            format!(
                "summaries, chosen because the {} model has summaries: each party makes {} release{} once and the noise-aware posterior is then sampled until it converges, at no further privacy cost (set `variant` in [sampler] for a per-iteration variant)",
                model.name(),
                schedule.releases(),
                if schedule.releases() == 1 { "" } else { "s" }
            ),
        ),
        Err(_) => (
            VariantName::Penalty,
            format!(
                "penalty, chosen because the {} model has no summaries: every iteration pays for one release per party (Yıldırım & Ermiş 2019)",
                model.name()
            ),
        ),
    }
}
fn default_chains() -> u32 {
    4
}
fn default_true() -> bool {
    true
}
fn default_seed() -> u64 {
    1
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteParty {
    pub name: String,
    /// e.g. "http://10.0.0.5:50051"
    pub address: String,
    /// File holding the party's bearer token (relative to the config file).
    pub token_file: PathBuf,
    /// The name the party's certificate must carry [default: `name`].
    pub tls_name: Option<String>,
}

/// The directory `path` is in: `.` for a bare file name, whose parent is the empty path.
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl RunConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let mut config: RunConfig = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{} is not a valid run config: {e}", path.display()))?;
        // Absolute, so that the config kept for `--resume` means the same from anywhere.
        let base = std::path::absolute(directory_of(path))
            .map_err(|e| anyhow::anyhow!("cannot resolve {}: {e}", path.display()))?;
        let base = base.as_path();
        for p in &mut config.parties {
            if p.token_file.is_relative() {
                p.token_file = base.join(&p.token_file);
            }
        }
        if let Some(out) = &mut config.out
            && out.is_relative()
        {
            *out = base.join(&*out);
        }
        if config.parties.is_empty() {
            anyhow::bail!("{} lists no parties", path.display());
        }
        if let Some(tls) = &mut config.tls {
            tls.resolve(base);
        }
        Ok(config)
    }

    /// Refuses a party name that could not name its checkpoint directory, and a name given
    /// twice (ignoring case, as some file systems do), whose parties' records would merge.
    fn check_names(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for p in &self.parties {
            crate::federation::ids::check_party_name(&p.name)?;
            if !seen.insert(p.name.to_ascii_lowercase()) {
                return Err(format!(
                    "two parties are named {:?} (names are compared ignoring case)",
                    p.name
                ));
            }
        }
        Ok(())
    }

    /// Each party's TLS settings (all `None` over plaintext); refuses a config that names
    /// neither TLS nor plaintext, or both.
    fn transports(&self) -> anyhow::Result<Vec<Option<ClientTlsConfig>>> {
        match (&self.tls, self.insecure) {
            (Some(tls), false) => {
                if !tls.allowed_clients.is_empty() {
                    anyhow::bail!(
                        "tls.allowed_clients is a party's setting; the coordinator checks each party's certificate against its `tls_name`"
                    );
                }
                tls.validate().map_err(anyhow::Error::msg)?;
                self.parties
                    .iter()
                    .map(|p| {
                        tls.client(p.tls_name.as_deref().unwrap_or(&p.name))
                            .map(Some)
                    })
                    .collect()
            }
            (None, true) => {
                tracing::warn!(
                    "INSECURE: plaintext gRPC to every party (--insecure): the answers and bearer tokens cross the network readable"
                );
                Ok(vec![None; self.parties.len()])
            }
            (None, false) => anyhow::bail!(
                "the run config has no [tls] section: give the coordinator's certificate, key and the federation's CA (`coordinator certs` makes them), or pass --insecure for plaintext on a closed network"
            ),
            (Some(_), true) => anyhow::bail!("both [tls] and insecure: choose one"),
        }
    }
}

/// The command's name, as the checkpoint records it.
const COMMAND: &str = "run";

/// Runs the configured job with the built-in model of its `[model]` table until it ends or
/// `stop` is requested, and reports it. The job keeps a checkpoint in its output directory,
/// so that [`resume`] can carry it on if the coordinator is killed.
pub async fn run(config: RunConfig, out: Option<PathBuf>, stop: &Stop) -> anyhow::Result<Report> {
    let model = built_in(&config)?;
    run_with(config, model, out, stop).await
}

/// Runs the configured job with `model`, which must be the parties' (checked by
/// fingerprint): the entry point of a program that samples a model written in Rust (the
/// prior and the proposals are the coordinator's, so it needs the model too; see
/// `party/examples/custom_model`).
pub async fn run_with(
    config: RunConfig,
    model: Arc<dyn Model>,
    out: Option<PathBuf>,
    stop: &Stop,
) -> anyhow::Result<Report> {
    if let Some(spec) = &config.model
        && spec.build()?.fingerprint() != model.fingerprint()
    {
        anyhow::bail!(
            "the run config's [model] is not the {} model this program samples: remove it",
            model.name()
        );
    }
    let out = out
        .or(config.out.clone())
        .ok_or_else(|| anyhow::anyhow!("give --out or `out` in the run config"))?;
    let checkpoint = Checkpoint::start(&out, COMMAND, &config)?;
    let outcome = job(config, model, &out, &checkpoint, stop).await;
    checkpoint.end(&outcome)?;
    outcome
}

/// The run config's job as a plan, with nothing opened or released and no output directory
/// made: what each party would be asked for, and what it would cost (`run --dry-run`).
pub async fn dry_run(config: RunConfig) -> anyhow::Result<String> {
    let model = built_in(&config)?;
    let handles = connect(&config).await?;
    let (settings, start, route) = settings_of(&config, model.as_ref())?;
    let plan = job::preview(&Federation::new(handles), &model, &settings, &start).await?;
    Ok(match route {
        Some(why) => format!("route: {why}\n{plan}"),
        None => plan,
    })
}

/// Carries on the job in `out`, whose coordinator was killed, with the settings it started
/// with: the same run ids and steps, the draws so far kept.
pub async fn resume(out: &Path, stop: &Stop) -> anyhow::Result<Report> {
    let (checkpoint, config) = Checkpoint::resume::<RunConfig>(out, COMMAND)?;
    let model = built_in(&config)?;
    resumed(config, model, out, checkpoint, stop).await
}

/// [`resume`] for a program that samples `model`, written in Rust (see [`run_with`]).
pub async fn resume_with(out: &Path, model: Arc<dyn Model>, stop: &Stop) -> anyhow::Result<Report> {
    let (checkpoint, config) = Checkpoint::resume::<RunConfig>(out, COMMAND)?;
    resumed(config, model, out, checkpoint, stop).await
}

async fn resumed(
    config: RunConfig,
    model: Arc<dyn Model>,
    out: &Path,
    checkpoint: Checkpoint,
    stop: &Stop,
) -> anyhow::Result<Report> {
    let outcome = job(config, model, out, &checkpoint, stop).await;
    checkpoint.end(&outcome)?;
    outcome
}

/// The model of the config's `[model]` table.
fn built_in(config: &RunConfig) -> anyhow::Result<Arc<dyn Model>> {
    match &config.model {
        Some(spec) => Ok(spec.build()?),
        None => anyhow::bail!("the run config has no [model] table"),
    }
}

/// A connection to every party of the config, by name.
async fn connect(config: &RunConfig) -> anyhow::Result<Vec<(String, GrpcParty)>> {
    config.check_names().map_err(anyhow::Error::msg)?;
    let transports = config.transports()?;
    let mut handles = Vec::with_capacity(config.parties.len());
    for (p, tls) in config.parties.iter().zip(transports) {
        let token = std::fs::read_to_string(&p.token_file).map_err(|e| {
            anyhow::anyhow!(
                "party {}: cannot read {}: {e}",
                p.name,
                p.token_file.display()
            )
        })?;
        let handle = GrpcParty::connect(&p.address, token.trim(), tls)
            .await
            .map_err(|e| anyhow::anyhow!("party {}: {e}", p.name))?;
        handles.push((p.name.clone(), handle));
    }
    Ok(handles)
}

/// The job's settings and start from the config's `[sampler]`, and the route's reason when
/// the config names no variant.
fn settings_of(
    config: &RunConfig,
    model: &dyn Model,
) -> anyhow::Result<(JobSettings, Start, Option<String>)> {
    let s = &config.sampler;
    let hmc = HmcOptions {
        leapfrog_steps: s.leapfrog_steps,
        step_size: s.step_size,
        gradient_clip: s.gradient_clip,
        gradient_tau: s.gradient_tau,
    };
    let (name, route) = match s.variant {
        Some(v) => (v, None),
        None => {
            let (v, why) = choose_route(model);
            tracing::info!(route = %why, "route");
            (v, Some(why))
        }
    };
    let variant = Variant::new(name, s.batch_size, s.barker_c, hmc).map_err(anyhow::Error::msg)?;
    variant
        .check_proposal(s.proposal)
        .map_err(anyhow::Error::msg)?;
    let settings = JobSettings {
        aggregation: s.aggregation,
        collusion: s.collusion,
        variant,
        chains: s.chains,
        iterations: s.iterations,
        tau: s.tau,
        warmup: s.warmup,
        clip: match (&variant, s.clip) {
            (Variant::Barker { .. } | Variant::Summaries, None) => 0.0,
            (Variant::Summaries, Some(c)) => anyhow::bail!(
                "clip = {c} does not apply to the summaries route: each row is bounded by the model's public column bounds"
            ),
            (Variant::Barker { .. }, Some(c)) => anyhow::bail!(
                "clip = {c} does not apply to the barker variant: its clip follows from the batch and C (Räisä 2020, Thm 3.3)"
            ),
            (_, Some(c)) => c,
            (v, None) => anyhow::bail!("the {} variant needs `clip` in [sampler]", v.name()),
        },
        proposal: s.proposal,
        proposal_sd: match (&variant, s.proposal_sd) {
            (Variant::Summaries, None) => Some(0.0),
            (Variant::Summaries, Some(sd)) => anyhow::bail!(
                "proposal_sd = {sd} does not apply to the summaries route: it samples by HMC, adapted in warm-up"
            ),
            // The longest step DP Barker's clip allows (`kernels::barker::step_within_clip`).
            (Variant::Barker { .. }, sd) => sd,
            (_, Some(sd)) => Some(sd),
            (v, None) => anyhow::bail!("the {} variant needs `proposal_sd` in [sampler]", v.name()),
        },
        adapt: s.adapt,
        target_accept: s
            .target_accept
            .unwrap_or(s.proposal.default_target_accept()),
        seed: s.seed,
    };
    let start = match s.init.clone().unwrap_or(InitChoice::Private) {
        InitChoice::Private => {
            let init = InitialiserSettings {
                share: s.init_share.unwrap_or(initialiser::DEFAULT_SHARE),
                steps: s
                    .init_steps
                    .unwrap_or(initialiser::default_steps(model.dim())),
                gradient_clip: variant.gradient_clip(s.clip),
            };
            init.check().map_err(anyhow::Error::msg)?;
            Start::Private(init)
        }
        InitChoice::Point(point) => Start::Given(Inits {
            points: vec![point.clone(); s.chains as usize],
            label: format!("given: {point:?}"),
        }),
        InitChoice::TruthJitter => anyhow::bail!(
            "init = \"truth-jitter\" is a simulation protocol: a run has no true θ; use \"private\" or a point"
        ),
    };
    Ok((settings, start, route))
}

async fn job(
    config: RunConfig,
    model: Arc<dyn Model>,
    out: &Path,
    checkpoint: &Checkpoint,
    stop: &Stop,
) -> anyhow::Result<Report> {
    let mut handles = Vec::with_capacity(config.parties.len());
    for (name, handle) in connect(&config).await? {
        let recorded = checkpoint.party(&name, handle)?;
        handles.push((name, recorded));
    }
    let (settings, start, route) = settings_of(&config, model.as_ref())?;
    let mut comments = vec![match &config.model {
        Some(spec) => ("model_spec".to_string(), serde_json::to_string(spec)?),
        None => (
            "model".to_string(),
            format!("{} (fingerprint {})", model.name(), model.fingerprint()),
        ),
    }];
    comments.extend(route.clone().map(|why| ("route".to_string(), why)));
    let result = job::run(
        Arc::new(Federation::new(handles)),
        Arc::clone(&model),
        &settings,
        start,
        out,
        comments,
        crate::progress::for_terminal,
        stop,
    )
    .await?;
    let mut report = output::finish(out, model.as_ref(), &result, None)?;
    if let Some(why) = route {
        report.table = format!("route: {why}\n{}", report.table);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use fedmcmc_common::models::{Family, GlmSpec};
    use fedmcmc_common::noise_aware::rounds::{DEFAULT_RELEASES, EXACT_RELEASES};

    use super::*;

    /// `--config run.toml` (a bare name, the docs' line) resolves against the working
    /// directory; its parent is the empty path, which `std::path::absolute` refuses.
    #[test]
    fn a_bare_config_name_is_in_the_working_directory() {
        assert_eq!(directory_of(Path::new("run.toml")), Path::new("."));
        assert_eq!(directory_of(Path::new("a/run.toml")), Path::new("a"));
        assert_eq!(directory_of(Path::new("/run.toml")), Path::new("/"));
        assert!(std::path::absolute(directory_of(Path::new("run.toml"))).is_ok());
    }

    /// The route follows from the model alone: the summaries route for every GLM family and
    /// a bounded banana, the DP penalty for a model without summaries, each with its reason; and a run config
    /// for a GLM needs no sampler settings at all.
    #[test]
    fn the_route_follows_from_the_model() {
        for family in [Family::Logistic, Family::Poisson, Family::Gaussian] {
            let model = ModelSpec::Glm(GlmSpec::example(family, 3)).build().unwrap();
            let (route, why) = choose_route(model.as_ref());
            assert_eq!(route, VariantName::Summaries);
            let releases = if family == Family::Gaussian {
                EXACT_RELEASES
            } else {
                DEFAULT_RELEASES
            };
            assert!(why.contains(&format!("{releases} releases once")), "{why}");
        }
        let (route, why) = choose_route(ModelSpec::flat_banana(2).build().unwrap().as_ref());
        assert_eq!(route, VariantName::Penalty);
        assert!(why.contains("the banana model has no summaries"), "{why}");
        // With public bounds on its columns the banana's sum of rows is its summary.
        let bounded = ModelSpec::flat_banana(2).with_predictive_bounds(6.0);
        let (route, why) = choose_route(bounded.build().unwrap().as_ref());
        assert_eq!(route, VariantName::Summaries);
        assert!(why.contains("1 release once"), "{why}");
        let config: RunConfig = toml::from_str(
            "insecure = true\n[sampler]\n[[parties]]\nname = \"a\"\naddress = \"http://127.0.0.1:1\"\ntoken_file = \"t\"\n",
        )
        .unwrap();
        assert_eq!(config.sampler.variant, None);
        assert_eq!(
            (config.sampler.clip, config.sampler.proposal_sd),
            (None, None)
        );
    }

    /// Party names become checkpoint directories: one that climbs, or one given twice, is
    /// refused.
    #[test]
    fn party_names_that_are_paths_or_repeated_are_refused() {
        let config = |names: &[&str]| -> RunConfig {
            let parties: String = names
                .iter()
                .map(|n| {
                    format!("[[parties]]\nname = {n:?}\naddress = \"a\"\ntoken_file = \"t\"\n")
                })
                .collect();
            toml::from_str(&format!("insecure = true\n[sampler]\n{parties}")).unwrap()
        };
        assert!(
            config(&["a", "party-2", "lab-c.example.org"])
                .check_names()
                .is_ok()
        );
        let e = config(&["a", "../../x"]).check_names().unwrap_err();
        assert!(e.contains(r#"the party name "../../x" cannot name"#), "{e}");
        let e = config(&["lab", "Lab"]).check_names().unwrap_err();
        assert!(e.contains(r#"two parties are named "Lab""#), "{e}");
    }
}
