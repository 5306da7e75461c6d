//! The lease: a run whose coordinator stopped stepping it is closed after the party's lease
//! (`lease_seconds`), charged for what it released, as CloseRun would close it; so an
//! abandoned run gives back the rest of its reservation.
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use super::PartyNode;
use crate::error::PartyError;
use crate::ledger::ClosedBy;
use crate::runs::RunState;

impl PartyNode {
    /// Closes every open run that has seen no step for longer than the lease at `now`,
    /// charging what each released, as CloseRun would. Returns the ids closed. The lease
    /// keeper calls this with the clock; tests may pass a later instant.
    pub async fn close_idle_runs(&self, now: Instant) -> Result<Vec<String>, PartyError> {
        let _admission = self.admission.lock().await;
        let lease = self.limits.lease();
        let idle = |run: &RunState| now.saturating_duration_since(run.idle_since()) > lease;
        let expired: Vec<_> = self
            .runs
            .lock()
            .expect("runs lock")
            .open
            .iter()
            .filter(|(_, run)| idle(run) && !run.closed.load(Ordering::SeqCst))
            .map(|(id, run)| (id.clone(), Arc::clone(run)))
            .collect();
        let by = ClosedBy::Lease {
            idle_seconds: self.limits.lease_seconds,
        };
        let mut closed = Vec::with_capacity(expired.len());
        for (run_id, run) in expired {
            // A step may have renewed the lease since the list was made.
            if idle(&run) {
                self.close(&run_id, run, by).await?;
                closed.push(run_id);
            }
        }
        Ok(closed)
    }

    /// Runs for as long as the node lives, closing idle runs a few times per lease. Holds the
    /// node weakly, so that dropping the node (and releasing its ledger) ends it.
    pub async fn keep_leases(node: Weak<PartyNode>) {
        let Some(period) = node.upgrade().map(|n| n.limits.lease() / 4) else {
            return;
        };
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(node) = node.upgrade() else {
                return;
            };
            match node.close_idle_runs(Instant::now()).await {
                Ok(ids) => {
                    for run_id in ids {
                        tracing::info!(party = %node.name, %run_id, "idle run closed by its lease");
                    }
                }
                Err(e) => {
                    tracing::error!(party = %node.name, error = %e, "closing idle runs failed")
                }
            }
        }
    }
}
