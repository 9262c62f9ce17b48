//! p2p-host library.
