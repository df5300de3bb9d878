//! Every scene key with its type, default and unit. `--set` accepts exactly these keys
//! (`N` is an obstacle or probe index), and a test checks that scenes/README.md documents each one.

/// Documentation of one scene key.
#[derive(Debug, Clone, Copy)]
pub struct KeyDoc {
    /// Dotted key; `N` stands for an array index.
    pub key: &'static str,
    /// Value type and allowed values.
    pub ty: &'static str,
    /// Default.
    pub default: &'static str,
    /// Unit.
    pub unit: &'static str,
    /// Meaning.
    pub doc: &'static str,
}

macro_rules! k {
    ($key:expr, $ty:expr, $def:expr, $unit:expr, $doc:expr) => {
        KeyDoc { key: $key, ty: $ty, default: $def, unit: $unit, doc: $doc }
    };
}

const FACE_TY: &str = "\"periodic\" | \"wall\" | \"slip_wall\" | \"moving_wall\" | \"inlet\" | \"outlet\", or a table { type = ..., velocity = ..., density = ..., profile = ... }";

const KIND_TY: &str = "\"periodic\" | \"wall\" | \"slip_wall\" (also \"symmetry\") | \"moving_wall\" | \"inlet\" | \"outlet\"";

macro_rules! face {
    ($f:literal) => {
        [
            KeyDoc {
                key: $f,
                ty: FACE_TY,
                default: "\"periodic\"",
                unit: "",
                doc: "boundary of this face: a kind, or a table with the kind and its settings",
            },
            KeyDoc { key: concat!($f, ".type"), ty: KIND_TY, default: "\"periodic\"", unit: "", doc: "boundary kind" },
            k!(
                concat!($f, ".velocity"),
                "[x, y(, z)]",
                "[0, 0, 0]",
                "cells/step",
                "wall velocity (moving_wall, tangential) or inlet velocity (inlet; centre value for parabolic)"
            ),
            k!(concat!($f, ".density"), "number within a factor 2 of initial.density", "1.0", "lattice density", "outlet density (outlet)"),
            k!(
                concat!($f, ".profile"),
                "\"uniform\" | \"parabolic\"",
                "\"uniform\"",
                "",
                "inlet velocity profile across the open part of the face"
            ),
            k!(
                concat!($f, ".sponge"),
                "integer >= 0, at most half the axis",
                "0",
                "cells",
                "absorbing layer in front of an inlet or outlet: waves leave instead of bouncing back"
            ),
        ]
    };
}

const fn cat<const A: usize, const B: usize, const C: usize>(a: [KeyDoc; A], b: [KeyDoc; B]) -> [KeyDoc; C] {
    let mut out = [a[0]; C];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    let mut j = 0;
    while j < B {
        out[A + j] = b[j];
        j += 1;
    }
    out
}

