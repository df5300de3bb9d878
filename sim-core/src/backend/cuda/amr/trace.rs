//! Developer knob `ESOFLOW_AMR_PROFILE=trace`: the device time of each operation of an
//! adaptation, from timing events recorded on the stream between the launches (nothing waits
//! inside the adaptation, so the times are those of a normal run, the gaps where the device
//! waits for the host included in the operation after them). Printed per operation when the
//! solver is dropped: total, launches, mean per adaptation.

use cudarc::driver::{sys::CUevent_flags, CudaContext, CudaEvent, CudaStream};
use std::collections::BTreeMap;
use std::sync::Arc;

pub(super) struct Trace {
    /// Events recorded since the adaptation began, with the operation each one ends.
    marks: Vec<(&'static str, usize)>,
    pool: Vec<CudaEvent>,
    sums: BTreeMap<&'static str, (f64, u64)>,
    adaptations: u64,
    total: f64,
    /// Blocks refined and coarsened by each adaptation.
    changes: Vec<(usize, usize)>,
}

impl Trace {
    /// The trace when the knob asks for it.
    pub(super) fn from_env() -> Option<Trace> {
        (std::env::var("ESOFLOW_AMR_PROFILE").as_deref() == Ok("trace")).then(|| Trace {
            marks: Vec::new(),
            pool: Vec::new(),
            sums: BTreeMap::new(),
            adaptations: 0,
            total: 0.0,
            changes: Vec::new(),
        })
    }

    fn event(&mut self, ctx: &Arc<CudaContext>, i: usize) -> Option<&CudaEvent> {
        while self.pool.len() <= i {
            self.pool.push(ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).ok()?);
        }
        self.pool.get(i)
    }

    /// Start an adaptation's trace.
    pub(super) fn begin(&mut self, s: &Arc<CudaStream>) {
        self.marks.clear();
        self.tick(s, "start");
    }

    /// The work launched since the last tick belongs to `op`.
    pub(super) fn tick(&mut self, s: &Arc<CudaStream>, op: &'static str) {
        let i = self.marks.len();
        let ctx = s.context().clone();
        if let Some(e) = self.event(&ctx, i) {
            if e.record(s).is_ok() {
                self.marks.push((op, i));
            }
        }
    }

    /// End the adaptation: wait for its events and add their intervals.
    pub(super) fn end(&mut self, s: &Arc<CudaStream>, changes: (usize, usize)) {
        self.changes.push(changes);
        self.tick(s, "end");
        for w in self.marks.windows(2) {
            let (a, b) = (&self.pool[w[0].1], &self.pool[w[1].1]);
            if let Ok(ms) = a.elapsed_ms(b) {
                let e = self.sums.entry(w[1].0).or_insert((0.0, 0));
                e.0 += f64::from(ms) * 1e-3;
                e.1 += 1;
                self.total += f64::from(ms) * 1e-3;
            }
        }
        self.marks.clear();
        self.adaptations += 1;
    }

    /// The table, largest first.
    pub(super) fn print(&self) {
        let n = self.adaptations.max(1) as f64;
        eprintln!("amr adaptation trace: {} adaptations, {:.1} us each on the device", self.adaptations, 1e6 * self.total / n);
        let tail: Vec<String> = self.changes.iter().rev().take(40).rev().map(|(r, c)| format!("+{r}/-{c}")).collect();
        eprintln!("  blocks refined/coarsened by the last adaptations: {}", tail.join(" "));
        let mut rows: Vec<_> = self.sums.iter().collect();
        rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        for (op, (t, c)) in rows {
            eprintln!("  {op:24} {:9.1} us/adaptation {:5.1} % {c:8} intervals", 1e6 * t / n, 100.0 * t / self.total.max(1e-12));
        }
    }
}
