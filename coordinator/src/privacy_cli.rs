//! `coordinator privacy …`: the accountants of `fedmcmc_common::accountant` on the command line,
//! so that an analyst can plan (ε, δ), iteration counts and noise before asking parties to run.
use anyhow::{Result, bail, ensure};
use clap::{Args, Subcommand};
use fedmcmc_common::accountant::{
    Accountant, GaussianComposition, calibrate, max_releases, mu_per_release,
};
use serde_json::{Map, Value, json};

#[derive(Args, Debug)]
pub struct PrivacyArgs {
    #[command(subcommand)]
    command: PrivacyCommand,
}

#[derive(Subcommand, Debug)]
enum PrivacyCommand {
    /// The smallest ε with δ(ε) ≤ D after K releases.
    #[command(allow_negative_numbers = true)]
    Epsilon {
        #[command(flatten)]
        noise: Noise,
        /// Number of releases K.
        #[arg(long, value_name = "K")]
        releases: u64,
        /// Target δ, in (0, 1).
        #[arg(long, value_name = "D")]
        delta: f64,
        #[command(flatten)]
        method: Method,
    },
    /// δ at ε after K releases.
    #[command(allow_negative_numbers = true)]
    Delta {
        #[command(flatten)]
        noise: Noise,
        /// Number of releases K.
        #[arg(long, value_name = "K")]
        releases: u64,
        /// ε at which to report δ, > 0.
        #[arg(long, value_name = "E")]
        epsilon: f64,
        #[command(flatten)]
        method: Method,
    },
    /// The most releases (iterations of DP penalty) that fit (ε, δ) (seed 003 Alg. 2).
    #[command(allow_negative_numbers = true)]
    MaxIterations {
        #[command(flatten)]
        noise: Noise,
        /// Target ε, > 0.
        #[arg(long, value_name = "E")]
        epsilon: f64,
        /// Target δ, in (0, 1).
        #[arg(long, value_name = "D")]
        delta: f64,
        #[command(flatten)]
        method: Method,
    },
    /// The smallest noise multiplier with which K releases fit (ε, δ).
    #[command(allow_negative_numbers = true)]
    Calibrate {
        /// Number of releases K.
        #[arg(long, value_name = "K")]
        releases: u64,
        /// Target ε, > 0.
        #[arg(long, value_name = "E")]
        epsilon: f64,
        /// Target δ, in (0, 1).
        #[arg(long, value_name = "D")]
        delta: f64,
        /// Also report τ = s/√N for a party with N rows.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        rows: Option<u64>,
        #[command(flatten)]
        method: Method,
    },
}

/// The noise of one release: a multiplier s directly, or the thesis's s = τ·√N (seed 003
/// Thm 3.1/3.2 with α = ½).
#[derive(Args, Debug)]
struct Noise {
    /// Noise std divided by the L2 sensitivity of one release.
    #[arg(
        long,
        value_name = "S",
        required_unless_present = "tau",
        conflicts_with = "tau"
    )]
    noise_multiplier: Option<f64>,
    /// τ of s = τ·√N; needs --rows.
    #[arg(long, value_name = "T", requires = "rows")]
    tau: Option<f64>,
    /// N, the party's number of rows, for --tau.
    #[arg(long, value_name = "N", requires = "tau", value_parser = clap::value_parser!(u64).range(1..))]
    rows: Option<u64>,
}

#[derive(Args, Debug)]
struct Method {
    /// `analytic` (tight Gaussian privacy-loss distribution) or `zcdp` (looser).
    #[arg(long, default_value_t = Accountant::Analytic)]
    accountant: Accountant,
}

impl Noise {
    /// The multiplier, and the fields that say where it came from.
    fn resolve(&self) -> Result<(f64, Map<String, Value>)> {
        let mut fields = Map::new();
        let s = match (self.noise_multiplier, self.tau, self.rows) {
            (Some(s), _, _) => s,
            (None, Some(tau), Some(rows)) => {
                ensure!(
                    tau.is_finite() && tau > 0.0,
                    "tau must be a finite number greater than 0, got {tau}"
                );
                fields.insert("tau".into(), json!(tau));
                fields.insert("rows".into(), json!(rows));
                tau * (rows as f64).sqrt()
            }
            _ => bail!("give either --noise-multiplier, or --tau together with --rows"),
        };
        fields.insert("noise_multiplier".into(), json!(s));
        Ok((s, fields))
    }
}

fn with_method(mut fields: Map<String, Value>, accountant: Accountant) -> Value {
    fields.insert("accountant".into(), json!(accountant.key()));
    fields.insert("method".into(), json!(accountant.name()));
    Value::Object(fields)
}

/// Runs one `privacy` subcommand and returns the JSON object to print.
pub fn run(args: &PrivacyArgs) -> Result<Value> {
    match &args.command {
        PrivacyCommand::Epsilon {
            noise,
            releases,
            delta,
            method,
        } => {
            let (s, mut out) = noise.resolve()?;
            let c = GaussianComposition::from_releases(&[(*releases as f64, s)])?;
            let epsilon = method.accountant.epsilon(&c, *delta)?;
            out.insert("epsilon".into(), json!(epsilon));
            out.insert("delta".into(), json!(delta));
            out.insert("releases".into(), json!(releases));
            out.insert("mu".into(), json!(c.mu()));
            Ok(with_method(out, method.accountant))
        }
        PrivacyCommand::Delta {
            noise,
            releases,
            epsilon,
            method,
        } => {
            let (s, mut out) = noise.resolve()?;
            let c = GaussianComposition::from_releases(&[(*releases as f64, s)])?;
            let delta = method.accountant.delta(&c, *epsilon)?;
            out.insert("delta".into(), json!(delta));
            out.insert("epsilon".into(), json!(epsilon));
            out.insert("releases".into(), json!(releases));
            out.insert("mu".into(), json!(c.mu()));
            Ok(with_method(out, method.accountant))
        }
        PrivacyCommand::MaxIterations {
            noise,
            epsilon,
            delta,
            method,
        } => {
            let (s, mut out) = noise.resolve()?;
            let a = method.accountant;
            let k = max_releases(a, s, *epsilon, *delta)?;
            let delta_after = |n: u64| {
                GaussianComposition::from_releases(&[(n as f64, s)])
                    .and_then(|c| a.delta(&c, *epsilon))
            };
            out.insert("releases".into(), json!(k));
            out.insert("delta_at_releases".into(), json!(delta_after(k)?));
            out.insert("delta_at_next".into(), json!(delta_after(k + 1)?));
            out.insert("epsilon".into(), json!(epsilon));
            out.insert("delta".into(), json!(delta));
            out.insert("mu_per_release".into(), json!(mu_per_release(s)));
            Ok(with_method(out, a))
        }
        PrivacyCommand::Calibrate {
            releases,
            epsilon,
            delta,
            rows,
            method,
        } => {
            let s = calibrate(method.accountant, *releases, *epsilon, *delta)?;
            let mut out = Map::new();
            out.insert("noise_multiplier".into(), json!(s));
            if let Some(rows) = rows {
                out.insert("tau".into(), json!(s / (*rows as f64).sqrt()));
                out.insert("rows".into(), json!(rows));
            }
            out.insert("releases".into(), json!(releases));
            out.insert("epsilon".into(), json!(epsilon));
            out.insert("delta".into(), json!(delta));
            out.insert("mu".into(), json!(*releases as f64 * mu_per_release(s)));
            Ok(with_method(out, method.accountant))
        }
    }
}