const BASE: [KeyDoc; 33] = [
    k!("name", "string", "\"\"", "", "display name"),
    k!("description", "string", "\"\"", "", "what the scene shows"),
    k!("try", "string", "\"\"", "", "what to try with the scene in the viewer (the presets window shows it)"),
    k!("domain", "table", "", "", "grid"),
    k!("domain.size", "[nx, ny] or [nx, ny, nz], each >= 3", "(required)", "cells", "cells per axis, boundary layers included"),
    k!("domain.lattice", "\"D2Q9\" | \"D3Q19\" | \"D3Q27\"", "D2Q9 in 2D, D3Q19 in 3D", "", "velocity set"),
    k!("boundaries", "table", "", "", "one entry per face"),
    k!("fluid", "table", "", "", "give one of tau, viscosity, reynolds"),
    k!("fluid.tau", "number > 0.5", "0.6 if nothing else is given", "steps", "relaxation time"),
    k!("fluid.viscosity", "number > 0", "", "cells^2/step", "kinematic viscosity; tau = 3 viscosity + 0.5"),
    k!("fluid.reynolds", "number > 0", "", "", "Reynolds number; viscosity = velocity * length / reynolds"),
    k!(
        "fluid.length",
        "number > 0",
        "(required with reynolds)",
        "cells",
        "reference length for reynolds and the force coefficients ([forces])"
    ),
    k!(
        "fluid.velocity",
        "number > 0",
        "(required with reynolds)",
        "cells/step",
        "reference velocity for reynolds and the force coefficients ([forces])"
    ),
    k!("fluid.force", "[x, y(, z)]", "[0, 0, 0]", "lattice force density", "uniform body force (Guo forcing)"),
    k!("initial", "table", "", "", "initial state"),
    k!(
        "initial.kind",
        "\"uniform\" | \"taylor_green\" | \"taylor_green_3d\"",
        "\"uniform\"",
        "",
        "initial flow field: uniform; 2D Taylor-Green vortices (every z plane alike); 3D Taylor-Green vortex (3D only)"
    ),
    k!(
        "initial.velocity",
        "[x, y(, z)]",
        "[0, 0, 0]",
        "cells/step",
        "uniform velocity, or the Taylor-Green amplitude U (x component; the other components are ignored)"
    ),
    k!("initial.density", "number > 0", "1.0", "lattice density", "initial density"),
    k!("solver", "table", "", "", "numerical method"),
    k!(
        "solver.scheme",
        "\"esoteric_pull\" | \"esoteric_push\" | \"aa\" | \"one_step_pull\" | \"swap\" | \"ghost\"",
        "\"esoteric_pull\"",
        "",
        "streaming scheme"
    ),
    k!("solver.precision", "\"fp32\" | \"fp16s\" | \"fp16c\"", "\"fp32\"", "", "DDF storage precision (arithmetic is always FP32)"),
    k!("solver.collision", "\"bgk\" | \"trt\" | \"smagorinsky\" | \"regularized\"", "\"bgk\"", "", "collision operator"),
    k!("solver.smagorinsky_cs", "number 0 to 1", "0.1", "", "Smagorinsky constant"),
    k!("solver.ghost_block", "integer 2 to 256", "16", "cells", "block edge of the LBM-Ghost scheme"),
    k!("solver.steps", "integer 0 to 10^12", "1000", "steps", "steps of `esoflow run` without --steps"),
    k!("solver.stats_every", "integer 1 to 10^12", "100", "steps", "interval of stats.csv rows"),
    k!(
        "solver.walls",
        "\"interpolated\" | \"staircase\"",
        "\"interpolated\"",
        "",
        "obstacle walls: interpolated bounce-back on the exact shape, or halfway on the voxels"
    ),
    k!("obstacles", "array of tables", "[]", "", "solid shapes (at most 15); [[obstacles]] with shape = ..."),
    k!("obstacles.N.shape", "\"box\" | \"sphere\" | \"cylinder\" | \"stl\"", "(required)", "", "kind of shape"),
    k!("obstacles.N.name", "string", "shape and index", "", "name in force reports"),
    k!(
        "obstacles.N.center",
        "[x, y(, z)]",
        "(required for sphere, cylinder, stl)",
        "cells",
        "centre of the sphere or cylinder axis, or where the STL's bounding-box centre goes (cell (x, y, z) has its centre at x, y, z)"
    ),
    k!("obstacles.N.radius", "number > 0", "(required for sphere, cylinder)", "cells", "radius"),
    k!("obstacles.N.axis", "\"x\" | \"y\" | \"z\"", "\"z\"", "", "cylinder axis (3D; in 2D a cylinder is a disc in the x-y plane)"),
];

const MORE: [KeyDoc; 5] = [
    k!("obstacles.N.length", "number > 0", "infinite", "cells", "cylinder length along its axis, centred on center"),
    k!(
        "obstacles.N.min",
        "[x, y(, z)]",
        "(required for box)",
        "cells",
        "box lower corner: cells whose centre is >= min on every axis (and <= max) are solid"
    ),
    k!("obstacles.N.max", "[x, y(, z)]", "(required for box)", "cells", "box upper corner, inclusive (see min)"),
    k!("obstacles.N.file", "path", "(required for stl)", "", "STL file (binary or ASCII), relative to the scene file"),
    k!("obstacles.N.size", "number > 0", "(required for stl)", "cells", "longest bounding-box edge of the mesh after scaling"),
];

const COMPRESSION: [KeyDoc; 5] = [
    k!("compression", "table", "", "", "compressed subgrids (3D, esoteric_pull, fp32; CPU)"),
    k!("compression.enabled", "true | false", "false", "", "run on compressed subgrids: cores wavelet-compressed between steps"),
    k!(
        "compression.tau",
        "number >= 0",
        "1e-5",
        "DDF units",
        "wavelet threshold: details below tau * 2^level are dropped (bigger: smaller state, larger error)"
    ),
    k!("compression.subgrid", "[x, y, z], each >= 3", "[64, 64, 64]", "cells", "subgrid size; the last subgrid on an axis takes the remainder"),
    k!(
        "compression.memory_budget",
        "number of bytes, or a string such as \"8 GB\" (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)",
        "none",
        "bytes",
        "most memory the compressed state may take: refused at start if the estimate exceeds it; during the run tau is raised for the largest subgrids"
    ),
];

