//! The viewer: a window (winit) with the field drawn by wgpu and panels in egui, and the same
//! view rendered offscreen for `esoflow run --screenshot`.
//!
//! - `worker`: the solver thread (owns the solver; hands over field snapshots).
//! - `app`: the viewer's state and its frame (egui only; testable headless), with its parts:
//!   `panels`, one file per panel (each an `impl ViewerApp` block), and `recording`; `edit_tool`: the draw / erase brush; `reference`: the uncompressed reference run;
//!   `legend`: colour ranges and colour-map textures.
//! - `render`, `camera`, `colormap`: the field renderer (wgpu, no egui); `mc`: the marching-cubes
//!   table of its isosurfaces.
//! - `window`: the winit shell (surface, event loop, screenshots).
//! - `headless`: offscreen GPU setup and screenshots without a window.
//! - `interop`: Vulkan buffers (and timeline semaphores) exported for CUDA (zero-copy).

pub mod app;
pub mod camera;
pub mod colormap;
pub mod edit_tool;
pub mod frames;
pub mod gpu_timer;
pub mod headless;
pub mod interop;
pub mod legend;
pub mod mc;
pub mod reference;
pub mod render;
pub mod window;
pub mod worker;

pub use app::{panels, recording};

#[cfg(test)]
mod soak_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tracer_tests;

use colormap::ColorMap;
use egui::{Color32, Rect, Ui};
use sim_core::bricks::{BrickClass, BrickMap};
use sim_core::fields::FieldKind;
use std::path::PathBuf;

/// `esoflow view`: open a scene in the window.
#[derive(clap::Args, Debug, Clone)]
pub struct ViewArgs {
    /// Scene file (TOML). Default: the built-in cylinder_2d scene.
    pub scene: Option<PathBuf>,
    /// Solver backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: crate::BackendChoice,
    /// Split the grid over this many GPUs of this machine, or `auto` (CUDA; see `esoflow run
    /// --help`).
    #[arg(long, default_value = "1", value_parser = crate::solvers::parse_gpus)]
    pub gpus: crate::solvers::Gpus,
    /// Override a scene key, e.g. --set fluid.reynolds=100.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Start paused.
    #[arg(long)]
    pub paused: bool,
    /// Close the window after this many frames (with --screenshot: after saving it), 1 to 10^9.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub frames: Option<u64>,
    /// Save a screenshot of the window to FILE (after --frames N frames, default 60) and exit.
    #[arg(long, value_name = "FILE")]
    pub screenshot: Option<PathBuf>,
    /// Initial view, as for `run --view`: field=speed,cmap=turbo,range=0:0.1,slices=10:20:5,
    /// iso=vorticity:0.01,solids=on,overlay=bricks,outlines=bricks (or subgrids, or
    /// bricks+subgrids: a compressed run's subgrids coloured by their compression ratio).
    #[arg(long, value_name = "SPEC")]
    pub view: Option<String>,
    /// Steps per frame (the solver thread's batch between two pictures), 1 to 10^6.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub steps_per_frame: u64,
    /// No window: measure the viewer's pipeline offscreen for SECONDS: the solver alone, then the
    /// solver thread running while the main thread uploads and draws every new field (FPS, MLUPS).
    /// SECONDS from 0.1 to 86400.
    #[arg(long, value_name = "SECONDS", value_parser = bench_secs)]
    pub bench: Option<f64>,
    /// With --bench: draw at most this many frames per second, 0.1 to 10000 (0: as fast as
    /// they come).
    #[arg(long, value_name = "FPS", default_value_t = 0.0, requires = "bench", value_parser = bench_fps)]
    pub bench_fps: f64,
    /// Record the view (the flow and its legend) as numbered PNG frames into this folder while
    /// the window runs, and a video (DIR/recording.mp4) at the end where ffmpeg is on the PATH;
    /// F9 or the Record button start and stop recordings too.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// With --record: steps between two frames, 1 to 10^9 (default: every new frame of the view).
    #[arg(long, value_name = "K", requires = "record", value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub every: Option<u64>,
    /// A probe from the start: X,Y (2D) or X,Y,Z (3D) in cells, optionally named,
    /// NAME=X,Y[,Z]; repeatable, after the scene's [[probes]]. The Probes and forces panel
    /// opens with their plots.
    #[arg(long, value_name = "[NAME=]X,Y[,Z]")]
    pub probe: Vec<String>,
    /// How the fields reach the renderer: `auto` (GPU memory shared between CUDA and Vulkan
    /// where both run on one GPU, else host memory), `shared` (say why when it cannot), `host`.
    #[arg(long, value_enum, default_value = "auto")]
    pub frame_path: frames::FramePath,
}

