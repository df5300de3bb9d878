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

/// The room at the ring's tail never reaches a word of a record, whichever way the records
/// lie: a record compressed there in place cannot overwrite one still to be read.
#[test]
fn tail_room_stays_clear_of_the_records() {
    for cap in [1u64, 2, 7, 64] {
        for tail in 0..cap {
            for used in 0..=cap {
                let room = tail_room(cap, tail, used);
                let head = (tail + cap - used) % cap;
                let live = |w: u64| used > 0 && (w + cap - head) % cap < used;
                assert!(tail + room <= cap, "cap {cap} tail {tail} used {used}: room {room} runs past the end");
                for w in tail..tail + room {
                    assert!(!live(w), "cap {cap} tail {tail} used {used}: word {w} of the room holds a record");
                }
                // All of the free words up to the end or the oldest record.
                let free_ahead = (tail..cap).take_while(|&w| !live(w)).count() as u64;
                assert_eq!(room, free_ahead, "cap {cap} tail {tail} used {used}");
            }
        }
    }
}
