//! Editing the cells of a running simulation: turn fluid cells solid (as part of an obstacle,
//! so the force on them is reported) or solid cells fluid. [`Domain::plan_edit`] checks an
//! edit and says what changes; backends apply it with [`crate::Solver::edit_cells`], which
//! keeps the incoming DDFs of every cell that stays fluid exactly as they were (only their
//! place in memory may move, because bounce-back reads other slots next to a solid) and starts
//! every cell that becomes fluid at rest equilibrium.

use crate::domain::{id_of, is_solid, kind, kind_of, make_flag, Domain, MAX_IDS};

/// What the cells of an edit become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EditTo {
    /// Fluid (at rest, density the mean of its fluid neighbours, or 1).
    Fluid,
    /// Solid cells of the obstacle with this name; a new obstacle when the domain has none of
    /// that name.
    Solid(String),
    /// Solid cells of an existing obstacle, by id (1-based, as in [`Domain::obstacles`]).
    SolidId(usize),
}

/// An edit: cells (linear indices `x + nx * (y + ny * z)`) and what they become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellEdit {
    /// Cell indices; duplicates are allowed.
    pub cells: Vec<usize>,
    /// What they become.
    pub to: EditTo,
}

/// What an edit did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EditReport {
    /// Every cell that changed, with its flag before the edit (the [`crate::domain::NEAR`] bit
    /// included); enough to undo the edit.
    pub changed: Vec<(usize, u8)>,
    /// Obstacle id the new solid cells belong to.
    pub obstacle: Option<usize>,
    /// Mass (sum of density) of the cells that became fluid, as initialised.
    pub mass_added: f64,
    /// Mass of the cells that became solid, before the edit.
    pub mass_removed: f64,
}

impl EditReport {
    /// Number of cells that became solid.
    #[must_use]
    pub fn became_solid(&self) -> usize {
        self.changed.iter().filter(|(_, f)| !is_solid(*f)).count()
    }
    /// Number of cells that became fluid.
    #[must_use]
    pub fn became_fluid(&self) -> usize {
        self.changed.iter().filter(|(_, f)| is_solid(*f)).count()
    }
    /// The edits that undo this one (the flow state is not restored, only the cells).
    #[must_use]
    pub fn undo(&self) -> Vec<CellEdit> {
        let mut out = Vec::new();
        let back_to_fluid: Vec<usize> = self.changed.iter().filter(|(_, f)| !is_solid(*f)).map(|(c, _)| *c).collect();
        if !back_to_fluid.is_empty() {
            out.push(CellEdit { cells: back_to_fluid, to: EditTo::Fluid });
        }
        for id in 1..=MAX_IDS {
            let cells: Vec<usize> = self.changed.iter().filter(|(_, f)| is_solid(*f) && id_of(*f) == id).map(|(c, _)| *c).collect();
            if !cells.is_empty() {
                out.push(CellEdit { cells, to: EditTo::SolidId(id) });
            }
        }
        out
    }
}

/// Why a cell with `flag` cannot take part in an edit to `to`, if it cannot.
#[must_use]
pub fn refusal(flag: u8, to: &EditTo) -> Option<&'static str> {
    match kind_of(flag) {
        kind::INLET => Some("inlet cells cannot be edited"),
        kind::OUTLET => Some("outlet cells cannot be edited"),
        kind::MOVING => Some("moving-wall cells cannot be edited"),
        kind::SLIP => Some("free-slip wall cells cannot be edited"),
        kind::SOLID if id_of(flag) == 0 && *to == EditTo::Fluid => Some("the domain's boundary walls cannot be erased"),
        _ => None,
    }
}

/// The checked form of an edit: which cells change and to what.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EditPlan {
    /// Changed cells with their new flag (without the NEAR bit), sorted, no duplicates.
    pub changes: Vec<(usize, u8)>,
    /// The obstacle id of new solid cells, and the name to add when it is a new obstacle.
    pub obstacle: Option<(usize, Option<String>)>,
}

