//! The webhook's serving certificate: PEM files (as cert-manager or a Secret mount provides
//! them; re-read when they change, as controller-runtime's certificate watcher does), or a CA
//! and a certificate made in memory for development and tests, whose CA goes into the
//! webhook configuration's `caBundle`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::SystemTime;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why a certificate could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The private key is of a type rustls cannot sign with.
    #[error("unusable private key in {path}: {source}")]
    Key {
        /// The key file, or `generated`.
        path: PathBuf,
        /// rustls's reason.
        source: rustls::Error,
    },
    /// Generating the development certificate failed.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The TLS configuration was refused.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

#[derive(Debug)]
struct Files {
    cert: PathBuf,
    key: PathBuf,
    /// Modification times of the pair last loaded.
    loaded: Mutex<(Option<SystemTime>, Option<SystemTime>)>,
}

/// The serving certificate, shared by the TLS acceptor and the reload task. Cloning shares it.
#[derive(Clone)]
pub struct ServingCertificate {
    current: Arc<RwLock<Arc<CertifiedKey>>>,
    files: Option<Arc<Files>>,
    ca_bundle: Option<String>,
}

impl fmt::Debug for ServingCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServingCertificate")
            .field("files", &self.files)
            .field("self_signed", &self.ca_bundle.is_some())
            .finish_non_exhaustive()
    }
}

impl ServingCertificate {
    /// The certificate chain in `cert` and its private key in `key` (PEM; `tls.crt` and
    /// `tls.key` of a `kubernetes.io/tls` Secret). [`ServingCertificate::reload`] re-reads them
    /// when either changes.
    ///
    /// # Errors
    /// When a file cannot be read or holds no certificate or no usable key.
    pub fn from_files(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Result<Self, TlsError> {
        let files = Files {
            cert: cert.into(),
            key: key.into(),
            loaded: Mutex::new((None, None)),
        };
        let stamps = (modified(&files.cert), modified(&files.key));
        let pair = load(&files.cert, &files.key)?;
        *files.loaded.lock().unwrap_or_else(PoisonError::into_inner) = stamps;
        Ok(Self {
            current: Arc::new(RwLock::new(pair)),
            files: Some(Arc::new(files)),
            ca_bundle: None,
        })
    }

    /// A new CA and a serving certificate for `hosts` (DNS names or IP addresses, e.g.
    /// `127.0.0.1` or `NAME.NAMESPACE.svc`) signed by it, in memory, for development and tests;
    /// [`ServingCertificate::ca_bundle`] is the CA to put in the webhook configuration.
    ///
    /// # Errors
    /// When a key or certificate cannot be generated.
    pub fn self_signed(hosts: &[&str]) -> Result<Self, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name
            .push(DnType::CommonName, "kube-fsm webhook development CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key)?;

        let key = KeyPair::generate()?;
        let mut leaf =
            CertificateParams::new(hosts.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>())?;
        leaf.distinguished_name.push(
            DnType::CommonName,
            hosts.first().copied().unwrap_or("kube-fsm-webhook"),
        );
        leaf.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = leaf.signed_by(&key, &Issuer::from_params(&ca, &ca_key))?;

        let der =
            PrivateKeyDer::try_from(key.serialize_der()).map_err(|message| TlsError::Read {
                path: "generated".into(),
                message: message.to_owned(),
            })?;
        let signer = any_supported_type(&der).map_err(|source| TlsError::Key {
            path: "generated".into(),
            source,
        })?;
        let pair = CertifiedKey::new(vec![cert.der().clone()], signer);
        Ok(Self {
            current: Arc::new(RwLock::new(Arc::new(pair))),
            files: None,
            ca_bundle: Some(ca_cert.pem()),
        })
    }

    /// The PEM of the CA that signed a [`ServingCertificate::self_signed`] certificate (for
    /// [`super::WebhookOptions::ca_bundle`]); `None` for certificates from files.
    pub fn ca_bundle(&self) -> Option<&str> {
        self.ca_bundle.as_deref()
    }

    /// Re-reads the files when either has changed since they were last loaded; returns
    /// whether a new pair is now served. A pair that does not load leaves the old one served.
    ///
    /// # Errors
    /// When the changed files do not load (tried again at the next call).
    pub fn reload(&self) -> Result<bool, TlsError> {
        let Some(files) = &self.files else {
            return Ok(false);
        };
        let stamps = (modified(&files.cert), modified(&files.key));
        let mut loaded = files.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        if *loaded == stamps {
            return Ok(false);
        }
        let pair = load(&files.cert, &files.key)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = pair;
        *loaded = stamps;
        Ok(true)
    }

    /// Whether the certificate comes from files (and so may change).
    pub fn from_disk(&self) -> bool {
        self.files.is_some()
    }

    /// When the certificate served now stops being valid (its `notAfter`), if it can be read.
    pub fn expires(&self) -> Option<SystemTime> {
        let current = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        not_after(current.cert.first()?)
    }
}

/// `at` as RFC 3339, for messages.
pub(crate) fn timestamp(at: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(at)
        .map_or_else(|_| "an unreadable time".to_owned(), |t| t.to_string())
}

/// The `notAfter` of `cert` (DER).
fn not_after(cert: &CertificateDer<'_>) -> Option<SystemTime> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let seconds = u64::try_from(parsed.validity().not_after.timestamp()).ok()?;
    Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(seconds))
}

