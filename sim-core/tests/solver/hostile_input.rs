//! Input a hostile tester types: numbers that wrap, NaN and infinity, obstacles outside the
//! domain or filling it, and generated overrides of every scene key. Each gets one clear error
//! (or loads); nothing panics.

use crate::common::parse;
use proptest::prelude::*;
use sim_core::checkpoint::Checkpoint;
use sim_core::domain::Domain;
use sim_core::scene::KEYS;

const BASE: &str = r#"
[domain]
size = [40, 20]
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0] }
x_max = "outlet"
y_min = "wall"
y_max = "wall"
[fluid]
tau = 0.6
[[obstacles]]
shape = "sphere"
center = [12, 10]
radius = 3
"#;

const BASE_3D: &str = r#"
[domain]
size = [24, 12, 12]
[fluid]
tau = 0.6
[[obstacles]]
shape = "box"
min = [4, 4, 4]
max = [6, 6, 6]
"#;

/// The one-line error of a scene that must not load, or of its voxelisation.
fn refused(text: &str, sets: &[(&str, &str)]) -> String {
    let e = match parse(text, sets) {
        Err(e) => e,
        Ok(ls) => match Domain::from_scene(&ls) {
            Err(e) => e,
            Ok(_) => panic!("{sets:?} was accepted"),
        },
    };
    let s = e.to_string();
    assert!(!s.contains('\n'), "one line: {s}");
    s
}

#[test]
fn a_size_whose_product_wraps_is_refused() {
    let e = refused(BASE_3D, &[("domain.size", "[4294967296,4294967296,4]")]);
    assert!(e.contains("domain.size") && e.contains("2^33"), "{e}");
    let e = refused(BASE_3D, &[("domain.size", "[18446744073709551615,2,4]")]);
    assert!(e.contains("domain.size"), "{e}");
    let e = refused(BASE_3D, &[("domain.size", "[3000,3000,3000]")]);
    assert!(e.contains("2^33"), "{e}");
}

#[test]
fn nonsense_obstacles_are_refused_with_their_key() {
    for (sets, key, says) in [
        (vec![("obstacles.0.center", "[nan, 10]")], "obstacles.0.center", "finite"),
        (vec![("obstacles.0.center", "[inf, 10]")], "obstacles.0.center", "finite"),
        (vec![("obstacles.0.center", "[500, 10]")], "obstacles.0.center", "outside the domain"),
        (vec![("obstacles.0.center", "[-20, 10]")], "obstacles.0.center", "outside the domain"),
        (vec![("obstacles.0.radius", "nan")], "obstacles.0.radius", "> 0"),
        (vec![("obstacles.0.radius", "inf")], "obstacles.0.radius", "> 0"),
        (vec![("obstacles.0.radius", "500")], "obstacles", "no fluid cell"),
    ] {
        let e = refused(BASE, &sets);
        assert!(e.contains(key) && e.contains(says), "{sets:?}: {e}");
    }
    for (sets, key, says) in [
        (vec![("obstacles.0.min", "[8, 4, 4]")], "obstacles.0.min", "above max"),
        (vec![("obstacles.0.max", "[6, 6, 1e40]")], "obstacles.0.max", "finite"),
        (vec![("obstacles.0.min", "[-10, -10, -10]"), ("obstacles.0.max", "[40, 40, 40]")], "obstacles", "no fluid cell"),
        (vec![("obstacles.0.min", "[30, 4, 4]"), ("obstacles.0.max", "[40, 6, 6]")], "obstacles.0.min", "outside the domain"),
    ] {
        let e = refused(BASE_3D, &sets);
        assert!(e.contains(key) && e.contains(says), "{sets:?}: {e}");
    }
    // A shape reaching in from outside is fine (a wall-mounted body).
    parse(BASE, &[("obstacles.0.center", "[12, -2]"), ("obstacles.0.radius", "5")]).unwrap();
}