fn bench_secs(s: &str) -> Result<f64, String> {
    crate::parse_f64_in(s, 0.1, 86_400.0)
}

fn bench_fps(s: &str) -> Result<f64, String> {
    if s.trim().parse::<f64>() == Ok(0.0) {
        return Ok(0.0);
    }
    crate::parse_f64_in(s, 0.1, 10_000.0).map_err(|e| format!("{e} (or 0: no limit)"))
}

/// Parse a field name.
#[must_use]
pub fn field_from_name(s: &str) -> Option<FieldKind> {
    Some(match s.trim().to_ascii_lowercase().as_str() {
        "speed" | "|u|" | "u" | "velocity" => FieldKind::Speed,
        "ux" => FieldKind::Ux,
        "uy" => FieldKind::Uy,
        "uz" => FieldKind::Uz,
        "rho" | "density" | "pressure" => FieldKind::Density,
        "vorticity" | "|vorticity|" | "curl" => FieldKind::Vorticity,
        "q" => FieldKind::Q,
        _ => return None,
    })
}

/// Long name of a field with its units (lattice units).
#[must_use]
pub fn field_units(f: FieldKind) -> &'static str {
    match f {
        FieldKind::Speed => "velocity magnitude |u| [cells/step]",
        FieldKind::Ux => "x velocity ux [cells/step]",
        FieldKind::Uy => "y velocity uy [cells/step]",
        FieldKind::Uz => "z velocity uz [cells/step]",
        FieldKind::Density => "density rho [lattice units, rest = 1]",
        FieldKind::Vorticity => "vorticity |curl u| [1/step]",
        FieldKind::Q => "Q criterion [1/step²]",
    }
}

/// Default isosurface threshold of a field (`iso=vorticity` without a value).
#[must_use]
pub fn default_iso_threshold(kind: FieldKind) -> f32 {
    if kind == FieldKind::Q {
        1e-5
    } else {
        0.01
    }
}

/// The fields an isosurface can show.
pub const ISO_FIELDS: [FieldKind; 2] = [FieldKind::Vorticity, FieldKind::Q];

/// A view given on the command line:
/// `field=speed,cmap=turbo,range=0:0.1,slices=10:20:5,size=1200x400,iso=vorticity:0.01,solids=on,overlay=bricks,outlines=bricks`.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewSpec {
    /// Field.
    pub field: FieldKind,
    /// Colour map (default: the field's usual one).
    pub cmap: Option<ColorMap>,
    /// Fixed range (default: auto).
    pub range: Option<(f32, f32)>,
    /// Slice indices x:y:z (3D; default: the middle).
    pub slices: Option<[usize; 3]>,
    /// Image size in pixels (default: fit the domain, about 1200 wide).
    pub size: Option<[u32; 2]>,
    /// Isosurface field and threshold (3D; default: none).
    pub iso: Option<(FieldKind, f32)>,
    /// Solid obstacles as surfaces (3D; default: on).
    pub solids: Option<bool>,
    /// Brick overlay on the slices (default: off).
    pub bricks: bool,
    /// Outlines of the boundary and all-solid bricks (3D; default: off).
    pub brick_outlines: bool,
    /// Outlines of a compressed run's subgrids, coloured by compression ratio (3D; default: off).
    pub subgrid_outlines: bool,
    /// The legend under the picture (default: on; off for a bare picture, e.g. a thumbnail).
    pub legend: bool,
    /// Tracers: how many and where they are released (default: none). A picture shows them
    /// after they were carried through the state's velocity for a while; a bench moves them
    /// with every frame.
    pub tracers: Option<(u32, panels::tracers::Seeding)>,
    /// Streamlines: seeds along each edge of the seed line (2D) or plane (3D) in front of the
    /// inlet (default: none).
    pub streamlines: Option<u32>,
}

