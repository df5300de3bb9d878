//! Output files of `esoflow run --export DIR`: `fields.csv`, `fields.vti` (VTK XML image data,
//! for ParaView) and `stats.csv`, all in lattice units, and where the scene gives SI units,
//! `units.toml` with the factors that turn them into SI.

use crate::fields;
use crate::fields::Fields;
use crate::scene::column_name;
use crate::scene::ForceReference;
use crate::stats::Stats;
use crate::units::Units;
use std::io::Write;
use std::path::Path;

/// Header of fields.csv (a contract other tools script against).
pub const FIELDS_CSV_HEADER: &str = "x,y,z,rho,ux,uy,uz";
/// The columns stats.csv starts with (a contract other tools script against); per-obstacle
/// columns follow (see [`StatsColumns`]).
pub const STATS_CSV_HEADER: &str = "step,mass,max_u,fx,fy,fz,mlups";

/// Write one row per fluid cell: cell indices and lattice units (atomically: see
/// [`crate::atomic_file`]).
///
/// # Errors
/// I/O errors.
pub fn write_fields_csv(path: &Path, f: &Fields) -> std::io::Result<()> {
    crate::atomic_file::write_atomic(path, |w| fields_csv(w, f))
}

fn fields_csv(w: &mut dyn Write, f: &Fields) -> std::io::Result<()> {
    writeln!(w, "{FIELDS_CSV_HEADER}")?;
    let n = f.size;
    for z in 0..n[2] {
        for y in 0..n[1] {
            for x in 0..n[0] {
                let i = x + n[0] * (y + n[1] * z);
                if f.solid[i] {
                    continue;
                }
                let u = f.u[i];
                writeln!(w, "{x},{y},{z},{},{},{},{}", f.rho[i], u[0], u[1], u[2])?;
            }
        }
    }
    Ok(())
}

/// Write VTK image data with point arrays rho, velocity, vorticity, Q and solid (atomically:
/// see [`crate::atomic_file`]).
///
/// # Errors
/// I/O or encoding errors.
pub fn write_fields_vti(path: &Path, f: &Fields) -> Result<(), String> {
    let n = f.size;
    write_vti(path, f, &fields::vorticity(f), &fields::q_criterion(f), n, [0; 3], 0..f.rho.len())
}

/// The extent of `size` cells from `at`, as VTK writes it (first and last point per axis).
fn extent(at: [usize; 3], size: [usize; 3]) -> vtkio::model::Extent {
    let r = |a: usize| at[a] as i32..=(at[a] + size[a]) as i32 - 1;
    vtkio::model::Extent::Ranges([r(0), r(1), r(2)])
}

/// Write the cells `cells` of `f` (with their vorticity and Q) as image data of `size` cells
/// from `at`, in a grid of `whole` cells.
fn write_vti(
    path: &Path,
    f: &Fields,
    vort: &[[f32; 3]],
    q: &[f32],
    size: [usize; 3],
    at: [usize; 3],
    cells: std::ops::Range<usize>,
) -> Result<(), String> {
    use vtkio::model::{Attribute, Attributes, ByteOrder, DataArray, DataSet, ElementType, IOBuffer, ImageDataPiece, Piece, Version, Vtk};
    let flat3 = |v: &[[f32; 3]]| v[cells.clone()].iter().flat_map(|a| a.iter().copied()).collect::<Vec<f32>>();
    let arr = |name: &str, comps: u32, data: Vec<f32>| {
        Attribute::DataArray(DataArray {
            name: name.into(),
            elem: if comps == 1 { ElementType::Scalars { num_comp: 1, lookup_table: None } } else { ElementType::Vectors },
            data: IOBuffer::F32(data),
        })
    };
    let solid: Vec<f32> = f.solid[cells.clone()].iter().map(|&s| if s { 1.0 } else { 0.0 }).collect();
    // A piece of a split file is image data of its own extent: the .pvti holds the grid's.
    let piece = extent(at, size);
    let vtk = Vtk {
        version: Version::new((1, 0)),
        byte_order: ByteOrder::LittleEndian,
        title: "Esoflow fields".into(),
        file_path: None,
        data: DataSet::ImageData {
            extent: piece.clone(),
            origin: [0.0; 3],
            spacing: [1.0; 3],
            meta: None,
            pieces: vec![Piece::Inline(Box::new(ImageDataPiece {
                extent: piece,
                data: Attributes {
                    point: vec![
                        arr("rho", 1, f.rho[cells.clone()].to_vec()),
                        arr("velocity", 3, flat3(&f.u)),
                        arr("vorticity", 3, flat3(vort)),
                        arr("Q", 1, q[cells.clone()].to_vec()),
                        arr("solid", 1, solid),
                    ],
                    cell: vec![],
                },
            }))],
        },
    };
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    crate::atomic_file::write_atomic(path, |w| vtk.write_xml(w).map_err(|e| std::io::Error::other(e.to_string()))).map_err(io)
}

