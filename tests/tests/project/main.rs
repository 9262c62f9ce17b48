//! One test binary for the repository as a user meets it: the README's and
//! docs' commands run verbatim, the schemas, the crates' edges, a clone that
//! stands alone, and the pictures.
//! Each module was a test binary of its own; they share one link here.

mod crate_edges;
mod docs_examples;
mod docs_pages;
mod images;
mod pictures;
mod readme;
mod schemas;
mod standalone;
