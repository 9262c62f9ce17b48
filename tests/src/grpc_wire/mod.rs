//! The gRPC APIs vp2p speaks, as published, and a way to speak them without
//! vp2p's generated code: [`table`] holds the facts transcribed from the
//! upstream API files (cited there), [`protobuf`] encodes and decodes
//! protobuf's wire format by hand from those facts, [`raw`] sends and serves
//! gRPC calls whose messages are plain bytes.

pub mod protobuf;
pub mod raw;
pub mod table;
