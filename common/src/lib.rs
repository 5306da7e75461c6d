//! The maths shared by parties and the coordinator: models, per-row clipping, the Gaussian
//! mechanism and privacy accountants. No networking and no I/O beyond what callers pass in.
pub mod acceptance;
pub mod accountant;
pub mod barker;
pub mod clip;
pub mod data;
pub mod diagnostics;
pub mod discrete_gaussian;
pub mod mechanism;
pub mod models;
pub mod neighbours;
pub mod noise_aware;
pub mod proposal;
