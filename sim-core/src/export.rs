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

/// Write one row per fluid cell: cell indices and lattice units.
///
/// # Errors
/// I/O errors.
pub fn write_fields_csv(path: &Path, f: &Fields) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
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
    w.flush()
}

/// Write VTK image data with point arrays rho, velocity, vorticity, Q and solid.
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
    vtk.export(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Appends rows to stats.csv.
pub struct StatsWriter {
    w: std::io::BufWriter<std::fs::File>,
}

impl StatsWriter {
    /// Create the file and write the header.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create(path: &Path) -> std::io::Result<StatsWriter> {
        let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(w, "{STATS_CSV_HEADER}")?;
        Ok(StatsWriter { w })
    }
    /// One row.
    ///
    /// # Errors
    /// I/O errors.
    pub fn row(&mut self, s: &Stats, mlups: f64) -> std::io::Result<()> {
        let f = s.total_force();
        writeln!(self.w, "{},{:.9e},{:.6e},{:.6e},{:.6e},{:.6e},{:.3}", s.step, s.mass, s.max_u, f[0], f[1], f[2], mlups)?;
        self.w.flush()
    }
}
