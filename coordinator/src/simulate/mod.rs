//! `coordinator simulate`: a whole federation on one machine. Generates a data set from the
//! model, splits it among N parties, gives each its own directory under `OUT/parties/`
//! (SQLite rows, token, `party.toml`, ledger), serves each on a loopback port exactly as
//! `party serve` would, and samples over real gRPC.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fedmcmc_common::diagnostics;
use fedmcmc_common::models::{ExactPosterior, ModelSpec};
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::config::{BudgetConfig, DataConfig, DataFormat, PartyConfig};
use fedmcmc_party::tls;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use tokio::sync::oneshot;

use crate::checkpoint::Checkpoint;
use crate::federation::Federation;
use crate::federation::grpc::GrpcParty;
use crate::initialiser::{self, InitChoice, InitialiserSettings};
use crate::interrupt::Stop;
use crate::job::{self, Inits, JobSettings, Start};
use crate::output::{self, Report, summary::ExactReference};
use crate::presets::Preset;

mod args;
use crate::planning;
use crate::variant::{HmcOptions, Variant, VariantName};
pub use args::SimulateArgs;
use args::{config_file, merge};

/// The public box a gaussian or banana preset is given on the summaries route: this many sds
/// of its prior predictive either side of its mean (a simulated row beyond it would be
/// refused at load; at the presets' true θ none comes near).
const PRESET_BOX_SDS: f64 = 6.0;

/// The settings with every default filled in.
#[derive(Clone, Debug)]
pub struct Simulation {
    pub spec: ModelSpec,
    pub rows: usize,
    pub parties: usize,
    pub epsilon: f64,
    pub delta: f64,
    pub job: JobSettings,
    pub init: InitChoice,
    /// The private initialiser's settings, used when `init` is private.
    pub initialiser: InitialiserSettings,
    pub out: PathBuf,
    /// Plaintext instead of mutual TLS.
    pub insecure: bool,
    /// The settings, every one given, as the checkpoint keeps them for `--resume`.
    pub settings: SimulateArgs,
}

