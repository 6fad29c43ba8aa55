//! `--auth-token`: which tokens Authenticate hands out and the edge accepts.
//!
//! - `simple` (etcd's default): random strings every member learns from the log (the state
//!   machine keeps them, see `actcd_store::auth_store::simple_tokens`).
//! - `jwt,pub-key=PATH,priv-key=PATH,sign-method=ALG[,ttl=DURATION]`: signed, stateless tokens
//!   with etcd's claims (`username`, `revision`, `exp`), so a token one member signs is good on
//!   every member holding the same key, and one etcd signed is good on actcd. The revision is
//!   the auth revision at signing: any auth change after it makes the token fail key checks
//!   with "revision of auth store is old", and clientv3 authenticates again. Without a private
//!   key the member only verifies. The signing is jsonwebtoken's (with ring, already here for
//!   TLS); the one alg it lacks, ES512, is refused at start.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// etcd's JWT lifetime when `ttl=` is not given.
const DEFAULT_JWT_TTL: Duration = Duration::from_secs(300);

/// Why an `--auth-token` value cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFlagError {
    /// etcd's text for a malformed option list.
    #[error("--auth-token: auth: invalid auth options ({0})")]
    Options(String),
    /// A sign method etcd does not know, or one actcd cannot sign with.
    #[error("--auth-token: auth: invalid auth signature method {0:?}")]
    Method(String),
    /// A key file that cannot be read or parsed.
    #[error("--auth-token: cannot use {path}: {reason}")]
    Key {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
}

/// The token kind this member hands out and accepts.
pub enum Tokens {
    /// etcd's simple tokens.
    Simple,
    /// Signed JWTs.
    Jwt(Jwt),
}

/// A JWT signer and verifier.
pub struct Jwt {
    alg: Algorithm,
    sign: Option<EncodingKey>,
    verify: DecodingKey,
    ttl: Duration,
}

/// etcd's claims.
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    username: String,
    revision: u64,
    exp: u64,
}

impl Tokens {
    /// Reads an `--auth-token` value as etcd does: `simple`, or `jwt` and `key=value` options.
    pub fn from_flag(flag: &str) -> Result<Tokens, TokenFlagError> {
        let mut parts = flag.split(',');
        match parts.next().unwrap_or_default() {
            "simple" => Ok(Tokens::Simple),
            "jwt" => {
                let mut options = std::collections::BTreeMap::new();
                for part in parts {
                    let (key, value) = part
                        .split_once('=')
                        .filter(|(_, v)| !v.contains('='))
                        .ok_or_else(|| TokenFlagError::Options(format!("{part:?} is not key=value")))?;
                    if options.insert(key, value).is_some() {
                        return Err(TokenFlagError::Options(format!("{key} given twice")));
                    }
                }
                Jwt::from_options(&options).map(Tokens::Jwt)
            }
            other => Err(TokenFlagError::Options(format!("unknown token type {other:?}"))),
        }
    }
}

impl Jwt {
    fn from_options(options: &std::collections::BTreeMap<&str, &str>) -> Result<Jwt, TokenFlagError> {
        let method = options.get("sign-method").copied().unwrap_or_default();
        let alg = match method {
            "HS256" => Algorithm::HS256,
            "HS384" => Algorithm::HS384,
            "HS512" => Algorithm::HS512,
            "RS256" => Algorithm::RS256,
            "RS384" => Algorithm::RS384,
            "RS512" => Algorithm::RS512,
            "PS256" => Algorithm::PS256,
            "PS384" => Algorithm::PS384,
            "PS512" => Algorithm::PS512,
            "ES256" => Algorithm::ES256,
            "ES384" => Algorithm::ES384,
            _ => return Err(TokenFlagError::Method(method.to_string())),
        };
        let ttl = match options.get("ttl") {
            Some(ttl) => actcd_proto::go_duration::parse(ttl)
                .map_err(|e| TokenFlagError::Options(format!("ttl={ttl}: {e}")))?,
            None => DEFAULT_JWT_TTL,
        };
        let read = |key: &str| -> Result<Option<(String, Vec<u8>)>, TokenFlagError> {
            match options.get(key) {
                Some(path) => std::fs::read(path)
                    .map(|bytes| Some((path.to_string(), bytes)))
                    .map_err(|e| TokenFlagError::Key { path: path.to_string(), reason: e.to_string() }),
                None => Ok(None),
            }
        };
        let bad = |path: &str, e: jsonwebtoken::errors::Error| TokenFlagError::Key {
            path: path.to_string(),
            reason: e.to_string(),
        };
        let (private, public) = (read("priv-key")?, read("pub-key")?);
        let (sign, verify) = match alg {
            // HMAC: the private key file's bytes are the secret; the public key is ignored.
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
                let (_, secret) =
                    private.ok_or_else(|| TokenFlagError::Options("auth: missing key data".into()))?;
                (Some(EncodingKey::from_secret(&secret)), DecodingKey::from_secret(&secret))
            }
            // Key pairs: PEM files, signing only with a private key.
            _ => {
                type FromPem<K> = fn(&[u8]) -> jsonwebtoken::errors::Result<K>;
                let (private_key, public_key): (FromPem<EncodingKey>, FromPem<DecodingKey>) =
                    if matches!(alg, Algorithm::ES256 | Algorithm::ES384) {
                        (EncodingKey::from_ec_pem, DecodingKey::from_ec_pem)
                    } else {
                        (EncodingKey::from_rsa_pem, DecodingKey::from_rsa_pem)
                    };
                let sign = match &private {
                    Some((path, pem)) => Some(private_key(pem).map_err(|e| bad(path, e))?),
                    None => None,
                };
                let (path, pem) =
                    public.ok_or_else(|| TokenFlagError::Options("auth: missing key data".into()))?;
                (sign, public_key(&pem).map_err(|e| bad(&path, e))?)
            }
        };
        Ok(Jwt { alg, sign, verify, ttl })
    }

    /// A token for `username` at auth revision `revision`, or `None` on a verify-only member.
    pub fn sign(&self, username: &str, revision: u64) -> Option<Result<String, jsonwebtoken::errors::Error>> {
        let key = self.sign.as_ref()?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let claims = Claims { username: username.to_string(), revision, exp: (now + self.ttl).as_secs() };
        Some(jsonwebtoken::encode(&Header::new(self.alg), &claims, key))
    }

    /// The user and auth revision a valid, unexpired token of ours names.
    pub fn verify(&self, token: &str) -> Option<(String, u64)> {
        let mut validation = Validation::new(self.alg);
        validation.leeway = 0;
        validation.required_spec_claims = ["exp".to_string()].into_iter().collect();
        let data = jsonwebtoken::decode::<Claims>(token, &self.verify, &validation).ok()?;
        (!data.claims.username.is_empty() && data.claims.revision != 0)
            .then_some((data.claims.username, data.claims.revision))
    }
}