impl Domain {
    /// Check an edit against this domain and say which cells change. Cells that already are
    /// what the edit asks (solid for a solid edit, fluid for a fluid one) are left alone.
    ///
    /// # Errors
    /// A cell index outside the domain; an inlet, outlet or moving-wall cell; a boundary wall in
    /// a fluid edit; an unknown obstacle id; more than 15 obstacles.
    pub fn plan_edit(&self, e: &CellEdit) -> Result<EditPlan, String> {
        let cells = self.cells();
        for &c in &e.cells {
            if c >= cells {
                return Err(format!("cell index {c} is outside the domain ({cells} cells)"));
            }
            if let Some(why) = refusal(self.flags[c], &e.to) {
                let p = self.coords(c);
                return Err(format!("{why} (cell x={}, y={}, z={})", p[0], p[1], p[2]));
            }
        }
        let mut list: Vec<usize> = e.cells.clone();
        list.sort_unstable();
        list.dedup();
        let (flag, obstacle) = match &e.to {
            EditTo::Fluid => {
                list.retain(|&c| is_solid(self.flags[c]));
                (make_flag(kind::FLUID, 0), None)
            }
            EditTo::Solid(name) => {
                list.retain(|&c| !is_solid(self.flags[c]));
                if let Some(k) = self.obstacles.iter().position(|o| o == name) {
                    (make_flag(kind::SOLID, k + 1), Some((k + 1, None)))
                } else {
                    let id = self.obstacles.len() + 1;
                    if id > MAX_IDS && !list.is_empty() {
                        return Err(format!("at most {MAX_IDS} obstacles: the domain has {} already", self.obstacles.len()));
                    }
                    (make_flag(kind::SOLID, id.min(MAX_IDS)), Some((id, Some(name.clone()))))
                }
            }
            EditTo::SolidId(id) => {
                if *id == 0 || *id > self.obstacles.len() {
                    return Err(format!("there is no obstacle {id} (the domain has {})", self.obstacles.len()));
                }
                list.retain(|&c| !is_solid(self.flags[c]));
                (make_flag(kind::SOLID, *id), Some((*id, None)))
            }
        };
        if list.is_empty() {
            return Ok(EditPlan::default());
        }
        Ok(EditPlan { changes: list.into_iter().map(|c| (c, flag)).collect(), obstacle })
    }

    /// Cells whose flag or whose DDF slots an edit of `changes` may alter: the changed cells and
    /// their lattice neighbours, sorted, no duplicates.
    #[must_use]
    pub fn around(&self, changes: &[(usize, u8)]) -> Vec<usize> {
        let c = self.lattice.velocities();
        let mut v = Vec::with_capacity(changes.len() * c.len());
        for &(n, _) in changes {
            let p = self.coords(n);
            for &ci in c {
                v.push(self.neighbour(p, ci));
            }
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Apply a plan from [`Domain::plan_edit`]: flags, the obstacle table and the NEAR bits of
    /// the cells `around` the change. Returns each changed cell with its flag before.
    pub fn apply_plan(&mut self, plan: &EditPlan, around: &[usize]) -> Vec<(usize, u8)> {
        if let Some((_, Some(name))) = &plan.obstacle {
            self.obstacles.push(name.clone());
        }
        let before: Vec<(usize, u8)> = plan.changes.iter().map(|&(c, _)| (c, self.flags[c])).collect();
        for &(c, f) in &plan.changes {
            self.flags[c] = f;
        }
        self.mark_near_cells(around);
        before
    }

    /// Remove from `cells` those that may not take part in an edit to `to`; returns each reason
    /// with the number of cells it removed.
    pub fn retain_editable(&self, cells: &mut Vec<usize>, to: &EditTo) -> Vec<(&'static str, usize)> {
        let mut counts: Vec<(&'static str, usize)> = Vec::new();
        let n = self.cells();
        cells.retain(|&c| {
            let why = if c >= n { Some("cells outside the domain") } else { refusal(self.flags[c], to) };
            match why {
                None => true,
                Some(w) => {
                    match counts.iter_mut().find(|(k, _)| *k == w) {
                        Some(e) => e.1 += 1,
                        None => counts.push((w, 1)),
                    }
                    false
                }
            }
        });
        counts
    }

    /// The edits that turn this domain's cells into those of `target` (flags of the same
    /// domain before or after some edits): solid cells fluid and fluid cells into the
    /// obstacles `target` has them in. Obstacle ids this domain does not have yet are created
    /// from `names` (the obstacle table of `target`), in id order.
    ///
    /// # Errors
    /// `target` is of another size, or has solid cells edits cannot make (a boundary wall, a
    /// moving wall, an obstacle without a name).
    pub fn edits_towards(&self, target: &[u8], names: &[String]) -> Result<Vec<CellEdit>, String> {
        if target.len() != self.flags.len() {
            return Err("the saved domain has another size".into());
        }
        let mut fluid = Vec::new();
        let mut solid: Vec<Vec<usize>> = vec![Vec::new(); MAX_IDS + 1];
        for (i, (&a, &b)) in self.flags.iter().zip(target).enumerate() {
            match (is_solid(a), is_solid(b)) {
                (true, false) => fluid.push(i),
                (false, true) => {
                    if kind_of(b) != kind::SOLID || id_of(b) == 0 || id_of(b) > self.obstacles.len().max(names.len()) {
                        return Err("the saved domain has solid cells that edits cannot make".into());
                    }
                    solid[id_of(b)].push(i);
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        if !fluid.is_empty() {
            out.push(CellEdit { cells: fluid, to: EditTo::Fluid });
        }
        for (id, cells) in solid.into_iter().enumerate() {
            if cells.is_empty() {
                continue;
            }
            let to = if id <= self.obstacles.len() { EditTo::SolidId(id) } else { EditTo::Solid(names[id - 1].clone()) };
            out.push(CellEdit { cells, to });
        }
        Ok(out)
    }
}
