//! Mutual TLS across processes: a `party serve` from a simulation's directory answers only a
//! caller whose certificate chains to the federation's CA and carries an admitted name, and
//! the coordinator's side talks only to the party its certificate names. The bearer token
//! stays a second factor.
use fedmcmc_party::config::PartyConfig;
use fedmcmc_party::tls;
use fedmcmc_system_tests::{PartyProcess, any_port, describe, describe_as, simulate};

#[test]
fn a_party_answers_only_certified_admitted_callers() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    let (ok, _, stderr) = simulate(&sim, &["--iterations", "20", "--tau", "0.5"]);
    assert!(ok, "{stderr}");
    let config_path = sim.join("parties/party-1/party.toml");
    any_port(&config_path);
    let config = PartyConfig::load(&config_path).unwrap();
    assert_eq!(
        config.tls.as_ref().unwrap().allowed_clients,
        ["coordinator"],
        "simulate admits its own coordinator only"
    );
    let log = dir.path().join("party.log");
    let party = PartyProcess::start_logged(&config_path, &log);
    let token = std::fs::read_to_string(&config.auth_token_file).unwrap();
    let ca = sim.join("tls");

    // The coordinator's certificate, the party's name checked: answered.
    let d = describe_as(party.addr, &config, "coordinator").unwrap();
    assert_eq!(d.party_name, "party-1");

    let refused = |what: &str, result: Result<_, String>| match result {
        Ok(_) => panic!("{what}: answered"),
        Err(e) => e,
    };
    // Plaintext to the TLS port.
    refused("plaintext", describe(party.addr, None, &token));
    // TLS without a client certificate.
    let ca_only = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(
            std::fs::read(tls::ca_cert(&ca)).unwrap(),
        ))
        .domain_name("party-1");
    refused(
        "no client certificate",
        describe(party.addr, Some(ca_only), &token),
    );
    // A certificate named `coordinator` from another CA.
    let other = dir.path().join("other-ca");
    tls::issue(&other, &["coordinator".to_string()]).unwrap();
    let mut foreign = tls::files_for(&other, "coordinator");
    foreign.ca = tls::ca_cert(&ca);
    refused(
        "another CA",
        describe(party.addr, Some(foreign.client("party-1").unwrap()), &token),
    );
    // A certificate from the federation's CA whose name the party does not admit.
    tls::issue(&ca, &["intruder".to_string()]).unwrap();
    let e = refused(
        "a name not admitted",
        describe_as(party.addr, &config, "intruder"),
    );
    assert!(e.contains("PermissionDenied"), "{e}");
    // The coordinator's side: party-1's certificate does not name party-2.
    let wrong_name = tls::files_for(&ca, "coordinator")
        .client("party-2")
        .unwrap();
    refused(
        "a party under another name",
        describe(party.addr, Some(wrong_name), &token),
    );
    // The right certificate with a wrong token: the token is still checked.
    let right = tls::files_for(&ca, "coordinator")
        .client("party-1")
        .unwrap();
    let e = refused(
        "a wrong token",
        describe(party.addr, Some(right), "wrong-token-0123456789"),
    );
    assert!(e.contains("Unauthenticated"), "{e}");

    // The party logs each refused handshake with the check that failed.
    for why in [
        "the caller does not speak TLS",
        "the caller presented no client certificate",
        "the caller's certificate is not issued by the CA this party trusts",
    ] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&log).unwrap();
            if text
                .lines()
                .any(|l| l.contains("refused a TLS handshake") && l.contains(why))
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no log line saying {why:?}:\n{text}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    // The coordinator's own client says which check failed, not just "transport error".
    let coordinator = |files: tls::TlsFiles, name: &str| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let address = format!("https://{}", party.addr);
        runtime.block_on(async {
            use fedmcmc_coordinator::federation::PartyHandle;
            use fedmcmc_coordinator::federation::grpc::GrpcParty;
            let tls = Some(files.client(name).unwrap());
            match GrpcParty::connect(&address, &token, tls).await {
                Ok(p) => p.describe().await.map(drop).map_err(|e| e.message),
                Err(e) => Err(e.message),
            }
        })
    };
    let mut foreign = tls::files_for(&other, "coordinator");
    foreign.ca = tls::ca_cert(&other);
    let e = coordinator(foreign, "party-1").expect_err("another CA, coordinator side");
    assert!(
        e.contains("not issued by the CA the coordinator trusts"),
        "{e}"
    );
    let e = coordinator(tls::files_for(&ca, "coordinator"), "party-2")
        .expect_err("another name, coordinator side");
    assert!(e.contains("does not name the party"), "{e}");
}

#[test]
fn plaintext_is_refused_unless_asked_for_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    let (ok, _, stderr) = simulate(&sim, &["--iterations", "20", "--tau", "0.5", "--insecure"]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("INSECURE"),
        "the plaintext run is logged: {stderr}"
    );
    assert!(!sim.join("tls").exists(), "no certificates without TLS");
    let config_path = sim.join("parties/party-1/party.toml");
    let text = std::fs::read_to_string(&config_path).unwrap();
    assert!(text.contains("insecure = true"), "{text}");
    // Without `insecure` and without [tls] a party does not start.
    std::fs::write(&config_path, text.replace("insecure = true\n", "")).unwrap();
    let err = PartyConfig::load(&config_path).unwrap_err().to_string();
    assert!(err.contains("no [tls] section"), "{err}");
}
