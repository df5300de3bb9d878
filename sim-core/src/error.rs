//! The errors a solver reports.

/// Errors a solver reports.
#[derive(Debug, thiserror::Error)]
pub enum SolverError {
    /// A parameter was refused.
    #[error("invalid parameter: {0}")]
    Param(String),
    /// A checkpoint was refused.
    #[error("checkpoint refused: {0}")]
    Checkpoint(String),
    /// A cell edit was refused (the message names the cell and why).
    #[error("edit refused: {0}")]
    Edit(String),
    /// The backend cannot run (no device, out of memory, compile error).
    #[error("{0}")]
    Backend(String),
}
