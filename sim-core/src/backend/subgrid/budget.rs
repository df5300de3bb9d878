//! How a memory budget raises the compression threshold (tau) of subgrids, for the CPU and the
//! GPU subgrid solvers alike.
//!
//! After a step over the budget, tau doubles for the subgrids with the largest records, enough
//! of them that halving their records would cover the excess. Each raise is judged after the
//! next step by the record it left: a subgrid whose record has not shrunk by [`PAYS`] since its
//! raises began is raised again, up to [`TRIES`] doublings; if it still has not shrunk, tau goes
//! back to where it was before and the subgrid is left out of later raises. A record that holds
//! little more than its approximations (a flow at rest, or one without detail at that tau) does
//! not shrink with a higher tau, and before this rule the budget doubled tau every step up to
//! the cap, so that the detail the flow brought later was thrown away. A subgrid left out is
//! tried again once its record has grown by [`REGROWN`] (the flow brought detail back), and
//! every subgrid is after the user sets tau or the budget ([`Memo::default`]).

use super::{TAU_CAP, TAU_FLOOR};

/// The least share of its bytes a record must lose to its raises for them to stay.
pub(crate) const PAYS: f64 = 0.05;

/// Doublings of tau a subgrid gets to make its record smaller by [`PAYS`] (16x its tau).
pub(crate) const TRIES: u32 = 4;

/// Growth of a left-out subgrid's record (over its size when left out) that makes its tau worth
/// raising again.
pub(crate) const REGROWN: f64 = 1.25;

/// Raises of one subgrid that have not paid yet.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Run {
    /// Tau and the record's bytes before the first of them.
    tau: f32,
    bytes: u64,
    /// Doublings so far.
    tries: u32,
}

/// What the budget remembers of one subgrid between steps.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Memo {
    /// Raises after the last steps that have not paid yet.
    run: Option<Run>,
    /// Left out of raises: the record's bytes when its raises did not pay.
    spent: Option<u64>,
}

impl Memo {
    /// Whether raises have stopped paying for this subgrid.
    #[cfg(test)]
    pub(crate) fn spent(&self) -> bool {
        self.spent.is_some()
    }
}

/// What one pass of the budget did.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Outcome {
    /// Subgrids raised now: (index, tau before, tau now), the largest record first.
    pub(crate) raised: Vec<(usize, f32, f32)>,
    /// Subgrids whose raises did not pay: tau back where it was, left out from now on.
    pub(crate) undone: usize,
    /// Over the budget, and no subgrid is left whose tau is worth raising.
    pub(crate) exhausted: bool,
}

