//! Ending a long calibration early. A numerical accountant may search for seconds over a
//! large plan (10⁶ subsampled releases at ε = 100: 4.5 s under the PLD's grid cap,
//! minutes without it); a process asked to stop must not wait for it. The search checks its [`Cancel`] before every
//! probe and gives up with [`CompositionError::Cancelled`](super::CompositionError::Cancelled),
//! before anything is reserved.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once, by whoever stops the process; shared by clones.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ends every calibration that checks this (and every later one).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}
