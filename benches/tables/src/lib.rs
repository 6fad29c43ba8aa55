//! `actcd-tables`: etcd's published benchmark tables reproduced against actcd or etcd, driving
//! the load client (`actcd-bench`'s library) from this separate process and reading the
//! server's memory from `/proc`, as etcd's benchmarks do. Its own crate because it is a second
//! product beside the load client: starting and stopping servers, fitting, tables, charts.

pub mod chart;
pub mod cli;
pub mod fanout;
pub mod fit;
pub mod measure;
pub mod memtable;
pub mod outcome;
pub mod qpstable;
pub mod results;
pub mod server;
pub mod storetable;
pub mod tablesdoc;
pub mod watch_row;
