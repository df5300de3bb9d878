//! Obstacle shapes to cell masks. A cell is solid when its centre lies inside the shape.

use super::{Obstacle, Vec3};
use rayon::prelude::*;
use std::path::Path;

/// Mask of the cells inside an obstacle (index `x + nx * (y + ny * z)`).
///
/// # Errors
/// A message for an unreadable or empty STL file.
pub fn voxelise(o: &Obstacle, n: [usize; 3], dims: usize, base: &Path) -> Result<Vec<bool>, String> {
    let mut m = vec![false; n[0] * n[1] * n[2]];
    // Analytic shapes: a test of the cell centre, plane by plane in parallel.
    let fill = |m: &mut [bool], inside: &(dyn Fn([f32; 3]) -> bool + Sync)| {
        m.par_chunks_mut(n[0] * n[1]).enumerate().for_each(|(z, plane)| {
            for y in 0..n[1] {
                for x in 0..n[0] {
                    plane[x + n[0] * y] = inside([x as f32, y as f32, z as f32]);
                }
            }
        });
    };
    match o {
        Obstacle::Box { min, max, .. } => {
            let (lo, hi) = (min.0, max.0);
            fill(&mut m, &|p| (0..dims).all(|a| p[a] >= lo[a] && p[a] <= hi[a]));
        }
        Obstacle::Sphere { center, radius, .. } => {
            let c = center.0;
            fill(&mut m, &|p| (0..dims).map(|a| (p[a] - c[a]).powi(2)).sum::<f32>() <= radius * radius);
        }
        Obstacle::Cylinder { center, radius, axis, length, .. } => {
            let c = center.0;
            let ax = if dims == 2 { 2 } else { axis.index() };
            fill(&mut m, &|p| {
                let d2: f32 = (0..dims).filter(|&a| a != ax).map(|a| (p[a] - c[a]).powi(2)).sum();
                let along = if ax < dims { (p[ax] - c[ax]).abs() } else { 0.0 };
                d2 <= radius * radius && length.is_none_or(|l| along <= 0.5 * l)
            });
        }
        Obstacle::Stl { file, center, size, .. } => {
            let path = base.join(file);
            let tris = read_stl(&path)?;
            voxelise_mesh(&tris, *center, *size, n, dims, &mut m)?;
        }
    }
    Ok(m)
}

/// Read an STL file (binary or ASCII) into triangles.
///
/// # Errors
/// A message naming the file.
pub fn read_stl(path: &Path) -> Result<Vec<[[f32; 3]; 3]>, String> {
    let bytes = crate::input::read_capped(path, crate::input::STL_CAP, "an STL file")?;
    let unreadable = |e: std::io::Error| format!("{} is not a readable STL file (binary or ASCII): {e}", path.display());
    let mut cursor = std::io::Cursor::new(bytes);
    let reader = stl_io::create_stl_reader(&mut cursor).map_err(unreadable)?;
    let mut tris = Vec::new();
    for (i, t) in reader.enumerate() {
        let t =
            t.map_err(|e| format!("{} is not a readable STL file (binary or ASCII): triangle {i} (counting from 0): {e}", path.display()))?;
        let mut tri = [[0.0f32; 3]; 3];
        for (k, v) in tri.iter_mut().enumerate() {
            let p = t.vertices[k];
            *v = [p[0], p[1], p[2]];
            // A NaN or infinite coordinate would make the mesh's bounding box, and with it the
            // obstacle's place and size, meaningless.
            if let Some(bad) = v.iter().find(|c| !c.is_finite()) {
                return Err(format!(
                    "{}: triangle {i} (counting from 0), vertex {k} has the coordinate {bad}; every coordinate must be a finite number",
                    path.display()
                ));
            }
        }
        tris.push(tri);
    }
    if tris.is_empty() {
        return Err(format!("{} has no triangles", path.display()));
    }
    Ok(tris)
}