const AMR: [KeyDoc; 12] = [
    k!("amr", "table", "", "", "adaptive octree blocks (Jaber, Essel & Sullivan 2025; CPU, fp32, bgk)"),
    k!(
        "amr.enabled",
        "true | false",
        "false",
        "",
        "run on a forest of 4^D-cell blocks refined by 2 where the criterion asks (domain.size: multiples of 4)"
    ),
    k!("amr.max_level", "integer 0..=6", "2", "", "finest level; level l has cells 2^-l of domain.size's, the view shows the finest"),
    k!("amr.criterion", "\"vorticity\" | \"q\"", "\"vorticity\"", "", "block-max field that picks each block's level"),
    k!(
        "amr.threshold",
        "number > 0",
        "0.01",
        "1/step of level 0",
        "value that asks for level 1; each doubling asks for one level more (log2)"
    ),
    k!(
        "amr.coarsen",
        "number in (0, 1]",
        "1",
        "",
        "hysteresis: a block keeps its level while its value stays above this times the value that asks for it (1: none; 0.5 stops blocks refining and coarsening by turns)"
    ),
    k!("amr.interval", "integer >= 0", "50", "steps of level 0", "adapt every this many coarse steps (0: the initial mesh stays)"),
    k!("amr.near_wall", "integer 0..=max_level", "max_level", "", "level every block near an obstacle keeps"),
    k!(
        "amr.wall_margin",
        "number >= 0",
        "24",
        "cells of the near-wall level",
        "how near an obstacle counts as near (under ~24, the level jump next to the body biases its forces)"
    ),
    k!("amr.freeze", "list of levels", "[]", "", "levels whose blocks are neither created nor removed"),
    k!(
        "amr.capacity",
        "integer > 0",
        "every block up to max_level, at most 1 GiB of DDFs",
        "blocks",
        "most blocks at once (parents included); a refinement beyond it is skipped with a notice"
    ),
    k!(
        "amr.in_place",
        "true | false",
        "false",
        "",
        "CUDA backend: one copy of the blocks' DDFs streamed in place (Esoteric Pull, 0.59x the memory of D3Q19's two copies, slower for now: docs/amr-gpu.md); the CPU keeps two"
    ),
];

const FORCES: [KeyDoc; 7] = [
    k!("forces", "table", "", "", "reference values of the drag and lift coefficients and the Strouhal number"),
    k!("forces.length", "number > 0", "fluid.length", "cells", "reference length L: C = 2 F / (rho U^2 L) in 2D, St = f L / U"),
    k!("forces.velocity", "number > 0", "fluid.velocity", "cells/step", "reference velocity U"),
    k!("forces.area", "number > 0 (3D only)", "pi/4 length^2", "cells^2", "reference area A of 3D scenes: C = 2 F / (rho U^2 A)"),
    k!("forces.density", "number > 0", "initial.density", "lattice density", "reference density rho"),
    k!(
        "forces.drag_axis",
        "\"x\" | \"-x\" | \"y\" | \"-y\" | \"z\" | \"-z\"",
        "the inflow's direction",
        "",
        "direction of drag (the largest component of the inlet velocities, else of initial.velocity, else of fluid.force, else x)"
    ),
    k!(
        "forces.lift_axis",
        "\"x\" | \"-x\" | \"y\" | \"-y\" | \"z\" | \"-z\"",
        "y for drag along x",
        "",
        "direction of lift (2D: the other in-plane axis; 3D: the axis after the drag's, x -> y -> z -> x)"
    ),
];

const PROBES: [KeyDoc; 3] = [
    k!(
        "probes",
        "array of tables",
        "[]",
        "",
        "cells where `esoflow run` samples the flow over time (probes.csv with --export); [[probes]] with at = ..."
    ),
    k!(
        "probes.N.at",
        "[x, y] in 2D or [x, y, z] in 3D: whole cell indices inside the domain",
        "(required)",
        "cells",
        "the cell sampled (cell (x, y, z) has its centre at x, y, z); a cell inside an obstacle or wall samples zero velocity"
    ),
    k!("probes.N.name", "string", "probeN", "", "name in probes.csv and the run's summary"),
];

const UNITS: [KeyDoc; 6] = [
    k!("units", "table", "", "", "physical (SI) units: what a cell, a step and a lattice velocity stand for (none: lattice units only)"),
    k!(
        "units.length",
        "number > 0",
        "(required in [units])",
        "m",
        "physical length spanned by units.cells cells (e.g. the obstacle's diameter): dx = length / cells"
    ),
    k!("units.cells", "number > 0", "fluid.length", "cells", "cells that units.length spans"),
    k!(
        "units.velocity",
        "number > 0",
        "(required in [units])",
        "m/s",
        "what the reference lattice velocity (fluid.velocity, else the fastest inlet, moving wall or initial velocity) stands for: dt = dx u_lattice / velocity"
    ),
    k!(
        "units.viscosity",
        "number > 0",
        "none",
        "m^2/s",
        "kinematic viscosity: gives tau = 3 viscosity dt / dx^2 + 0.5 where [fluid] gives none, else must agree with [fluid] to 1 %"
    ),
    k!("units.density", "number > 0", "1000", "kg/m^3", "density of the fluid at rest (lattice density initial.density)"),
];

const FACES: [KeyDoc; 36] = {
    let a = cat::<6, 6, 12>(face!("boundaries.x_min"), face!("boundaries.x_max"));
    let b = cat::<6, 6, 12>(face!("boundaries.y_min"), face!("boundaries.y_max"));
    let c = cat::<6, 6, 12>(face!("boundaries.z_min"), face!("boundaries.z_max"));
    cat::<24, 12, 36>(cat::<12, 12, 24>(a, b), c)
};

/// Every key of the scene format.
pub static KEYS: [KeyDoc; 107] = cat::<101, 6, 107>(
    cat::<98, 3, 101>(
        cat::<91, 7, 98>(
            cat::<55, 36, 91>(cat::<43, 12, 55>(cat::<38, 5, 43>(cat::<33, 5, 38>(BASE, MORE), COMPRESSION), AMR), FACES),
            FORCES,
        ),
        PROBES,
    ),
    UNITS,
);
