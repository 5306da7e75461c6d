//! The wire format: the `fedmcmc.v1.Party` service and its messages.
//!
//! The single source of truth is `proto/fedmcmc/v1/party.proto`; this crate only compiles it.
pub mod v1 {
    tonic::include_proto!("fedmcmc.v1");
}

/// Largest request a party decodes. Every legitimate request is a few vectors of length d (a
/// step frame: that for each chain, which the coordinator keeps within this);
/// anything bigger is refused before it reaches the release path.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Largest parameter dimension the protocol accepts.
pub const MAX_DIM: usize = 1024;
