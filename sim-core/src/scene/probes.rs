//! `[[probes]]`: cells where a run samples the flow over time (see [`crate::probes`]): the
//! named cells themselves, how a user writes one, and the column-safe names they get.

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

/// A named cell where the flow is sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Name in probes.csv and in reports (letters, digits, `_` and `-` once named by
    /// [`name_probes`]; empty until then where the user gave none).
    pub name: String,
    /// The cell (x, y, z), z = 0 in 2D, in cells of the scene's `domain.size`.
    pub cell: [usize; 3],
}

impl Probe {
    /// Parse a probe given by a user: `X,Y` (2D) or `X,Y,Z` (3D) in cells, optionally named as
    /// `NAME=X,Y[,Z]`, checked against a domain of `size` cells (z = 1 in 2D) of `dims`
    /// dimensions. A cell inside an obstacle is accepted: it samples zeros.
    ///
    /// # Errors
    /// What is wrong and what would be valid, e.g. `x = 500 is outside the domain (0 to 399)`.
    pub fn parse(text: &str, size: [usize; 3], dims: usize) -> Result<Probe, String> {
        let (name, at) = match text.split_once('=') {
            Some((n, at)) => (n.trim(), at),
            None => ("", text),
        };
        let values: Vec<f64> = at
            .split(',')
            .map(|v| {
                let v = v.trim();
                v.parse::<f64>().map_err(|_| format!("\"{v}\" is not a number; give {}", form(dims)))
            })
            .collect::<Result<_, _>>()?;
        Ok(Probe { name: name.to_string(), cell: cell_of(&values, size, dims)? })
    }

    /// The cell of this probe on a solver's grid of `grid` cells, for a scene of `size` cells:
    /// the probe's own cell where the two agree, and on a grid finer by a whole factor `s` per
    /// axis (adaptive blocks show their finest level) the fine cell at the centre of the coarse
    /// one, `x s + s / 2`.
    #[must_use]
    pub fn cell_on(&self, size: [usize; 3], grid: [usize; 3]) -> [usize; 3] {
        std::array::from_fn(|a| {
            let s = (grid[a] / size[a].max(1)).max(1);
            (self.cell[a] * s + s / 2).min(grid[a].saturating_sub(1))
        })
    }
}

/// How a probe position is written, for messages.
fn form(dims: usize) -> &'static str {
    if dims == 2 {
        "X,Y in cells (this domain is 2D)"
    } else {
        "X,Y,Z in cells (this domain is 3D)"
    }
}

/// The cell of a probe position given as numbers: two (x, y) in 2D or three (x, y, z) in 3D
/// (in 2D a third, z = 0, is accepted too), each a whole cell index inside `size`.
///
/// # Errors
/// A count that does not fit `dims`, a number that is not a whole cell index, or a cell outside
/// the domain, e.g. `x = 500 is outside the domain (0 to 399)`.
pub fn cell_of(values: &[f64], size: [usize; 3], dims: usize) -> Result<[usize; 3], String> {
    if values.len() != dims && !(dims == 2 && values.len() == 3) {
        return Err(format!("got {} number(s); give {}", values.len(), form(dims)));
    }
    let mut cell = [0usize; 3];
    for (a, &v) in values.iter().enumerate() {
        let axis = ["x", "y", "z"][a];
        let last = size[a].saturating_sub(1);
        if !(v.is_finite() && v.fract() == 0.0) {
            return Err(format!("{axis} = {v} is not a whole cell index; cells are numbered 0 to {last}"));
        }
        if !(v >= 0.0 && v <= last as f64) {
            return Err(format!("{axis} = {v} is outside the domain (0 to {last})"));
        }
        cell[a] = v as usize;
    }
    Ok(cell)
}

/// Name every probe for probes.csv: a given name becomes a column-safe one (letters, digits,
/// `_` and `-`; see [`column_name`]), an empty one `probeK` (K its index), and a
/// name taken by an earlier probe gets `_2`, `_3`, ... Names already set this way stay as they
/// are, so a list can be named again after more probes were added.
pub fn name_probes(probes: &mut [Probe]) {
    let mut taken: Vec<String> = Vec::with_capacity(probes.len());
    for (k, p) in probes.iter_mut().enumerate() {
        let mut n = column_name(&p.name);
        if n.is_empty() {
            n = format!("probe{k}");
        }
        let base = n.clone();
        let mut i = 2;
        while taken.contains(&n) {
            n = format!("{base}_{i}");
            i += 1;
        }
        taken.push(n.clone());
        p.name = n;
    }
}

/// An obstacle name as a CSV column name: letters, digits, `_` and `-` stay, anything else
/// (spaces, commas, quotes, dots) becomes `_`, so that `NAME.fx` splits at its one dot.
#[must_use]
pub fn column_name(name: &str) -> String {
    name.trim().chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}
