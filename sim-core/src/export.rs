//! Output files of `esoflow run --export DIR`: `fields.csv`, `fields.vti` (VTK XML image data,
//! for ParaView) and `stats.csv`.

use crate::fields;
use crate::solver::{Fields, Stats};
use std::io::Write;
use std::path::Path;

/// Header of fields.csv (a contract other tools script against).
pub const FIELDS_CSV_HEADER: &str = "x,y,z,rho,ux,uy,uz";
/// Header of stats.csv (a contract other tools script against).
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
    use vtkio::model::{
        Attribute, Attributes, ByteOrder, DataArray, DataSet, ElementType, Extent, IOBuffer, ImageDataPiece, Piece, Version, Vtk,
    };
    let n = f.size;
    let flat3 = |v: &[[f32; 3]]| v.iter().flat_map(|a| a.iter().copied()).collect::<Vec<f32>>();
    let arr = |name: &str, comps: u32, data: Vec<f32>| {
        Attribute::DataArray(DataArray {
            name: name.into(),
            elem: if comps == 1 { ElementType::Scalars { num_comp: 1, lookup_table: None } } else { ElementType::Vectors },
            data: IOBuffer::F32(data),
        })
    };
    let vort = fields::vorticity(f);
    let q = fields::q_criterion(f);
    let solid: Vec<f32> = f.solid.iter().map(|&s| if s { 1.0 } else { 0.0 }).collect();
    let ext = Extent::Ranges([0..=(n[0] as i32 - 1), 0..=(n[1] as i32 - 1), 0..=(n[2] as i32 - 1)]);
    let vtk = Vtk {
        version: Version::new((1, 0)),
        byte_order: ByteOrder::LittleEndian,
        title: "Esoflow fields".into(),
        file_path: None,
        data: DataSet::ImageData {
            extent: ext.clone(),
            origin: [0.0; 3],
            spacing: [1.0; 3],
            meta: None,
            pieces: vec![Piece::Inline(Box::new(ImageDataPiece {
                extent: ext,
                data: Attributes {
                    point: vec![
                        arr("rho", 1, f.rho.clone()),
                        arr("velocity", 3, flat3(&f.u)),
                        arr("vorticity", 3, flat3(&vort)),
                        arr("Q", 1, q),
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

/// Appends rows to stats.csv, one whole row per write (see [`crate::atomic_file::AppendLog`]).
pub struct StatsWriter {
    log: crate::atomic_file::AppendLog,
}

impl StatsWriter {
    /// Create (or replace) the file and write the header.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create(path: &Path) -> std::io::Result<StatsWriter> {
        Ok(StatsWriter { log: crate::atomic_file::AppendLog::create(path, STATS_CSV_HEADER)? })
    }
    /// Continue the file of a run resumed at `step`: its rows of earlier steps stay, later ones
    /// (and a partial last line) go, and new rows are appended. A missing file is created.
    /// Returns the writer and the number of rows kept.
    ///
    /// # Errors
    /// I/O errors, or a file that is not an Esoflow stats.csv.
    pub fn resume(path: &Path, step: u64) -> std::io::Result<(StatsWriter, usize)> {
        let before = |row: &str| row.split(',').next().and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s < step);
        let (log, kept) = crate::atomic_file::AppendLog::resume(path, STATS_CSV_HEADER, before)?;
        Ok((StatsWriter { log }, kept))
    }
    /// One row.
    ///
    /// # Errors
    /// I/O errors.
    pub fn row(&mut self, s: &Stats, mlups: f64) -> std::io::Result<()> {
        let f = s.total_force();
        self.log.line(&format!("{},{:.9e},{:.6e},{:.6e},{:.6e},{:.6e},{:.3}", s.step, s.mass, s.max_u, f[0], f[1], f[2], mlups))
    }
}
