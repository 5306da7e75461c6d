//! Refusals over real gRPC: a party served on a loopback port, called through the generated
//! client, exactly as a coordinator would.
mod harness;

mod authentication;
mod bad_requests;
mod budget;
mod health_and_metrics;
mod replay_and_order;
