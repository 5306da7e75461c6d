//! Mutual TLS between the coordinator and the parties (rustls through tonic). Each side
//! holds a certificate issued by a CA the federation agrees on and accepts only peers whose
//! certificates chain to it: a party answers no one without such a certificate (and, if its
//! operator lists names, only those names), and the coordinator talks to no impostor of a
//! party. The bearer token stays as a second factor.
//!
//! The party makes its handshakes itself ([`accept`]) rather than through tonic's acceptor,
//! which drops a refused one without a word: an operator sees each refusal in the log with
//! the caller's address and the check that failed.
//!
//! [`issue`] makes the CA and the node certificates (`coordinator certs`, and the throwaway
//! CA of `simulate`).
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose,
    RevokedCertParams, SerialNumber,
};
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use rustls::RootCertStore;
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{
    CertificateDer, CertificateRevocationListDer, DnsName, PrivateKeyDer, ServerName,
};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// A node's TLS files (PEM): the CA its peers' certificates must chain to, and its own
/// certificate and private key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Party only: the names (DNS subject alternative names) a caller's certificate must
    /// carry, one of them; empty admits every certificate the CA issued.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_clients: Vec<String>,
    /// Party only: the CA's revocation list (`coordinator certs --revoke` writes it); a
    /// caller whose certificate is on it is refused at the handshake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crl: Option<PathBuf>,
}

impl TlsFiles {
    /// Resolves relative paths against `base` (the config file's directory).
    pub fn resolve(&mut self, base: &Path) {
        for p in [&mut self.ca, &mut self.cert, &mut self.key]
            .into_iter()
            .chain(self.crl.as_mut())
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    /// Checks that the files exist and the allowed names are DNS names or IP addresses, at
    /// load time.
    pub fn validate(&self) -> Result<(), String> {
        let files = [("ca", &self.ca), ("cert", &self.cert), ("key", &self.key)];
        for (what, p) in files
            .into_iter()
            .chain(self.crl.as_ref().map(|c| ("crl", c)))
        {
            if !p.is_file() {
                return Err(format!("tls.{what}: {} is not a file", p.display()));
            }
        }
        for name in &self.allowed_clients {
            if !is_name(name) {
                return Err(format!(
                    "tls.allowed_clients: {name:?} is neither a DNS name nor an IP address"
                ));
            }
        }
        Ok(())
    }

    fn read(&self) -> anyhow::Result<(Identity, Certificate)> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))
        };
        Ok((
            Identity::from_pem(read(&self.cert)?, read(&self.key)?),
            Certificate::from_pem(read(&self.ca)?),
        ))
    }

    /// The party's side: its identity, and a client certificate required that chains to the
    /// CA (a handshake without one is refused), speaking HTTP/2 as gRPC does.
    pub fn acceptor(&self) -> anyhow::Result<TlsAcceptor> {
        let pem = |what: &str, p: &Path| -> anyhow::Result<Vec<CertificateDer<'static>>> {
            let certs = CertificateDer::pem_file_iter(p)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| anyhow::anyhow!("tls.{what}: cannot read {}: {e}", p.display()))?;
            anyhow::ensure!(
                !certs.is_empty(),
                "tls.{what}: {} holds no certificate",
                p.display()
            );
            Ok(certs)
        };
        let mut roots = RootCertStore::empty();
        for ca in pem("ca", &self.ca)? {
            roots.add(ca)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
        if let Some(crl) = &self.crl {
            let crls = CertificateRevocationListDer::pem_file_iter(crl)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| anyhow::anyhow!("tls.crl: cannot read {}: {e}", crl.display()))?;
            // The CA's list covers every node certificate it issued; the CA itself is the
            // federation's trust root and is not on any list.
            verifier = verifier.with_crls(crls).only_check_end_entity_revocation();
        }
        let verifier = verifier.build()?;
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| anyhow::anyhow!("tls.key: cannot read {}: {e}", self.key.display()))?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(pem("cert", &self.cert)?, key)?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// The coordinator's side towards one party, whose certificate must name `party`.
    pub fn client(&self, party: &str) -> anyhow::Result<ClientTlsConfig> {
        let (identity, ca) = self.read()?;
        Ok(ClientTlsConfig::new()
            .ca_certificate(ca)
            .identity(identity)
            .domain_name(party))
    }
}