/// One pass after a step: judge the raises so far by the records' `bytes` now, then, with
/// `excess` bytes over the budget (0: within it), raise tau for the largest records that are
/// still worth it. `taus`, `bytes` and `memos` are per subgrid, in one order.
pub(crate) fn after_step(taus: &mut [f32], bytes: &[u64], memos: &mut [Memo], excess: u64) -> Outcome {
    debug_assert!(taus.len() == bytes.len() && taus.len() == memos.len());
    let mut out = Outcome::default();
    for k in 0..taus.len() {
        let m = &mut memos[k];
        if let Some(r) = m.run {
            if bytes[k] as f64 <= (1.0 - PAYS) * r.bytes as f64 {
                m.run = None;
            } else if r.tries >= TRIES {
                taus[k] = r.tau;
                m.run = None;
                m.spent = Some(bytes[k]);
                out.undone += 1;
            }
        }
        if m.spent.is_some_and(|at| bytes[k] as f64 > REGROWN * at as f64) {
            m.spent = None;
        }
    }
    let mut now = vec![false; taus.len()];
    if excess > 0 {
        // Raises that have not paid yet go on first: were they passed over for records that are
        // larger now, their taus would go back and come again, step after step, never judged.
        let mut order: Vec<usize> = (0..taus.len()).filter(|&k| taus[k] < TAU_CAP && memos[k].spent.is_none()).collect();
        order.sort_by_key(|&k| (memos[k].run.is_none(), std::cmp::Reverse(bytes[k])));
        let mut covered = 0u64;
        for k in order {
            if covered >= excess {
                break;
            }
            let old = taus[k];
            taus[k] = if old > 0.0 { (2.0 * old).min(TAU_CAP) } else { TAU_FLOOR };
            let m = &mut memos[k];
            m.run = Some(m.run.map_or(Run { tau: old, bytes: bytes[k], tries: 1 }, |r| Run { tries: r.tries + 1, ..r }));
            now[k] = true;
            covered += bytes[k] / 2;
            out.raised.push((k, old, taus[k]));
        }
        out.exhausted = out.raised.is_empty();
    }
    // Raises that have not paid and are not taken further now: tau goes back (nothing is lost,
    // they had not made the record smaller).
    for k in 0..taus.len() {
        if let (Some(r), false) = (memos[k].run, now[k]) {
            taus[k] = r.tau;
            memos[k].run = None;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_records_are_raised_until_half_of_them_covers_the_excess() {
        let mut taus = [1e-5f32, 1e-5, 1e-5, 0.0];
        let mut memos = [Memo::default(); 4];
        let out = after_step(&mut taus, &[100, 400, 300, 200], &mut memos, 300);
        assert_eq!(out.raised, vec![(1, 1e-5, 2e-5), (2, 1e-5, 2e-5)]);
        assert_eq!(taus, [1e-5, 2e-5, 2e-5, 0.0]);
        assert!(!out.exhausted);
        // Within the budget nothing is raised.
        let mut t2 = [0.0f32; 2];
        let out = after_step(&mut t2, &[10, 20], &mut [Memo::default(); 2], 0);
        assert_eq!((out.raised.len(), t2), (0, [0.0, 0.0]));
        // Tau 0 starts at the floor.
        let out = after_step(&mut t2, &[10, 20], &mut [Memo::default(); 2], 1);
        assert_eq!(out.raised, vec![(1, 0.0, TAU_FLOOR)]);
    }

    #[test]
    fn raises_go_on_while_the_record_shrinks() {
        let mut taus = [1e-5f32];
        let mut memos = [Memo::default()];
        let mut bytes = 1000u64;
        for _ in 0..10 {
            let out = after_step(&mut taus, &[bytes], &mut memos, 1);
            assert_eq!((out.raised.len(), out.undone), (1, 0));
            bytes = bytes * 9 / 10;
        }
        assert_eq!(taus[0], 1e-5 * 1024.0);
    }

    #[test]
    fn a_record_at_its_floor_gets_its_tau_back_and_is_left_out() {
        let mut taus = [1e-5f32, 1e-5];
        let mut memos = [Memo::default(); 2];
        // Subgrid 1 keeps its size whatever tau; subgrid 0 is at the cap's side of the order.
        for k in 1..=TRIES {
            let out = after_step(&mut taus, &[10, 300], &mut memos, 100);
            assert_eq!(out.raised, vec![(1, 1e-5 * (1 << (k - 1)) as f32, 1e-5 * (1 << k) as f32)]);
        }
        let out = after_step(&mut taus, &[10, 300], &mut memos, 100);
        assert_eq!(out.undone, 1);
        assert_eq!(out.raised, vec![(0, 1e-5, 2e-5)], "the next largest is tried instead");
        assert_eq!(taus[1], 1e-5, "tau back where it was before the raises");
        assert!(memos[1].spent());
        for _ in 0..20 {
            let out = after_step(&mut taus, &[10, 300], &mut memos, 100);
            assert!(out.raised.iter().all(|r| r.0 == 0));
        }
        assert!(memos[0].spent() && memos[1].spent());
        assert_eq!(taus, [1e-5, 1e-5], "tau does not climb while raising does not pay");
        assert!(after_step(&mut taus, &[10, 300], &mut memos, 100).exhausted);
        // The flow brings detail back into subgrid 1: its tau is worth raising again.
        let out = after_step(&mut taus, &[10, 380], &mut memos, 100);
        assert_eq!(out.raised, vec![(1, 1e-5, 2e-5)]);
    }

    #[test]
    fn raises_that_have_not_paid_go_on_before_larger_records_are_raised() {
        // Subgrid 0's raise saves 2 %, which leaves it below subgrid 1: it is still raised on
        // until it is judged, instead of its tau going back and coming again every step.
        let mut taus = [1e-5f32, 1e-5];
        let mut memos = [Memo::default(); 2];
        assert_eq!(after_step(&mut taus, &[300, 296], &mut memos, 100).raised, vec![(0, 1e-5, 2e-5)]);
        for k in 2..=TRIES {
            let out = after_step(&mut taus, &[294, 296], &mut memos, 100);
            assert_eq!(out.raised.len(), 1);
            assert_eq!(out.raised[0].0, 0, "pass {k}");
        }
        let out = after_step(&mut taus, &[294, 296], &mut memos, 100);
        assert_eq!((out.undone, out.raised[0].0, taus[0]), (1, 1, 1e-5));
        assert!(memos[0].spent());
    }

    #[test]
    fn a_raise_not_taken_further_within_the_budget_is_taken_back() {
        let mut taus = [1e-5f32];
        let mut memos = [Memo::default()];
        after_step(&mut taus, &[300], &mut memos, 100);
        assert_eq!(taus, [2e-5]);
        // Within the budget again (other subgrids shrank), this one did not: tau back, and it is
        // not left out.
        let out = after_step(&mut taus, &[300], &mut memos, 0);
        assert_eq!((taus, out.undone), ([1e-5], 0));
        assert!(!memos[0].spent());
        // One that paid keeps its tau.
        after_step(&mut taus, &[300], &mut memos, 100);
        after_step(&mut taus, &[200], &mut memos, 0);
        assert_eq!(taus, [2e-5]);
    }

    #[test]
    fn a_subgrid_at_the_cap_is_not_raised() {
        let mut taus = [TAU_CAP, 1e-3];
        let mut memos = [Memo::default(); 2];
        let out = after_step(&mut taus, &[500, 10], &mut memos, 1000);
        assert_eq!(out.raised, vec![(1, 1e-3, 2e-3)]);
        let mut taus = [TAU_CAP];
        let out = after_step(&mut taus, &[500], &mut [Memo::default()], 1000);
        assert!(out.exhausted);
    }
}
