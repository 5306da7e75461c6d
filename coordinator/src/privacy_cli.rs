//! `coordinator privacy …`: the accountants of `fedmcmc_common::accountant` on the command line,
//! so that an analyst can plan (ε, δ), iteration counts and noise before asking parties to run.
//!
//! Each release is a Gaussian mechanism (`--mechanism`), possibly on a Poisson subsample or a
//! batch drawn without replacement; `--release` adds further groups of releases (the fixed
//! prefix for `max-iterations` and `calibrate`). `--accountant best` (the default) answers with
//! the tightest accountant that covers the releases and lists every covering one.
use anyhow::{Result, anyhow, bail, ensure};
use clap::{Args, Subcommand};
use fedmcmc_common::accountant::{
    Answer, Cancel, Choice, Composition, CompositionError, Estimate, MaxReleases, MechanismKind,
    Release, mu_per_release,
};
use fedmcmc_common::neighbours::Neighbours;
use serde_json::{Map, Value, json};

#[derive(Args, Debug)]
pub struct PrivacyArgs {
    #[command(subcommand)]
    command: PrivacyCommand,
}

#[derive(Subcommand, Debug)]
enum PrivacyCommand {
    /// The smallest ε with δ(ε) ≤ D after K releases (and any --release groups).
    #[command(allow_negative_numbers = true)]
    Epsilon {
        #[command(flatten)]
        noise: Noise,
        /// Number of releases K of the --noise-multiplier mechanism.
        #[arg(long, value_name = "K")]
        releases: Option<u64>,
        /// Target δ, in (0, 1).
        #[arg(long, value_name = "D")]
        delta: f64,
        #[command(flatten)]
        mechanism: MechanismArgs,
        #[command(flatten)]
        method: Method,
    },
    /// δ at ε after K releases (and any --release groups).
    #[command(allow_negative_numbers = true)]
    Delta {
        #[command(flatten)]
        noise: Noise,
        /// Number of releases K of the --noise-multiplier mechanism.
        #[arg(long, value_name = "K")]
        releases: Option<u64>,
        /// ε at which to report δ, > 0.
        #[arg(long, value_name = "E")]
        epsilon: f64,
        #[command(flatten)]
        mechanism: MechanismArgs,
        #[command(flatten)]
        method: Method,
    },
    /// The most releases (iterations of DP penalty) that fit (ε, δ) after any --release
    /// groups (Räisä 2020, Alg. 2).
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
        mechanism: MechanismArgs,
        #[command(flatten)]
        method: Method,
    },
    /// The smallest noise multiplier with which K releases fit (ε, δ) after any --release
    /// groups.
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
        mechanism: MechanismArgs,
        #[command(flatten)]
        method: Method,
    },
}

/// The noise of one release: a multiplier s directly, or the thesis's s = τ·√N (Räisä 2020,
/// Thm 3.1/3.2 with α = ½).
#[derive(Args, Debug)]
struct Noise {
    /// Noise std divided by the L2 sensitivity of one release under --neighbours.
    #[arg(long, value_name = "S", conflicts_with = "tau")]
    noise_multiplier: Option<f64>,
    /// τ of s = τ·√N; needs --rows.
    #[arg(long, value_name = "T", requires = "rows")]
    tau: Option<f64>,
    /// N, the party's number of rows, for --tau.
    #[arg(long, value_name = "N", requires = "tau", value_parser = clap::value_parser!(u64).range(1..))]
    rows: Option<u64>,
}

/// How each release of the --noise-multiplier mechanism samples the data.
#[derive(Args, Debug)]
struct MechanismArgs {
    /// gaussian, poisson-gaussian (needs --sampling-rate), batch-gaussian (needs --batch and
    /// --population) or dp-barker (needs --batch and --population; Räisä 2020, Thm 3.3: its
    /// noise is fixed, so the noise multiplier is not used, and only rdp covers it).
    #[arg(long, value_name = "M", default_value = "gaussian")]
    mechanism: String,
    /// Poisson sampling rate q in (0, 1].
    #[arg(long, value_name = "Q")]
    sampling_rate: Option<f64>,
    /// Batch size b, drawn without replacement.
    #[arg(long, value_name = "B")]
    batch: Option<u64>,
    /// Population n the batch is drawn from.
    #[arg(long, value_name = "N")]
    population: Option<u64>,
}

