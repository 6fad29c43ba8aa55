//! etcd's check of a dialing member's certificate against the address it dials from (its
//! `checkSAN`, on the peer listener only): once the handshake has verified the chain, a client
//! certificate that names subject alternative names must name the remote address, as an IP SAN
//! or as a DNS SAN that resolves to it. A certificate that names none passes. So a member's
//! certificate and key copied to another host do not let that host into the cluster.
//!
//! etcd tries the IP SANs first, then, only if the certificate has DNS SANs too, looks each DNS
//! SAN up and compares its addresses. Its words for a refusal, which the listener logs, are
//! Go's: `x509: certificate is valid for 10.1.2.3, not 127.0.0.1` when only IP SANs were given,
//! `tls: "127.0.0.1" does not match any of DNSNames ["m1.example"]` otherwise.
//!
//! Left out: etcd also looks the remote address up in reverse (PTR) and matches the names it
//! finds, wildcard DNS SANs among them; here a DNS SAN is only resolved forward, so a wildcard
//! SAN matches no address.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use x509_parser::extensions::GeneralName;

/// The subject alternative names of a certificate that etcd's check reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AltNames {
    /// IP address SANs.
    pub ips: Vec<IpAddr>,
    /// DNS name SANs.
    pub dns: Vec<String>,
}

impl AltNames {
    /// The SANs of a DER certificate (none if it does not parse: the handshake has verified
    /// it already, so that cannot happen to a certificate this is asked about).
    pub fn of(der: &[u8]) -> Self {
        let mut names = Self::default();
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else { return names };
        let Ok(Some(san)) = cert.subject_alternative_name() else { return names };
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => names.dns.push(dns.to_string()),
                GeneralName::IPAddress(bytes) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                        names.ips.push(IpAddr::V4(Ipv4Addr::from(v4)));
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                        names.ips.push(IpAddr::V6(Ipv6Addr::from(v6)));
                    }
                }
                _ => {}
            }
        }
        names
    }

    /// Whether a member dialing from `remote` may present a certificate with these names,
    /// looking DNS SANs up with `resolve`; the error is etcd's text of the refusal.
    pub async fn admit<F, Fut>(&self, remote: IpAddr, resolve: F) -> Result<(), String>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = io::Result<Vec<IpAddr>>>,
    {
        let remote = remote.to_canonical();
        if !self.ips.is_empty() {
            if self.ips.iter().any(|ip| ip.to_canonical() == remote) {
                return Ok(());
            }
            if self.dns.is_empty() {
                let valid: Vec<String> = self.ips.iter().map(IpAddr::to_string).collect();
                return Err(format!("x509: certificate is valid for {}, not {remote}", valid.join(", ")));
            }
        }
        if self.dns.is_empty() {
            return Ok(());
        }
        let mut failed = None;
        for name in &self.dns {
            match resolve(name.clone()).await {
                Ok(addrs) if addrs.iter().any(|a| a.to_canonical() == remote) => return Ok(()),
                Ok(_) => {}
                Err(err) => failed = Some(err),
            }
        }
        let why = failed.map(|err| format!(" ({err})")).unwrap_or_default();
        Err(format!("tls: \"{remote}\" does not match any of DNSNames {:?}{why}", self.dns))
    }
}

/// The addresses `name` resolves to, by the system's resolver (`/etc/hosts` first).
pub async fn resolve(name: String) -> io::Result<Vec<IpAddr>> {
    Ok(tokio::net::lookup_host((name.as_str(), 0)).await?.map(|addr| addr.ip()).collect())
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::net::IpAddr;

    use super::{resolve, AltNames};
    use crate::tls::tests::certificate;

    #[tokio::test]
    async fn a_members_certificate_must_name_the_address_it_dials_from() {
        let names = |sans: &[&str]| AltNames::of(&certificate("actcd-peer", sans));
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let here = |_: String| async move { Ok::<_, io::Error>(vec![loopback]) };
        let elsewhere = |_: String| async { Ok::<_, io::Error>(vec!["10.9.9.9".parse().unwrap()]) };
        let nowhere = |_: String| async { Err::<Vec<IpAddr>, _>(io::Error::other("no such host")) };

        let both = names(&["localhost", "127.0.0.1"]);
        assert_eq!(both, AltNames { ips: vec![loopback], dns: vec!["localhost".into()] });
        assert_eq!(both.admit(loopback, nowhere).await, Ok(()), "an IP SAN matches without a lookup");
        assert_eq!(names(&[]).admit(loopback, nowhere).await, Ok(()), "no SANs, nothing to match");
        assert_eq!(
            names(&["10.1.2.3"]).admit(loopback, resolve).await,
            Err("x509: certificate is valid for 10.1.2.3, not 127.0.0.1".into())
        );
        assert_eq!(
            names(&["m1.example"]).admit(loopback, here).await,
            Ok(()),
            "a DNS SAN that resolves here"
        );
        assert_eq!(
            names(&["m1.example"]).admit(loopback, elsewhere).await,
            Err(r#"tls: "127.0.0.1" does not match any of DNSNames ["m1.example"]"#.into())
        );
        assert_eq!(
            names(&["10.1.2.3", "m1.example"]).admit(loopback, nowhere).await,
            Err(r#"tls: "127.0.0.1" does not match any of DNSNames ["m1.example"] (no such host)"#.into()),
            "with DNS SANs too, an IP mismatch falls through to them"
        );
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(names(&["::1"]).admit(v6, nowhere).await, Ok(()));
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(both.admit(mapped, nowhere).await, Ok(()), "an IPv4-mapped address is the IPv4 one");
        assert_eq!(AltNames::of(b"not a certificate"), AltNames::default());
    }
}
