//! `[[probes]]`: cells where a run samples the flow over time (see [`crate::probes`]).

use crate::probes::{cell_of, name_probes, Probe};
use serde::{Deserialize, Serialize};

/// One `[[probes]]` entry as the scene writes it; [`super::Derived::probes`] holds the checked
/// cells with their names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// The cell: `[x, y]` in 2D or `[x, y, z]` in 3D, whole cell indices.
    pub at: Vec<f64>,
    /// Name in probes.csv and in reports (default `probeK`, K its index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The probes of a scene of `size` cells (z = 1 in 2D) and `dims` dimensions: each cell inside
/// the domain, each named (see [`name_probes`]). Errors are (key, message).
pub(super) fn resolve(specs: &[ProbeSpec], size: [usize; 3], dims: usize) -> Result<Vec<Probe>, (String, String)> {
    let mut probes = Vec::with_capacity(specs.len());
    for (i, p) in specs.iter().enumerate() {
        let cell = cell_of(&p.at, size, dims).map_err(|m| (format!("probes.{i}.at"), m))?;
        probes.push(Probe { name: p.name.clone().unwrap_or_default(), cell });
    }
    name_probes(&mut probes);
    Ok(probes)
}