#[derive(Args, Debug)]
struct Method {
    /// analytic (tight, Gaussian only), zcdp (looser, Gaussian only), rdp, pld, or best (the
    /// tightest of those that cover the releases).
    #[arg(long, default_value_t = Choice::Best)]
    accountant: Choice,
    /// add-remove or substitute; the noise multiplier is relative to this relation's
    /// sensitivity.
    #[arg(long, default_value = "substitute")]
    neighbours: Neighbours,
    /// A further group of releases, repeatable:
    /// "mechanism=…,noise-multiplier=…,count=…[,sampling-rate=…][,batch=…,population=…]".
    #[arg(long, value_name = "SPEC")]
    release: Vec<Release>,
}

impl Noise {
    /// The multiplier, if given, and the fields that say where it came from.
    fn resolve(&self) -> Result<Option<(f64, Map<String, Value>)>> {
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
            _ => return Ok(None),
        };
        fields.insert("noise_multiplier".into(), json!(s));
        Ok(Some((s, fields)))
    }

    fn required(&self) -> Result<(f64, Map<String, Value>)> {
        self.resolve()?
            .ok_or_else(|| anyhow!("give either --noise-multiplier, or --tau together with --rows"))
    }
}

impl MechanismArgs {
    fn is_default(&self) -> bool {
        self.mechanism == "gaussian"
            && self.sampling_rate.is_none()
            && self.batch.is_none()
            && self.population.is_none()
    }

    fn resolve(&self) -> Result<MechanismKind> {
        Ok(MechanismKind::from_parts(
            &self.mechanism,
            self.sampling_rate,
            self.batch,
            self.population,
        )?)
    }
}

impl Method {
    /// The --release groups followed by `rest`.
    fn composition(&self, rest: Option<Release>) -> Result<Composition> {
        let releases = self.release.iter().copied().chain(rest).collect();
        Ok(Composition::new(releases, self.neighbours)?)
    }

    /// The accountant's report: which one answered, its method and stated error, and with
    /// `best` every covering accountant's answer (`value` names the answer's fields).
    fn report<T>(
        &self,
        mut out: Map<String, Value>,
        answer: &Answer<T>,
        value: impl Fn(&T) -> Map<String, Value>,
    ) -> Value {
        let estimate = |e: &Estimate<T>| {
            let mut fields = Map::new();
            fields.insert("accountant".into(), json!(e.method.key()));
            fields.insert("method".into(), json!(e.method.name()));
            fields.extend(value(&e.value));
            let mut error = serde_json::to_value(e.error).expect("a stated error serialises");
            error["statement"] = json!(e.error.to_string());
            fields.insert("error".into(), error);
            fields
        };
        out.extend(estimate(&answer.estimate));
        out.insert("requested_accountant".into(), json!(self.accountant.key()));
        out.insert("neighbours".into(), json!(self.neighbours.as_str()));
        if !self.release.is_empty() {
            out.insert("release_groups".into(), json!(self.release));
        }
        if self.accountant == Choice::Best {
            let all: Vec<Value> = answer
                .candidates
                .iter()
                .map(|c| match c {
                    Ok(e) => Value::Object(estimate(e)),
                    Err(f) => json!({"accountant": f.method.key(), "failure": f.error.to_string()}),
                })
                .collect();
            out.insert("candidates".into(), Value::Array(all));
        }
        Value::Object(out)
    }
}

/// The mechanism's fields (`mechanism`, and `sampling_rate` or `batch`/`population`).
fn mechanism_fields(kind: MechanismKind) -> Map<String, Value> {
    match serde_json::to_value(kind) {
        Ok(Value::Object(m)) => m,
        _ => unreachable!("a mechanism serialises to an object"),
    }
}

