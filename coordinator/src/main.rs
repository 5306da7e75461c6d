//! The analyst's command line.
//!
//! - `privacy …` prints one JSON object on stdout.
//! - `simulate` runs a whole federation on this machine (the main job).
//! - `run --config run.toml` samples against parties running elsewhere.
//! - `simulate --resume DIR` and `run --resume DIR` carry on a job whose coordinator was
//!   killed.
//!
//! On bad input every subcommand prints one sentence on stderr and exits non-zero. On
//! SIGINT or SIGTERM `simulate` and `run` stop their chains, close their runs on every party,
//! write the draws so far marked partial, say so on stderr and exit 130 (143); a second
//! signal exits at once.
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fedmcmc_coordinator::{interrupt, privacy_cli, remote, simulate};

#[derive(Parser, Debug)]
#[command(
    name = "coordinator",
    version,
    about = "Federated differentially private MCMC: the analyst's side."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Privacy accounting of a party's Gaussian releases (ε, δ, iteration budgets, noise).
    Privacy(privacy_cli::PrivacyArgs),
    /// Simulate a federation on this machine: generate data, split it among party nodes
    /// served on loopback ports, and sample over gRPC.
    Simulate(Box<simulate::SimulateArgs>),
    /// Sample against running parties listed in a run config.
    Run {
        /// The run config (TOML): the model, the sampler, the parties and TLS; see
        /// docs/deployment.md.
        #[arg(long, required_unless_present = "resume")]
        config: Option<PathBuf>,
        /// Output directory (overrides `out` in the config); it must not hold another run.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Plaintext gRPC to every party, no TLS (as `insecure = true` in the config): for a
        /// closed test network only.
        #[arg(long)]
        insecure: bool,
        /// Carry on the run in DIR whose coordinator was killed, with the config it started
        /// with: the same run ids and steps, the draws so far kept, nothing charged twice.
        /// Within the parties' lease (10 minutes by default) of the last step.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "out", "insecure"])]
        resume: Option<PathBuf>,
        /// Say what the run would ask of each party (steps, τ, the initialiser's share, ε
        /// after) and stop: nothing is opened or released, no output directory is made.
        #[arg(long, conflicts_with_all = ["resume", "out"])]
        dry_run: bool,
    },
    /// Rebuild summary.json and the plots from the draws in DIR (chain-<c>.csv), e.g. after
    /// a job was killed before writing them. Nothing is released: it reads files only.
    Summarise {
        /// The output directory of a `simulate` or `run` job.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Issue mutual-TLS certificates for a federation: a CA (created in DIR on first use)
    /// and, for each NAME, a certificate and key for that node (party or coordinator),
    /// written as DIR/NAME.pem and DIR/NAME.key (owner-only). Give each node its own files
    /// and the CA's certificate DIR/ca.pem; keep DIR/ca.key offline.
    Certs {
        #[arg(long)]
        dir: PathBuf,
        /// Node names: the DNS names or IP addresses their certificates carry (a party's is
        /// its `tls_name` in the run config; the coordinator's goes in the parties'
        /// `allowed_clients`).
        #[arg(required = true)]
        names: Vec<String>,
        /// Days the node certificates are valid (the CA, made on first use, ten years).
        #[arg(long, default_value_t = fedmcmc_party::tls::DEFAULT_DAYS, value_parser = clap::value_parser!(u32).range(1..=3650))]
        days: u32,
        /// Replace the named nodes' certificates and keys (renewal, or a key thought stolen);
        /// without it an existing certificate is never overwritten. Restart a node to load
        /// its new files.
        #[arg(long)]
        renew: bool,
        /// Revoke the named nodes' current certificates instead: their serials join the CA's
        /// revocation list, written anew to DIR/crl.pem; a party whose `tls.crl` names that
        /// file refuses them once restarted. Renew a revoked name to issue it again.
        #[arg(long, conflicts_with_all = ["renew", "days"])]
        revoke: bool,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version go to stdout as usual.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprintln!("{}", one_sentence(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    let job = match cli.command {
        Command::Privacy(args) => {
            return match privacy_cli::run(&args) {
                Ok(json) => {
                    println!("{json}");
                    ExitCode::SUCCESS
                }
                Err(e) => failure(&e),
            };
        }
        Command::Summarise { dir } => {
            return match fedmcmc_coordinator::output::rebuild::summarise(&dir) {
                Ok(rebuilt) => {
                    print!("{}", rebuilt.table);
                    println!("\noutput directory: {}", rebuilt.out.display());
                    ExitCode::SUCCESS
                }
                Err(e) => failure(&e),
            };
        }
        Command::Certs {
            dir,
            names,
            days,
            renew,
            revoke,
        } => {
            use fedmcmc_party::tls;
            if revoke {
                return match tls::revoke(&dir, &names) {
                    Ok(crl) => {
                        println!(
                            "revoked {}; the CA's revocation list is {} (each party's tls.crl; restart the parties to apply it)",
                            names.join(", "),
                            crl.display()
                        );
                        ExitCode::SUCCESS
                    }
                    Err(e) => failure(&e),
                };
            }
            return match tls::issue_with(&dir, &names, &tls::Issuing::days(days, renew)) {
                Ok(issued) => {
                    for cert in issued {
                        let until = time::OffsetDateTime::from(cert.not_after).date();
                        println!(
                            "{}  {}  valid until {until}",
                            tls::node_cert(&dir, &cert.name).display(),
                            tls::node_key(&dir, &cert.name).display()
                        );
                    }
                    println!("CA: {}", fedmcmc_party::tls::ca_cert(&dir).display());
                    ExitCode::SUCCESS
                }
                Err(e) => failure(&e),
            };
        }
        Command::Simulate(args) => Job::Simulate(args),
        Command::Run {
            resume: Some(dir), ..
        } => Job::ResumeRun(dir),
        Command::Run {
            config,
            out,
            insecure,
            dry_run,
            ..
        } => Job::Run {
            config: config.expect("clap requires --config without --resume"),
            out,
            insecure,
            dry_run,
        },
    };
    // Log lines on stderr (progress, grants); `RUST_LOG` overrides the level.
    fedmcmc_party::cli::init_logging();
    runtime().block_on(async {
        let stop = match interrupt::on_signals() {
            Ok(stop) => stop,
            Err(e) => return failure(&anyhow::anyhow!("cannot handle signals: {e}")),
        };
        let report = match job {
            Job::Simulate(args) => match args.resume.clone() {
                Some(dir) if *args != resumed(&dir) => Err(anyhow::anyhow!(
                    "--resume takes every setting from {}: give no other flag",
                    dir.display()
                )),
                Some(dir) => simulate::resume(&dir, &stop).await,
                None => match simulate::Simulation::from_args(*args) {
                    Ok(sim) => simulate::simulate(sim, &stop).await,
                    Err(e) => Err(e),
                },
            },
            Job::ResumeRun(dir) => remote::resume(&dir, &stop).await,
            Job::Run {
                config,
                out,
                insecure,
                dry_run,
            } => match remote::RunConfig::load(&config) {
                Ok(mut c) => {
                    c.insecure |= insecure;
                    if dry_run {
                        return match remote::dry_run(c).await {
                            Ok(plan) => {
                                print!("{plan}");
                                ExitCode::SUCCESS
                            }
                            Err(e) => failure(&e),
                        };
                    }
                    remote::run(c, out, &stop).await
                }
                Err(e) => Err(e),
            },
        };
        if let Ok(report) = &report {
            println!("{}", report.table);
            println!("output directory: {}", report.out.display());
        }
        match (report, stop.signal()) {
            (Ok(report), None) if !report.unclosed.is_empty() => {
                eprintln!(
                    "error: the draws and summary are written, but a run could not be closed: {}; `--resume {}` closes it once the party is back",
                    report.unclosed.join("; "),
                    report.out.display()
                );
                ExitCode::FAILURE
            }
            (Ok(_), None) => ExitCode::SUCCESS,
            (Err(e), None) => failure(&e),
            (Ok(report), Some(signal)) => {
                eprintln!("{}", report.interrupted_line(signal));
                ExitCode::from(signal.exit_code())
            }
            (Err(e), Some(signal)) => {
                eprintln!("interrupted by {signal}: {e:#}");
                ExitCode::from(signal.exit_code())
            }
        }
    })
}

/// `simulate --resume DIR` and nothing else.
fn resumed(dir: &std::path::Path) -> simulate::SimulateArgs {
    simulate::SimulateArgs {
        resume: Some(dir.to_path_buf()),
        ..Default::default()
    }
}

/// A sampling job, run with signal handling (see `fedmcmc_coordinator::interrupt`).
enum Job {
    Simulate(Box<simulate::SimulateArgs>),
    ResumeRun(PathBuf),
    Run {
        config: PathBuf,
        out: Option<PathBuf>,
        insecure: bool,
        dry_run: bool,
    },
}

fn failure(e: &anyhow::Error) -> ExitCode {
    eprintln!("error: {e:#}");
    ExitCode::FAILURE
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Clap's message up to its first blank line (dropping the usage block), on one line.
fn one_sentence(message: &str) -> String {
    message
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}
