//! `simulate`'s command line and config file: the flags, and how a config file's settings
//! fill in what the flags leave unset.
use std::path::PathBuf;

use clap::Args;
use fedmcmc_common::models::ModelSpec;
use fedmcmc_common::proposal::ProposalKind;
use serde::{Deserialize, Serialize};

use crate::federation::secure::Aggregation;
use crate::initialiser::InitChoice;
use crate::presets::Preset;
use crate::variant::VariantName;
/// The most rows a simulation makes: they are held in memory, a few GB at this count.
const MAX_ROWS: usize = 100_000_000;

fn rows_in_memory(s: &str) -> Result<usize, String> {
    let rows: usize = s.parse().map_err(|e| format!("{e}"))?;
    if !(1..=MAX_ROWS).contains(&rows) {
        return Err(format!(
            "{rows} rows: a simulation makes 1 to {MAX_ROWS} rows, held in memory"
        ));
    }
    Ok(rows)
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(x) => Err(format!("{x} is not a positive number")),
        Err(e) => Err(format!("{e}")),
    }
}

/// Flags; each may also come from `--config FILE` (a flag given on the command line wins).
#[derive(Args, Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
// `--epsilon -1` is a value, refused with its reason, not an unknown flag.
#[command(allow_negative_numbers = true)]
pub struct SimulateArgs {
    /// Carry on the simulation in DIR whose coordinator was killed, with the settings it
    /// started with (give no other flag).
    #[arg(long, value_name = "DIR")]
    #[serde(skip)]
    pub resume: Option<PathBuf>,
    /// TOML file with any of these settings (keys as the flags, with `_` for `-`); a `[model]`
    /// table may give a full model specification instead of a preset.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Model preset [default: banana].
    #[arg(long, value_enum)]
    pub model: Option<Preset>,
    /// Dimension of θ [default: 2, or 30 for thesis-gaussian, 3 for the GLMs].
    #[arg(long)]
    pub dim: Option<usize>,
    /// Rows in all, split evenly among the parties [default: 100000; at most 100000000,
    /// which are simulated in memory].
    #[arg(long, value_parser = rows_in_memory)]
    pub rows: Option<usize>,
    /// Number of parties [default: 3].
    #[arg(long)]
    pub parties: Option<usize>,
    /// Each party's ε [default: 6].
    #[arg(long, value_parser = positive)]
    pub epsilon: Option<f64>,
    /// Each party's δ [default: 0.1 / rows].
    #[arg(long)]
    pub delta: Option<f64>,
    /// Noise parameter τ (multiplier τ·√nᵢ per party). Without --iterations, the chains run
    /// as long as the budget allows [default: 0.1 unless --iterations is given].
    #[arg(long)]
    pub tau: Option<f64>,
    /// Iterations per chain, warm-up included. Without --tau, each party calibrates τ.
    /// Required by the minibatch variants.
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Sampler: the full-data DP penalty (Yıldırım & Ermiş 2019), the minibatch DP penalty
    /// (Räisä 2020, Sec. 3.4), DP Barker (Heikkilä et al. 2019), DP HMC (Räisä 2020,
    /// Alg. 4), or the penalty on noisy sufficient statistics (Yıldırım & Ermiş 2019, Alg. 3;
    /// the gaussian GLM) [default: penalty].
    #[arg(long, value_enum)]
    pub variant: Option<VariantName>,
    /// How the penalty variants propose θ′: `rw` (Gaussian random walk), `ocu` (one
    /// component at a time) or `gwmh` (the guided walk: one component in its own direction,
    /// reversed after a reject) (Räisä 2020, Sec. 3.1) [default: rw].
    #[arg(long)]
    pub proposal: Option<ProposalKind>,
    /// Minibatch variants: rows per step over the whole federation, split among the parties
    /// in proportion to their rows; each party draws its share in secret [default: 1000;
    /// for DP Barker the largest batch every party's budget allows for --iterations].
    #[arg(long)]
    pub batch_size: Option<u64>,
    /// DP Barker: the total noise variance C, split among the parties like the batch;
    /// 0.5, 1 and 2 have correction fits [default: 2].
    #[arg(long)]
    pub barker_c: Option<f64>,
    /// DP HMC: leapfrog steps per iteration; each party releases L + 1 gradients and one
    /// ratio per iteration [default: 10].
    #[arg(long)]
    pub leapfrog_steps: Option<u32>,
    /// DP HMC: initial leapfrog step size, adapted during warm-up [default: 1e-3].
    #[arg(long)]
    pub step_size: Option<f64>,
    /// DP HMC: clip on each row's untempered gradient norm [default: 2].
    #[arg(long)]
    pub gradient_clip: Option<f64>,
    /// DP HMC: gradient noise multiplier τ_g·√nᵢ per party [default: 0.5].
    #[arg(long)]
    pub gradient_tau: Option<f64>,
    /// Warm-up iterations per chain [default: half of the iterations].
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Number of chains [default: 4].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub chains: Option<u32>,
    /// Per-row clip on the untempered ratio: |ℓ(x|θ′) − ℓ(x|θ)| ≤ clip·‖θ′ − θ‖ [default: 2].
    #[arg(long)]
    pub clip: Option<f64>,
    /// Initial random-walk sd [default: the thesis's for the preset and variant, else 0.008;
    /// for DP Barker, whose walk is never adapted (that would move the chain into the clipped
    /// posterior), the longest step that keeps rows 3 sds inside its clip at the private
    /// initialiser's fitted posterior sds].
    #[arg(long)]
    pub proposal_sd: Option<f64>,
    /// Keep the random-walk sd fixed instead of adapting it during warm-up.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub no_adapt: Option<bool>,
    /// Seed for data, initial points, chains and the exact reference [default: 1].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Where the chains start: `private` (noisy-gradient ascent from the prior's mode at
    /// --init-share of every party's budget, chains overdispersed around the point found),
    /// `truth-jitter` (the thesis's simulation protocol: true θ plus noise; only a
    /// simulation knows θ), or one point `x,y,…` for every chain [default: private].
    #[arg(long, allow_hyphen_values = true)]
    pub init: Option<InitChoice>,
    /// The private initialiser's share of each party's remaining budget [default: 0.1].
    #[arg(long)]
    pub init_share: Option<f64>,
    /// The private initialiser's gradient releases [default: 40 + 30·d, enough for 15 Newton
    /// rounds after the climb: 100 at d = 2].
    #[arg(long)]
    pub init_steps: Option<u64>,
    /// How the parties' releases are summed: `secure` (each party adds a share of one
    /// noise, masked so that only the sum decodes; Heikkilä et al. 2017, Kairouz, Liu &
    /// Steinke 2021), `plain` (each adds all of its noise), or `auto`: secure where every
    /// party and the variant allow [default: auto].
    #[arg(long, value_enum)]
    pub aggregation: Option<Aggregation>,
    /// Secure aggregation: parties that may collude with the coordinator; each of P parties
    /// adds 1/(P − collusion) of the noise [default: 0].
    #[arg(long)]
    pub collusion: Option<u32>,
    /// Output directory [default: out/sim-<unix time>-<process id>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Plaintext gRPC between the coordinator and the simulated parties, instead of mutual
    /// TLS under a throwaway CA in the output directory.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub insecure: Option<bool>,
    /// A full model specification (config file only).
    #[arg(skip)]
    #[serde(rename = "model_spec")]
    pub model_spec: Option<ModelSpec>,
}

