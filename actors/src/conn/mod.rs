//! The conn family: one actor per client connection that has streams, which stops them when
//! the connection goes away. Its state is one map of the connection's streams, kept in the
//! actor itself: each handler is a line or two of map and send, with no logic to pull out.
//!
//! # Layout
//! - [`actor`]: the ConnActor.
//! - [`messages`]: the family's messages (a stream attached, the connection closed).

pub mod actor;
pub mod messages;
