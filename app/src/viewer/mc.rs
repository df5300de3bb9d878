//! The marching-cubes case table, generated from the cube's geometry instead of typed in, and
//! packed for `shaders/marching_cubes.wgsl`.
//!
//! Numbering (keep in sync with the shader): corner `c` of a cube is at offset
//! `(c & 1, (c >> 1) & 1, (c >> 2) & 1)`; edge `axis * 4 + k` runs along `axis` from the corner
//! with bit `(axis + 1) % 3` = `k & 1` and bit `(axis + 2) % 3` = `k >> 1` (others 0). A case is
//! the 8-bit mask of the corners inside the surface (value above the threshold).
//!
//! How the table is made: on each face of the cube, the crossings (edges whose two corners
//! differ) are joined by segments that cut off the face's inside corners; where a face has two
//! inside corners on a diagonal (the ambiguous face), each inside corner is cut off on its own.
//! The choice depends on the face's four corners only, so the two cubes that share a face join
//! its crossings the same way and the surface has no cracks. The segments of the six faces close
//! into loops (every crossing has one segment entering and one leaving), and each loop becomes a
//! fan of triangles.

/// Most triangles of any case (asserted when the table is built; the packing has room for 10).
pub const MAX_TRIANGLES: usize = 5;

/// Corners of a cube: the two ends of an edge.
#[must_use]
pub fn edge_corners(e: usize) -> (usize, usize) {
    let axis = e / 4;
    let k = e % 4;
    let a = ((k & 1) << ((axis + 1) % 3)) | ((k >> 1) << ((axis + 2) % 3));
    (a, a | (1 << axis))
}

fn edge_between(c1: usize, c2: usize) -> usize {
    let d = c1 ^ c2;
    debug_assert!(d.count_ones() == 1);
    let axis = d.trailing_zeros() as usize;
    let base = c1 & c2;
    axis * 4 + ((base >> ((axis + 1) % 3)) & 1) + 2 * ((base >> ((axis + 2) % 3)) & 1)
}

/// Whether two edges lie in one face of the cube.
fn same_face(e1: usize, e2: usize) -> bool {
    let (a1, b1) = edge_corners(e1);
    let (a2, b2) = edge_corners(e2);
    (0..3).any(|axis| {
        let bit = |c: usize| (c >> axis) & 1;
        bit(a1) == bit(b1) && bit(b1) == bit(a2) && bit(a2) == bit(b2)
    })
}

/// The triangles of a case, as triples of edges.
#[must_use]
pub fn case_triangles(case: u8) -> Vec<[usize; 3]> {
    let inside = |c: usize| case >> c & 1 == 1;
    // next[e] = the crossing that follows crossing e along its loop.
    let mut next = [usize::MAX; 12];
    for axis in 0..3 {
        let (u, v) = ((axis + 1) % 3, (axis + 2) % 3);
        for side in 0..2 {
            // The face's corners counter-clockwise seen from outside the cube.
            let mut cyc: Vec<usize> = [(0, 0), (1, 0), (1, 1), (0, 1)].iter().map(|&(a, b)| (side << axis) | (a << u) | (b << v)).collect();
            if side == 0 {
                cyc.reverse();
            }
            for k in 0..4 {
                let prev = cyc[(k + 3) % 4];
                if !inside(cyc[k]) || inside(prev) {
                    continue;
                }
                // A run of inside corners starts at k; find where it ends.
                let mut j = k;
                while inside(cyc[(j + 1) % 4]) {
                    j = (j + 1) % 4;
                }
                let from = edge_between(prev, cyc[k]);
                let to = edge_between(cyc[j], cyc[(j + 1) % 4]);
                debug_assert_eq!(next[from], usize::MAX, "case {case}: edge {from} leaves twice");
                next[from] = to;
            }
        }
    }
    let mut used = [false; 12];
    let mut tris = Vec::new();
    for start in 0..12 {
        if next[start] == usize::MAX || used[start] {
            continue;
        }
        let mut lp = vec![start];
        used[start] = true;
        let mut e = next[start];
        while e != start {
            used[e] = true;
            lp.push(e);
            e = next[e];
        }
        // A fan from the loop's first crossing; start where no diagonal of the fan lies in a
        // face of the cube (two crossings of one face not joined by that face's segment), or the
        // neighbouring cube's surface would touch this one along it.
        let len = lp.len();
        let r = (0..len).find(|&r| (2..len - 1).all(|i| !same_face(lp[r], lp[(r + i) % len]))).unwrap_or(0);
        lp.rotate_left(r);
        for i in 1..len - 1 {
            tris.push([lp[0], lp[i], lp[i + 1]]);
        }
    }
    tris
}

/// The table as the shader reads it: per case four words of eight 4-bit entries; entry 0 is the
/// number of triangles, entries 1.. the edges of the triangles, three per triangle.
#[must_use]
pub fn packed_table() -> Vec<[u32; 4]> {
    (0..=255u8)
        .map(|case| {
            let tris = case_triangles(case);
            assert!(tris.len() <= MAX_TRIANGLES, "case {case}: {} triangles", tris.len());
            let mut nibbles = vec![tris.len() as u32];
            nibbles.extend(tris.iter().flatten().map(|&e| e as u32));
            let mut w = [0u32; 4];
            for (i, x) in nibbles.iter().enumerate() {
                w[i / 8] |= x << (4 * (i % 8));
            }
            w
        })
        .collect()
}

/// A vertex of [`triangles_cpu`]: its position and the grid edge it lies on (the cell at the
/// edge's lower end and the edge's axis).
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub struct CpuVertex {
    /// Position (world space: cell `x` fills `[x, x + 1]`).
    pub pos: [f32; 3],
    /// Grid edge.
    pub edge: ([usize; 3], usize),
}