/// Cells (linear indices) inside an STL mesh placed in a domain of `n` cells: the centre of its
/// bounding box at `center`, its longest edge `size` cells (the rule of `shape = "stl"`).
///
/// # Errors
/// An unreadable, damaged or empty file, a bad size, or a mesh that covers no cell centre.
pub fn stl_cells(path: &Path, n: [usize; 3], dims: usize, center: [f32; 3], size: f32) -> Result<Vec<usize>, String> {
    if !(size > 0.0 && size.is_finite() && center.iter().all(|c| c.is_finite())) {
        return Err(format!("the STL size must be a positive number of cells, got {size}"));
    }
    let tris = read_stl(path)?;
    let mut m = vec![false; n[0] * n[1] * n[2]];
    voxelise_mesh(&tris, Vec3(center), size, n, dims, &mut m).map_err(|e| format!("{}: {e}", path.display()))?;
    let cells: Vec<usize> = m.iter().enumerate().filter(|(_, b)| **b).map(|(i, _)| i).collect();
    if cells.is_empty() {
        return Err(format!(
            "{}: placed at {center:?} with size {size} the mesh covers no cell centre (is it a closed surface? make it larger)",
            path.display()
        ));
    }
    Ok(cells)
}

/// The triangles of a mesh in cell coordinates: its bounding box scaled so that the longest edge
/// is `size` cells and centred on `center` (the rule of `shape = "stl"`).
///
/// # Errors
/// A mesh of zero extent.
pub fn place_mesh(tris: &[[[f32; 3]; 3]], center: [f32; 3], size: f32) -> Result<Vec<[[f64; 3]; 3]>, String> {
    let mut lo = [f32::MAX; 3];
    let mut hi = [f32::MIN; 3];
    for t in tris {
        for v in t {
            for a in 0..3 {
                lo[a] = lo[a].min(v[a]);
                hi[a] = hi[a].max(v[a]);
            }
        }
    }
    let ext = (0..3).map(|a| hi[a] - lo[a]).fold(0.0f32, f32::max);
    if !(ext > 0.0) {
        return Err("the STL mesh has zero extent".into());
    }
    let s = size / ext;
    let mid = [(lo[0] + hi[0]) * 0.5, (lo[1] + hi[1]) * 0.5, (lo[2] + hi[2]) * 0.5];
    let map = |v: [f32; 3]| -> [f64; 3] { std::array::from_fn(|a| f64::from((v[a] - mid[a]) * s + center[a])) };
    Ok(tris.iter().map(|t| [map(t[0]), map(t[1]), map(t[2])]).collect())
}

/// Voxelise a closed triangle mesh by ray parity along x, after scaling its bounding box so its
/// longest edge is `size` cells and centring it on `center`.
fn voxelise_mesh(tris: &[[[f32; 3]; 3]], center: Vec3, size: f32, n: [usize; 3], dims: usize, m: &mut [bool]) -> Result<(), String> {
    let placed = place_mesh(tris, center.0, size)?;
    // In 2D the mesh is sliced at z = center.z: use the 3D parity test on the plane z = centre.
    let zs: Vec<usize> = if dims == 2 { vec![0] } else { (0..n[2]).collect() };
    let mut hits: Vec<Vec<f64>> = vec![Vec::new(); n[1] * zs.len()];
    for p in &placed {
        let (ymin, ymax) = (p.iter().map(|v| v[1]).fold(f64::MAX, f64::min), p.iter().map(|v| v[1]).fold(f64::MIN, f64::max));
        let (zmin, zmax) = (p.iter().map(|v| v[2]).fold(f64::MAX, f64::min), p.iter().map(|v| v[2]).fold(f64::MIN, f64::max));
        let y0 = ymin.ceil().max(0.0) as usize;
        let y1 = (ymax.floor().min(n[1] as f64 - 1.0)).max(-1.0);
        if y1 < 0.0 {
            continue;
        }
        for y in y0..=(y1 as usize) {
            for (zi, &z) in zs.iter().enumerate() {
                let zc = if dims == 2 { f64::from(center.0[2]) } else { z as f64 };
                if zc < zmin || zc > zmax {
                    continue;
                }
                if let Some(x) = ray_x(p, y as f64, zc) {
                    hits[y + n[1] * zi].push(x);
                }
            }
        }
    }
    for (zi, &z) in zs.iter().enumerate() {
        for y in 0..n[1] {
            let h = &mut hits[y + n[1] * zi];
            h.sort_by(f64::total_cmp);
            for pair in h.chunks_exact(2) {
                let x0 = pair[0].ceil().max(0.0) as usize;
                let x1 = pair[1].floor().min(n[0] as f64 - 1.0);
                if x1 < 0.0 {
                    continue;
                }
                for x in x0..=(x1 as usize) {
                    m[x + n[0] * (y + n[1] * z)] = true;
                }
            }
        }
    }
    Ok(())
}

