//! TLS distribution (as Erlang's `inet_tls_dist`): a TLS 1.3 handshake with
//! rustls (crypto provider `ring`), mutual authentication by certificates
//! of the cluster's CA, then the cookie handshake and every frame inside
//! TLS 1.3 application-data records.
//!
//! The reader and the writer thread of a connection cannot share one
//! rustls session, so (as kernel TLS offload does) the handshake runs to
//! completion first (blocking for an outbound connection, on the poller
//! for an inbound one), and then the traffic secrets are taken out of
//! rustls (`dangerous_extract_secrets`) and each direction's key, IV and
//! sequence number handed to the record layer (`session.rs`), which writes
//! real TLS 1.3 records (AES-256-GCM, the only suite offered). Connections
//! never rekey: one is dropped before 2^24 records in either direction.
//!
//! The handshake is fed one whole TLS record at a time, so rustls never
//! holds application data when its secrets are extracted; the server sends
//! no session tickets, so nothing follows its `Finished`.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{
    ClientConfig, ClientConnection, Connection, ConnectionTrafficSecrets, DigitallySignedStruct,
    RootCertStore, ServerConfig, ServerConnection, SignatureScheme,
};

use crate::session::{Opener, Sealer, TLS_HEADER};
use crate::NetError;

/// TLS settings of a node: its certificate chain and key, and the CA roots
/// its peers' certificates must chain to. Both sides of every connection
/// present a certificate (mutual authentication), and the peer's
/// certificate must name the node it claims to be: a DNS subject
/// alternative name equal to the node name or, for a name `part@host`, to
/// `host` (a DNS name or an IP address). TLS 1.3 only.
///
/// # Examples
///
/// ```no_run
/// # fn der(_: &str) -> Vec<u8> { Vec::new() }
/// use graft_net::{NetConfig, TlsConfig};
///
/// let tls = TlsConfig::new(vec![der("node.crt")], der("node.key"), vec![der("ca.crt")])
///     .expect("a valid certificate and key");
/// let cfg = NetConfig::new("a", "127.0.0.1:0".parse().unwrap()).cookie("c").tls(tls);
/// # let _ = cfg;
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    verify_name: bool,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("verify_peer_name", &self.verify_name)
            .finish_non_exhaustive()
    }
}

fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    // The record layer speaks AES-256-GCM only.
    p.cipher_suites = vec![rustls::crypto::ring::cipher_suite::TLS13_AES_256_GCM_SHA384];
    Arc::new(p)
}

fn bad(m: impl fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("TLS configuration: {m}"),
    )
}

impl TlsConfig {
    /// A configuration from DER: the node's certificate chain (its own
    /// certificate first), its private key (PKCS#8) and the CA
    /// certificates its peers' must chain to. Fails on a key or
    /// certificate rustls cannot use.
    pub fn new(
        cert_chain: Vec<Vec<u8>>,
        key_pkcs8: Vec<u8>,
        ca_roots: Vec<Vec<u8>>,
    ) -> io::Result<TlsConfig> {
        let chain: Vec<CertificateDer<'static>> =
            cert_chain.into_iter().map(CertificateDer::from).collect();
        if chain.is_empty() {
            return Err(bad("an empty certificate chain"));
        }
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pkcs8));
        let mut roots = RootCertStore::empty();
        for r in ca_roots {
            roots.add(CertificateDer::from(r)).map_err(bad)?;
        }
        if roots.is_empty() {
            return Err(bad("no CA roots"));
        }
        let roots = Arc::new(roots);
        let p = provider();
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), p.clone())
            .build()
            .map_err(bad)?;
        let mut server = ServerConfig::builder_with_provider(p.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(bad)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(bad)?;
        server.enable_secret_extraction = true;
        server.send_tls13_tickets = 0;
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        let mut client = ClientConfig::builder_with_provider(p.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(bad)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly {
                roots,
                algs: p.signature_verification_algorithms,
            }))
            .with_client_auth_cert(chain, key)
            .map_err(bad)?;
        client.enable_secret_extraction = true;
        client.resumption = rustls::client::Resumption::disabled();
        Ok(TlsConfig {
            client: Arc::new(client),
            server: Arc::new(server),
            verify_name: true,
        })
    }

    /// Whether the peer's certificate must name the peer node (default
    /// on). Off, any certificate of the CA will do for any node name.
    pub fn verify_peer_name(mut self, on: bool) -> Self {
        self.verify_name = on;
        self
    }
}