impl Simulation {
    pub fn from_args(args: SimulateArgs) -> anyhow::Result<Self> {
        let args = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
                let file = config_file(&text).map_err(|e| {
                    anyhow::anyhow!("{} is not a valid simulation config: {e}", path.display())
                })?;
                merge(args, file)
            }
            None => args,
        };
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let out = args
            .out
            .clone()
            // The process id keeps two simulations started in the same second apart.
            .unwrap_or_else(|| PathBuf::from(format!("out/sim-{seconds}-{}", std::process::id())));
        // What `--resume` reads back: every setting, none left to a file or the clock.
        let settings = SimulateArgs {
            config: None,
            resume: None,
            out: Some(out.clone()),
            ..args.clone()
        };

        let preset = match (args.model, &args.model_spec) {
            (None, Some(_)) => None,
            (preset, _) => Some(preset.unwrap_or(Preset::Banana)),
        };
        let dim = preset.map(|p| p.dim(args.dim)).transpose()?;
        let rows = args
            .rows
            .or(preset.zip(dim).map(|(p, d)| p.rows(d)))
            .unwrap_or(100_000);
        let parties = args.parties.unwrap_or(3);
        if parties == 0 || rows < parties {
            anyhow::bail!(
                "need at least one party and one row per party ({rows} rows, {parties} parties)"
            );
        }
        let spec = match (preset, args.model_spec) {
            (Some(preset), _) => preset.spec(args.dim, rows)?,
            (None, spec) => spec.expect("a model spec when there is no preset"),
        };
        let iterations = args.iterations;
        let name = args.variant.unwrap_or(VariantName::Penalty);
        let variant = Variant::new(
            name,
            args.batch_size,
            args.barker_c,
            HmcOptions {
                leapfrog_steps: args.leapfrog_steps,
                step_size: args.step_size,
                gradient_clip: args.gradient_clip,
                gradient_tau: args.gradient_tau,
            },
        )
        .map_err(anyhow::Error::msg)?;
        // A preset's rows are unbounded; the summaries route needs a public box, and the
        // prior predictive's gives one without looking at the rows.
        let spec = match (variant, preset) {
            (Variant::Summaries, Some(_)) => spec.with_predictive_bounds(PRESET_BOX_SDS),
            _ => spec,
        };
        let proposal = args.proposal.unwrap_or_default();
        variant
            .check_proposal(proposal)
            .map_err(anyhow::Error::msg)?;
        // The thesis's settings for the preset's full-data DP penalty, else flat banana d = 2's.
        let thesis = match (variant, preset.zip(dim)) {
            (Variant::Penalty, Some((preset, d))) => preset.thesis_penalty(d, proposal),
            _ => None,
        };
        let (thesis_tau, proposal_sd, clip) = thesis.unwrap_or((0.1, 0.008, 2.0));
        // DP Barker's walk is not adapted: its default step is the longest its clip allows
        // (`kernels::barker::step_within_clip`), its batch the largest the budget allows.
        let proposal_sd = match variant {
            Variant::Barker { .. } => args.proposal_sd,
            _ => Some(args.proposal_sd.unwrap_or(proposal_sd)),
        };
        let clip = args.clip.unwrap_or(clip);
        // The full-data variant may run as long as the budget allows at a default τ; the
        // others are planned by the parties' accountants from their iterations.
        if variant == Variant::Summaries {
            if let Some(clip) = args.clip {
                anyhow::bail!(
                    "--clip {clip} does not apply to the summaries route: each row is bounded by the model's public column bounds"
                );
            }
            if let Some(init) = &args.init {
                anyhow::bail!(
                    "--init {init:?} does not apply to the summaries route: its chains start from its own releases"
                );
            }
        }
        if matches!(variant, Variant::Barker { .. })
            && let Some(clip) = args.clip
        {
            anyhow::bail!(
                "--clip {clip} does not apply to the barker variant: its clip follows from the batch and C (Räisä 2020, Thm 3.3)"
            );
        }
        // DP HMC always needs a ratio τ: its parties do not calibrate its two noises.
        let initialiser = InitialiserSettings {
            share: args.init_share.unwrap_or(initialiser::DEFAULT_SHARE),
            steps: args
                .init_steps
                .unwrap_or(initialiser::default_steps(spec.dim())),
            gradient_clip: variant.gradient_clip(Some(clip)),
        };
        initialiser.check().map_err(anyhow::Error::msg)?;
        let default_tau = match variant {
            Variant::Penalty if iterations.is_none() => Some(thesis_tau),
            Variant::SufficientStatistics if iterations.is_none() => Some(0.1),
            Variant::Hmc { .. } => Some(0.1),
            _ => None,
        };
        let (chains, tau) = (args.chains.unwrap_or(4), args.tau.or(default_tau));
        // Refused before the parties' directories are written (the job plans again later).
        if variant.per_iteration() {
            planning::check(&variant, chains, tau, iterations).map_err(anyhow::Error::msg)?;
        }
        Ok(Simulation {
            spec,
            rows,
            parties,
            epsilon: args.epsilon.unwrap_or(6.0),
            delta: args.delta.unwrap_or(0.1 / rows as f64),
            job: JobSettings {
                aggregation: args.aggregation.unwrap_or_default(),
                collusion: args.collusion.unwrap_or(0),
                variant,
                chains,
                iterations,
                tau,
                warmup: args.warmup,
                clip,
                proposal,
                proposal_sd,
                adapt: !args.no_adapt.unwrap_or(false),
                target_accept: proposal.default_target_accept(),
                seed: args.seed.unwrap_or(1),
            },
            init: args.init.unwrap_or(InitChoice::Private),
            initialiser,
            out,
            insecure: args.insecure.unwrap_or(false),
            settings,
        })
    }
}

/// Independent random streams from the one recorded seed.
fn stream(seed: u64, purpose: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(purpose);
    rng
}

const DATA_STREAM: u64 = 1;
const EXACT_STREAM: u64 = 3;
const MMD_STREAM: u64 = 4;

/// Draws from the exact posterior used as the MMD reference (Räisä 2020, Sec. 5.3).
const EXACT_REFERENCE_DRAWS: usize = 1000;
/// Most pooled chain draws compared by MMD (evenly thinned beyond that).
const MMD_MAX_DRAWS: usize = 2000;

