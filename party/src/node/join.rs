//! Joining a secure run (Heikkilä et al. 2017; `aggregation.rs` holds the protocol): the
//! node checks every party's announcement for a run it opened for secure aggregation, and
//! closes the run if one is refused.
use super::PartyNode;
use crate::error::PartyError;
use crate::secure::Announcement;

impl PartyNode {
    /// Joins a secure run: verifies every announcement and derives the masks (see
    /// [`Aggregation::join`](crate::aggregation::Aggregation::join)), answering the run's
    /// common noise multiplier. A refused join closes the run: a coordinator that
    /// substituted a key gets nothing more from it.
    pub async fn join_aggregation(
        &self,
        run_id: &str,
        announcements: Vec<Announcement>,
    ) -> Result<f64, PartyError> {
        let run = self.run(run_id)?;
        let aggregation = run.session(run_id)?.ok_or_else(|| {
            PartyError::FailedPrecondition(format!(
                "run {run_id} was opened for plain releases, not secure aggregation"
            ))
        })?;
        match aggregation.join(self.identity.as_deref(), &self.name, announcements) {
            Ok(multiplier) => Ok(multiplier),
            Err(e) => {
                tracing::warn!(party = %self.name, %run_id, error = %e, "secure aggregation refused: run closed");
                self.close_run(run_id).await?;
                Err(e)
            }
        }
    }
}
