//! etcd's auth store (v3 auth): users, roles and key-range permissions as state machine
//! state, the checks every request passes, and the simple tokens a member remembers. Nothing
//! here hashes a password or reads a clock: bcrypt runs at the gRPC edge before a command is
//! proposed, and time is a parameter, so apply stays deterministic.
//!
//! # Layout
//! - [`auth_state`]: enabled, revision, users and roles; each auth command's rule; the check.
//! - [`permissions`]: a user's grants merged into intervals, and whether they cover a range.
//! - [`needs`]: what each write needs of its user, asked at the edge and again at apply.
//! - [`commands`]: the auth commands as the writer applies them.
//! - [`caller`]: who sent a command, as the log carries it (etcd's request header).
//! - [`simple_tokens`]: `--auth-token simple`'s tokens and their TTL.
//! - [`error`]: etcd's auth errors.

pub mod auth_state;
pub mod caller;
pub mod commands;
pub mod error;
pub mod needs;
pub mod permissions;
pub mod simple_tokens;

pub use self::auth_state::{AuthState, Need, ROOT};
pub use self::caller::Caller;
pub use self::error::AuthError;
pub use self::permissions::Access;
