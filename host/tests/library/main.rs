//! The p2p-host library's tests, one binary: the vfio-user server against the
//! captured H200, the overlay's properties on generated config spaces, and
//! the NVSwitch heuristic.

mod nvswitch_heuristic;
mod overlay_props;
mod serve_protocol;
