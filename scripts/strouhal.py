#!/usr/bin/env python3
"""Strouhal number and mean drag from an esoflow stats.csv (run with --export DIR and
--set solver.stats_every=10): mean F_x and the spacing of upward zero crossings of F_y over the
steps in [from, to). A crossing counts only once F_y has been below its mean by a quarter of its
amplitude since the last one: an adaptation of the blocks puts a small kink in the lift, and
near zero that made extra crossings (the square cylinder adapting every 250 steps read as St
0.208 where its lift's period is that of St 0.164).

usage: strouhal.py STATS.CSV FROM TO U D
  U: inflow velocity (cells of level 0 per step of level 0), D: obstacle size in those cells.
  C_D = 2 mean(F_x) / (U^2 D), St = D / (U T) with T the mean period of F_y.
"""
import csv
import sys


def main():
    path, lo, hi, u, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    rows = [r for r in csv.DictReader(line for line in open(path) if not line.startswith("#"))]
    pts = [(int(r["step"]), float(r["fx"]), float(r["fy"])) for r in rows if lo <= int(r["step"]) < hi]
    if len(pts) < 3:
        sys.exit(f"{path}: fewer than 3 rows between steps {lo} and {hi}")
    fx = sum(p[1] for p in pts) / len(pts)
    fy_mean = sum(p[2] for p in pts) / len(pts)
    amp = (max(p[2] for p in pts) - min(p[2] for p in pts)) / 2
    ups = []
    armed = False
    for (s0, _, y0), (s1, _, y1) in zip(pts, pts[1:]):
        a, b = y0 - fy_mean, y1 - fy_mean
        armed = armed or a < -amp / 4
        if armed and a < 0 <= b:
            ups.append(s0 + (s1 - s0) * (-a) / (b - a))
            armed = False
    cd = 2 * fx / (u * u * d)
    if len(ups) < 2:
        print(f"C_D {cd:.3f}; fewer than two lift periods in steps {lo}-{hi}")
        return
    period = (ups[-1] - ups[0]) / (len(ups) - 1)
    cl = 2 * amp / (u * u * d)
    print(f"St {d / (u * period):.4f}  C_D {cd:.4f}  C_L amplitude {cl:.3f}  ({len(ups) - 1} periods of {period:.1f} steps)")


main()
