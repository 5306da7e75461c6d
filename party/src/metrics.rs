//! What an operator's monitoring reads, on a port of its own (`metrics_listen`): `GET
//! /health`, plain text (`SERVING`, or `NOT_SERVING` with 503 once shutdown has begun), and
//! `GET /metrics`, Prometheus's text format (OpenMetrics): releases made, requests refused
//! by gRPC code, step latency, ε committed and remaining, open runs.
//!
//! Plain HTTP without the party's token: nothing here depends on row values (counts of
//! requests and their refusals, and ε, which Describe shows every caller), but it says how
//! busy the party is, so bind it to an interface only the operator's monitoring reaches.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::node::PartyNode;

type Labels = Vec<(&'static str, String)>;

/// The party's counters; cheap to update from every call (atomics).
pub struct Metrics {
    registry: Registry,
    releases: Counter,
    replays: Counter,
    refusals: Family<Labels, Counter>,
    step_seconds: Histogram,
    epsilon_budget: Gauge<f64, AtomicU64>,
    epsilon_committed: Gauge<f64, AtomicU64>,
    epsilon_remaining: Gauge<f64, AtomicU64>,
    open_runs: Gauge,
    rows: Gauge,
    serving: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("fedmcmc_party");
        let releases = Counter::default();
        registry.register(
            "releases",
            "Noisy answers released (each charged to the ledger first); replays not counted",
            releases.clone(),
        );
        let replays = Counter::default();
        registry.register(
            "replays",
            "Steps asked again and answered with the recorded release, at no charge",
            replays.clone(),
        );
        let refusals = Family::<Labels, Counter>::default();
        registry.register(
            "refusals",
            "Calls refused, by gRPC status code (authentication, budget, limits, bad input)",
            refusals.clone(),
        );
        // 10 µs to about 10 s: a step is a fraction of a millisecond in memory, an fsync more.
        let step_seconds = Histogram::new(exponential_buckets(1e-5, 2.0, 21));
        registry.register(
            "step_seconds",
            "Time to answer a step, from its decoded request to its answer or refusal",
            step_seconds.clone(),
        );
        let epsilon_budget = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "epsilon_budget",
            "The party's budget ε at its δ",
            epsilon_budget.clone(),
        );
        let epsilon_committed = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "epsilon_committed",
            "ε at δ of every release and reservation in the ledger",
            epsilon_committed.clone(),
        );
        let epsilon_remaining = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "epsilon_remaining",
            "The budget ε less the committed ε (at least 0; ε does not add, so this is a guide, not a promise of a run)",
            epsilon_remaining.clone(),
        );
        let open_runs = Gauge::default();
        registry.register("open_runs", "Runs open now", open_runs.clone());
        let rows = Gauge::default();
        registry.register("rows", "Rows the party holds", rows.clone());
        Metrics {
            registry,
            releases,
            replays,
            refusals,
            step_seconds,
            epsilon_budget,
            epsilon_committed,
            epsilon_remaining,
            open_runs,
            rows,
            serving: AtomicBool::new(true),
        }
    }
}

impl Metrics {
    /// A step answered: a release, or a replay of one.
    pub fn answered(&self, replayed: bool, took: Duration) {
        if replayed {
            self.replays.inc();
        } else {
            self.releases.inc();
        }
        self.step_seconds.observe(took.as_secs_f64());
    }

    /// A step refused (its refusal is counted where the status leaves, [`Metrics::refused`]).
    pub fn step_refused(&self, took: Duration) {
        self.step_seconds.observe(took.as_secs_f64());
    }

    /// A call, or a step in a stream, refused with `code`.
    pub fn refused(&self, code: tonic::Code) {
        self.refusals
            .get_or_create(&vec![("code", format!("{code:?}"))])
            .inc();
    }

    /// Shutdown has begun: `/health` says NOT_SERVING.
    pub fn stopping(&self) {
        self.serving.store(false, Ordering::Relaxed);
    }

    /// The exposition, with the node's ε, runs and rows read now.
    pub fn render(&self, node: &PartyNode) -> String {
        let d = node.describe();
        self.epsilon_budget.set(d.epsilon);
        self.epsilon_committed.set(d.epsilon_committed);
        self.epsilon_remaining
            .set((d.epsilon - d.epsilon_committed).max(0.0));
        self.open_runs.set(i64::from(d.open_runs));
        self.rows.set(i64::try_from(d.rows).unwrap_or(i64::MAX));
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}

type Shared = (Arc<Metrics>, Arc<PartyNode>);

async fn health(State((metrics, _)): State<Shared>) -> impl IntoResponse {
    if metrics.serving.load(Ordering::Relaxed) {
        (StatusCode::OK, "SERVING\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "NOT_SERVING\n")
    }
}

async fn exposition(State((metrics, node)): State<Shared>) -> impl IntoResponse {
    // Describe reads the ledger's cached totals; off the async workers all the same.
    let text = tokio::task::spawn_blocking(move || metrics.render(&node)).await;
    match text {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// Serves `/health` and `/metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, node: Arc<PartyNode>) {
    let app = axum::Router::new()
        .route("/health", axum::routing::get(health))
        .route("/metrics", axum::routing::get(exposition))
        .with_state((metrics, node));
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "the metrics endpoint stopped");
    }
}