/// Verifies the acceptor's chain to our roots, not its name: the
/// connecting side knows only an address, so the name is checked once the
/// cookie handshake has told it (`check_name`).
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algs.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.2 is refused".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

fn tls_err(m: impl fmt::Display) -> NetError {
    NetError::Handshake(format!("TLS: {m}"))
}

/// Checks that `cert` names node `name` (see [`TlsConfig`]).
pub(crate) fn check_name(
    cfg: &TlsConfig,
    cert: &CertificateDer<'_>,
    name: &str,
) -> Result<(), NetError> {
    if !cfg.verify_name {
        return Ok(());
    }
    let parsed = ParsedCertificate::try_from(cert).map_err(tls_err)?;
    let host = name.rsplit_once('@').map(|(_, h)| h);
    let ok = std::iter::once(name).chain(host).any(|n| {
        ServerName::try_from(n)
            .is_ok_and(|sn| rustls::client::verify_server_name(&parsed, &sn).is_ok())
    });
    if ok {
        Ok(())
    } else {
        Err(tls_err(format!(
            "the peer's certificate does not name node {name:?} (name mismatch)"
        )))
    }
}

/// A TLS handshake in progress, sans I/O: feed it what the socket gave,
/// write what [`take_output`](Self::take_output) returns.
pub(crate) struct TlsHandshake {
    conn: Connection,
    raw: Vec<u8>,
}

impl fmt::Debug for TlsHandshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsHandshake").finish_non_exhaustive()
    }
}

/// A finished TLS handshake: each direction's record protection, the
/// peer's certificate, and bytes received past the handshake.
pub(crate) struct TlsUp {
    pub(crate) sealer: Sealer,
    pub(crate) opener: Opener,
    pub(crate) cert: CertificateDer<'static>,
    /// The channel binding for the cookie handshake: a TLS exporter value
    /// (RFC 8446 section 7.5, label [`EXPORTER_LABEL`]), the same at both
    /// ends of this TLS connection and unknown to any other.
    pub(crate) binding: [u8; 32],
    pub(crate) raw: Vec<u8>,
}

/// The exporter label of the cookie handshake's channel binding.
pub(crate) const EXPORTER_LABEL: &[u8] = b"EXPORTER-graft-dist-v2";

impl fmt::Debug for TlsUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsUp").finish_non_exhaustive()
    }
}

fn keys(s: ConnectionTrafficSecrets) -> Result<([u8; 32], [u8; 12]), NetError> {
    match s {
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => {
            let k: [u8; 32] = key.as_ref().try_into().map_err(|_| tls_err("key length"))?;
            let i: [u8; 12] = iv.as_ref().try_into().map_err(|_| tls_err("iv length"))?;
            Ok((k, i))
        }
        _ => Err(tls_err("an unexpected cipher suite")),
    }
}

impl TlsHandshake {
    /// The connecting side's handshake with the node at `peer`.
    pub(crate) fn client(cfg: &TlsConfig, peer: SocketAddr) -> Result<TlsHandshake, NetError> {
        let name = ServerName::IpAddress(peer.ip().into());
        let conn = ClientConnection::new(cfg.client.clone(), name).map_err(tls_err)?;
        Ok(TlsHandshake {
            conn: conn.into(),
            raw: Vec::new(),
        })
    }

    /// The accepting side's handshake.
    pub(crate) fn server(cfg: &TlsConfig) -> Result<TlsHandshake, NetError> {
        let conn = ServerConnection::new(cfg.server.clone()).map_err(tls_err)?;
        Ok(TlsHandshake {
            conn: conn.into(),
            raw: Vec::new(),
        })
    }

