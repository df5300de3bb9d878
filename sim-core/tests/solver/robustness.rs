//! Checkpoints resume bit-exactly (for every scheme, and across schemes), damaged ones are
//! refused, and a blow-up is reported with the first bad cell.

use crate::common::*;
use sim_core::schemes::Scheme;

const SCENE: &str = r#"
[domain]
size = [40, 22]
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0], profile = "parabolic" }
x_max = "outlet"
y_min = "wall"
y_max = { type = "moving_wall", velocity = [0.03, 0.0] }
[fluid]
tau = 0.6
[[obstacles]]
shape = "cylinder"
center = [12, 10]
radius = 3.5
"#;

#[test]
fn checkpoints_resume_bit_exactly_for_every_scheme_and_precision() {
    for s in Scheme::ALL {
        for p in ["fp32", "fp16s", "fp16c"] {
            let ov = [("solver.scheme", s.name()), ("solver.precision", p), ("solver.ghost_block", "8")];
            let mut straight = solver(SCENE, &ov);
            straight.step(301).unwrap();
            let mut first = solver(SCENE, &ov);
            first.step(150).unwrap();
            let bytes = first.checkpoint().to_bytes();
            let ck = sim_core::checkpoint::Checkpoint::from_bytes(&bytes).unwrap();
            let mut resumed = solver(SCENE, &ov);
            resumed.restore(&ck).unwrap();
            assert_eq!(resumed.time_step(), 150);
            resumed.step(151).unwrap();
            assert_eq!(resumed.checkpoint(), straight.checkpoint(), "{s} {p}: resume is not bit-exact");
        }
    }
}

#[test]
fn a_checkpoint_of_one_scheme_resumes_in_another() {
    for s in Scheme::ALL {
        // LBM-Ghost keeps obstacle walls half-way: its checkpoints are compared on staircase walls.
        let walls = if s == Scheme::Ghost { "staircase" } else { "interpolated" };
        let mut a = solver(SCENE, &[("solver.scheme", "esoteric_pull"), ("solver.walls", walls)]);
        a.step(123).unwrap();
        let ck = a.checkpoint();
        let mut b = solver(SCENE, &[("solver.scheme", s.name()), ("solver.ghost_block", "8"), ("solver.walls", walls)]);
        b.restore(&ck).unwrap();
        assert_eq!(b.checkpoint(), ck, "{s}");
        b.step(77).unwrap();
        let mut c = solver(SCENE, &[("solver.scheme", "esoteric_pull"), ("solver.walls", walls)]);
        c.restore(&ck).unwrap();
        c.step(77).unwrap();
        let (dr, du) = max_field_diff(b.as_ref(), c.as_ref());
        assert!(dr == 0.0 && du == 0.0, "{s}: differs after resuming an esoteric_pull checkpoint");
    }
}

#[test]
fn checkpoints_of_other_domains_or_damaged_files_are_refused() {
    let mut a = solver(SCENE, &[]);
    a.step(10).unwrap();
    let ck = a.checkpoint();
    let mut other = solver(SCENE, &[("obstacles.0.radius", "4.5")]);
    let e = other.restore(&ck).unwrap_err().to_string();
    assert!(e.contains("different domain"), "{e}");
    let mut fp16 = solver(SCENE, &[("solver.precision", "fp16s")]);
    assert!(fp16.restore(&ck).unwrap_err().to_string().contains("fp32"));
    let mut bytes = ck.to_bytes();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    let e = sim_core::checkpoint::Checkpoint::from_bytes(&bytes).unwrap_err();
    assert!(e.contains("checksum"), "{e}");
}

/// Put a NaN into one cell's DDFs through a checkpoint: stats must report the blow-up at
/// that cell.
#[test]
fn a_blow_up_names_the_first_bad_cell() {
    let mut a = solver(SCENE, &[]);
    a.step(20).unwrap();
    let mut ck = a.checkpoint();
    let q = 9;
    let k = 200; // the 201st non-solid cell
    let off = (k * q + 3) * 4;
    ck.data[off..off + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    a.restore(&ck).unwrap();
    let st = a.stats();
    assert!(st.blown_up());
    let dom = a.domain();
    let cell = (0..dom.cells()).filter(|&n| !sim_core::domain::is_solid(dom.flags[n])).nth(k).unwrap();
    assert_eq!(st.first_bad_cell, Some(dom.coords(cell)));
}