/// Write one piece of a field file split over the slabs of a grid: the layers `keep` of
/// `block` along `axis` (the slowest of its axes), the first of them layer `at` of the whole
/// grid. The block has at least one layer before and one after those it writes, so that the
/// vorticity and Q of every written cell come from its true neighbours, as in the whole grid's
/// file.
///
/// # Errors
/// I/O or encoding errors; `keep` without a layer of the block on each side.
pub fn write_fields_vti_piece(path: &Path, block: &Fields, axis: usize, keep: std::ops::Range<usize>, at: usize) -> Result<(), String> {
    let n = block.size;
    if keep.start == 0 || keep.end >= n[axis] || keep.is_empty() {
        return Err(format!("{}: a piece needs a layer of its block on each side", path.display()));
    }
    let lc: usize = n[..axis].iter().product();
    let (vort, q) = (fields::vorticity(block), fields::q_criterion(block));
    let mut size = n;
    size[axis] = keep.len();
    let mut from = [0; 3];
    from[axis] = at;
    write_vti(path, block, &vort, &q, size, from, keep.start * lc..keep.end * lc)
}

/// Write the `.pvti` that joins the pieces of a split field file: the grid of `whole` cells,
/// each piece's file name (beside the .pvti) and its layers `lo..=hi` along `axis`.
///
/// # Errors
/// I/O errors.
pub fn write_fields_pvti(path: &Path, whole: [usize; 3], axis: usize, pieces: &[(String, usize, usize)]) -> std::io::Result<()> {
    let ext = |lo: usize, hi: usize| {
        (0..3).map(|a| if a == axis { format!("{lo} {hi}") } else { format!("0 {}", whole[a] - 1) }).collect::<Vec<_>>().join(" ")
    };
    crate::atomic_file::write_atomic(path, |w| {
        writeln!(w, r#"<?xml version="1.0"?>"#)?;
        writeln!(w, r#"<VTKFile type="PImageData" version="1.0" byte_order="LittleEndian">"#)?;
        writeln!(w, r#"  <PImageData WholeExtent="{}" GhostLevel="0" Origin="0 0 0" Spacing="1 1 1">"#, ext(0, whole[axis] - 1))?;
        writeln!(w, r#"    <PPointData Scalars="rho" Vectors="velocity">"#)?;
        for (name, comps) in [("rho", 1), ("velocity", 3), ("vorticity", 3), ("Q", 1), ("solid", 1)] {
            writeln!(w, r#"      <PDataArray type="Float32" Name="{name}" NumberOfComponents="{comps}"/>"#)?;
        }
        writeln!(w, "    </PPointData>")?;
        for (file, lo, hi) in pieces {
            writeln!(w, r#"    <Piece Extent="{}" Source="{file}"/>"#, ext(*lo, *hi))?;
        }
        writeln!(w, "  </PImageData>")?;
        writeln!(w, "</VTKFile>")
    })
}

/// Write `units.toml` (atomically): the factors that turn the lattice values of the exported
/// files into SI units (multiply: `ux [m/s] = ux * velocity`), and the scene's reference values
/// they come from. The other files stay in lattice units, so readers of them are unaffected.
///
/// # Errors
/// I/O errors.
pub fn write_units_toml(path: &Path, u: &Units) -> std::io::Result<()> {
    crate::atomic_file::write_atomic(path, |w| units_toml(w, u))
}

fn units_toml(w: &mut dyn Write, u: &Units) -> std::io::Result<()> {
    let r = &u.reference;
    let force = if u.dims == 2 { "N/m (per metre of depth: a 2D run)" } else { "N" };
    writeln!(w, "# What one lattice unit of the exported files stands for in SI units (the scene's [units]).")?;
    writeln!(w, "# Multiply a lattice value by its factor, e.g. ux [m/s] = ux * velocity.")?;
    for (key, v, what) in [
        ("dx", u.dx, "m per cell".to_string()),
        ("dt", u.dt, "s per step".into()),
        ("velocity", u.velocity(1.0), "m/s per cell/step".into()),
        ("density", u.density(1.0), "kg/m^3 per unit of lattice density".into()),
        ("pressure", u.pressure(1.0), "Pa per unit of lattice pressure c_s^2 (rho - 1)".into()),
        ("force", u.force(1.0), format!("{force} per unit of lattice force")),
        ("viscosity", u.viscosity(1.0), "m^2/s per cell^2/step".into()),
        ("vorticity", u.rate(1.0), "1/s per 1/step".into()),
    ] {
        writeln!(w, "{key} = {v:?}  # {what}")?;
    }
    writeln!(w, "dims = {}", u.dims)?;
    writeln!(w, "\n[reference]")?;
    for (key, v, what) in [
        ("length", r.length, "m spanned by `cells` cells"),
        ("cells", r.cells, "cells"),
        ("velocity", r.velocity, "m/s that `lattice_velocity` stands for"),
        ("lattice_velocity", r.lattice_velocity, "cells/step"),
        ("density", r.density, "kg/m^3 of the fluid at rest"),
        ("lattice_density", r.lattice_density, "its lattice density"),
    ] {
        writeln!(w, "{key} = {v:?}  # {what}")?;
    }
    Ok(())
}

/// The columns of stats.csv: [`STATS_CSV_HEADER`] (the force there is the total on all
/// obstacles), then for each obstacle `NAME.fx,NAME.fy,NAME.fz` and, where the scene gives
/// reference values, its drag and lift coefficients `NAME.cd,NAME.cl`. NAME is the obstacle's
/// name as a column name (see [`column_name`]).
#[derive(Clone, Debug, PartialEq)]
pub struct StatsColumns {
    names: Vec<String>,
    reference: ForceReference,
}

impl StatsColumns {
    /// The columns of a run with these obstacles (display names, in id order) and force
    /// reference.
    #[must_use]
    pub fn new(obstacles: &[String], reference: ForceReference) -> StatsColumns {
        let mut names: Vec<String> = Vec::with_capacity(obstacles.len());
        for (k, o) in obstacles.iter().enumerate() {
            let mut n = column_name(o);
            if n.is_empty() {
                n = format!("obstacle{k}");
            }
            // Two obstacles of one name get columns of their own: NAME, NAME_2, NAME_3, ...
            let base = n.clone();
            let mut i = 2;
            while names.contains(&n) {
                n = format!("{base}_{i}");
                i += 1;
            }
            names.push(n);
        }
        StatsColumns { names, reference }
    }
    /// The obstacles' names as they appear in the columns.
    #[must_use]
    pub fn names(&self) -> &[String] {
        &self.names
    }
    /// The header line.
    #[must_use]
    pub fn header(&self) -> String {
        let mut h = String::from(STATS_CSV_HEADER);
        let coefficients = self.reference.values.is_some();
        for n in &self.names {
            h.push_str(&format!(",{n}.fx,{n}.fy,{n}.fz"));
            if coefficients {
                h.push_str(&format!(",{n}.cd,{n}.cl"));
            }
        }
        h
    }
    fn row(&self, s: &Stats, mlups: f64) -> String {
        let f = s.total_force();
        let mut r = format!("{},{:.9e},{:.6e},{:.6e},{:.6e},{:.6e},{:.3}", s.step, s.mass, s.max_u, f[0], f[1], f[2], mlups);
        for k in 0..self.names.len() {
            let f = s.forces.get(k).copied().unwrap_or([f64::NAN; 3]);
            r.push_str(&format!(",{:.6e},{:.6e},{:.6e}", f[0], f[1], f[2]));
            if let Some([cd, cl]) = self.reference.coefficients(f) {
                r.push_str(&format!(",{cd:.6e},{cl:.6e}"));
            }
        }
        r
    }
}

/// Appends rows to stats.csv, one whole row per write (see [`crate::atomic_file::AppendLog`]).
pub struct StatsWriter {
    log: crate::atomic_file::AppendLog,
    columns: StatsColumns,
}

impl StatsWriter {
    /// Create (or replace) the file and write the header.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create(path: &Path, columns: &StatsColumns) -> std::io::Result<StatsWriter> {
        Ok(StatsWriter { log: crate::atomic_file::AppendLog::create(path, &columns.header())?, columns: columns.clone() })
    }
    /// Continue the file of a run resumed at `step`: its rows of earlier steps stay, later ones
    /// (and a partial last line) go, and new rows are appended. A missing file is created.
    /// Returns the writer and the number of rows kept.
    ///
    /// # Errors
    /// I/O errors, or a file whose columns are not these (another program's file, or a run
    /// with other obstacles or reference values), named in the message.
    pub fn resume(path: &Path, step: u64, columns: &StatsColumns) -> std::io::Result<(StatsWriter, usize)> {
        let header = columns.header();
        if let Ok(text) = std::fs::read_to_string(path) {
            let old = text.lines().next().unwrap_or("").trim_end();
            if old != header {
                let (ours, theirs): (Vec<&str>, Vec<&str>) = (header.split(',').collect(), old.split(',').collect());
                let missing: Vec<&str> = ours.iter().filter(|c| !theirs.contains(c)).copied().collect();
                let extra: Vec<&str> = theirs.iter().filter(|c| !ours.contains(c)).copied().collect();
                let differ = match (missing.is_empty(), extra.is_empty()) {
                    (true, true) => "its columns are in another order".to_string(),
                    (false, true) => format!("it lacks the columns {}", missing.join(",")),
                    (true, false) => format!("it has the columns {} that this run does not write", extra.join(",")),
                    (false, false) => format!("it has the columns {} where this run writes {}", extra.join(","), missing.join(",")),
                };
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "its columns differ from this run's: {differ} (another scene's obstacles or [forces], or another program, \
                         wrote it); move it away or export into another folder"
                    ),
                ));
            }
        }
        let before = |row: &str| row.split(',').next().and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s < step);
        let (log, kept) = crate::atomic_file::AppendLog::resume(path, &header, before)?;
        Ok((StatsWriter { log, columns: columns.clone() }, kept))
    }
    /// One row.
    ///
    /// # Errors
    /// I/O errors.
    pub fn row(&mut self, s: &Stats, mlups: f64) -> std::io::Result<()> {
        self.log.line(&self.columns.row(s, mlups))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::{ReferenceValues, SignedAxis};

    fn columns(names: &[&str], values: bool) -> StatsColumns {
        let values = values.then_some(ReferenceValues { length: 20.0, velocity: 0.05, area: None, density: 1.0 });
        let names: Vec<String> = names.iter().map(|s| (*s).to_string()).collect();
        StatsColumns::new(&names, ForceReference { drag: SignedAxis::X, lift: SignedAxis::Y, values })
    }

    fn stats(step: u64, forces: Vec<[f64; 3]>) -> Stats {
        Stats { step, mass: 1.0, max_u: 0.1, rho_range: [1.0; 2], forces, first_bad_cell: None }
    }

    #[test]
    fn per_obstacle_columns_have_csv_names_and_coefficients() {
        let c = columns(&["cylinder", "my box, big", "cylinder", "a.b"], true);
        assert_eq!(c.names(), ["cylinder", "my_box__big", "cylinder_2", "a_b"]);
        let c = columns(&["cylinder"], true);
        assert_eq!(c.header(), "step,mass,max_u,fx,fy,fz,mlups,cylinder.fx,cylinder.fy,cylinder.fz,cylinder.cd,cylinder.cl");
        // C = 2 F / (rho U^2 L) = F / 0.025.
        let row = c.row(&stats(7, vec![[0.05, -0.0025, 0.0]]), 1.5);
        let v: Vec<f64> = row.split(',').map(|x| x.parse().unwrap()).collect();
        assert_eq!(v.len(), 12);
        assert!((v[10] - 2.0).abs() < 1e-9 && (v[11] + 0.1).abs() < 1e-9, "{row}");
        assert_eq!(columns(&["cylinder"], false).header(), "step,mass,max_u,fx,fy,fz,mlups,cylinder.fx,cylinder.fy,cylinder.fz");
        assert_eq!(columns(&[], true).header(), STATS_CSV_HEADER);
    }

    #[test]
    fn units_toml_holds_the_factors_and_parses() {
        use crate::units::Reference;
        let r = Reference { length: 0.1, cells: 20.0, velocity: 0.5, lattice_velocity: 0.1, density: 1.2, lattice_density: 1.0 };
        let u = Units::new(r, 2).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("units.toml");
        write_units_toml(&p, &u).unwrap();
        let t: toml::Table = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let f = |k: &str| t[k].as_float().unwrap();
        assert_eq!((f("dx"), f("dt"), f("velocity")), (u.dx, u.dt, u.velocity(1.0)));
        assert!((f("force") - 1.2 * 1.25e-7 / 1e-6).abs() < 1e-12, "{t:?}");
        assert_eq!(t["dims"].as_integer(), Some(2));
        assert_eq!(t["reference"]["length"].as_float(), Some(0.1));
    }

    #[test]
    fn a_resume_keeps_its_header_and_refuses_other_columns() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stats.csv");
        let c = columns(&["cylinder"], true);
        let mut w = StatsWriter::create(&p, &c).unwrap();
        for s in [0, 10, 20] {
            w.row(&stats(s, vec![[0.05, 0.0, 0.0]]), 0.0).unwrap();
        }
        drop(w);
        let (mut w, kept) = StatsWriter::resume(&p, 15, &c).unwrap();
        assert_eq!(kept, 2);
        w.row(&stats(15, vec![[0.05, 0.0, 0.0]]), 0.0).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.starts_with(&format!("{}\n0,", c.header())), "{text}");
        // Without reference values the coefficient columns are missing: refused, and the file
        // is left as it was.
        let e = StatsWriter::resume(&p, 15, &columns(&["cylinder"], false)).err().unwrap().to_string();
        assert!(e.contains("columns differ") && e.contains("cylinder.cd,cylinder.cl") && e.contains("move it away"), "{e}");
        let e = StatsWriter::resume(&p, 15, &columns(&["sphere"], true)).err().unwrap().to_string();
        assert!(e.contains("cylinder.fx") && e.contains("sphere.fx"), "{e}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), text);
    }
}
