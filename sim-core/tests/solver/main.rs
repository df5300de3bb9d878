//! The solver's tests that need no GPU, as one test binary: the CPU reference against analytic
//! solutions and published data (`physics`, `walls`), the streaming schemes against each other
//! (`schemes`), the shipped scenes (`scenes`), edits while running (`edit`), blow-ups and
//! rollback (`robustness`) and bad input (`hostile_input`). One binary links and optimises the
//! generic solvers once instead of once per file. Run one part with its module name, e.g.
//! `cargo test --release -p sim-core --test solver physics::`.

#[path = "../common/mod.rs"]
mod common;

mod edit;
mod hostile_input;
mod physics;
mod robustness;
mod scenes;
mod schemes;
mod walls;
