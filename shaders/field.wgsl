// Slice planes of a scalar field, coloured through a lookup table; solid cells grey; the brick
// overlay on the slices; the isosurface and the solid obstacles' surfaces (vertices made by
// marching_cubes.wgsl), lit by a headlight; the domain box; outline boxes (bricks, blocks).
// 2D scenes draw only the z plane (nz = 1) with an orthographic camera that fits the domain.
// World space: cell (x, y, z) fills [x, x+1] x [y, y+1] x [z, z+1].
// The field is read straight from a storage buffer (a frame the solver wrote into memory shared
// with the renderer, or an upload from host memory): x fastest, rows of `g.pitch.x` floats (rows
// may be padded), then y, then z.
// Keep `Globals` in sync with `gpu_data::FieldGlobals` in app/src/viewer/render.rs.

struct Globals {
    clip_from_world: mat4x4<f32>,
    // nx, ny, nz, colour map row
    size: vec4<u32>,
    // slice index along x, y, z; w = bit mask of the planes to draw (1 = x, 2 = y, 4 = z)
    slices: vec4<u32>,
    // lo, hi of the colour range; z = how much of the class colour a brick's inside takes in the
    // overlay (the rest is the field); w unused
    range: vec4<f32>,
    // camera position (world space); w unused
    eye: vec4<f32>,
    // lo, hi of the isosurface's colour range (velocity magnitude); z = grey of the solid
    // obstacles' surfaces; w unused
    iso_range: vec4<f32>,
    // brick size x, y, z; w = 1 when the brick overlay is drawn
    bricks: vec4<u32>,
    // overlay colour of each brick class: all solid, plain fluid, boundary
    brick_colors: array<vec4<f32>, 3>,
    // x = floats from one row of the field to the next; yzw unused
    pitch: vec4<u32>,
};

@group(0) @binding(0) var<uniform> g: Globals;
@group(0) @binding(1) var<storage, read> field: array<f32>;
@group(0) @binding(2) var solid: texture_3d<u32>;
@group(0) @binding(3) var lut: texture_2d<f32>;
@group(0) @binding(5) var brick_class: texture_3d<u32>;

// The field's value in a cell (inside the grid).
fn field_at(cell: vec3<i32>) -> f32 {
    let c = vec3<u32>(cell);
    return field[(c.z * g.size.y + c.y) * g.pitch.x + c.x];
}

struct VsOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) world: vec3<f32>,
    @location(1) @interpolate(flat) axis: u32,
};

// One quad (two triangles) per plane; instance = axis. Planes that are off collapse to nothing.
@vertex
fn vs_slice(@builtin(vertex_index) vi: u32, @builtin(instance_index) axis: u32) -> VsOut {
    var corners = array<vec2<f32>, 6>(
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 0.0), vec2<f32>(1.0, 1.0),
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 1.0), vec2<f32>(0.0, 1.0),
    );
    let c = corners[vi];
    let n = vec3<f32>(g.size.xyz);
    var p = vec3<f32>(0.0);
    let pos = f32(g.slices[axis]) + 0.5;
    if axis == 0u {
        p = vec3<f32>(pos, c.x * n.y, c.y * n.z);
    } else if axis == 1u {
        p = vec3<f32>(c.x * n.x, pos, c.y * n.z);
    } else {
        p = vec3<f32>(c.x * n.x, c.y * n.y, pos);
    }
    var out: VsOut;
    out.world = p;
    out.axis = axis;
    if (g.slices.w & (1u << axis)) == 0u {
        out.clip = vec4<f32>(2.0, 2.0, 2.0, 1.0);
    } else {
        out.clip = g.clip_from_world * vec4<f32>(p, 1.0);
    }
    return out;
}

// The colour of a normalised value: LUT entry round(t * 255) (keep in sync with colormap.rs).
fn lut_color(t: f32) -> vec3<f32> {
    let i = u32(clamp(t, 0.0, 1.0) * 255.0 + 0.5);
    return textureLoad(lut, vec2<u32>(i, g.size.w), 0).rgb;
}

fn is_finite(v: f32) -> bool {
    return abs(v) <= 3.0e38;
}

// The colour of a value in the range lo..hi; NaN and infinities (a blown-up state): magenta.
fn value_color(v: f32, lo: f32, hi: f32) -> vec3<f32> {
    if !is_finite(v) {
        return vec3<f32>(1.0, 0.0, 1.0);
    }
    var t = 0.5;
    if hi > lo {
        t = (v - lo) / (hi - lo);
    }
    return lut_color(t);
}

