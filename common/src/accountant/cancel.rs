//! Ending a long calibration early. A numerical accountant may search for minutes over a
//! huge plan (each PLD probe of 8·10⁴ subsampled releases at ε ≈ 2 000 takes seconds); a
//! process asked to stop must not wait for it. The search checks its [`Cancel`] before every
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
