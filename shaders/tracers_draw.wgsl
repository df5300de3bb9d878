// Drawing the tracers (round dots of a few pixels, one triangle each) and the streamlines (line
// segments coloured by speed) that tracers.wgsl made; depth-tested against the slices and
// surfaces in 3D, on top of the field in 2D.
// `Params` (binding 0) is in tracer_params.wgsl, prepended as for tracers.wgsl; the tracers and
// the lines are read-only here.

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> tracers: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> line_points: array<vec4<f32>>;
@group(0) @binding(3) var lut: texture_2d<f32>;

struct DotOut {
    @builtin(position) clip: vec4<f32>,
    // position inside the dot, -1..1
    @location(0) at: vec2<f32>,
};

// The clip position of a world point; in 2D in front of the field's plane.
fn project(p: vec3<f32>) -> vec4<f32> {
    var c = prm.clip_from_world * vec4<f32>(p, 1.0);
    if prm.size.z == 1u {
        c.z = 0.0;
    }
    return c;
}

// One triangle per dot (the dot is the circle inscribed in it): half the triangles of a quad,
// which matters on GPUs with few raster units.
@vertex
fn vs_dot(@builtin(vertex_index) vi: u32, @builtin(instance_index) i: u32) -> DotOut {
    var corners = array<vec2<f32>, 3>(vec2<f32>(0.0, 2.0), vec2<f32>(-1.7320508, -1.0), vec2<f32>(1.7320508, -1.0));
    let k = corners[vi];
    var c = project(tracers[i].xyz);
    // The dot's size in pixels whatever its depth: offset in clip space scaled by w.
    let px = 0.5 * prm.style.x;
    c = vec4<f32>(c.xy + k * px * 2.0 / prm.style.yz * c.w, c.zw);
    var out: DotOut;
    out.clip = c;
    out.at = k;
    return out;
}

@fragment
fn fs_dot(in: DotOut) -> @location(0) vec4<f32> {
    let r = length(in.at);
    if r > 1.0 {
        discard;
    }
    // A dark rim keeps white dots visible on light parts of the colour map.
    let rim = smoothstep(0.55, 0.95, r);
    return vec4<f32>(mix(prm.color.rgb, vec3<f32>(0.05), rim * 0.8), prm.color.a);
}

struct LineOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) color: vec3<f32>,
};

// Two vertices per segment; segment s of line j joins points k and k + 1. A segment whose
// end is past the line's end collapses out of view.
@vertex
fn vs_line(@builtin(vertex_index) vi: u32) -> LineOut {
    let points = max(prm.lines.z, 2u);
    let seg = vi / 2u;
    let j = seg / (points - 1u);
    let k = seg % (points - 1u);
    let a = line_points[j * points + k];
    let b = line_points[j * points + k + 1u];
    let p = select(a, b, (vi & 1u) == 1u);
    var out: LineOut;
    if a.w < 0.0 || b.w < 0.0 {
        out.clip = vec4<f32>(2.0, 2.0, 2.0, 1.0);
    } else {
        out.clip = project(p.xyz);
    }
    var color = prm.color.rgb;
    if prm.style.w == 1.0 {
        let lo = prm.line_range.x;
        let hi = prm.line_range.y;
        var t = 0.5;
        if hi > lo {
            t = clamp((p.w - lo) / (hi - lo), 0.0, 1.0);
        }
        color = textureLoad(lut, vec2<u32>(u32(t * 255.0 + 0.5), prm.lines.w), 0).rgb;
    }
    out.color = color;
    return out;
}

@fragment
fn fs_line(in: LineOut) -> @location(0) vec4<f32> {
    return vec4<f32>(in.color, 1.0);
}