/// Marching cubes on the CPU with the same table and the same rules as the shader (samples at
/// cell centres, inside = above the threshold, cubes with a non-finite corner skipped): the
/// reference the GPU's output is tested against.
#[cfg(test)]
#[must_use]
pub fn triangles_cpu(values: &[f32], n: [usize; 3], threshold: f32) -> Vec<[CpuVertex; 3]> {
    let at = |p: [usize; 3]| values[p[0] + n[0] * (p[1] + n[1] * p[2])];
    let mut out = Vec::new();
    if n.iter().any(|&k| k < 2) {
        return out;
    }
    for z in 0..n[2] - 1 {
        for y in 0..n[1] - 1 {
            for x in 0..n[0] - 1 {
                let corner = |c: usize| [x + (c & 1), y + ((c >> 1) & 1), z + ((c >> 2) & 1)];
                let v: Vec<f32> = (0..8).map(|c| at(corner(c))).collect();
                if v.iter().any(|s| !s.is_finite()) {
                    continue;
                }
                let case = (0..8).fold(0u8, |m, c| m | (u8::from(v[c] > threshold) << c));
                for t in case_triangles(case) {
                    out.push(t.map(|e| {
                        let (a, b) = edge_corners(e);
                        let d = v[b] - v[a];
                        let s = if d.abs() > 0.0 { ((threshold - v[a]) / d).clamp(0.0, 1.0) } else { 0.5 };
                        let (pa, pb) = (corner(a), corner(b));
                        CpuVertex { pos: [0, 1, 2].map(|k| pa[k] as f32 + 0.5 + s * (pb[k] as f32 - pa[k] as f32)), edge: (pa, e / 4) }
                    }));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn every_case_cuts_exactly_the_crossing_edges() {
        let mut most = 0;
        for case in 0..=255u8 {
            let tris = case_triangles(case);
            most = most.max(tris.len());
            let mut used = [false; 12];
            for t in &tris {
                assert!(t[0] != t[1] && t[1] != t[2] && t[0] != t[2], "case {case}: degenerate {t:?}");
                for &e in t {
                    used[e] = true;
                }
            }
            for e in 0..12 {
                let (a, b) = edge_corners(e);
                let crosses = (case >> a & 1) != (case >> b & 1);
                assert_eq!(used[e], crosses, "case {case}, edge {e}");
            }
            // Complementary cases cut the same edges; the empty and full cubes have nothing.
            if case == 0 || case == 255 {
                assert!(tris.is_empty());
            }
        }
        assert_eq!(most, MAX_TRIANGLES);
        let t = packed_table();
        assert_eq!(t.len(), 256);
        assert_eq!(t[1][0] & 15, 1, "one corner: one triangle");
        assert_eq!(t[0b0000_1111][0] & 15, 2, "a face's four corners: a quad");
    }

    #[test]
    fn random_fields_give_closed_consistently_oriented_surfaces() {
        // Random values inside an 8^3 box whose boundary samples are all outside: the surface is
        // closed, so every triangle edge is shared by exactly two triangles, once each way.
        let n = [8, 8, 8];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for round in 0..20 {
            let values: Vec<f32> = (0..512)
                .map(|i| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let p = [i % 8, (i / 8) % 8, i / 64];
                    if p.iter().any(|&k| k == 0 || k == 7) {
                        -1.0
                    } else {
                        // Never exactly the threshold (a vertex on a corner is shared by edges).
                        ((seed >> 40) as f32 + 0.5) / (1u64 << 24) as f32 - 0.5
                    }
                })
                .collect();
            let tris = triangles_cpu(&values, n, 0.0);
            assert!(!tris.is_empty(), "round {round}");
            let mut edges: HashMap<_, i32> = HashMap::new();
            for t in &tris {
                for k in 0..3 {
                    *edges.entry((t[k].edge, t[(k + 1) % 3].edge)).or_default() += 1;
                }
            }
            for (&(a, b), &c) in &edges {
                let back = edges.get(&(b, a)).copied().unwrap_or(0);
                assert!(c == 1 && back == 1, "round {round}: edge {a:?}->{b:?} used {c} times, back {back}");
            }
        }
    }

    #[test]
    fn triangles_face_away_from_the_inside() {
        // A ball of high values: the triangles' right-hand normals point outwards (away from the
        // centre), the side toward lower values.
        let n = [12, 12, 12];
        let c = 5.5f32;
        let values: Vec<f32> = (0..n[0] * n[1] * n[2])
            .map(|i| {
                let p = [(i % 12) as f32, ((i / 12) % 12) as f32, (i / 144) as f32];
                4.0 - ((p[0] - c).powi(2) + (p[1] - c).powi(2) + (p[2] - c).powi(2)).sqrt()
            })
            .collect();
        let tris = triangles_cpu(&values, n, 0.0);
        assert!(tris.len() > 50);
        let mut out = 0;
        for t in &tris {
            let t = t.map(|v| v.pos);
            let u = [0, 1, 2].map(|k| t[1][k] - t[0][k]);
            let v = [0, 1, 2].map(|k| t[2][k] - t[0][k]);
            let nrm = [u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]];
            let mid = [0, 1, 2].map(|k| (t[0][k] + t[1][k] + t[2][k]) / 3.0 - (c + 0.5));
            if nrm[0] * mid[0] + nrm[1] * mid[1] + nrm[2] * mid[2] > 0.0 {
                out += 1;
            }
        }
        assert_eq!(out, tris.len(), "every triangle faces outwards");
    }
}