// The target is a plain (non-sRGB) RGBA8 texture holding gamma-encoded colours, as egui's own
// textures do: the stored bytes are the LUT's sRGB bytes.
@fragment
fn fs_slice(in: VsOut) -> @location(0) vec4<f32> {
    // World units per pixel (derivatives first: they need uniform control flow).
    let per_px = fwidth(in.world);
    let nmax = vec3<i32>(g.size.xyz) - vec3<i32>(1);
    var cell = clamp(vec3<i32>(floor(in.world)), vec3<i32>(0), nmax);
    cell[in.axis] = i32(g.slices[in.axis]);
    var color = vec3<f32>(0.5, 0.5, 0.5);
    if textureLoad(solid, cell, 0).r == 0u {
        color = value_color(field_at(cell), g.range.x, g.range.y);
    }
    if g.bricks.w == 1u {
        // The brick overlay: the inside tinted with the class colour, the brick's edges (within
        // about a pixel of a brick boundary in the plane) in the class colour.
        let b = vec3<i32>(g.bricks.xyz);
        let cls = min(textureLoad(brick_class, cell / b, 0).r, 2u);
        let tint = g.brick_colors[cls].rgb;
        let bf = vec3<f32>(g.bricks.xyz);
        let q = in.world / bf;
        let px = abs(q - round(q)) * bf / max(per_px, vec3<f32>(1e-6));
        var edge = false;
        for (var a = 0u; a < 3u; a++) {
            if a != in.axis && px[a] < 0.75 {
                edge = true;
            }
        }
        if edge {
            color = tint;
        } else {
            color = mix(color, tint, g.range.z);
        }
    }
    return vec4<f32>(color, 1.0);
}

struct SurfaceOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) world: vec3<f32>,
    @location(1) normal: vec3<f32>,
    @location(2) color: vec3<f32>,
};

fn surface_vertex(v: vec4<u32>, color: vec3<f32>) -> SurfaceOut {
    var out: SurfaceOut;
    out.world = bitcast<vec3<f32>>(v.xyz);
    out.normal = unpack4x8snorm(v.w).xyz;
    out.color = color;
    out.clip = g.clip_from_world * vec4<f32>(out.world, 1.0);
    return out;
}

// Isosurface vertices: coloured by the velocity magnitude through the colour map. The speed at
// the vertex comes with it (interpolated by marching_cubes.wgsl, in the compute pass): the
// vertex shader reads nothing but its vertex, as vertex work is the scarce kind on compute GPUs.
@vertex
fn vs_iso(@location(0) v: vec4<u32>, @location(1) speed: f32) -> SurfaceOut {
    return surface_vertex(v, value_color(speed, g.iso_range.x, g.iso_range.y));
}

// Solid obstacles: grey.
@vertex
fn vs_solid(@location(0) v: vec4<u32>) -> SurfaceOut {
    return surface_vertex(v, vec3<f32>(g.iso_range.z));
}

// A headlight: ambient plus diffuse, two-sided (the inside of a surface cut by the box shows).
@fragment
fn fs_surface(in: SurfaceOut) -> @location(0) vec4<f32> {
    let n = normalize(in.normal);
    let l = normalize(g.eye.xyz - in.world);
    let diffuse = abs(dot(n, l));
    return vec4<f32>(in.color * (0.3 + 0.7 * diffuse), 1.0);
}

// Vertex `vi` (0..24) of the 12 edges of the unit cube, two vertices per edge: edges 0..4 run
// along x, 4..8 along y, 8..12 along z.
fn cube_edge_vertex(vi: u32) -> vec3<f32> {
    let edge = vi / 2u;
    let end = f32(vi % 2u);
    let a = edge / 4u;          // axis the edge runs along
    let k = edge % 4u;          // which of the 4 parallel edges
    let b = f32(k & 1u);
    let c = f32((k >> 1u) & 1u);
    if a == 0u {
        return vec3<f32>(end, b, c);
    } else if a == 1u {
        return vec3<f32>(b, end, c);
    }
    return vec3<f32>(b, c, end);
}

// The domain box: 12 edges, 24 vertices, no vertex buffer.
@vertex
fn vs_box(@builtin(vertex_index) vi: u32) -> @builtin(position) vec4<f32> {
    return g.clip_from_world * vec4<f32>(cube_edge_vertex(vi) * vec3<f32>(g.size.xyz), 1.0);
}

@fragment
fn fs_box() -> @location(0) vec4<f32> {
    return vec4<f32>(0.8, 0.8, 0.8, 1.0);
}

struct OutlineOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) @interpolate(flat) color: vec4<f32>,
};

// Outline boxes: one instance per box (corners in cells, colour as sRGB bytes read as unorm),
// 24 vertices each for its 12 edges. Keep the attributes in sync with
// `gpu_data::OutlineInstance` in app/src/viewer/render.rs.
@vertex
fn vs_outline(
    @builtin(vertex_index) vi: u32,
    @location(0) lo: vec3<f32>,
    @location(1) hi: vec3<f32>,
    @location(2) color: vec4<f32>,
) -> OutlineOut {
    var out: OutlineOut;
    out.clip = g.clip_from_world * vec4<f32>(mix(lo, hi, cube_edge_vertex(vi)), 1.0);
    out.color = color;
    return out;
}

// The colour as it is (gamma-encoded, like the rest of the view); alpha blends (see render.rs).
@fragment
fn fs_outline(in: OutlineOut) -> @location(0) vec4<f32> {
    return in.color;
}
