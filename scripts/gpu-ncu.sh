#!/usr/bin/env bash
# Where the time goes in the stream-collide kernels: Nsight Compute (ncu) counters of one
# steady-state step of the bench's 256^3 box, per configuration. Needs a GPU host whose runtime
# lets ncu read counters (Firecracker machines do, gVisor ones do not). Run from the repository
# root after scripts/stage-gpu.sh: bash stage/gpu-ncu.sh. Prints a table and writes it to
# $OUT/ncu.txt, with every raw counter in $OUT/ncu-raw.csv.
set -uo pipefail
OUT=${OUT:-out/gpu-ncu}
RAW=$(mktemp -d)
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
if [ -z "$NCU" ]; then echo "ncu not found"; exit 1; fi
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum
M=$M,launch__registers_per_thread,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
M=$M,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
M=$M,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
M=$M,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio
M=$M,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio
# name lattice precision env
while read -r name lattice prec env; do
  [ -z "$name" ] && continue
  env $env timeout 120 "$NCU" --clock-control none -k regex:stream_collide --launch-skip 40 --launch-count 1 --metrics "$M" --csv \
    stage/esoflow bench --backend cuda --size 256 --lattice "$lattice" --scheme esoteric_pull --precision "$prec" --seconds 0.05 \
    > "$RAW/ncu-$name.csv" 2> "$RAW/ncu-$name.err"
done <<'CFG'
d3q19-fp32 D3Q19 fp32 ESOFLOW_CUDA_PAIRS=1
d3q19-fp16s D3Q19 fp16s ESOFLOW_CUDA_PAIRS=1
d3q19-fp16s-nopairs D3Q19 fp16s ESOFLOW_CUDA_PAIRS=0
d3q27-fp32 D3Q27 fp32 ESOFLOW_CUDA_PAIRS=1
CFG
python3 - "$RAW" <<'PY' | tee "$OUT/ncu.txt"
import csv, glob, os, sys
out = sys.argv[1]
short = {
    "gpu__time_duration.sum": "us", "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%",
    "launch__registers_per_thread": "regs", "launch__block_size": "block",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occ%", "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue%",
}
for f in sorted(glob.glob(os.path.join(out, "ncu-*.csv"))):
    rows = [r for r in csv.reader(open(f)) if len(r) > 10]
    if len(rows) < 2:
        print(os.path.basename(f), "no data:", open(f.replace(".csv", ".err")).read()[-300:].replace("\n", " "))
        continue
    h = rows[0]
    vals = {}
    for r in rows[1:]:
        d = dict(zip(h, r))
        vals[d["Metric Name"]] = (d["Metric Value"].replace(",", ""), d["Metric Unit"])
    def v(k):
        try:
            return float(vals[k][0])
        except Exception:
            return float("nan")
    t = v("gpu__time_duration.sum")
    unit = vals.get("gpu__time_duration.sum", ("", ""))[1]
    secs = t * {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3}.get(unit, 1e-9)
    by = v("dram__bytes_read.sum") * (1 if vals.get("dram__bytes_read.sum", ("", ""))[1] == "byte" else {"Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(vals.get("dram__bytes_read.sum", ("", ""))[1], 1))
    bw = v("dram__bytes_write.sum") * {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(vals.get("dram__bytes_write.sum", ("", ""))[1], 1)
    ldspr = v("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum") / max(v("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"), 1)
    stspr = v("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum") / max(v("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"), 1)
    st = lambda k: v("smsp__average_warps_issue_stalled_%s_per_issue_active.ratio" % k)
    print(f"{os.path.basename(f)[4:-4]:<20} {secs*1e6:8.1f} us  {(by+bw)/secs/1e9 if secs else 0:7.0f} GB/s  dram {v('dram__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}%  "
          f"regs {v('launch__registers_per_thread'):.0f} block {v('launch__block_size'):.0f} occ {v('sm__warps_active.avg.pct_of_peak_sustained_active'):5.1f}%  "
          f"issue {v('smsp__issue_active.avg.pct_of_peak_sustained_active'):5.1f}%  sect/req ld {ldspr:.2f} st {stspr:.2f}  "
          f"stalls/issue: longsb {st('long_scoreboard'):.2f} barrier {st('barrier'):.2f} lg {st('lg_throttle'):.2f} mio {st('mio_throttle'):.2f} drain {st('drain'):.2f}")
PY
for f in "$RAW"/ncu-*.csv; do echo "# $(basename "$f")"; cat "$f"; tail -n 3 "${f%.csv}.err"; done > "$OUT/ncu-raw.csv"