/// The composition of `epsilon`/`delta`: the --release groups and K releases of the
/// --noise-multiplier mechanism, if given; and the fields describing the latter.
fn composition_of(
    noise: &Noise,
    releases: Option<u64>,
    mechanism: &MechanismArgs,
    method: &Method,
) -> Result<(Composition, Map<String, Value>)> {
    let (main, mut out) = match (noise.resolve()?, releases) {
        (Some((s, mut out)), Some(k)) => {
            let kind = mechanism.resolve()?;
            out.extend(mechanism_fields(kind));
            out.insert("releases".into(), json!(k));
            let release = Release {
                mechanism: kind,
                noise_multiplier: s,
                count: k as f64,
            };
            (Some(release), out)
        }
        (Some(_), None) => bail!("give --releases with the noise multiplier"),
        (None, Some(_)) => bail!("give --noise-multiplier, or --tau with --rows, for --releases"),
        (None, None) => {
            ensure!(
                mechanism.is_default(),
                "--mechanism and its parameters describe the --noise-multiplier release, which is missing"
            );
            ensure!(
                !method.release.is_empty(),
                "give --noise-multiplier (or --tau with --rows) and --releases, or at least one --release"
            );
            (None, Map::new())
        }
    };
    let composition = method.composition(main)?;
    if let Some(c) = composition.gaussian() {
        out.insert("mu".into(), json!(c.mu()));
    }
    Ok((composition, out))
}

/// Runs one `privacy` subcommand and returns the JSON object to print.
pub fn run(args: &PrivacyArgs) -> Result<Value> {
    match &args.command {
        PrivacyCommand::Epsilon {
            noise,
            releases,
            delta,
            mechanism,
            method,
        } => {
            let (c, mut out) = composition_of(noise, *releases, mechanism, method)?;
            let answer = method.accountant.epsilon(&c, *delta)?;
            out.insert("delta".into(), json!(delta));
            Ok(method.report(out, &answer, |e| single("epsilon", *e)))
        }
        PrivacyCommand::Delta {
            noise,
            releases,
            epsilon,
            mechanism,
            method,
        } => {
            let (c, mut out) = composition_of(noise, *releases, mechanism, method)?;
            let answer = method.accountant.delta(&c, *epsilon)?;
            out.insert("epsilon".into(), json!(epsilon));
            Ok(method.report(out, &answer, |d| single("delta", *d)))
        }
        PrivacyCommand::MaxIterations {
            noise,
            epsilon,
            delta,
            mechanism,
            method,
        } => {
            let (s, mut out) = noise.required()?;
            let kind = mechanism.resolve()?;
            let prefix = method.composition(None)?;
            let answer = method
                .accountant
                .max_releases(&prefix, kind, s, *epsilon, *delta)?;
            out.extend(mechanism_fields(kind));
            out.insert("epsilon".into(), json!(epsilon));
            out.insert("delta".into(), json!(delta));
            if kind == MechanismKind::Gaussian {
                out.insert("mu_per_release".into(), json!(mu_per_release(s)));
            }
            Ok(method.report(out, &answer, |m: &MaxReleases| {
                let mut f = Map::new();
                f.insert("releases".into(), json!(m.releases));
                f.insert("delta_at_releases".into(), json!(m.delta_at_releases));
                f.insert("delta_at_next".into(), json!(m.delta_at_next));
                f
            }))
        }
        PrivacyCommand::Calibrate {
            releases,
            epsilon,
            delta,
            rows,
            mechanism,
            method,
        } => {
            let kind = mechanism.resolve()?;
            let prefix = method.composition(None)?;
            let answer = method
                .accountant
                .calibrate(&prefix, kind, *releases, (*epsilon, *delta), &Cancel::new())
                .map_err(|e| match e {
                    CompositionError::FixedNoise => anyhow!(
                        "{e}: `privacy epsilon` gives what K releases cost, `privacy max-iterations` how many fit"
                    ),
                    e => e.into(),
                })?;
            let mut out = mechanism_fields(kind);
            out.insert("releases".into(), json!(releases));
            out.insert("epsilon".into(), json!(epsilon));
            out.insert("delta".into(), json!(delta));
            Ok(method.report(out, &answer, |&s| {
                let mut f = single("noise_multiplier", s);
                if let Some(rows) = rows {
                    f.insert("tau".into(), json!(s / (*rows as f64).sqrt()));
                    f.insert("rows".into(), json!(rows));
                }
                if kind == MechanismKind::Gaussian {
                    f.insert("mu".into(), json!(*releases as f64 * mu_per_release(s)));
                }
                f
            }))
        }
    }
}

fn single(key: &str, value: f64) -> Map<String, Value> {
    let mut f = Map::new();
    f.insert(key.into(), json!(value));
    f
}