#[test]
fn non_finite_velocities_and_densities_are_refused() {
    for (sets, key) in [
        (vec![("boundaries.x_min.velocity", "[nan, 0]")], "boundaries.x_min.velocity"),
        (vec![("boundaries.x_min.velocity", "[0.05, inf]")], "boundaries.x_min.velocity"),
        (vec![("initial.velocity", "[nan, 0]")], "initial.velocity"),
        (vec![("initial.density", "inf")], "initial.density"),
        (vec![("boundaries.x_max", "{ type = \"outlet\", density = 1e30 }")], "boundaries.x_max.density"),
        (vec![("boundaries.x_max", "{ type = \"outlet\", density = 0.1 }")], "boundaries.x_max.density"),
        (vec![("fluid.force", "[nan, 0]")], "fluid.force"),
        (vec![("solver.smagorinsky_cs", "inf")], "solver.smagorinsky_cs"),
        (vec![("solver.ghost_block", "100000000000")], "solver.ghost_block"),
    ] {
        let e = refused(BASE, &sets);
        assert!(e.contains(key), "{sets:?}: {e}");
    }
}

/// Free-slip walls where they cannot run are refused with the face's key and what would run.
#[test]
fn free_slip_walls_are_refused_where_they_cannot_run() {
    for (sets, says) in [
        (vec![("solver.scheme", "swap")], "esoteric_pull"),
        (vec![("solver.scheme", "ghost")], "esoteric_pull"),
        (vec![("compression.enabled", "true")], "dense grids"),
        (vec![("amr.enabled", "true")], "dense grids"),
    ] {
        let mut sets = sets.clone();
        sets.push(("boundaries.y_max", "\"slip_wall\""));
        let e = refused(BASE, &sets);
        assert!(e.contains("boundaries.y_max") && e.contains(says), "{sets:?}: {e}");
    }
    // The symmetry plane's other name loads.
    let ls = parse(BASE, &[("boundaries.y_max", "\"symmetry\"")]).unwrap();
    assert!(Domain::from_scene(&ls).is_ok());
}

/// Values that break naive code: huge, negative, non-finite, empty, wrongly shaped.
fn nasty_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("-inf".to_string()),
        Just("1e308".to_string()),
        Just("18446744073709551615".to_string()),
        Just("4294967296".to_string()),
        Just("[]".to_string()),
        Just("[nan, nan, nan]".to_string()),
        Just("[1e300, -1e300]".to_string()),
        Just("[4294967296, 4294967296, 4]".to_string()),
        Just("[0, 0]".to_string()),
        Just("\"\"".to_string()),
        Just("\"wall\"".to_string()),
        Just("true".to_string()),
        Just("{}".to_string()),
        Just("{ type = \"outlet\", density = -1 }".to_string()),
        (-1e6f64..1e6).prop_map(|x| x.to_string()),
        (0u64..100_000).prop_map(|x| x.to_string()),
        prop::collection::vec(-100.0f64..200.0, 0..4)
            .prop_map(|v| format!("[{}]", v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))),
        "[a-z_\\[\\]{}=\", .0-9]{0,24}",
    ]
}

/// A key of the scene format with `N` replaced by an obstacle index (0, 1 or 20).
fn any_key() -> impl Strategy<Value = String> {
    (0..KEYS.len(), prop_oneof![Just("0"), Just("1"), Just("20")]).prop_map(|(i, n)| KEYS[i].key.replace(".N.", &format!(".{n}.")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Up to four overrides of any keys with nasty values: the loader answers with a scene or
    /// one error line, and a scene that loads voxelises (or says why not) without a panic.
    #[test]
    fn generated_overrides_never_panic(sets in prop::collection::vec((any_key(), nasty_value()), 1..4), three_d in any::<bool>()) {
        let sets: Vec<(&str, &str)> = sets.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        match parse(if three_d { BASE_3D } else { BASE }, &sets) {
            Err(e) => prop_assert!(!e.to_string().contains('\n'), "{}", e),
            Ok(ls) => {
                // Voxelise only grids of test size (a valid huge grid is the memory plan's job).
                let cells: usize = ls.derived.size.iter().product();
                if cells <= 1 << 20 {
                    let _ = Domain::from_scene(&ls);
                }
            }
        }
    }

    /// Any bytes, and damaged checkpoints: refused with a message, never a panic.
    #[test]
    fn damaged_checkpoints_are_refused_without_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..256), flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8)) {
        let _ = Checkpoint::from_bytes(&bytes);
        let ls = parse(BASE, &[]).unwrap();
        let s = sim_core::build::cpu(&ls).unwrap();
        let mut b = s.checkpoint().to_bytes();
        for (at, x) in flips {
            let i = at % b.len();
            b[i] ^= x;
        }
        let _ = Checkpoint::from_bytes(&b);
    }
}
