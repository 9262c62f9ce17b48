//! p2p-guest library.