    /// Feeds received bytes, one whole record at a time; `true` once the
    /// handshake is complete (what follows stays unread for the records).
    pub(crate) fn feed(&mut self, data: &[u8]) -> Result<bool, NetError> {
        self.raw.extend_from_slice(data);
        while self.conn.is_handshaking() {
            if self.raw.len() < TLS_HEADER {
                if !self.raw.is_empty() && !(20..=23).contains(&self.raw[0]) {
                    return Err(not_tls());
                }
                break;
            }
            if !(20..=23).contains(&self.raw[0]) || self.raw[1] != 3 {
                return Err(not_tls());
            }
            let len = TLS_HEADER + u16::from_be_bytes([self.raw[3], self.raw[4]]) as usize;
            if len > TLS_HEADER + (1 << 14) + 256 {
                return Err(tls_err("a TLS record longer than TLS allows"));
            }
            if self.raw.len() < len {
                break;
            }
            let mut rec = &self.raw[..len];
            while !rec.is_empty() {
                self.conn.read_tls(&mut rec).map_err(tls_err)?;
            }
            self.raw.drain(..len);
            if let Err(e) = self.conn.process_new_packets() {
                return Err(match e {
                    rustls::Error::AlertReceived(a) => {
                        tls_err(format!("the peer refused the handshake: alert {a:?}"))
                    }
                    rustls::Error::InvalidCertificate(c) => tls_err(format!(
                        "the peer's certificate was refused: {}",
                        cert_reason(&c)
                    )),
                    rustls::Error::NoCertificatesPresented => {
                        tls_err("the peer presented no certificate")
                    }
                    e => tls_err(format!("handshake failed: {e}")),
                });
            }
        }
        Ok(!self.conn.is_handshaking())
    }

    /// What to send (handshake messages, or an alert after a failure).
    pub(crate) fn take_output(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut out).is_err() {
                break;
            }
        }
        out
    }

    /// The record protection of the finished handshake.
    pub(crate) fn finish(mut self) -> Result<TlsUp, NetError> {
        let cert = (self.conn.peer_certificates())
            .and_then(|c| c.first())
            .ok_or_else(|| tls_err("the peer presented no certificate"))?
            .clone()
            .into_owned();
        let raw = std::mem::take(&mut self.raw);
        // The exporter needs the exporter master secret, which rustls keeps
        // only while it owns the connection: take it before the secrets.
        let binding = (self.conn)
            .export_keying_material([0u8; 32], EXPORTER_LABEL, None)
            .map_err(tls_err)?;
        let s = self.conn.dangerous_extract_secrets().map_err(tls_err)?;
        let ((tk, ti), (rk, ri)) = (keys(s.tx.1)?, keys(s.rx.1)?);
        Ok(TlsUp {
            sealer: Sealer::tls(&tk, ti, s.tx.0),
            opener: Opener::tls(&rk, ri, s.rx.0),
            cert,
            binding,
            raw,
        })
    }
}

fn not_tls() -> NetError {
    tls_err("the peer does not speak TLS (a plain-TCP graft node?)")
}

/// The peer hung up before the TLS handshake was done.
pub(crate) fn closed_in_handshake() -> NetError {
    tls_err("the peer closed the connection in the TLS handshake (a plain-TCP node?)")
}

/// A connecting side's error in the cookie handshake over TLS, as told:
/// the peer's alert (read as an aborted connection) is a TLS refusal.
pub(crate) fn alert_as_handshake(e: NetError) -> NetError {
    match e {
        NetError::Io(io) if io.kind() == io::ErrorKind::ConnectionAborted => tls_err(io),
        e => e,
    }
}

fn cert_reason(c: &rustls::CertificateError) -> String {
    use rustls::CertificateError as C;
    match c {
        C::UnknownIssuer => "not signed by our CA (unknown issuer)".into(),
        C::Expired | C::ExpiredContext { .. } => "expired".into(),
        C::NotValidYet | C::NotValidYetContext { .. } => "not valid yet".into(),
        C::BadSignature => "bad signature".into(),
        e => format!("{e:?}"),
    }
}

