//! What the app's integration tests share: the repository root and runs of the real binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root, where runs start so that `scenes/...` paths resolve.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Run the esoflow binary from the repository root and wait for it.
pub fn esoflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_esoflow")).args(args).current_dir(root()).output().expect("the esoflow binary runs")
}

/// A run's standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}
