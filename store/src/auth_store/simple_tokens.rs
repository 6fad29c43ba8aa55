//! etcd's simple tokens (`--auth-token simple`): random strings a member remembers, each naming
//! a user, valid for `--auth-token-ttl` after its last use. The token is chosen before the
//! Authenticate command is proposed and every member records it when it applies the command,
//! so a token from one member is valid on all of them (once they applied it), as on etcd.
//! They live in memory only: a restart forgets them, and clients authenticate again (clientv3
//! does so by itself on "invalid auth token").
//!
//! Time is a parameter: the caller passes `now`, so the tests need no clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// At most this many tokens are remembered. Authenticating costs a bcrypt hash, so reaching it
/// takes a long stream of successful logins; when it is full the token closest to expiry is
/// forgotten first (its client gets "invalid auth token" and authenticates again).
pub const MAX_TOKENS: usize = 65536;

/// The simple tokens this member knows.
#[derive(Debug)]
pub struct SimpleTokens {
    ttl: Duration,
    tokens: HashMap<String, Entry>,
}

#[derive(Debug)]
struct Entry {
    user: String,
    expires: Instant,
}

impl SimpleTokens {
    /// No tokens yet; each lives `ttl` after its last use.
    pub fn new(ttl: Duration) -> Self {
        Self { ttl, tokens: HashMap::new() }
    }

    /// Records `token` for `user`.
    pub fn add(&mut self, token: String, user: String, now: Instant) {
        if self.tokens.len() >= MAX_TOKENS {
            self.tokens.retain(|_, e| e.expires > now);
        }
        if self.tokens.len() >= MAX_TOKENS {
            let oldest = self.tokens.iter().min_by_key(|(_, e)| e.expires).map(|(t, _)| t.clone());
            if let Some(oldest) = oldest {
                self.tokens.remove(&oldest);
            }
        }
        self.tokens.insert(token, Entry { user, expires: now + self.ttl });
    }

    /// The user `token` names, if it is known and not expired; a use extends its life.
    pub fn user(&mut self, token: &str, now: Instant) -> Option<String> {
        match self.tokens.get_mut(token) {
            Some(e) if e.expires > now => {
                e.expires = now + self.ttl;
                Some(e.user.clone())
            }
            Some(_) => {
                self.tokens.remove(token);
                None
            }
            None => None,
        }
    }

    /// Forgets every token of `user` (deleted, or its password changed).
    pub fn forget_user(&mut self, user: &str) {
        self.tokens.retain(|_, e| e.user != user);
    }

    /// Forgets every token (auth disabled, or a snapshot replaced the auth state).
    pub fn clear(&mut self) {
        self.tokens.clear();
    }

    /// How many tokens are remembered.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_lives_its_ttl_after_its_last_use() {
        let t0 = Instant::now();
        let mut tokens = SimpleTokens::new(Duration::from_secs(300));
        tokens.add("abc.1".into(), "alice".into(), t0);
        assert_eq!(tokens.user("abc.1", t0 + Duration::from_secs(299)).as_deref(), Some("alice"));
        // The use at 299 s moved the end to 599 s.
        assert_eq!(tokens.user("abc.1", t0 + Duration::from_secs(598)).as_deref(), Some("alice"));
        assert_eq!(tokens.user("abc.1", t0 + Duration::from_secs(898)), None, "300 s unused");
        assert!(tokens.is_empty(), "an expired token is forgotten when seen");
        assert_eq!(tokens.user("nope", t0), None);
    }

    #[test]
    fn forgetting_a_user_drops_only_its_tokens() {
        let t0 = Instant::now();
        let mut tokens = SimpleTokens::new(Duration::from_secs(300));
        tokens.add("a.1".into(), "alice".into(), t0);
        tokens.add("a.2".into(), "alice".into(), t0);
        tokens.add("b.3".into(), "bob".into(), t0);
        tokens.forget_user("alice");
        assert_eq!(tokens.len(), 1);
        assert_eq!(tokens.user("b.3", t0).as_deref(), Some("bob"));
    }

    #[test]
    fn a_full_keeper_forgets_the_token_closest_to_expiry() {
        let t0 = Instant::now();
        let mut tokens = SimpleTokens::new(Duration::from_secs(300));
        for i in 0..MAX_TOKENS {
            tokens.add(format!("t.{i}"), "u".into(), t0 + Duration::from_millis(i as u64));
        }
        tokens.add("new".into(), "u".into(), t0 + Duration::from_secs(1));
        assert_eq!(tokens.len(), MAX_TOKENS);
        assert_eq!(tokens.user("t.0", t0 + Duration::from_secs(1)), None, "the oldest went");
        assert!(tokens.user("t.1", t0 + Duration::from_secs(1)).is_some());
        assert!(tokens.user("new", t0 + Duration::from_secs(1)).is_some());
    }
}
