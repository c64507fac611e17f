#!/usr/bin/env python3
"""Compares HTA's per-iteration numbers with `shardscope report --json`.

    compare.py HTA_JSON REPORT_JSON [--rel 0.005] [--abs-us 2] [--overlap-pp 0.5]
               [--all-steps] [--quiet]

HTA_JSON is bench/hta_check/hta_per_iteration.py's output (for example
tests/reference/hta/*.json); REPORT_JSON is `shardscope report TRACE --json` of
the same trace. Standard library only: runs without HTA.

Per rank (matched by rank id) and per iteration: HTA iteration i is shardscope's
step_values entry with "step" == i. Compared: the iterations both have that
shardscope marks "reported" (with --all-steps, every iteration both have; without
it the others are still shown, marked "info", and never fail).

    HTA                      shardscope step_values
    kernel_time_us       <-> device_span_ms * 1000
    idle_time_us         <-> idle_ms * 1000
    compute_time_us      <-> compute_ms * 1000
    non_compute_time_us  <-> non_compute_ms * 1000
    comm_time_us         <-> comm_ms * 1000
    comm_comp_overlap_pct <-> 100 * overlap   (HTA null = no comm kernels:
                                               shardscope must have comm_ms == 0)

A time passes when |hta - shardscope| <= max(rel * |hta|, abs_us) (defaults
0.5 % and 2 us: HTA rounds fractional-microsecond timestamps to whole
microseconds, ceil(ts) and floor(ts + dur), unless HTA_DISABLE_NS_ROUNDING=1);
the overlap passes within overlap_pp percentage points (default 0.5).

Iterations only one side has are listed. Exit 0 when every compared value
passes, 1 on any failure (or when HTA has per-iteration values and none could be
compared, or a rank is missing on one side), 2 when an input is unusable
(including an HTA JSON holding {"error": ...}).
"""

import argparse
import json
import sys

TIME_FIELDS = [
    # (label, HTA key, shardscope key)
    ("span", "kernel_time_us", "device_span_ms"),
    ("idle", "idle_time_us", "idle_ms"),
    ("compute", "compute_time_us", "compute_ms"),
    ("non_compute", "non_compute_time_us", "non_compute_ms"),
    ("comm", "comm_time_us", "comm_ms"),
]


def load(path, what):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError) as e:
        print(f"error: {what} {path}: {e}", file=sys.stderr)
        sys.exit(2)