/// A simulation config file: the flags' keys, where `model` is a preset's name or, as in a
/// run config, a `[model]` table with a full model specification (`model_spec` is read as
/// the same table).
pub(super) fn config_file(text: &str) -> Result<SimulateArgs, toml::de::Error> {
    let mut table: toml::Table = toml::from_str(text)?;
    if matches!(table.get("model"), Some(toml::Value::Table(_))) {
        if table.contains_key("model_spec") {
            return Err(serde::de::Error::custom(
                "give the model as a [model] table or as model_spec, not both",
            ));
        }
        let spec = table.remove("model").expect("present");
        table.insert("model_spec".to_string(), spec);
    }
    table.try_into()
}

/// `--flag` values override the config file's.
pub(super) fn merge(flags: SimulateArgs, file: SimulateArgs) -> SimulateArgs {
    SimulateArgs {
        resume: None,
        config: flags.config,
        model: flags.model.or(file.model),
        dim: flags.dim.or(file.dim),
        rows: flags.rows.or(file.rows),
        parties: flags.parties.or(file.parties),
        epsilon: flags.epsilon.or(file.epsilon),
        delta: flags.delta.or(file.delta),
        tau: flags.tau.or(file.tau),
        iterations: flags.iterations.or(file.iterations),
        variant: flags.variant.or(file.variant),
        proposal: flags.proposal.or(file.proposal),
        batch_size: flags.batch_size.or(file.batch_size),
        barker_c: flags.barker_c.or(file.barker_c),
        leapfrog_steps: flags.leapfrog_steps.or(file.leapfrog_steps),
        step_size: flags.step_size.or(file.step_size),
        gradient_clip: flags.gradient_clip.or(file.gradient_clip),
        gradient_tau: flags.gradient_tau.or(file.gradient_tau),
        warmup: flags.warmup.or(file.warmup),
        chains: flags.chains.or(file.chains),
        clip: flags.clip.or(file.clip),
        proposal_sd: flags.proposal_sd.or(file.proposal_sd),
        no_adapt: flags.no_adapt.or(file.no_adapt),
        seed: flags.seed.or(file.seed),
        init: flags.init.or(file.init),
        init_share: flags.init_share.or(file.init_share),
        init_steps: flags.init_steps.or(file.init_steps),
        aggregation: flags.aggregation.or(file.aggregation),
        collusion: flags.collusion.or(file.collusion),
        out: flags.out.or(file.out),
        insecure: flags.insecure.or(file.insecure),
        model_spec: file.model_spec,
    }
}