/// The connecting side's TLS handshake, blocking until `deadline`.
pub(crate) fn connect(
    s: &mut TcpStream,
    cfg: &TlsConfig,
    deadline: Instant,
) -> Result<TlsUp, NetError> {
    let mut hs = TlsHandshake::client(cfg, s.peer_addr()?)?;
    let mut buf = vec![0u8; 16 << 10];
    let mut done = false;
    loop {
        let out = hs.take_output();
        if !out.is_empty() {
            s.write_all(&out)?;
        }
        if done {
            return hs.finish();
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(NetError::Timeout);
        }
        s.set_read_timeout(Some(left))?;
        let n = match s.read(&mut buf) {
            Ok(0) => return Err(closed_in_handshake()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(NetError::Timeout),
            Err(e) => return Err(e.into()),
        };
        match hs.feed(&buf[..n]) {
            Ok(d) => done = d,
            Err(e) => {
                let _ = s.write_all(&hs.take_output());
                return Err(e);
            }
        }
    }
}

/// The cookie handshake's stream over TLS records (the connecting side).
pub(crate) struct TlsIo {
    s: TcpStream,
    pub(crate) up: TlsUp,
    pub(crate) plain: Vec<u8>,
}

impl fmt::Debug for TlsIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsIo").finish_non_exhaustive()
    }
}

impl TlsIo {
    pub(crate) fn new(s: TcpStream, up: TlsUp) -> TlsIo {
        TlsIo {
            s,
            up,
            plain: Vec::new(),
        }
    }
}

impl Read for TlsIo {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let mut buf = [0u8; 4096];
        loop {
            if !self.plain.is_empty() {
                let n = self.plain.len().min(out.len());
                out[..n].copy_from_slice(&self.plain[..n]);
                self.plain.drain(..n);
                return Ok(n);
            }
            self.plain = self.up.opener.open_available(&mut self.up.raw)?;
            if !self.plain.is_empty() {
                continue;
            }
            let n = self.s.read(&mut buf)?;
            if n == 0 {
                return Ok(0);
            }
            self.up.raw.extend_from_slice(&buf[..n]);
        }
    }
}

impl Write for TlsIo {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut wire = Vec::new();
        self.up.sealer.seal(data, &mut wire)?;
        self.s.write_all(&wire)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What the cookie handshake needs of its stream besides reading and
/// writing.
pub(crate) trait HsStream: Read + Write {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    fn peer_name(&self) -> String;
    /// The TLS channel binding the handshake is bound to (none on plain
    /// TCP).
    fn channel_binding(&self) -> Option<[u8; 32]> {
        None
    }
}

impl HsStream for TcpStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, t)
    }
    fn peer_name(&self) -> String {
        self.peer_addr().map(|a| a.to_string()).unwrap_or_default()
    }
}

impl HsStream for TlsIo {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.s.set_read_timeout(t)
    }
    fn peer_name(&self) -> String {
        self.s.peer_name()
    }
    fn channel_binding(&self) -> Option<[u8; 32]> {
        Some(self.up.binding)
    }
}

/// An inbound connection's TLS state while it is pending.
#[derive(Debug)]
pub(crate) enum PendingTls {
    Handshaking(Box<TlsHandshake>),
    Up(Box<TlsUp>),
    /// Failed (or moved out).
    Gone,
}

impl PendingTls {
    /// Feeds received bytes: what to send back, and the plaintext for the
    /// cookie handshake.
    pub(crate) fn feed(&mut self, data: &[u8]) -> (Vec<u8>, Result<Vec<u8>, NetError>) {
        match self {
            PendingTls::Handshaking(hs) => {
                let r = hs.feed(data);
                let out = hs.take_output();
                match r {
                    Ok(false) => (out, Ok(Vec::new())),
                    Err(e) => (out, Err(e)),
                    Ok(true) => {
                        let PendingTls::Handshaking(hs) = std::mem::replace(self, PendingTls::Gone)
                        else {
                            unreachable!()
                        };
                        match hs.finish() {
                            Ok(up) => {
                                *self = PendingTls::Up(Box::new(up));
                                let (o, r) = self.feed(&[]);
                                debug_assert!(o.is_empty());
                                (out, r)
                            }
                            Err(e) => (out, Err(e)),
                        }
                    }
                }
            }
            PendingTls::Up(up) => {
                up.raw.extend_from_slice(data);
                let r = up.opener.open_available(&mut up.raw);
                (Vec::new(), r.map_err(NetError::from))
            }
            PendingTls::Gone => (Vec::new(), Err(tls_err("a failed TLS connection"))),
        }
    }

