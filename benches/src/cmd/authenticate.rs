//! `authenticate`: Authenticate over and over with one name and password, right or wrong: what
//! checking a password costs the server (bcrypt is slow on purpose), and, run beside `put`,
//! whether a loop of wrong passwords slows anyone else's writes. etcd's benchmark has no such
//! command.

use crate::conn::{Conn, OpError};
use crate::output::Out;
use crate::runner::{run_clients, Plan, Worker};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::auth_client::AuthClient;
use actcd_proto::etcdserverpb::AuthenticateRequest;
use clap::Args;
use std::future::Future;

#[derive(Debug, Clone, Args)]
pub struct AuthenticateArgs {
    /// Total number of Authenticate requests.
    #[arg(long, default_value_t = 1000)]
    pub total: u64,
    /// The user name to authenticate as.
    #[arg(long, default_value = "root")]
    pub name: String,
    /// The password to try (a wrong one measures the brute-force loop).
    #[arg(long, default_value = "")]
    pub password: String,
}

impl AuthenticateArgs {
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let request = AuthenticateRequest { name: self.name, password: self.password };
        let worker = |conn| AuthWorker { auth: AuthClient::new(conn), request: request.clone() };
        run_clients((settings, stop, out), "authenticate", Plan::new(self.total, 0), "", worker).await;
    }
}

struct AuthWorker {
    auth: AuthClient<Conn>,
    request: AuthenticateRequest,
}

impl Worker for AuthWorker {
    fn call(&mut self, _i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let request = self.request.clone();
        (0, async move { self.auth.authenticate(request).await.map(|_| ()).map_err(OpError::from) })
    }
}