/// The name on the simulated coordinator's certificate, the one name its parties admit.
const COORDINATOR: &str = "coordinator";

/// A party served in this process on a loopback port.
struct ServedParty {
    address: String,
    token: String,
    name: String,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// Ends the party's calibration of a plan when the job is asked to stop.
    calibrations: fedmcmc_common::accountant::Cancel,
}

/// Writes one party's directory: rows, token, config (relative paths, so it can be served
/// later with `party serve --config DIR/party.toml`).
fn write_party_dir(
    dir: &Path,
    name: &str,
    index: usize,
    rows: &fedmcmc_common::data::Columns,
    sim: &Simulation,
    token: &str,
    ca: Option<&Path>,
) -> anyhow::Result<PartyConfig> {
    std::fs::create_dir_all(dir)?;
    // The party's own certificate and key, and the CA, copied into its directory.
    let tls = match ca {
        Some(ca) => {
            std::fs::create_dir_all(dir.join("tls"))?;
            let mut files = tls::files_for(Path::new("tls"), name);
            for (from, to) in [
                (tls::ca_cert(ca), &files.ca),
                (tls::node_cert(ca, name), &files.cert),
                (tls::node_key(ca, name), &files.key),
            ] {
                std::fs::copy(from, dir.join(to))?;
            }
            files.allowed_clients = vec![COORDINATOR.to_string()];
            Some(files)
        }
        None => None,
    };
    let names: Vec<String> = sim
        .spec
        .build()?
        .columns()
        .into_iter()
        .map(|c| c.name)
        .collect();
    fedmcmc_party::store::write_sqlite(&dir.join("rows.sqlite"), "rows", rows, &names)?;
    fedmcmc_party::config::write_secret(&dir.join("token"), &format!("{token}\n"))?;
    let config = PartyConfig {
        name: name.to_string(),
        listen: format!("127.0.0.1:{}", 50051 + index).parse()?,
        ledger: "ledger.sqlite".into(),
        auth_token_file: "token".into(),
        neighbours: Neighbours::Substitute,
        budget: BudgetConfig {
            epsilon: sim.epsilon,
            delta: sim.delta,
            accountant: Default::default(),
        },
        data: DataConfig {
            format: DataFormat::Sqlite,
            path: "rows.sqlite".into(),
            table: "rows".into(),
        },
        model: Some(sim.spec.clone()),
        limits: Default::default(),
        metrics_listen: None,
        insecure: tls.is_none(),
        tls,
    };
    let path = dir.join("party.toml");
    std::fs::write(&path, toml::to_string(&config)?)?;
    // Read back (and validated) as `party serve` would, so the simulation exercises the
    // real loading path.
    PartyConfig::load(&path).map_err(|e| anyhow::anyhow!("party {name}: {e}"))
}

async fn serve_party(config: &PartyConfig) -> anyhow::Result<ServedParty> {
    let opened = fedmcmc_party::open(config)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let address = format!("{scheme}://{}", listener.local_addr()?);
    let (stop, stopped) = oneshot::channel::<()>();
    let token = opened.token.clone();
    let calibrations = opened.node.calibrations();
    let tls = config.tls.clone();
    let task = tokio::spawn(async move {
        fedmcmc_party::service::serve(
            opened.node,
            &opened.token,
            tls.as_ref(),
            listener,
            None,
            async {
                let _ = stopped.await;
            },
        )
        .await
    });
    Ok(ServedParty {
        address,
        token,
        name: config.name.clone(),
        stop,
        task,
        calibrations,
    })
}