impl Default for ViewSpec {
    fn default() -> ViewSpec {
        ViewSpec {
            field: FieldKind::Speed,
            cmap: None,
            range: None,
            slices: None,
            size: None,
            iso: None,
            solids: None,
            bricks: false,
            brick_outlines: false,
            subgrid_outlines: false,
            legend: true,
            tracers: None,
            streamlines: None,
        }
    }
}

impl ViewSpec {
    /// The keys `--view` accepts.
    pub const KEYS: &'static str = "field, cmap, range, slices, size, iso, solids, overlay, outlines, legend, tracers, streamlines";

    /// Parse `key=value` pairs separated by commas.
    ///
    /// # Errors
    /// An unknown key or a bad value, with the accepted forms.
    pub fn parse(s: &str) -> anyhow::Result<ViewSpec> {
        let mut v = ViewSpec::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, val)) = part.split_once('=') else {
                anyhow::bail!("--view {part}: expected KEY=VALUE ({})", ViewSpec::KEYS);
            };
            let nums = |sep: char| -> anyhow::Result<Vec<f64>> {
                val.split(sep).map(|x| x.trim().parse::<f64>().map_err(|e| anyhow::anyhow!("--view {part}: {e}"))).collect()
            };
            match k.trim() {
                "field" => {
                    v.field = field_from_name(val)
                        .ok_or_else(|| anyhow::anyhow!("--view field={val}: expected speed, ux, uy, uz, rho, vorticity or q"))?;
                }
                "cmap" | "colormap" => {
                    v.cmap = Some(
                        ColorMap::from_name(val)
                            .ok_or_else(|| anyhow::anyhow!("--view cmap={val}: expected viridis, turbo or diverging"))?,
                    );
                }
                "range" => {
                    let r = nums(':')?;
                    if r.len() != 2 || !(r[1] > r[0]) {
                        anyhow::bail!("--view range={val}: expected MIN:MAX with MAX > MIN, e.g. range=0:0.12");
                    }
                    v.range = Some((r[0] as f32, r[1] as f32));
                }
                "slices" => {
                    let r = nums(':')?;
                    if r.len() != 3 || r.iter().any(|&x| x < 0.0) {
                        anyhow::bail!("--view slices={val}: expected X:Y:Z cell indices, e.g. slices=32:16:16");
                    }
                    v.slices = Some([r[0] as usize, r[1] as usize, r[2] as usize]);
                }
                "size" => {
                    let r = nums('x')?;
                    if r.len() != 2 || r.iter().any(|&x| !(1.0..=8192.0).contains(&x)) {
                        anyhow::bail!("--view size={val}: expected WIDTHxHEIGHT in pixels, e.g. size=1200x400");
                    }
                    v.size = Some([r[0] as u32, r[1] as u32]);
                }
                "iso" => v.iso = parse_iso(val).map_err(|e| anyhow::anyhow!("--view iso={val}: {e}"))?,
                "solids" => {
                    v.solids = Some(match val.trim().to_ascii_lowercase().as_str() {
                        "on" | "true" | "yes" | "1" => true,
                        "off" | "false" | "no" | "0" => false,
                        _ => anyhow::bail!("--view solids={val}: expected on or off"),
                    });
                }
                "legend" => {
                    v.legend = match val.trim().to_ascii_lowercase().as_str() {
                        "on" | "true" | "yes" | "1" => true,
                        "off" | "false" | "no" | "0" => false,
                        _ => anyhow::bail!("--view legend={val}: expected on or off"),
                    };
                }
                "overlay" => {
                    v.bricks = match val.trim().to_ascii_lowercase().as_str() {
                        "bricks" => true,
                        "none" | "off" => false,
                        _ => anyhow::bail!("--view overlay={val}: expected bricks or none"),
                    };
                }
                "outlines" => {
                    (v.brick_outlines, v.subgrid_outlines) = match val.trim().to_ascii_lowercase().as_str() {
                        "bricks" => (true, false),
                        "subgrids" => (false, true),
                        "bricks+subgrids" | "subgrids+bricks" => (true, true),
                        "none" | "off" => (false, false),
                        _ => anyhow::bail!("--view outlines={val}: expected bricks, subgrids, bricks+subgrids or none"),
                    };
                }
                "tracers" => v.tracers = parse_tracers(val).map_err(|e| anyhow::anyhow!("--view tracers={val}: {e}"))?,
                "streamlines" => {
                    v.streamlines = match val.trim().to_ascii_lowercase().as_str() {
                        "off" | "none" | "0" => None,
                        "on" => Some(panels::tracers::StreamlineSettings::default().seeds),
                        x => match x.parse::<u32>() {
                            Ok(k) if (1..=256).contains(&k) => Some(k),
                            _ => anyhow::bail!(
                                "--view streamlines={val}: expected the seeds along each edge, 1 to 256 (e.g. streamlines=16), on or off"
                            ),
                        },
                    };
                }
                other => anyhow::bail!("--view {other}: unknown key ({})", ViewSpec::KEYS),
            }
        }
        Ok(v)
    }
}

