//! What a started API server needs to be reached safely: a CA, a serving certificate for
//! 127.0.0.1 signed by it, a service-account signing key, an admin token, and a kubeconfig
//! that uses them. Made fresh for every cluster with rcgen.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};

use crate::Error;

/// The credentials in memory (PEM text and the token).
#[derive(Debug)]
pub(crate) struct Credentials {
    pub(crate) ca: String,
    pub(crate) cert: String,
    pub(crate) key: String,
    /// ECDSA P-256, PKCS#8: signs service-account tokens.
    pub(crate) sa_key: String,
    pub(crate) sa_public: String,
    /// 32 random bytes in hex: the admin's bearer token.
    pub(crate) token: String,
}

/// Where [`Credentials::write`] put them.
#[derive(Debug)]
pub(crate) struct Files {
    pub(crate) ca: PathBuf,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) sa_key: PathBuf,
    pub(crate) sa_public: PathBuf,
    /// `TOKEN,admin,admin,"system:masters"`, for `--token-auth-file`.
    pub(crate) tokens: PathBuf,
    pub(crate) kubeconfig: PathBuf,
}

impl Credentials {
    /// A new CA, a serving certificate for `127.0.0.1` and `localhost` signed by it, a
    /// service-account key and a token.
    pub(crate) fn generate() -> Result<Self, rcgen::Error> {
        let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name
            .push(DnType::CommonName, "kube-fsm-envtest-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key)?;

        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let mut leaf =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        leaf.distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        leaf.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = leaf.signed_by(&key, &Issuer::from_params(&ca, &ca_key))?;

        let sa = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let token: String = (0..32)
            .map(|_| format!("{:02x}", fastrand::u8(..)))
            .collect();
        Ok(Self {
            ca: ca_cert.pem(),
            cert: cert.pem(),
            key: key.serialize_pem(),
            sa_key: sa.serialize_pem(),
            sa_public: sa.public_key_pem(),
            token,
        })
    }

    /// Writes them into `dir`, with a kubeconfig for the API server on 127.0.0.1:`port`.
    pub(crate) fn write(&self, dir: &Path, port: u16) -> Result<Files, Error> {
        let files = Files {
            ca: dir.join("ca.crt"),
            cert: dir.join("server.crt"),
            key: dir.join("server.key"),
            sa_key: dir.join("sa.key"),
            sa_public: dir.join("sa.pub"),
            tokens: dir.join("tokens.csv"),
            kubeconfig: dir.join("kubeconfig"),
        };
        let tokens = format!("{},admin,admin,\"system:masters\"\n", self.token);
        let kubeconfig = kubeconfig(port, &files.ca, &self.token);
        for (path, text) in [
            (&files.ca, &self.ca),
            (&files.cert, &self.cert),
            (&files.key, &self.key),
            (&files.sa_key, &self.sa_key),
            (&files.sa_public, &self.sa_public),
            (&files.tokens, &tokens),
            (&files.kubeconfig, &kubeconfig),
        ] {
            std::fs::write(path, text).map_err(|source| Error::Io {
                action: format!("write {}", path.display()),
                source,
            })?;
        }
        Ok(files)
    }
}

/// A kubeconfig (YAML) for the admin with `token` at `https://127.0.0.1:PORT`, trusting the CA
/// in the file `ca`.
fn kubeconfig(port: u16, ca: &Path, token: &str) -> String {
    // JSON strings are YAML strings: any path is quoted right.
    let ca = serde_json::Value::from(ca.to_string_lossy()).to_string();
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: https://127.0.0.1:{port}
    certificate-authority: {ca}
users:
- name: admin
  user:
    token: \"{token}\"
contexts:
- name: envtest
  context:
    cluster: envtest
    user: admin
current-context: envtest
"
    )
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use x509_parser::extensions::GeneralName;
    use x509_parser::pem::parse_x509_pem;

    use super::*;

    #[test]
    fn the_serving_certificate_names_loopback_and_is_signed_by_the_ca() {
        let credentials = Credentials::generate().unwrap();
        let (_, ca) = parse_x509_pem(credentials.ca.as_bytes()).unwrap();
        let ca = ca.parse_x509().unwrap();
        assert!(ca.is_ca());
        let (_, pem) = parse_x509_pem(credentials.cert.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        assert_eq!(cert.issuer(), ca.subject());
        let names = cert
            .subject_alternative_name()
            .unwrap()
            .expect("a subjectAltName")
            .value
            .general_names
            .clone();
        assert!(
            names.contains(&GeneralName::IPAddress(&Ipv4Addr::LOCALHOST.octets())),
            "{names:?}"
        );
        assert!(
            names.contains(&GeneralName::DNSName("localhost")),
            "{names:?}"
        );
        assert!(credentials.key.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(
            credentials
                .sa_key
                .starts_with("-----BEGIN PRIVATE KEY-----")
        );
        assert!(
            credentials
                .sa_public
                .starts_with("-----BEGIN PUBLIC KEY-----")
        );
        assert_eq!(credentials.token.len(), 64);
        assert!(credentials.token.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn the_kubeconfig_reads_back() {
        let text = kubeconfig(6443, Path::new("/tmp/a dir/ca: \"x\".crt"), "abc123");
        let config = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/tmp/a dir/ca: \"x\".crt")
        );
        let user = config.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some());
        assert_eq!(config.current_context.as_deref(), Some("envtest"));
    }
}
