// Tracers and streamlines: particles carried by the velocity of the frame the view already has,
// and lines traced through it, both made in compute passes and drawn over the slices.
// World space as in field.wgsl: cell (x, y, z) fills [x, x+1] x [y, y+1] x [z, z+1]; velocity in
// lattice units is cells per time step. The velocity components are read straight from the
// frame's storage buffers (rows of `pitch.x` floats); a frame sampled on a lattice (every s-th
// cell, `pitch.y` = s) is interpolated between its lattice points. 2D grids (nz = 1) keep z at
// 0.5 and read no uz.
// `Params` (binding 0) is in tracer_params.wgsl, prepended when the shader is built.

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> ux: array<f32>;
@group(0) @binding(2) var<storage, read> uy: array<f32>;
@group(0) @binding(3) var<storage, read> uz: array<f32>;
@group(0) @binding(4) var solid: texture_3d<u32>;
@group(0) @binding(5) var<storage, read_write> tracers: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> line_points: array<vec4<f32>>;

// Most sub-steps one pass takes per tracer: each moves at most half a cell.
const MAX_SUBSTEPS: u32 = 32u;

fn is_2d() -> bool {
    return prm.size.z == 1u;
}

fn is_solid_cell(c: vec3<i32>) -> bool {
    return textureLoad(solid, c, 0).r != 0u;
}

fn inside(p: vec3<f32>) -> bool {
    let n = vec3<f32>(prm.size.xyz);
    if is_2d() {
        return p.x >= 0.0 && p.y >= 0.0 && p.x < n.x && p.y < n.y;
    }
    return all(p >= vec3<f32>(0.0)) && all(p < n);
}

fn cell_of(p: vec3<f32>) -> vec3<i32> {
    return clamp(vec3<i32>(floor(p)), vec3<i32>(0), vec3<i32>(prm.size.xyz) - vec3<i32>(1));
}

// The velocity stored at lattice point l (cell l * s); zero in solid cells.
fn velocity_at_point(l: vec3<u32>) -> vec3<f32> {
    let s = max(prm.pitch.y, 1u);
    let c = l * s;
    if is_solid_cell(vec3<i32>(c)) {
        return vec3<f32>(0.0);
    }
    let i = (c.z * prm.size.y + c.y) * prm.pitch.x + c.x;
    var w = 0.0;
    if !is_2d() {
        w = uz[i];
    }
    return vec3<f32>(ux[i], uy[i], w);
}

// The velocity at a point of world space: trilinear between the lattice points around it
// (values sit at cell centres), constant beyond the last ones.
fn velocity(p: vec3<f32>) -> vec3<f32> {
    let s = f32(max(prm.pitch.y, 1u));
    let last = (vec3<u32>(prm.size.xyz) - vec3<u32>(1u)) / max(prm.pitch.y, 1u);
    let q = max((p - vec3<f32>(0.5)) / s, vec3<f32>(0.0));
    let i0 = min(vec3<u32>(floor(q)), last);
    let i1 = min(i0 + vec3<u32>(1u), last);
    let t = clamp(q - vec3<f32>(i0), vec3<f32>(0.0), vec3<f32>(1.0));
    let a = mix(velocity_at_point(i0), velocity_at_point(vec3<u32>(i1.x, i0.y, i0.z)), t.x);
    let b = mix(velocity_at_point(vec3<u32>(i0.x, i1.y, i0.z)), velocity_at_point(vec3<u32>(i1.x, i1.y, i0.z)), t.x);
    let ab = mix(a, b, t.y);
    if is_2d() {
        return vec3<f32>(ab.xy, 0.0);
    }
    let c = mix(velocity_at_point(vec3<u32>(i0.x, i0.y, i1.z)), velocity_at_point(vec3<u32>(i1.x, i0.y, i1.z)), t.x);
    let d = mix(velocity_at_point(vec3<u32>(i0.x, i1.y, i1.z)), velocity_at_point(i1), t.x);
    return mix(ab, mix(c, d, t.y), t.z);
}

