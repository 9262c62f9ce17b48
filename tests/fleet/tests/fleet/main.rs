//! scripts/fleet.sh's pieces against expectations derived by hand from
//! boot.sh's layouts, small fleets on the real control plane, the committed
//! counts' format and the claim templates.

mod committed;
mod scheduled;
mod templates;
mod trees;