/// `20000`, `20000:inlet`, `20000:everywhere` or `off`.
fn parse_tracers(val: &str) -> Result<Option<(u32, panels::tracers::Seeding)>, String> {
    use panels::tracers::Seeding;
    let forms =
        format!("expected COUNT[:inlet|everywhere] with COUNT 1 to {} (e.g. tracers=20000:everywhere), or off", render::MAX_TRACERS);
    let (count, seeding) = match val.split_once(':') {
        Some((c, s)) => (c.trim(), Some(s.trim().to_ascii_lowercase())),
        None => (val.trim(), None),
    };
    if count.eq_ignore_ascii_case("off") || count.eq_ignore_ascii_case("none") {
        return if seeding.is_none() { Ok(None) } else { Err(forms) };
    }
    let count = count.parse::<u32>().ok().filter(|c| (1..=render::MAX_TRACERS).contains(c)).ok_or_else(|| forms.clone())?;
    let seeding = match seeding.as_deref() {
        None | Some("inlet") => Seeding::Inlet,
        Some("everywhere" | "all") => Seeding::Everywhere,
        Some(_) => return Err(forms),
    };
    Ok(Some((count, seeding)))
}

/// `vorticity:0.01`, `q:1e-5`, `vorticity` (the default threshold) or `off`.
fn parse_iso(val: &str) -> Result<Option<(FieldKind, f32)>, String> {
    const FORMS: &str = "expected vorticity:THRESHOLD or q:THRESHOLD (e.g. iso=vorticity:0.01, iso=q:1e-5), or off";
    let (name, thr) = match val.split_once(':') {
        Some((n, t)) => (n.trim(), Some(t.trim())),
        None => (val.trim(), None),
    };
    if name.eq_ignore_ascii_case("off") || name.eq_ignore_ascii_case("none") {
        return if thr.is_none() { Ok(None) } else { Err(FORMS.into()) };
    }
    let kind = field_from_name(name).filter(|k| ISO_FIELDS.contains(k)).ok_or_else(|| format!("field {name:?}: {FORMS}"))?;
    let threshold = match thr {
        None => default_iso_threshold(kind),
        Some(t) => {
            t.parse::<f32>().ok().filter(|x| x.is_finite()).ok_or_else(|| format!("threshold {t:?} is not a finite number: {FORMS}"))?
        }
    };
    Ok(Some((kind, threshold)))
}

/// The isosurface line of the legend.
#[derive(Clone, Debug, PartialEq)]
pub struct IsoLegend {
    /// Field of the surface.
    pub kind: FieldKind,
    /// Threshold.
    pub threshold: f32,
    /// Colour range of the velocity magnitude on it.
    pub color_range: (f32, f32),
    /// A warning (triangles capped, no surface at this threshold).
    pub note: Option<String>,
}

/// The brick overlay's key in the legend.
#[derive(Clone, Debug, PartialEq)]
pub struct BrickLegend {
    /// Cells per brick.
    pub brick: [usize; 3],
    /// Bricks of each class, indexed by `BrickClass as usize`.
    pub counts: [usize; 3],
}