    /// Seals the cookie handshake's output.
    pub(crate) fn seal(&mut self, plain: &[u8]) -> Result<Vec<u8>, NetError> {
        match self {
            PendingTls::Up(up) => {
                let mut wire = Vec::new();
                up.sealer.seal(plain, &mut wire)?;
                Ok(wire)
            }
            _ => Err(tls_err("output before the TLS handshake")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

    fn config() -> TlsConfig {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_der = ca.self_signed(&ca_key).unwrap().der().to_vec();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["n".to_string()])
            .unwrap()
            .signed_by(&key, &Issuer::from_params(&ca, &ca_key))
            .unwrap();
        TlsConfig::new(vec![leaf.der().to_vec()], key.serialize_der(), vec![ca_der]).unwrap()
    }

    /// Our records are real TLS 1.3: after extracting the server's secrets,
    /// a rustls client that still runs its own record layer reads what we
    /// seal, and we open what it writes.
    #[test]
    fn sealed_records_are_tls_records_rustls_reads() {
        let cfg = config();
        let mut client =
            ClientConnection::new(cfg.client.clone(), ServerName::try_from("n").unwrap()).unwrap();
        let mut server = TlsHandshake::server(&cfg).unwrap();
        let mut done = false;
        for _ in 0..10 {
            let mut c2s = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut c2s).unwrap();
            }
            done = server.feed(&c2s).unwrap();
            let s2c = server.take_output();
            client.read_tls(&mut &s2c[..]).unwrap();
            client.process_new_packets().unwrap();
            if done && !client.is_handshaking() {
                break;
            }
        }
        assert!(done && !client.is_handshaking());
        let mut up = server.finish().unwrap();
        // The channel binding is the exporter value both ends compute.
        let theirs = client
            .export_keying_material([0u8; 32], EXPORTER_LABEL, None)
            .unwrap();
        assert_eq!(up.binding, theirs);
        assert_ne!(up.binding, [0u8; 32]);
        // Server to client: our sealer, rustls's reader (several records).
        let msg: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let mut wire = Vec::new();
        up.sealer.seal(&msg, &mut wire).unwrap();
        assert_eq!(&wire[..3], &[23, 3, 3]);
        let mut at = &wire[..];
        let mut got = Vec::new();
        while !at.is_empty() {
            client.read_tls(&mut at).unwrap();
            client.process_new_packets().unwrap();
            let mut buf = [0u8; 65536];
            while let Ok(n) = client.reader().read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
        }
        assert_eq!(got, msg);
        // Client to server: rustls's writer, our opener.
        client.writer().write_all(b"hello from rustls").unwrap();
        let mut c2s = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut c2s).unwrap();
        }
        let mut raw = c2s.clone();
        assert_eq!(
            up.opener.open_available(&mut raw).unwrap(),
            b"hello from rustls"
        );
        // Replayed, or with a flipped bit: refused.
        let mut again = c2s.clone();
        assert!(up.opener.open_available(&mut again).is_err());
        // An alert from rustls is reported in words.
        client.send_close_notify();
        let mut c2s = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut c2s).unwrap();
        }
        let e = up.opener.open_available(&mut c2s).unwrap_err();
        assert!(e.to_string().contains("close_notify"), "{e}");
    }

    #[test]
    fn bad_configurations_and_non_tls_bytes_are_refused() {
        assert!(TlsConfig::new(vec![], vec![1, 2, 3], vec![]).is_err());
        assert!(TlsConfig::new(vec![vec![0; 10]], vec![1, 2, 3], vec![vec![0; 10]]).is_err());
        let cfg = config();
        let mut hs = TlsHandshake::server(&cfg).unwrap();
        let e = hs.feed(b"\0\0\0\x20GRFT").unwrap_err();
        assert!(e.to_string().contains("plain-TCP"), "{e}");
        let mut hs = TlsHandshake::server(&cfg).unwrap();
        let e = hs.feed(&[22, 3, 1, 0xff, 0xff]).unwrap_err();
        assert!(e.to_string().contains("longer"), "{e}");
        let mut hs = TlsHandshake::server(&cfg).unwrap();
        assert!(hs.feed(&[22, 3, 1, 0, 4, 1, 0, 0, 0]).is_err());
    }
}
