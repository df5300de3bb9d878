//! Data-parallel primitives the mesh operations are phrased in: exclusive scan and stream
//! compaction. On the GPU these are Thrust/CUB calls (`exclusive_scan`, `copy_if`); here they
//! are the same two-level pattern with rayon (per-chunk sums in parallel, a scan of the chunk
//! sums, then per-chunk local scans in parallel).

use rayon::prelude::*;

/// Elements per chunk of the two-level scan (one "thread block").
const CHUNK: usize = 4096;

/// Exclusive prefix sum of `input` into `out` (same length); returns the total.
pub fn exclusive_scan(input: &[u32], out: &mut [u32]) -> u32 {
    assert_eq!(input.len(), out.len(), "scan lengths");
    let sums: Vec<u32> = input.par_chunks(CHUNK).map(|c| c.iter().sum()).collect();
    let mut base = Vec::with_capacity(sums.len());
    let mut acc = 0u32;
    for s in &sums {
        base.push(acc);
        acc += s;
    }
    out.par_chunks_mut(CHUNK).zip(input.par_chunks(CHUNK)).zip(base.par_iter()).for_each(|((o, i), &b)| {
        let mut a = b;
        for (oo, &ii) in o.iter_mut().zip(i) {
            *oo = a;
            a += ii;
        }
    });
    acc
}

/// Stream compaction: the indices `i` with `flag[i] != 0`, in increasing order, written to
/// `out[..count]` through an exclusive scan of the flags (the scatter is the GPU kernel's).
/// `offsets` is scratch of the same length as `flag`. Returns the count.
pub fn compact(flag: &[u32], offsets: &mut [u32], out: &mut [u32]) -> usize {
    let total = exclusive_scan(flag, offsets) as usize;
    assert!(out.len() >= total, "compaction output too small");
    for (i, (&f, &o)) in flag.iter().zip(offsets.iter()).enumerate() {
        if f != 0 {
            out[o as usize] = i as u32;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_and_compact_match_the_sequential_definition() {
        let input: Vec<u32> = (0..10_000u32).map(|i| (i * 7919) % 3).collect();
        let mut out = vec![0; input.len()];
        let total = exclusive_scan(&input, &mut out);
        let mut acc = 0;
        for (i, &v) in input.iter().enumerate() {
            assert_eq!(out[i], acc);
            acc += v;
        }
        assert_eq!(total, acc);
        let flags: Vec<u32> = input.iter().map(|&v| u32::from(v == 1)).collect();
        let mut off = vec![0; flags.len()];
        let mut ids = vec![0; flags.len()];
        let n = compact(&flags, &mut off, &mut ids);
        let want: Vec<u32> = (0..input.len() as u32).filter(|&i| input[i as usize] == 1).collect();
        assert_eq!(&ids[..n], &want[..]);
    }
}