impl BrickLegend {
    /// The key of a brick map.
    #[must_use]
    pub fn of(map: &BrickMap) -> BrickLegend {
        BrickLegend { brick: map.brick, counts: BrickClass::ALL.map(|c| map.count_of(c)) }
    }
}

/// What the legend shows.
#[derive(Clone, Debug, PartialEq)]
pub struct LegendInfo {
    /// Field.
    pub field: FieldKind,
    /// Colour map.
    pub cmap: ColorMap,
    /// Range.
    pub range: (f32, f32),
    /// Auto range (from the data) or fixed.
    pub auto: bool,
    /// The isosurface, when one is drawn.
    pub iso: Option<IsoLegend>,
    /// The brick overlay's key, when it is drawn.
    pub bricks: Option<BrickLegend>,
    /// The title instead of the field's name and units (the difference view's).
    pub title: Option<String>,
    /// The subgrid outlines' key, when they are drawn.
    pub subgrids: Option<SubgridLegend>,
    /// The block outlines' key (an adaptive run), when they are drawn.
    pub blocks: Option<BlockLegend>,
    /// The data's true smallest and largest value, when the auto range leaves out the tails.
    pub data: Option<(f32, f32)>,
    /// The scene's SI units, when it gives them: the range is shown in SI units too.
    pub units: Option<sim_core::units::Units>,
}

/// The block outlines' key in the legend: leaves per level and the level colours.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockLegend {
    /// Leaves per level (index: level).
    pub leaves: Vec<usize>,
    /// Cells per block edge on each level (index: level), in cells of the finest grid.
    pub edge: Vec<usize>,
}

/// The subgrid outlines' key in the legend: the colour map of the compression ratio.
#[derive(Clone, Debug, PartialEq)]
pub struct SubgridLegend {
    /// Ratio at the two ends of the colour bar.
    pub range: (f32, f32),
    /// Subgrids outlined.
    pub count: usize,
    /// Smallest and largest threshold among them.
    pub tau: (f32, f32),
}

impl LegendInfo {
    /// A legend of the field alone.
    #[must_use]
    pub fn field(field: FieldKind, cmap: ColorMap, range: (f32, f32), auto: bool) -> LegendInfo {
        LegendInfo { field, cmap, range, auto, iso: None, bricks: None, title: None, subgrids: None, blocks: None, data: None, units: None }
    }
}

/// Where the legend's colour bar is drawn inside a view `rect` (points).
#[must_use]
pub fn legend_bar_rect(rect: Rect) -> Rect {
    let w = 256.0f32.min(rect.width() - 40.0).max(40.0);
    Rect::from_min_size(egui::pos2(rect.right() - 18.0 - w, rect.bottom() - 36.0 - 14.0), egui::vec2(w, 14.0))
}

