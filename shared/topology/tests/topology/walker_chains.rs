//! Property tests for the config-space walkers on generated valid chains: the
//! walker returns exactly the capabilities placed, in chain order, with the
//! lengths the PCI / PCI Express specs give them, and the invariants of
//! tests/support/src/walker_invariants.rs hold for them too.

use crate::walker_gen::{ext_chain_in, invariants, std_chain_in, walk_ext, walk_std};
use p2p_topology::pci::{CONFIG_EXTENDED_LEN as EXT, CONFIG_LEGACY_LEN as LEGACY};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn valid_standard_chain_walks_exactly(chain in std_chain_in(LEGACY)) {
        prop_assert_eq!(walk_std(&chain.bytes), Ok(chain.expect));
        invariants::check(&chain.bytes).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn valid_extended_chain_walks_exactly(chain in ext_chain_in(EXT)) {
        prop_assert_eq!(walk_ext(&chain.bytes), Ok(chain.expect));
        invariants::check(&chain.bytes).map_err(TestCaseError::fail)?;
    }
}