/// Hands rustls the pair served now.
#[derive(Debug)]
pub(super) struct Resolver(pub(super) Arc<RwLock<Arc<CertifiedKey>>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.0
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

impl ServingCertificate {
    pub(super) fn resolver(&self) -> Arc<Resolver> {
        Arc::new(Resolver(self.current.clone()))
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let read = |path: &Path, message: String| TlsError::Read {
        path: path.to_owned(),
        message,
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|err| read(cert, err.to_string()))?;
    let Some(leaf) = chain.first() else {
        return Err(read(cert, "no CERTIFICATE block".to_owned()));
    };
    // An expired certificate fails every handshake: keep serving the one that still works.
    if let Some(expired) = not_after(leaf).filter(|t| *t <= SystemTime::now()) {
        let at = timestamp(expired);
        return Err(read(cert, format!("the certificate expired at {at}")));
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|err| read(key, err.to_string()))?;
    let signer = any_supported_type(&der).map_err(|source| TlsError::Key {
        path: key.to_owned(),
        source,
    })?;
    let pair = CertifiedKey::new(chain, signer);
    match pair.keys_match() {
        // A key of another certificate (a rotation caught half-way): every handshake would fail.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::Read {
                path: key.to_owned(),
                message: format!(
                    "the key does not belong to the certificate in {}",
                    cert.display()
                ),
            })
        }
        _ => Ok(Arc::new(pair)),
    }
}

/// A verifier of client certificates signed by a CA of `ca_pem`.
pub(super) fn client_verifier(
    ca_pem: &[u8],
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let read = |message: String| TlsError::Read {
        path: "the client CA".into(),
        message,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots
            .add(cert.map_err(|err| read(err.to_string()))?)
            .map_err(TlsError::Config)?;
    }
    if roots.is_empty() {
        return Err(read("no CERTIFICATE block".to_owned()));
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|err| read(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throwaway certificate and key, as PEM.
    fn pair(host: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![host.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A fresh folder holding `tls.crt` and `tls.key` for `host`: the folder, the two paths
    /// and the certificate's PEM.
    fn files_of(host: &str) -> (PathBuf, PathBuf, PathBuf, String) {
        let dir = std::env::temp_dir().join(format!("kube-fsm-tls-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let (cert_pem, key_pem) = pair(host);
        std::fs::write(&cert, &cert_pem).unwrap();
        std::fs::write(&key, &key_pem).unwrap();
        (dir, cert, key, cert_pem)
    }

    fn served(certificate: &ServingCertificate) -> CertificateDer<'static> {
        certificate.current.read().unwrap().cert[0].clone()
    }

    #[test]
    fn changed_files_are_served_and_broken_ones_leave_the_old_pair() {
        let (dir, cert, key, _) = files_of("a.example");
        let certificate = ServingCertificate::from_files(&cert, &key).unwrap();
        let first = served(&certificate);
        assert!(
            !certificate.reload().unwrap(),
            "unchanged files are not re-read"
        );

        let (second_cert, second_key) = pair("b.example");
        std::fs::write(&cert, &second_cert).unwrap();
        std::fs::write(&key, &second_key).unwrap();
        assert!(certificate.reload().unwrap());
        let second = served(&certificate);
        assert_ne!(first, second);

        std::fs::write(&cert, "not a certificate").unwrap();
        let err = certificate.reload().unwrap_err();
        assert!(err.to_string().contains("tls.crt"), "{err}");
        assert_eq!(served(&certificate), second, "the old pair is still served");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let (dir, cert, key, first_cert) = files_of("a.example");
        let certificate = ServingCertificate::from_files(&cert, &key).unwrap();
        // Half a rotation: the new key is there, the certificate is still the old one.
        let (_, other_key) = pair("b.example");
        std::fs::write(&key, &other_key).unwrap();
        let err = certificate.reload().unwrap_err();
        assert!(err.to_string().contains("does not belong"), "{err}");
        std::fs::write(&cert, &first_cert).unwrap();
        assert!(ServingCertificate::from_files(&cert, &key).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_expired_certificate_is_refused_and_the_served_one_says_when_it_expires() {
        let (dir, cert, key, _) = files_of("a.example");
        let certificate = ServingCertificate::from_files(&cert, &key).unwrap();
        let expires = certificate.expires().expect("a readable notAfter");
        assert!(expires > SystemTime::now(), "{expires:?}");

        let key_pair = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["b.example".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let expired = params.self_signed(&key_pair).unwrap();
        std::fs::write(&cert, expired.pem()).unwrap();
        std::fs::write(&key, key_pair.serialize_pem()).unwrap();
        let err = certificate.reload().unwrap_err();
        assert!(err.to_string().contains("expired at 2021-01-01"), "{err}");
        assert_eq!(
            certificate.expires(),
            Some(expires),
            "the old one is served"
        );
        assert!(ServingCertificate::from_files(&cert, &key).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_files_are_named() {
        let err = ServingCertificate::from_files("/nonexistent/tls.crt", "/nonexistent/tls.key")
            .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/tls.crt"), "{err}");
    }

    #[test]
    fn a_development_certificate_comes_with_its_ca() {
        let certificate = ServingCertificate::self_signed(&["127.0.0.1", "db.ns.svc"]).unwrap();
        let ca = certificate.ca_bundle().unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    }
}