/// Draw the legend (field name, units, colour bar, range) in the bottom-right of `rect`; returns
/// the part of `rect` it covers (other overlays keep out of it).
pub fn legend_ui(ui: &Ui, rect: Rect, l: &LegendInfo, tex: egui::TextureId) -> Rect {
    let bar = legend_bar_rect(rect);
    let painter = ui.painter();
    let font = egui::FontId::proportional(13.0);
    let how = match (l.auto, l.data) {
        (false, _) => "fixed range",
        (true, Some(_)) => "auto: 1st to 99th percentile",
        (true, None) => "auto range",
    };
    let title = format!("{}  ({how})", l.title.as_deref().unwrap_or_else(|| field_units(l.field)));
    let galley = painter.layout_no_wrap(title, font.clone(), Color32::from_gray(235));
    // Below the ticks, the data's true extremes when the range leaves out the tails, and the
    // range in SI units where the scene gives them.
    let extremes = l.data.map(|(lo, hi)| format!("data from {} to {}", fmt_value(lo), fmt_value(hi)));
    let si = l.units.as_ref().filter(|_| l.title.is_none()).map(|u| legend::si_range(l.field, l.range, u));
    let below: Vec<_> = extremes.into_iter().chain(si).map(|t| painter.layout_no_wrap(t, font.clone(), Color32::from_gray(190))).collect();
    let extra: f32 = below.iter().map(|g| g.size().y + 2.0).sum();
    let bottom = rect.bottom() - 8.0;
    let bar = bar.translate(egui::vec2(0.0, bottom - extra - (bar.bottom() + 24.0)).min(egui::Vec2::ZERO));
    let wide = below.iter().map(|g| g.size().x).fold(galley.size().x, f32::max);
    let bg = Rect::from_min_max(
        egui::pos2(bar.left().min(bar.right() - wide) - 8.0, bar.top() - galley.size().y - 12.0),
        egui::pos2(bar.right() + 8.0, bar.bottom() + 24.0 + extra),
    );
    painter.rect_filled(bg, 4.0, Color32::from_black_alpha(190));
    painter.galley(egui::pos2(bg.left() + 8.0, bar.top() - galley.size().y - 6.0), galley, Color32::from_gray(235));
    painter.image(tex, bar, Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)), Color32::WHITE);
    let (lo, hi) = l.range;
    for (i, v) in [lo, 0.5 * (lo + hi), hi].into_iter().enumerate() {
        let x = bar.left() + bar.width() * i as f32 * 0.5;
        painter.line_segment([egui::pos2(x, bar.bottom()), egui::pos2(x, bar.bottom() + 4.0)], (1.0, Color32::from_gray(235)));
        let align = [egui::Align2::LEFT_TOP, egui::Align2::CENTER_TOP, egui::Align2::RIGHT_TOP][i];
        painter.text(egui::pos2(x, bar.bottom() + 5.0), align, fmt_value(v), font.clone(), Color32::from_gray(235));
    }
    let mut y = bar.bottom() + 22.0;
    for g in below {
        let h = g.size().y + 2.0;
        painter.galley(egui::pos2(bar.right() - g.size().x, y), g, Color32::from_gray(190));
        y += h;
    }
    let mut covered = bg;
    // Above it, the isosurface: its field, threshold and colouring (and a warning).
    let mut top = bg.top();
    if let Some(iso) = &l.iso {
        let mut lines = vec![(
            format!(
                "isosurface {} = {}, coloured by |u| from {} to {}",
                iso.kind.name(),
                fmt_value(iso.threshold),
                fmt_value(iso.color_range.0),
                fmt_value(iso.color_range.1)
            ),
            Color32::from_gray(235),
        )];
        if let Some(n) = &iso.note {
            lines.push((n.clone(), Color32::from_rgb(255, 170, 60)));
        }
        for (text, color) in lines.into_iter().rev() {
            let galley = painter.layout_no_wrap(text, font.clone(), color);
            let r = Rect::from_min_size(egui::pos2(bar.right() - galley.size().x, top - 6.0 - galley.size().y), galley.size());
            painter.rect_filled(r.expand(4.0), 4.0, Color32::from_black_alpha(190));
            painter.galley(r.min, galley, color);
            covered = covered.union(r.expand(4.0));
            top = r.top() - 4.0;
        }
    }
    if let Some(b) = &l.bricks {
        bricks_legend_ui(ui, rect, b);
    }
    if let Some(s) = &l.subgrids {
        subgrid_legend_ui(ui, rect, s);
    }
    if let Some(b) = &l.blocks {
        let finest = b.leaves.len().saturating_sub(1) as u8;
        let mut lines = vec![("leaf blocks by level".to_string(), None)];
        for (lv, (&n, &e)) in b.leaves.iter().zip(&b.edge).enumerate() {
            let k = render::level_color(lv as u8, finest);
            lines.push((format!("level {lv}: {n} ({e} cells wide)"), Some(Color32::from_rgb(k[0], k[1], k[2]))));
        }
        swatch_legend_ui(ui, rect, lines, false);
    }
    covered
}