def fmt(x, digits=3):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hta_json")
    ap.add_argument("report_json")
    ap.add_argument("--rel", type=float, default=0.005, help="relative tolerance (0.005)")
    ap.add_argument("--abs-us", type=float, default=2.0, help="absolute tolerance, us (2)")
    ap.add_argument("--overlap-pp", type=float, default=0.5, help="overlap tolerance, points (0.5)")
    ap.add_argument("--all-steps", action="store_true",
                    help="also fail on steps shardscope does not mark reported")
    ap.add_argument("--quiet", action="store_true", help="print failures and the summary only")
    a = ap.parse_args(argv)

    hta = load(a.hta_json, "HTA JSON")
    rep = load(a.report_json, "report JSON")
    if "error" in hta:
        print(f"error: HTA could not read {hta.get('files')}: {hta['error']}", file=sys.stderr)
        return 2
    if "ranks" not in hta or "ranks" not in rep:
        print("error: no 'ranks' in one of the inputs", file=sys.stderr)
        return 2

    print(f"HTA {hta.get('hta_version')} ({'ns rounding' if hta.get('ns_rounding', True) else 'HTA_DISABLE_NS_ROUNDING=1'}) "
          f"on {', '.join(hta.get('files', []))}; shardscope step_rule={rep.get('step_rule')}")
    if hta.get("warning"):
        print(f"HTA warning: {hta['warning']}")
    print(f"tolerance: times max({a.rel * 100:g} %, {a.abs_us:g} us), overlap {a.overlap_pp:g} pp")

    failures = []
    notes = []
    worst = {label: (0.0, 0.0) for label, _, _ in TIME_FIELDS}  # (abs us, rel)
    worst_overlap = 0.0
    compared = 0

    hta_ranks = {r["rank"]: r for r in hta["ranks"]}
    rep_ranks = {r["rank"]: r for r in rep["ranks"]}
    hta_valid = sum(1 for r in hta["ranks"] for it in r.get("iterations", [])
                    if it.get("kernel_time_us") is not None)
    for rk in sorted(set(hta_ranks) - set(rep_ranks)):
        failures.append(f"rank {rk}: in HTA, not in the shardscope report")
    for rk in sorted(set(rep_ranks) - set(hta_ranks)):
        failures.append(f"rank {rk}: in the shardscope report, not in HTA")

    header = f"{'rank':>4} {'step':>6} {'field':<12} {'HTA':>14} {'shardscope':>14} {'diff':>11} {'tol':>9}  result"
    if not a.quiet:
        print(header)
    for rk in sorted(set(hta_ranks) & set(rep_ranks)):
        h_iters = {it["iteration"]: it for it in hta_ranks[rk].get("iterations", [])}
        s_steps = {sv["step"]: sv for sv in rep_ranks[rk].get("step_values", [])}
        if "step_values" not in rep_ranks[rk]:
            print(f"error: rank {rk} of the report has no step_values", file=sys.stderr)
            return 2
        for i, it in h_iters.items():
            if it.get("kernel_time_us") is None:
                why = it.get("temporal_breakdown_error", "no values")
                notes.append(f"rank {rk} iteration {i}: HTA has no values ({it.get('gpu_events', 0)} "
                             f"device events; {why})")
        only_h = sorted(i for i in h_iters if i not in s_steps)
        only_s = sorted(s for s in s_steps if s not in h_iters)
        if only_h:
            notes.append(f"rank {rk}: iterations only HTA has: {only_h}")
        if only_s:
            notes.append(f"rank {rk}: steps only shardscope has: "
                         + ", ".join(f"{s}{'' if s_steps[s].get('reported') else ' (not reported)'}"
                                     for s in only_s))
        for i in sorted(set(h_iters) & set(s_steps)):
            it, sv = h_iters[i], s_steps[i]
            checked = bool(sv.get("reported")) or a.all_steps
            if it.get("kernel_time_us") is None:
                if checked:
                    notes.append(f"rank {rk} step {i}: reported by shardscope, but HTA has no values")
                continue
            if checked:
                compared += 1
            tag = "" if checked else " (info: not reported)"
            for label, hk, sk in TIME_FIELDS:
                hv, sv_ms = it.get(hk), sv.get(sk)
                if hv is None or sv_ms is None:
                    res = "missing"
                    if checked:
                        failures.append(f"rank {rk} step {i} {label}: HTA {hv}, shardscope {sv_ms}")
                    if not a.quiet or checked:
                        print(f"{rk:>4} {i:>6} {label:<12} {fmt(hv):>14} {fmt(sv_ms):>14} {'':>11} {'':>9}  {res}{tag}")
                    continue
                s_us = sv_ms * 1000.0
                diff = s_us - hv
                tol = max(a.rel * abs(hv), a.abs_us)
                ok = abs(diff) <= tol + 1e-9
                if checked:
                    w_abs, w_rel = worst[label]
                    # relative residual only where the absolute tolerance does not dominate
                    rel = abs(diff) / abs(hv) if abs(hv) > a.abs_us else 0.0
                    worst[label] = (max(w_abs, abs(diff)), max(w_rel, rel))
                    if not ok:
                        failures.append(f"rank {rk} step {i} {label}: HTA {hv} us, shardscope {s_us:.3f} us "
                                        f"(diff {diff:+.3f} us > {tol:.3f})")
                if not a.quiet or (checked and not ok):
                    print(f"{rk:>4} {i:>6} {label:<12} {fmt(float(hv)):>14} {s_us:>14.3f} {diff:>+11.3f} "
                          f"{tol:>9.3f}  {'ok' if ok else 'FAIL'}{tag}")
            ho = it.get("comm_comp_overlap_pct")
            so = sv.get("overlap")
            s_comm = sv.get("comm_ms")
            if ho is None:
                ok = (s_comm or 0) == 0
                line = (f"{rk:>4} {i:>6} {'overlap_pct':<12} {'- (no comm)':>14} "
                        f"{fmt(None if so is None else 100 * so):>14} {'':>11} {'':>9}  "
                        f"{'ok' if ok else 'FAIL (shardscope has comm)'}{tag}")
                if checked and not ok:
                    failures.append(f"rank {rk} step {i}: HTA sees no comm kernels, shardscope comm_ms={s_comm}")
            elif so is None:
                ok = False
                line = f"{rk:>4} {i:>6} {'overlap_pct':<12} {ho:>14.3f} {'-':>14} {'':>11} {'':>9}  FAIL{tag}"
                if checked:
                    failures.append(f"rank {rk} step {i}: HTA overlap {ho:.3f} %, shardscope has none")
            else:
                diff = 100.0 * so - ho
                ok = abs(diff) <= a.overlap_pp + 1e-12
                if checked:
                    worst_overlap = max(worst_overlap, abs(diff))
                    if not ok:
                        failures.append(f"rank {rk} step {i} overlap: HTA {ho:.3f} %, shardscope "
                                        f"{100 * so:.3f} % (diff {diff:+.3f} pp)")
                line = (f"{rk:>4} {i:>6} {'overlap_pct':<12} {ho:>14.3f} {100 * so:>14.3f} {diff:>+11.3f} "
                        f"{a.overlap_pp:>9.3f}  {'ok' if ok else 'FAIL'}{tag}")
            if not a.quiet or (checked and not ok):
                print(line)

    if hta_valid > 0 and compared == 0:
        failures.append("no iteration compared: HTA has per-iteration values, but no step both "
                        "have is reported by shardscope")
    for n in notes:
        print(f"note: {n}")
    if compared:
        print("largest differences over compared steps: "
              + ", ".join(f"{label} {w[0]:.3f} us ({100 * w[1]:.4f} %)" for label, w in worst.items())
              + f", overlap {worst_overlap:.4f} pp")
    if hta_valid == 0:
        print("nothing to compare: HTA has no per-iteration values for this trace")
    if failures:
        print(f"FAIL: {len(failures)} failure(s) over {compared} compared step(s)")
        for f in failures:
            print(f"  {f}")
        return 1
    print(f"PASS: {compared} step(s) compared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
