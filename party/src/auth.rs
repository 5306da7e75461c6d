//! Who may call: the client-certificate names the operator admits (`tls.allowed_clients`)
//! and the bearer token, checked on every call before anything is decoded. Interceptors of
//! the gRPC service ([`crate::service`]); a refusal here is counted like any other.
use std::sync::Arc;

use tonic::{Request, Status};

/// Where the operator listed client names (`tls.allowed_clients`), refuses a caller whose TLS
/// certificate carries none of them. Every service the party serves goes through it: the
/// party's own (inside [`BearerAuth`]) and the health service, which asks for no token.
#[derive(Clone)]
pub struct ClientCheck {
    allowed: crate::tls::Allowed,
}

impl ClientCheck {
    pub fn new(allowed_clients: &[String]) -> Self {
        ClientCheck {
            allowed: Arc::new(allowed_clients.to_vec()),
        }
    }
}

impl tonic::service::Interceptor for ClientCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        if !self.allowed.is_empty() {
            let peer = request.peer_certs();
            if !crate::tls::names_one_of(peer.as_deref().map(|c| c.as_slice()), &self.allowed) {
                return Err(Status::permission_denied(
                    "this party does not admit the caller's certificate name",
                ));
            }
        }
        Ok(request)
    }
}

/// Checks `authorization: Bearer <token>` on every call, in constant time, after the
/// [`ClientCheck`]. A call must carry exactly one `authorization` entry: with two, which one
/// a check reads would decide whether a wrong token passes.
#[derive(Clone)]
pub struct BearerAuth {
    expected: Arc<Vec<u8>>,
    clients: ClientCheck,
}

impl BearerAuth {
    pub fn new(token: &str, allowed_clients: &[String]) -> Self {
        BearerAuth {
            expected: Arc::new(format!("Bearer {token}").into_bytes()),
            clients: ClientCheck::new(allowed_clients),
        }
    }
}

impl tonic::service::Interceptor for BearerAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let request = self.clients.call(request)?;
        let mut entries = request.metadata().get_all("authorization").iter();
        let given = entries.next().map(|v| v.as_bytes()).unwrap_or_default();
        let more = entries.count();
        if more > 0 {
            return Err(Status::unauthenticated(format!(
                "the call carries {} authorization headers; send exactly one bearer token",
                more + 1
            )));
        }
        let same_len = given.len() == self.expected.len();
        let diff = given
            .iter()
            .zip(self.expected.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if same_len && diff == 0 {
            Ok(request)
        } else {
            Err(Status::unauthenticated(
                "missing or wrong bearer token for this party",
            ))
        }
    }
}