/// The subgrid outlines' key, top left of `rect`: what the colours mean and a colour bar of the
/// compression ratio (drawn from the colour map, no texture).
pub fn subgrid_legend_ui(ui: &Ui, rect: Rect, s: &SubgridLegend) {
    let painter = ui.painter();
    let font = egui::FontId::proportional(13.0);
    let text = Color32::from_gray(235);
    let tau = if s.tau.0 == s.tau.1 { format!("{:.1e}", s.tau.1) } else { format!("{:.1e} to {:.1e}", s.tau.0, s.tau.1) };
    let title = painter.layout_no_wrap(format!("{} subgrids by compression ratio (tau {tau})", s.count), font.clone(), text);
    let w = title.size().x.max(200.0);
    let bg = Rect::from_min_size(egui::pos2(rect.left() + 10.0, rect.top() + 10.0), egui::vec2(w + 16.0, title.size().y + 44.0));
    painter.rect_filled(bg, 4.0, Color32::from_black_alpha(190));
    let top = bg.top() + 6.0;
    painter.galley(egui::pos2(bg.left() + 8.0, top), title, text);
    let bar = Rect::from_min_size(egui::pos2(bg.left() + 8.0, top + 20.0), egui::vec2(w, 10.0));
    let k = 64;
    for i in 0..k {
        let c = render::SUBGRID_CMAP.lut_entry(i * (colormap::LUT_SIZE - 1) / (k - 1));
        let x0 = bar.left() + bar.width() * i as f32 / k as f32;
        let r = Rect::from_min_max(egui::pos2(x0, bar.top()), egui::pos2(x0 + bar.width() / k as f32 + 0.5, bar.bottom()));
        painter.rect_filled(r, 0.0, Color32::from_rgb(c[0], c[1], c[2]));
    }
    let (lo, hi) = s.range;
    for (x, v, align) in [(bar.left(), lo, egui::Align2::LEFT_TOP), (bar.right(), hi, egui::Align2::RIGHT_TOP)] {
        painter.text(egui::pos2(x, bar.bottom() + 2.0), align, format!("{v:.2}x"), font.clone(), text);
    }
}

/// The brick overlay's key, top right of `rect`: brick size, then each class's colour, name and
/// count.
pub fn bricks_legend_ui(ui: &Ui, rect: Rect, b: &BrickLegend) {
    let size =
        if b.brick[2] == 1 { format!("{}x{}", b.brick[0], b.brick[1]) } else { format!("{}x{}x{}", b.brick[0], b.brick[1], b.brick[2]) };
    let mut lines = vec![(format!("bricks of {size} cells"), None)];
    for c in BrickClass::ALL {
        let k = render::BRICK_COLORS[c as usize];
        lines.push((format!("{}: {}", c.name(), b.counts[c as usize]), Some(Color32::from_rgb(k[0], k[1], k[2]))));
    }
    swatch_legend_ui(ui, rect, lines, true);
}

/// A key of coloured swatches and their lines (a line without a colour is a title), in the top
/// right (`right`) or top left corner of `rect`.
fn swatch_legend_ui(ui: &Ui, rect: Rect, lines: Vec<(String, Option<Color32>)>, right: bool) {
    let painter = ui.painter();
    let font = egui::FontId::proportional(13.0);
    let galleys: Vec<_> = lines.into_iter().map(|(t, c)| (painter.layout_no_wrap(t, font.clone(), Color32::from_gray(235)), c)).collect();
    let w = galleys.iter().map(|(g, _)| g.size().x).fold(0.0, f32::max) + 22.0;
    let h: f32 = galleys.iter().map(|(g, _)| g.size().y + 3.0).sum();
    let left = if right { rect.right() - w - 22.0 } else { rect.left() + 10.0 };
    let bg = Rect::from_min_size(egui::pos2(left, rect.top() + 10.0), egui::vec2(w + 12.0, h + 10.0));
    painter.rect_filled(bg, 4.0, Color32::from_black_alpha(190));
    let mut y = bg.top() + 5.0;
    for (g, c) in galleys {
        let h = g.size().y;
        if let Some(c) = c {
            painter.rect_filled(Rect::from_min_size(egui::pos2(bg.left() + 6.0, y + h * 0.5 - 6.0), egui::vec2(12.0, 12.0)), 2.0, c);
        }
        painter.galley(egui::pos2(bg.left() + 24.0, y), g, Color32::from_gray(235));
        y += h + 3.0;
    }
}

/// A number for the legend: short, with an exponent when it is very small or large.
#[must_use]
pub fn fmt_value(v: f32) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e4).contains(&a) {
        format!("{v:.2e}")
    } else {
        format!("{v:.4}")
    }
}