// A hash to [0, 1) (PCG).
fn pcg(v: u32) -> u32 {
    let state = v * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

fn unit(v: u32) -> f32 {
    return f32(pcg(v) >> 8u) / 16777216.0;
}

// A fluid point in the box lo..hi (a few tries; the last one is kept even if solid, and
// leaves at the next pass).
fn release(i: u32, lo: vec3<f32>, hi: vec3<f32>) -> vec3<f32> {
    var p = lo;
    for (var k = 0u; k < 4u; k++) {
        let h = pcg(i * 4u + k + pcg(prm.pitch.z));
        p = lo + (hi - lo) * vec3<f32>(unit(h), unit(h ^ 0x68bc21ebu), unit(h ^ 0x02e5be93u));
        if is_2d() {
            p.z = 0.5;
        }
        if !is_solid_cell(cell_of(p)) {
            break;
        }
    }
    return p;
}

// A point carried by the flow for `dt` time steps (midpoint rule, in sub-steps of at most half
// a cell).
fn carry(p0: vec3<f32>, dt: f32) -> vec3<f32> {
    var p = p0;
    let speed = length(velocity(p));
    let n = clamp(u32(ceil(speed * dt / 0.5)), 1u, MAX_SUBSTEPS);
    let h = dt / f32(n);
    for (var k = 0u; k < n; k++) {
        let mid = p + 0.5 * h * velocity(p);
        p = p + h * velocity(mid);
    }
    return p;
}

// One pass over the tracers: each moves with the flow for `seed_max.w` time steps, and is
// released again in the seed box when it leaves the grid, enters a solid cell or outlives its
// life; a tracer released in this pass is carried on for a random part of the pass, so that
// those released together do not travel as one front. With `pitch.w` = 1 every tracer is
// placed anew: anywhere in the grid, its age spread over its life so that they leave in turn.
@compute @workgroup_size(64)
fn advect(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i >= prm.size.w {
        return;
    }
    let life = prm.seed_min.w;
    if prm.pitch.w == 1u {
        let p = release(i ^ 0x5bd1e995u, vec3<f32>(0.0), vec3<f32>(prm.size.xyz));
        tracers[i] = vec4<f32>(p, unit(i * 3u + 1u + prm.pitch.z) * min(life, 1.0e6));
        return;
    }
    var t = tracers[i];
    var p = t.xyz;
    let dt = prm.seed_max.w;
    if dt > 0.0 {
        p = carry(p, dt);
        t.w = t.w + dt;
    }
    if !inside(p) || is_solid_cell(cell_of(p)) || t.w > life {
        p = release(i, prm.seed_min.xyz, prm.seed_max.xyz);
        t.w = unit(i * 7u + 5u + pcg(prm.pitch.z)) * dt;
        if t.w > 0.0 {
            p = carry(p, t.w);
            if !inside(p) {
                p = release(i, prm.seed_min.xyz, prm.seed_max.xyz);
                t.w = 0.0;
            }
        }
    }
    tracers[i] = vec4<f32>(p, t.w);
}

// One streamline per thread: from its seed on the seed rectangle along the velocity's
// direction in steps of `line_origin.w` cells (midpoint rule). Points past the line's end (it
// left the grid, reached a solid cell or still water) have w = -1; the rest carry the speed.
@compute @workgroup_size(64)
fn trace(@builtin(global_invocation_id) id: vec3<u32>) {
    let count = prm.lines.x * prm.lines.y;
    let j = id.x;
    if j >= count {
        return;
    }
    let a = (f32(j % prm.lines.x) + 0.5) / f32(prm.lines.x);
    let b = (f32(j / prm.lines.x) + 0.5) / f32(prm.lines.y);
    var p = prm.line_origin.xyz + a * prm.line_u.xyz + b * prm.line_v.xyz;
    if is_2d() {
        p.z = 0.5;
    }
    let h = prm.line_origin.w;
    let points = prm.lines.z;
    var alive = inside(p) && !is_solid_cell(cell_of(p));
    for (var k = 0u; k < points; k++) {
        var w = -1.0;
        var u = vec3<f32>(0.0);
        if alive {
            u = velocity(p);
            w = length(u);
            alive = w > 1.0e-7;
        }
        line_points[j * points + k] = vec4<f32>(p, w);
        if alive {
            let mid = p + 0.5 * h * u / w;
            let um = velocity(mid);
            let sm = length(um);
            if sm <= 1.0e-7 {
                alive = false;
            } else {
                p = p + h * um / sm;
                alive = inside(p) && !is_solid_cell(cell_of(p));
            }
        }
    }
}