/// How long a caller has to finish its handshake before its connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The connections of `listener` after their TLS handshakes, for tonic's
/// `serve_with_incoming`. Each handshake runs on its own task, so a slow or silent caller
/// holds up no one (and is dropped after [`HANDSHAKE_TIMEOUT`]); a refused one is logged with
/// the caller's address and the check that failed. Accepting stops once the server drops
/// the stream.
pub fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
) -> ReceiverStream<std::io::Result<TlsStream<TcpStream>>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: say so, and let it pass.
                        tracing::warn!("cannot accept a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                () = tx.closed() => return,
            };
            // With several chains' requests in flight on one connection, Nagle's algorithm
            // would hold small responses back for delayed ACKs.
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::warn!(
                        caller = %peer,
                        "refused a TLS handshake: {}",
                        refusal(&e)
                    ),
                    Err(_) => tracing::warn!(
                        caller = %peer,
                        "dropped a connection whose TLS handshake did not finish within {} s",
                        HANDSHAKE_TIMEOUT.as_secs()
                    ),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Which check a refused handshake failed, in the operator's words.
fn refusal(e: &std::io::Error) -> String {
    use rustls::{CertificateError, Error};
    let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<Error>()) else {
        return format!("{e} (not TLS, or the connection broke)");
    };
    let why = match tls {
        Error::NoCertificatesPresented => "the caller presented no client certificate",
        Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => "the caller's certificate is not issued by the CA this party trusts (tls.ca)",
        Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "the caller's certificate has expired",
        Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => "the caller's certificate is not valid yet",
        Error::InvalidCertificate(CertificateError::Revoked) => {
            "the caller's certificate is revoked"
        }
        Error::InvalidMessage(_) => "the caller does not speak TLS (plaintext gRPC?)",
        Error::AlertReceived(alert) => {
            return format!(
                "the caller gave up with alert {alert:?} (it does not trust this party's certificate, or it names another party)"
            );
        }
        _ => return tls.to_string(),
    };
    format!("{why} ({tls})")
}