/// A random token for a simulated party (never leaves the output directory).
fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 24];
    rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut bytes)
        .map_err(|e| anyhow::anyhow!("the OS random source failed: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The thesis's protocol for simulations (Räisä 2020): true θ plus N(0, 1)·(mean posterior
/// sd) per coordinate, independently per chain. A real analyst does not know θ.
fn thesis_inits(
    truth: &[f64],
    exact: &dyn ExactPosterior,
    chains: u32,
    rng: &mut ChaCha8Rng,
) -> Vec<Vec<f64>> {
    let sd = exact.sd();
    let mean_sd = sd.iter().sum::<f64>() / sd.len() as f64;
    (0..chains)
        .map(|_| {
            truth
                .iter()
                .map(|t| {
                    let z: f64 = StandardNormal.sample(rng);
                    t + z * mean_sd
                })
                .collect()
        })
        .collect()
}

/// Pooled post-warm-up draws, thinned evenly to at most `max`.
fn pooled_draws(job: &job::JobResult, max: usize) -> Vec<Vec<f64>> {
    let all: Vec<Vec<f64>> = job
        .traces
        .iter()
        .flat_map(|t| t.kept().map(move |i| t.draw(i).to_vec()))
        .collect();
    let stride = all.len().div_ceil(max).max(1);
    all.into_iter().step_by(stride).collect()
}

/// The command's name, as the checkpoint records it.
const COMMAND: &str = "simulate";

/// Runs the whole simulation until it ends or `stop` is requested, and reports it. It keeps
/// a checkpoint in its output directory, so that [`resume`] can carry it on if the process
/// is killed.
pub async fn simulate(sim: Simulation, stop: &Stop) -> anyhow::Result<Report> {
    if sim.out.join("parties").exists() {
        anyhow::bail!(
            "{} already holds a simulation; choose another --out",
            sim.out.display()
        );
    }
    let checkpoint = Checkpoint::start(&sim.out, COMMAND, &sim.settings)?;
    let outcome = federate(&sim, &checkpoint, true, stop).await;
    checkpoint.end(&outcome)?;
    outcome
}

/// Carries on the simulation in `out`, whose process was killed: the parties are served
/// again from their directories (their ledgers hold their open runs) and the job retraces
/// its steps, then goes on.
pub async fn resume(out: &Path, stop: &Stop) -> anyhow::Result<Report> {
    let (checkpoint, settings) = Checkpoint::resume::<SimulateArgs>(out, COMMAND)?;
    let sim = Simulation::from_args(SimulateArgs {
        out: Some(out.to_path_buf()),
        ..settings
    })?;
    let outcome = federate(&sim, &checkpoint, false, stop).await;
    checkpoint.end(&outcome)?;
    outcome
}

/// The simulation's data (from its seed, so a resumed one has the same), its parties'
/// directories written if `new` (else read back), the parties served and sampled.
async fn federate(
    sim: &Simulation,
    checkpoint: &Checkpoint,
    new: bool,
    stop: &Stop,
) -> anyhow::Result<Report> {
    let model = sim.spec.build()?;
    let truth = sim.spec.true_theta();
    let out = &sim.out;
    let data = model.simulate(&truth, sim.rows, &mut stream(sim.job.seed, DATA_STREAM));
    // The reference for the summary's exact moments and MMD, where the model has one.
    let exact = model.exact_posterior(&data);
    if exact.is_none() && sim.init == InitChoice::TruthJitter {
        anyhow::bail!(
            "--init truth-jitter spreads the chains by the exact posterior's sd, and the {} model has none here: use --init private or a point",
            model.name()
        );
    }

    let names: Vec<String> = (1..=sim.parties).map(|i| format!("party-{i}")).collect();
    // A throwaway CA for this federation, with the coordinator's certificate beside it.
    let ca = out.join("tls");
    if sim.insecure {
        tracing::warn!("INSECURE: the simulated federation talks plaintext gRPC (--insecure)");
    } else if new {
        let mut all = names.clone();
        all.push(COORDINATOR.to_string());
        tls::issue(&ca, &all)?;
    }
    let ca = (!sim.insecure).then_some(ca.as_path());
    let mut served = Vec::with_capacity(sim.parties);
    for (i, (rows, name)) in data.split(sim.parties).iter().zip(&names).enumerate() {
        let dir = out.join("parties").join(name);
        let config = if new {
            write_party_dir(&dir, name, i, rows, sim, &new_token()?, ca)?
        } else {
            let path = dir.join("party.toml");
            PartyConfig::load(&path).map_err(|e| anyhow::anyhow!("party {name}: {e}"))?
        };
        let party = serve_party(&config).await?;
        stop.cancels(party.calibrations.clone());
        served.push(party);
    }
    let mut handles = Vec::with_capacity(served.len());
    for p in &served {
        // Every party serves TLS exactly when the simulation has a CA.
        let tls = match ca {
            Some(ca) => Some(tls::files_for(ca, COORDINATOR).client(&p.name)?),
            None => None,
        };
        let handle = GrpcParty::connect(&p.address, &p.token, tls).await?;
        handles.push((p.name.clone(), checkpoint.party(&p.name, handle)?));
    }
    let federation = Arc::new(Federation::new(handles));

    let start = match &sim.init {
        InitChoice::Private => Start::Private(sim.initialiser),
        InitChoice::Point(point) => Start::Given(Inits {
            points: vec![point.clone(); sim.job.chains as usize],
            label: format!("given: {point:?}"),
        }),
        InitChoice::TruthJitter => Start::Given(Inits {
            points: thesis_inits(
                &truth,
                exact.as_deref().expect("checked above"),
                sim.job.chains,
                &mut stream(sim.job.seed, job::INIT_STREAM),
            ),
            label: "truth-jitter, the thesis's protocol for simulations: true θ + N(0, 1)·(mean exact posterior sd) per chain (uses the known truth)".into(),
        }),
    };
    let comments = vec![
        ("model_spec".to_string(), serde_json::to_string(&sim.spec)?),
        ("rows".to_string(), sim.rows.to_string()),
        ("parties".to_string(), sim.parties.to_string()),
        ("epsilon".to_string(), sim.epsilon.to_string()),
        ("delta".to_string(), sim.delta.to_string()),
        ("seed".to_string(), sim.job.seed.to_string()),
        ("data_seed_stream".to_string(), DATA_STREAM.to_string()),
    ];
    let result = job::run(
        Arc::clone(&federation),
        Arc::clone(&model),
        &sim.job,
        start,
        out,
        comments,
        crate::progress::for_terminal,
        stop,
    )
    .await;

    // Our connections must close before the servers can finish their graceful shutdown.
    drop(federation);
    for p in served {
        let _ = p.stop.send(());
        p.task.await??;
    }
    let result = result?;

    let reference = match &exact {
        Some(exact) => Some(exact_reference(exact.as_ref(), &result, sim.job.seed)?),
        None => None,
    };
    let mut report = output::finish(out, model.as_ref(), &result, reference.as_ref())?;
    if reference.is_none() {
        report.table += &format!(
            "\nno exact posterior for the {} model: the draws are compared with none (no MMD)\n",
            model.name()
        );
    }
    if sim.job.variant.per_iteration() && model.summaries().is_some() {
        report.table += &format!(
            "\nthe summaries route applies to the {} model: `--variant summaries` pays once, for a few releases of summaries, and then samples their noise-aware posterior until every chain converges; here each of the {} iterations paid its own release (README, \"Choosing the route\")\n",
            model.name(),
            result.sampler.iterations
        );
    }
    Ok(report)
}

/// The exact posterior's moments, its reference sample and the MMDs of the pooled draws and
/// of as many independent exact draws against it (Räisä 2020, Sec. 5.3).
fn exact_reference(
    exact: &dyn ExactPosterior,
    result: &job::JobResult,
    seed: u64,
) -> anyhow::Result<ExactReference> {
    let mut exact_rng = stream(seed, EXACT_STREAM);
    let reference: Vec<Vec<f64>> = (0..EXACT_REFERENCE_DRAWS)
        .map(|_| exact.sample(&mut exact_rng))
        .collect();
    let draws = pooled_draws(result, MMD_MAX_DRAWS);
    let independent: Vec<Vec<f64>> = (0..draws.len())
        .map(|_| exact.sample(&mut exact_rng))
        .collect();
    let mut mmd_rng = stream(seed, MMD_STREAM);
    // After an early stop there may be too few draws (or all equal): report the rest.
    let mut mmd = |sample: &[Vec<f64>]| match diagnostics::mmd(sample, &reference, &mut mmd_rng) {
        Err(e) if result.interrupted.is_some() => {
            tracing::warn!(error = %e, "no MMD for the partial draws");
            Ok(None)
        }
        other => other.map(Some),
    };
    Ok(ExactReference {
        mean: exact.mean(),
        sd: exact.sd(),
        mmd_to_exact: mmd(&draws)?,
        mmd_baseline: mmd(&independent)?,
        draws: reference,
    })
}
