//! Compressed subgrids on the GPU against the dense solvers.

use super::*;

/// The working box's initial state holds, for the subgrid's own cells, exactly the slots
/// the dense solver starts with (walls, a sphere and an inlet around it).
#[test]
fn initial_boxes_match_the_dense_solver() {
    let text = r#"
[domain]
size = [20, 12, 10]
lattice = "D3Q19"
[fluid]
viscosity = 0.05
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0, 0.0], profile = "parabolic" }
x_max = { type = "outlet" }
y_min = "wall"
y_max = "wall"
[[obstacles]]
shape = "sphere"
center = [7.0, 6.0, 5.0]
radius = 2.5
"#;
    let ls = crate::scene::from_str(text, "t.toml", std::path::PathBuf::from("."), &[]).expect("scene");
    let dom = Domain::from_scene(&ls).expect("domain");
    let init = |p| crate::domain::initial_state(&ls, p);
    let dense = CpuSolver::<D3Q19, f32>::new(dom.clone(), Scheme::EsotericPull, crate::solver::Params::from_scene(&ls, &dom), 16, init);
    let (_, _, state) = dense.into_parts();
    let nn = dom.cells();
    for (origin, size) in [([0, 0, 0], [7, 5, 4]), ([13, 7, 6], [7, 5, 4]), ([5, 3, 2], [9, 6, 5])] {
        let bn = size.map(|s| s + 2);
        let mut out = vec![0.0f32; 19 * vol(bn)];
        initial_box(&dom, origin, bn, &init, &mut out);
        for z in 0..size[2] {
            for y in 0..size[1] {
                for x in 0..size[0] {
                    let g = dom.index(origin[0] + x, origin[1] + y, origin[2] + z);
                    let b = (x + 1) + bn[0] * ((y + 1) + bn[1] * (z + 1));
                    for i in 0..19 {
                        assert_eq!(out[i * vol(bn) + b].to_bits(), state[i * nn + g].to_bits(), "slot {i} of cell {g} (box {origin:?})");
                    }
                }
            }
        }
    }
}
