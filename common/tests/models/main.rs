//! Models against their definitions: the affine hot loops against per-row log-likelihoods
//! and gradients, gradients against finite differences, exact posteriors against the
//! unnormalised posterior and against their own samplers, simulation against the likelihood,
//! and spec validation; the grid reference posterior against a closed form, and the Gaussian
//! mixture, which has none, against the grid.
mod support;

mod affine;
mod exact_posteriors;
mod glm;
mod gradients;
mod grid;
mod mixture;
mod simulation;
mod specs;