/// x where the line {(x, y, z)} crosses triangle p, if it does. Half-open edge rules keep a
/// ray through a shared edge or vertex from counting twice.
fn ray_x(p: &[[f64; 3]; 3], y: f64, z: f64) -> Option<f64> {
    // 2D edge functions in the (y, z) plane.
    let e = |a: [f64; 3], b: [f64; 3]| (b[1] - a[1]) * (z - a[2]) - (b[2] - a[2]) * (y - a[1]);
    let w0 = e(p[1], p[2]);
    let w1 = e(p[2], p[0]);
    let w2 = e(p[0], p[1]);
    let top_left = |a: [f64; 3], b: [f64; 3]| {
        let (dy, dz) = (b[1] - a[1], b[2] - a[2]);
        dz > 0.0 || (dz == 0.0 && dy < 0.0)
    };
    let inside = |w: f64, a, b| w > 0.0 || (w == 0.0 && top_left(a, b));
    let inside_neg = |w: f64, a, b| w < 0.0 || (w == 0.0 && !top_left(a, b));
    let pos = inside(w0, p[1], p[2]) && inside(w1, p[2], p[0]) && inside(w2, p[0], p[1]);
    let neg = inside_neg(w0, p[1], p[2]) && inside_neg(w1, p[2], p[0]) && inside_neg(w2, p[0], p[1]);
    if !(pos || neg) {
        return None;
    }
    let sum = w0 + w1 + w2;
    if sum == 0.0 {
        return None;
    }
    Some((w0 * p[0][0] + w1 * p[1][0] + w2 * p[2][0]) / sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A closed cube mesh from -1 to 1, 12 triangles.
    fn cube() -> Vec<[[f32; 3]; 3]> {
        let v = |i: usize| -> [f32; 3] {
            [if i & 1 != 0 { 1.0 } else { -1.0 }, if i & 2 != 0 { 1.0 } else { -1.0 }, if i & 4 != 0 { 1.0 } else { -1.0 }]
        };
        let quads = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]];
        let mut t = Vec::new();
        for q in quads {
            t.push([v(q[0]), v(q[1]), v(q[2])]);
            t.push([v(q[0]), v(q[2]), v(q[3])]);
        }
        t
    }

    #[test]
    fn cube_mesh_voxelises_to_the_expected_cell_count() {
        let n = [20, 20, 20];
        let mut m = vec![false; 8000];
        voxelise_mesh(&cube(), Vec3([10.0, 10.0, 10.0]), 9.0, n, 3, &mut m).unwrap();
        // Cube from 5.5 to 14.5 -> cells 6..=14 on each axis: 9^3.
        assert_eq!(m.iter().filter(|&&b| b).count(), 729);
    }

    #[test]
    fn damaged_or_empty_stl_files_give_messages() {
        let dir = std::env::temp_dir().join(format!("esoflow-stl-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut truncated = vec![0u8; 80];
        truncated.extend_from_slice(&5u32.to_le_bytes());
        truncated.extend_from_slice(&[1u8; 30]);
        for (name, bytes) in [
            ("empty.stl", Vec::new()),
            ("garbage.stl", (0..997u32).map(|i| (i * 31 % 251) as u8).collect()),
            ("noface.stl", b"solid x\nendsolid x\n".to_vec()),
            ("truncated.stl", truncated),
            ("half.stl", b"solid x\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\nvertex 1".to_vec()),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            let e = stl_cells(&p, [10, 10, 10], 3, [5.0; 3], 4.0).expect_err(name);
            assert!(e.contains(name), "{name}: {e}");
        }
        let e = stl_cells(&dir.join("missing.stl"), [10, 10, 10], 3, [5.0; 3], 4.0).unwrap_err();
        assert!(e.contains("cannot open"), "{e}");
    }

    #[test]
    fn a_vertex_that_is_not_a_finite_number_is_named() {
        let dir = tempfile::tempdir().unwrap();
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut tris: Vec<stl_io::Triangle> = cube()
                .iter()
                .map(|t| stl_io::Triangle {
                    normal: stl_io::Normal::new([0.0, 0.0, 0.0]),
                    vertices: [stl_io::Vertex::new(t[0]), stl_io::Vertex::new(t[1]), stl_io::Vertex::new(t[2])],
                })
                .collect();
            tris[7].vertices[2] = stl_io::Vertex::new([0.5, bad, 0.5]);
            let p = dir.path().join("bad.stl");
            let mut f = std::fs::File::create(&p).unwrap();
            stl_io::write_stl(&mut f, tris.iter()).unwrap();
            drop(f);
            let e = stl_cells(&p, [10, 10, 10], 3, [5.0; 3], 4.0).unwrap_err();
            assert!(e.contains("bad.stl") && e.contains("triangle 7") && e.contains(&format!("coordinate {bad}")), "{e}");
            // The same in ASCII.
            let mut ascii = String::from("solid c\n");
            for (i, t) in cube().iter().enumerate() {
                ascii.push_str("facet normal 0 0 0\nouter loop\n");
                for (k, v) in t.iter().enumerate() {
                    let y = if (i, k) == (3, 1) { format!("{bad}") } else { v[1].to_string() };
                    ascii.push_str(&format!("vertex {} {y} {}\n", v[0], v[2]));
                }
                ascii.push_str("endloop\nendfacet\n");
            }
            ascii.push_str("endsolid c\n");
            std::fs::write(&p, ascii).unwrap();
            let e = read_stl(&p).unwrap_err();
            assert!(e.contains("bad.stl") && e.contains("triangle 3 (counting from 0)") && e.contains("finite"), "{e}");
        }
        if Path::new("/dev/zero").exists() {
            let e = read_stl(Path::new("/dev/zero")).unwrap_err();
            assert!(e.contains("/dev/zero"), "{e}");
        }
    }

    #[test]
    fn ascii_and_binary_stl_read_the_same() {
        let dir = std::env::temp_dir().join(format!("esoflow-stl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tris = cube();
        let mut ascii = String::from("solid c\n");
        for t in &tris {
            ascii.push_str("facet normal 0 0 0\nouter loop\n");
            for v in t {
                ascii.push_str(&format!("vertex {} {} {}\n", v[0], v[1], v[2]));
            }
            ascii.push_str("endloop\nendfacet\n");
        }
        ascii.push_str("endsolid c\n");
        std::fs::write(dir.join("a.stl"), ascii).unwrap();
        let mesh: Vec<stl_io::Triangle> = tris
            .iter()
            .map(|t| stl_io::Triangle {
                normal: stl_io::Normal::new([0.0, 0.0, 0.0]),
                vertices: [stl_io::Vertex::new(t[0]), stl_io::Vertex::new(t[1]), stl_io::Vertex::new(t[2])],
            })
            .collect();
        let mut f = std::fs::File::create(dir.join("b.stl")).unwrap();
        stl_io::write_stl(&mut f, mesh.iter()).unwrap();
        drop(f);
        let a = read_stl(&dir.join("a.stl")).unwrap();
        let b = read_stl(&dir.join("b.stl")).unwrap();
        assert_eq!(a.len(), 12);
        assert_eq!(b.len(), 12);
        assert!(read_stl(&dir.join("missing.stl")).unwrap_err().contains("missing.stl"));
    }
}
