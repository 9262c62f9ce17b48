//! CUDA C sources, filled in by the guest CUDA work.