/// Whether the caller's certificate (the first of `peer`, as the handshake verified it)
/// names one of `allowed`. No certificate, or one that does not parse, names none.
pub fn names_one_of(peer: Option<&[CertificateDer<'static>]>, allowed: &[String]) -> bool {
    let Some(leaf) = peer.and_then(|chain| chain.first()) else {
        return false;
    };
    let Ok(cert) = webpki::EndEntityCert::try_from(leaf) else {
        return false;
    };
    allowed.iter().any(|name| {
        ServerName::try_from(name.as_str())
            .is_ok_and(|n| cert.verify_is_valid_for_subject_name(&n).is_ok())
    })
}

/// File names of what [`issue`] writes into its directory.
pub fn ca_cert(dir: &Path) -> PathBuf {
    dir.join("ca.pem")
}
pub fn ca_key(dir: &Path) -> PathBuf {
    dir.join("ca.key")
}
pub fn node_cert(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.pem"))
}
pub fn node_key(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.key"))
}

/// The files a node called `name` uses, from a directory [`issue`] wrote.
pub fn files_for(dir: &Path, name: &str) -> TlsFiles {
    TlsFiles {
        ca: ca_cert(dir),
        cert: node_cert(dir, name),
        key: node_key(dir, name),
        allowed_clients: Vec::new(),
        crl: None,
    }
}

/// How long the node certificates [`issue`] makes are valid by default, in days: a year, so
/// that a stolen key does not serve for ever; renew with `coordinator certs --renew`.
pub const DEFAULT_DAYS: u32 = 365;
/// The CA's validity when [`issue`] creates one, in days.
const CA_DAYS: u64 = 3650;
/// Node certificates start this long before they are made, for peers whose clocks lag.
const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// What [`issue_with`] makes: node certificates valid over `valid`, replacing existing ones
/// (with new keys) if `renew`.
#[derive(Clone, Debug)]
pub struct Issuing {
    pub valid: std::ops::Range<SystemTime>,
    pub renew: bool,
}

impl Issuing {
    /// Valid from now (less the clock skew allowed) for `days` days.
    pub fn days(days: u32, renew: bool) -> Self {
        Issuing {
            valid: from_now(u64::from(days)),
            renew,
        }
    }
}

/// From now, less the clock skew allowed, for `days` days: every validity `issue_with` and
/// `revoke` sign.
fn from_now(days: u64) -> std::ops::Range<SystemTime> {
    let now = SystemTime::now();
    now - CLOCK_SKEW..now + Duration::from_secs(86_400 * days)
}

/// One certificate [`issue_with`] wrote.
#[derive(Clone, Debug)]
pub struct Issued {
    pub name: String,
    pub not_after: SystemTime,
}

/// [`issue_with`] for [`DEFAULT_DAYS`], never replacing a certificate.
pub fn issue(dir: &Path, names: &[String]) -> anyhow::Result<Vec<Issued>> {
    issue_with(dir, names, &Issuing::days(DEFAULT_DAYS, false))
}

/// Issues a certificate for each of `names` (its subject alternative name, a DNS name or an IP
/// address, for both server and client use) from the CA in `dir`, creating the CA first
/// (valid ten years) if `dir` has none. Private keys are written owner-only. An existing node
/// certificate is replaced only when renewing, with a new key: each file is written beside
/// the old one and moved over it, so a node that reads them finds whole files.
pub fn issue_with(dir: &Path, names: &[String], how: &Issuing) -> anyhow::Result<Vec<Issued>> {
    if how.valid.end <= how.valid.start {
        anyhow::bail!("a certificate's validity must end after it starts");
    }
    for name in names {
        if !is_name(name) {
            anyhow::bail!("{name:?} is neither a DNS name nor an IP address");
        }
        if node_cert(dir, name).exists() && !how.renew {
            anyhow::bail!(
                "{} exists: a certificate for {name} was issued already (renew it with --renew)",
                node_cert(dir, name).display()
            );
        }
    }
    std::fs::create_dir_all(dir)?;
    let ca_key = if ca_key(dir).exists() {
        KeyPair::from_pem(&std::fs::read_to_string(ca_key(dir))?)?
    } else {
        let key = KeyPair::generate()?;
        let cert = ca_params(Some(from_now(CA_DAYS)))?.self_signed(&key)?;
        crate::config::write_secret(&ca_key(dir), &key.serialize_pem())?;
        std::fs::write(ca_cert(dir), cert.pem())?;
        key
    };
    // The CA's subject and key are all a certificate takes from its issuer, and `issue`
    // writes every CA with the same subject: so an existing CA is rebuilt from its key.
    let issuer = Issuer::new(ca_params(None)?, ca_key);
    let mut issued = Vec::new();
    for name in names {
        let mut params = CertificateParams::new(vec![name.clone()])?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = how.valid.start.into();
        params.not_after = how.valid.end.into();
        // A random positive serial, kept beside the certificate so that it can be revoked.
        let mut serial = [0u8; 16];
        rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut serial)
            .map_err(|e| anyhow::anyhow!("the OS random source failed: {e}"))?;
        serial[0] &= 0x7f;
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?;
        let (key_path, cert_path) = (node_key(dir, name), node_cert(dir, name));
        let fresh = |p: &Path| {
            p.with_extension(format!(
                "{}.new",
                p.extension().unwrap_or_default().display()
            ))
        };
        crate::config::write_secret(&fresh(&key_path), &key.serialize_pem())?;
        std::fs::write(fresh(&cert_path), cert.pem())?;
        std::fs::write(fresh(&serial_file(dir, name)), hex(&serial))?;
        std::fs::rename(fresh(&key_path), &key_path)?;
        std::fs::rename(fresh(&cert_path), &cert_path)?;
        std::fs::rename(fresh(&serial_file(dir, name)), serial_file(dir, name))?;
        issued.push(Issued {
            name: name.clone(),
            not_after: how.valid.end,
        });
    }
    Ok(issued)
}

