//! The `p2p-host` command's tests, one binary: `serve` given hostile
//! configuration, and its socket file.

mod serve_conf;
mod serve_socket;
