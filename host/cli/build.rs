//! Build script of the `p2p-host` binary: the commit stamp `--version` prints
//! (shared with p2p-guest).

#[path = "../../shared/build-commit.rs"]
mod commit;

fn main() {
    commit::main();
}
