//! The party's command line, shared by the `party` binary (the built-in models of the
//! config's `[model]` table) and by a program that serves a model written in Rust
//! (`party/examples/custom_model`): one code path whatever the model.
//!
//! - `serve --config party.toml`: run a party node beside its private rows.
//! - `status --config party.toml`: its budget and runs, from the ledger, without serving.
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use fedmcmc_common::models::Model;

use crate::config::PartyConfig;

#[derive(Parser)]
#[command(
    name = "party",
    version,
    about = "A federation member: serves noisy, budgeted answers about its private rows"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load the rows and the ledger, then serve gRPC until SIGINT/SIGTERM.
    Serve {
        #[arg(long)]
        config: PathBuf,
    },
    /// Print the budget, what is committed to closed and open runs, and the open runs, from
    /// a copy of the ledger (safe while the party serves; the rows are not read).
    Status {
        #[arg(long)]
        config: PathBuf,
    },
}

/// Where a party program's model comes from: the config's `[model]` table
/// ([`crate::configured_model`], the `party` binary) or the program's own code.
pub type ModelSource = fn(&PartyConfig) -> anyhow::Result<Arc<dyn Model>>;

/// Parses the command line and runs it with the model from `model`; the exit code to return
/// from `main`. The `party` binary is `cli::main(fedmcmc_party::configured_model)`.
pub fn main(model: ModelSource) -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run(cli, model))
}

/// Log lines on stderr, at `info` unless `RUST_LOG` says otherwise: the party's and the
/// coordinator's command lines both.
pub fn init_logging() {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr);
    if std::env::var(LOG_FORMAT).is_ok_and(|f| f == "json") {
        logs.json().init();
    } else {
        // Colour codes only for a person at a terminal, not in log files or pipes.
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}

/// `FEDMCMC_LOG_FORMAT=json`: one JSON object per log line, for a log collector.
pub const LOG_FORMAT: &str = "FEDMCMC_LOG_FORMAT";

async fn run(cli: Cli, model: ModelSource) -> ExitCode {
    init_logging();
    let result = match cli.command {
        Command::Serve { config } => serve(&config, model).await,
        Command::Status { config } => PartyConfig::load(&config)
            .map_err(anyhow::Error::from)
            .and_then(|c| crate::status(&c, model(&c)?))
            .map(|report| print!("{report}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("party: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(path: &std::path::Path, model: ModelSource) -> anyhow::Result<()> {
    let config = PartyConfig::load(path)?;
    let opened = crate::open_with(&config, model(&config)?)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    tokio::spawn(crate::PartyNode::keep_leases(std::sync::Arc::downgrade(
        &opened.node,
    )));
    let d = opened.node.describe();
    tracing::info!(
        party = %d.name, listen = %listener.local_addr()?, rows = d.rows, model = %d.model,
        epsilon = d.epsilon, delta = d.delta, epsilon_committed = d.epsilon_committed,
        "serving"
    );
    if d.epsilon > fedmcmc_common::mechanism::MAX_COVERED_EPSILON {
        tracing::warn!(
            "NON-PRIVATE: budget.epsilon = {} is beyond the {:e} up to which this party's exact discrete noise is proven as private as the accountant says; treat its releases as unprotected",
            d.epsilon,
            fedmcmc_common::mechanism::MAX_COVERED_EPSILON
        );
    }
    if config.insecure {
        tracing::warn!(
            "INSECURE: serving plaintext gRPC without TLS (`insecure = true` in the config): anyone on the network path can read the answers and the bearer token"
        );
    }
    let metrics = match config.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (metrics_listen): {e}"))?,
        ),
        None => None,
    };
    // Its signals are handled from before it says it listens.
    let shutdown = shutdown_signal()?;
    // Operators and tests read the bound addresses from these lines on stdout.
    println!("listening on {}", listener.local_addr()?);
    if let Some(m) = &metrics {
        println!("metrics on http://{}/metrics", m.local_addr()?);
    }
    crate::service::serve(
        opened.node,
        &opened.token,
        config.tls.as_ref(),
        listener,
        metrics,
        shutdown,
    )
    .await?;
    tracing::info!("stopped");
    Ok(())
}

/// The first SIGINT, SIGTERM or SIGHUP (the terminal it was started from closed) starts a
/// graceful shutdown, logged with the signal: no new connections, calls in flight finish
/// (every answer already given is in the ledger). Open step streams end when their
/// coordinator closes its run, so a second signal exits at once.
/// The handlers are installed when this is called, not when the future is first polled.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let handler = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|e| anyhow::anyhow!("cannot handle {name}: {e}"))
    };
    let mut interrupt = handler(SignalKind::interrupt(), "SIGINT")?;
    let mut term = handler(SignalKind::terminate(), "SIGTERM")?;
    let mut hangup = handler(SignalKind::hangup(), "SIGHUP")?;
    let mut signal = async move || {
        tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
            _ = hangup.recv() => "SIGHUP",
        }
    };
    Ok(async move {
        let first = signal().await;
        tracing::info!(
            signal = first,
            "shutting down; a second signal stops at once"
        );
        tokio::spawn(async move {
            signal().await;
            std::process::exit(130);
        });
    })
}
