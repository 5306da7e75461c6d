//! What a party refuses, as typed errors; `service.rs` maps each kind to one gRPC status.
use crate::ledger::LedgerError;

#[derive(Debug, thiserror::Error)]
pub enum PartyError {
    /// Malformed input: NaN/∞/wrong-length θ, a bad plan, a chain out of range.
    #[error("{0}")]
    InvalidArgument(String),
    /// An unknown run id.
    #[error("{0}")]
    NotFound(String),
    /// The party's budget, the run's plan or the party's caps on runs have no room for this.
    #[error("{0}")]
    BudgetExhausted(String),
    /// A replayed key with new inputs, a step out of order, a closed run, a model mismatch.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A variant this party does not serve.
    #[error("{0}")]
    Unimplemented(String),
    /// A step of a secure run this party has not joined (since it started): the
    /// coordinator relays the run's announcements again, then asks again.
    #[error("{0}")]
    Unjoined(String),
    /// The ledger could not record the charge: nothing was released.
    #[error("{0}")]
    Ledger(#[from] LedgerError),
}
