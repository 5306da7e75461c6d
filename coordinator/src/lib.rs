//! The analyst's side of the federation.
//!
//! - `federation`: the parties as one summed contribution (in-process or over gRPC).
//! - `sampler`: chains and their bookkeeping; `kernels`: how releases become decisions
//!   (penalty, Barker, HMC; the acceptance tests themselves are
//!   `fedmcmc_common::acceptance`); `variant`: which kernel, and each party's run plan.
//! - `initialiser`: the private initialiser, where chains start when no point is given.
//! - `planning`: iterations from τ (Räisä 2020, Alg. 2) or τ from iterations.
//! - `job`: check, plan, open, sample, close; shared by `simulate` and `run`.
//! - `checkpoint`: what `--resume` reads back after a coordinator was killed (with
//!   `federation::recorded`, every party's replies on record).
//! - `interrupt`: SIGINT/SIGTERM as a stop flag the sampler checks between steps.
//! - `simulate`, `remote`: the two ways to launch a job; `output`, `progress`: what it shows.
//! - `privacy_cli`: `coordinator privacy …`, the accountants on the command line.
pub mod checkpoint;
pub mod federation;
pub mod initialiser;
pub mod interrupt;
pub mod job;
pub mod kernels;
pub mod output;
pub mod planning;
pub mod presets;
pub mod privacy_cli;
pub mod progress;
pub mod remote;
pub mod sampler;
pub mod simulate;
pub mod summaries;
pub mod variant;
