//! Stopping a job early: the one place that knows about signals.
//!
//! The sampler only sees a [`Stop`] flag, checked between steps. [`on_signals`] sets it on
//! the first SIGINT or SIGTERM, so the job finishes the steps in flight, closes its run on
//! every party (unused reservations go back) and writes what it has; a second signal exits
//! at once, for when a party hangs and the user will not wait.
use std::sync::{Arc, Mutex, OnceLock};

use fedmcmc_common::accountant::Cancel;

use tokio::signal::unix::{SignalKind, signal};

/// A signal that stops a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
}

impl Signal {
    /// The shell's convention, 128 + the signal number, so scripts can tell an interrupted
    /// run from a failed one.
    pub fn exit_code(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        })
    }
}

/// Asks a job to stop after the steps in flight; shared by clones. The first request wins,
/// and cancels the calibrations of the job's in-process parties (a plan of 10⁶ subsampled
/// releases at ε = 100 takes 4.5 s to calibrate before its run opens).
#[derive(Clone, Debug, Default)]
pub struct Stop {
    signal: Arc<OnceLock<Signal>>,
    calibrations: Arc<Mutex<Vec<Cancel>>>,
}

impl Stop {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn request(&self, signal: Signal) {
        let _ = self.signal.set(signal);
        for c in self.calibrations.lock().expect("calibrations lock").iter() {
            c.cancel();
        }
    }

    /// Cancels `calibration` on the stop request (at once if it came already).
    pub fn cancels(&self, calibration: Cancel) {
        let mut all = self.calibrations.lock().expect("calibrations lock");
        if self.is_requested() {
            calibration.cancel();
        }
        all.push(calibration);
    }

    pub fn is_requested(&self) -> bool {
        self.signal.get().is_some()
    }

    /// What asked the job to stop, if anything has.
    pub fn signal(&self) -> Option<Signal> {
        self.signal.get().copied()
    }
}

/// Installs SIGINT and SIGTERM handlers on the current tokio runtime and returns the flag
/// they set. Must be called before any run is opened, so that no signal can kill the
/// process with a reservation outstanding.
pub fn on_signals() -> std::io::Result<Stop> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let stop = Stop::new();
    let flag = stop.clone();
    tokio::spawn(async move {
        let mut next = async || {
            tokio::select! {
                _ = interrupt.recv() => Signal::Interrupt,
                _ = terminate.recv() => Signal::Terminate,
            }
        };
        let first = next().await;
        flag.request(first);
        eprintln!(
            "{first}: stopping the chains after their current step and closing the run on \
             every party; a second signal exits at once, leaving the run open"
        );
        let second = next().await;
        eprintln!("{second}: exiting at once");
        std::process::exit(i32::from(second.exit_code()));
    });
    Ok(stop)
}