/// The CA's parameters: every CA [`issue_with`] makes has the same subject, so an existing
/// one is rebuilt as an issuer from these and its key; `valid` only when it is made.
fn ca_params(valid: Option<std::ops::Range<SystemTime>>) -> anyhow::Result<CertificateParams> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.distinguished_name
        .push(DnType::CommonName, "fedmcmc federation CA");
    if let Some(valid) = valid {
        p.not_before = valid.start.into();
        p.not_after = valid.end.into();
    }
    Ok(p)
}

/// A DNS name or an IP address: what a certificate [`issue_with`] makes may name.
fn is_name(name: &str) -> bool {
    DnsName::try_from(name).is_ok() || name.parse::<IpAddr>().is_ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Revokes the current certificates of `names`: their serials join the CA's list of revoked
/// serials (`DIR/revoked`, one `serial name seconds-since-1970` line each, kept so that the list
/// only grows), and
/// the revocation list signed by the CA is written anew to `DIR/crl.pem`. A party that
/// names that file as `tls.crl` refuses those certificates once it restarts. Renew a revoked
/// name (`--renew`) to give its node a new certificate. Returns the list's path.
pub fn revoke(dir: &Path, names: &[String]) -> anyhow::Result<PathBuf> {
    let ca_key = KeyPair::from_pem(
        &std::fs::read_to_string(ca_key(dir))
            .map_err(|e| anyhow::anyhow!("{}: {e}", ca_key(dir).display()))?,
    )?;
    let revoked_path = dir.join("revoked");
    let mut listed = match std::fs::read_to_string(&revoked_path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => anyhow::bail!("{}: {e}", revoked_path.display()),
    };
    let now = SystemTime::now();
    let since_epoch = now.duration_since(SystemTime::UNIX_EPOCH)?.as_secs();
    for name in names {
        let serial = std::fs::read_to_string(serial_file(dir, name)).map_err(|e| {
            anyhow::anyhow!(
                "{}: {e} (a certificate issued before serials were kept cannot be listed; renew it instead)",
                serial_file(dir, name).display()
            )
        })?;
        let serial = serial.trim();
        if !listed.lines().any(|l| l.split(' ').next() == Some(serial)) {
            listed.push_str(&format!("{serial} {name} {since_epoch}\n"));
        }
    }
    let malformed = |line: &str| {
        anyhow::anyhow!(
            "{}: {line:?} is not `serial name seconds-since-1970`",
            revoked_path.display()
        )
    };
    let revoked_certs = listed
        .lines()
        .map(|line| {
            let [serial, _name, seconds] = line.split(' ').collect::<Vec<_>>()[..] else {
                return Err(malformed(line));
            };
            let bytes = (0..serial.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(serial.get(i..i + 2).unwrap_or("zz"), 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|_| malformed(line))?;
            let seconds: u64 = seconds.parse().map_err(|_| malformed(line))?;
            Ok(RevokedCertParams {
                serial_number: SerialNumber::from_slice(&bytes),
                revocation_time: (SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)).into(),
                reason_code: None,
                invalidity_date: None,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let update = from_now(CA_DAYS);
    let params = CertificateRevocationListParams {
        this_update: update.start.into(),
        next_update: update.end.into(),
        // Increasing with every list the CA signs, as RFC 5280 asks.
        crl_number: SerialNumber::from(since_epoch),
        issuing_distribution_point: None,
        revoked_certs,
        key_identifier_method: KeyIdMethod::Sha256,
    };
    let crl = params.signed_by(&Issuer::new(ca_params(None)?, ca_key))?;
    std::fs::write(&revoked_path, listed)?;
    let path = dir.join("crl.pem");
    std::fs::write(&path, crl.pem()?)?;
    Ok(path)
}

/// Where [`issue_with`] keeps a node certificate's serial.
pub fn serial_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.serial"))
}

/// The allow-list as the interceptor holds it.
pub type Allowed = Arc<Vec<String>>;
