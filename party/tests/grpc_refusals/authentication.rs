//! Who may call: bearer tokens (two authorization headers are refused in either order) and
//! mutual TLS (certificates expire, are renewed and revoked; the allow-list holds for health).
use std::net::SocketAddr;
use std::path::Path;

use fedmcmc_party::tls::TlsFiles;
use fedmcmc_proto::v1 as pb;
use tonic::Code;
use tonic::transport::Channel;

use crate::harness::{Running, TOKEN, authorised, committed, fresh, open, party_dir, plan, tau};

/// A call with two `authorization` entries is refused, saying two were sent, whichever comes
/// first: a check that read only the first (or the last) let a right token beside a wrong one
/// through. One right entry is still answered.
#[tokio::test]
async fn two_authorization_headers_are_refused_in_either_order() {
    let (_dir, party, mut c) = fresh().await;
    let wrong = "wrong-token-0123456789abcdef";
    for tokens in [[TOKEN, wrong], [wrong, TOKEN], [TOKEN, TOKEN]] {
        let mut two = party.client_with_tokens(&tokens).await;
        for err in [
            two.describe(pb::DescribeRequest {}).await.unwrap_err(),
            open(&mut two, &party.fingerprint, plan(1, 1, tau(1.0)))
                .await
                .unwrap_err(),
        ] {
            assert_eq!(err.code(), Code::Unauthenticated, "{tokens:?}: {err:?}");
            assert_eq!(
                err.message(),
                "the call carries 2 authorization headers; send exactly one bearer token",
                "{tokens:?}"
            );
        }
    }
    assert_eq!(committed(&mut c).await, 0.0);
    party.stop().await;
}

/// Describe over mutual TLS as the holder of certificate `name` from the CA in `ca`, dialling
/// the party as `party_name`: its name, or why the handshake or the call failed.
async fn tls_describe(
    addr: SocketAddr,
    ca: &Path,
    name: &str,
    party_name: &str,
) -> Result<String, String> {
    let config = fedmcmc_party::tls::files_for(ca, name)
        .client(party_name)
        .unwrap();
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(config)
        .unwrap()
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    authorised(channel, &[TOKEN])
        .describe(pb::DescribeRequest {})
        .await
        .map(|d| d.into_inner().party_name)
        .map_err(|e| format!("{e:?}"))
}

/// Certificates expire, are renewed and revoked: a coordinator certificate whose validity has
/// passed is refused at the handshake; without renewal an existing certificate is never
/// overwritten; renewed (a new key and certificate, `coordinator certs --renew`), the same
/// name is answered; revoked (`--revoke`), it is refused by a party given the CA's list, and
/// renewed again, answered. The party's own certificate names an IP address, as the
/// coordinator dials it.
#[tokio::test]
async fn certificates_expire_are_renewed_and_revoked_and_may_name_an_ip_address() {
    use fedmcmc_party::tls::{self, Issuing};
    use std::time::{Duration, SystemTime};

    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("tls");
    let (party_name, coordinator) = ("127.0.0.1".to_string(), "coordinator".to_string());
    tls::issue(&ca, std::slice::from_ref(&party_name)).unwrap();
    let (now, day) = (SystemTime::now(), Duration::from_secs(86_400));
    let lapsed = Issuing {
        valid: now - 2 * day..now - day,
        renew: false,
    };
    tls::issue_with(&ca, std::slice::from_ref(&coordinator), &lapsed).unwrap();
    let files = tls::files_for(&ca, &party_name);
    let party = Running::start_with(&party_dir(dir.path(), 1.0, 1e-6), Some(files)).await;
    let as_coordinator = || tls_describe(party.addr, &ca, &coordinator, &party_name);
    as_coordinator().await.expect_err("an expired certificate");
    let again = tls::issue(&ca, std::slice::from_ref(&coordinator)).unwrap_err();
    assert!(
        again
            .to_string()
            .ends_with("was issued already (renew it with --renew)"),
        "{again}"
    );
    as_coordinator()
        .await
        .expect_err("still the expired certificate");
    let bad = tls::issue(&ca, &["not a name!".to_string()]).unwrap_err();
    assert_eq!(
        bad.to_string(),
        "\"not a name!\" is neither a DNS name nor an IP address"
    );
    let renewed = tls::issue_with(
        &ca,
        std::slice::from_ref(&coordinator),
        &Issuing::days(30, true),
    )
    .unwrap();
    assert!(renewed[0].not_after > now + 29 * day);
    assert_eq!(as_coordinator().await.unwrap(), "alpha");
    party.stop().await;

    // Revoked: a party given the CA's list refuses the certificate; renewed again (a new
    // serial), the name is answered.
    let crl = tls::revoke(&ca, std::slice::from_ref(&coordinator)).unwrap();
    let with_crl = || TlsFiles {
        crl: Some(crl.clone()),
        ..tls::files_for(&ca, &party_name)
    };
    let party = Running::start_with(&party_dir(dir.path(), 1.0, 1e-6), Some(with_crl())).await;
    let as_coordinator = || tls_describe(party.addr, &ca, &coordinator, &party_name);
    as_coordinator().await.expect_err("a revoked certificate");
    tls::issue_with(
        &ca,
        std::slice::from_ref(&coordinator),
        &Issuing::days(30, true),
    )
    .unwrap();
    assert_eq!(as_coordinator().await.unwrap(), "alpha");
    party.stop().await;
}

/// The allow-list of client certificate names holds for the health service as for the
/// party's own: a certificate from the federation's CA whose name the party does not admit is
/// refused by both (PERMISSION_DENIED), and the admitted one gets the health answer without
/// a token (operators' probes carry none) and the party's answers with it.
#[tokio::test]
async fn the_health_service_admits_only_the_allowed_client_names() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("tls");
    let names = ["alpha", "coordinator", "intruder"].map(String::from);
    fedmcmc_party::tls::issue(&ca, &names).unwrap();
    let tls = TlsFiles {
        allowed_clients: vec!["coordinator".into()],
        ..fedmcmc_party::tls::files_for(&ca, "alpha")
    };
    let party = Running::start_with(&party_dir(dir.path(), 1.0, 1e-6), Some(tls)).await;
    let check = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    let party_service = "fedmcmc.v1.Party";

    let admitted = party.tls_channel(&ca, "coordinator").await;
    let mut health = HealthClient::new(admitted.clone());
    for service in ["", party_service] {
        let status = health
            .check(check(service))
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    let d = authorised(admitted, &[TOKEN])
        .describe(pb::DescribeRequest {})
        .await
        .unwrap();
    assert_eq!(d.into_inner().party_name, "alpha");

    let excluded = party.tls_channel(&ca, "intruder").await;
    let mut health = HealthClient::new(excluded.clone());
    for service in ["", party_service] {
        let err = health.check(check(service)).await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{service:?}: {err:?}");
        assert_eq!(
            err.message(),
            "this party does not admit the caller's certificate name"
        );
    }
    let err = authorised(excluded, &[TOKEN])
        .describe(pb::DescribeRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    party.stop().await;
}
