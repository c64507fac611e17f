#!/usr/bin/env python3
"""Per-iteration numbers of Holistic Trace Analysis (HTA) for Kineto traces.

    hta_per_iteration.py [--out FILE] [--no-ns-rounding] [--verbose] TRACE [TRACE...]

The TRACEs (.json or .json.gz, one file per rank) form one run: they are
symlinked into a temporary folder and loaded with HTA's TraceAnalysis exactly as
a user would (`TraceAnalysis(trace_dir=...)`, the last ProfilerStep dropped). For
every rank and every iteration >= 0 that HTA keeps, HTA's own
BreakdownAnalysis.get_temporal_breakdown and
CommunicationAnalysis.get_comm_comp_overlap run on a shallow copy of the loaded
Trace whose rank dataframe is restricted to that iteration's rows
(`iteration == i`). The unrounded overlap ratio and the communication time come
from the same steps HTA's get_comm_comp_overlap takes (hta.utils.utils
get_kernel_type + merge_kernel_intervals), checked against HTA's own
2-decimal percentage. The standard whole-trace values go under "whole_trace".

--no-ns-rounding sets HTA_DISABLE_NS_ROUNDING=1: HTA then keeps fractional
microseconds instead of ceil(ts) / floor(ts + dur) (it only rounds when the
file's "ts" values parse as floats).

Writes JSON (stdout or --out). When HTA cannot load the run, writes
{"error": "...", ...} and exits 3. Times are microseconds, as HTA reports them.
Needs HolisticTraceAnalysis (scripts/hta-check installs the pinned version).
"""

import argparse
import copy
import gzip
import json
import logging
import math
import os
import re
import sys
import tempfile
import traceback
import warnings
from importlib.metadata import version as pkg_version


def _num(x):
    """A JSON number: ints stay ints, integral floats become ints, NaN -> None."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    if math.isnan(f) or math.isinf(f):
        return None
    f = round(f, 6)  # drop float noise below a picosecond (HTA subtracts sums of floats)
    if f == int(f) and abs(f) < 2**53:
        return int(f)
    return f


def _error_text(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    if text.endswith(":"):
        text = text[:-1]
    frames = traceback.extract_tb(e.__traceback__)
    # Name HTA's frame (stable with the pins), not the library's below it.
    hta_frames = [f for f in frames if "/hta/" in f.filename]
    frames = hta_frames or frames
    if frames:
        f = frames[-1]
        where = f.filename
        if "site-packages/" in where:
            where = where.split("site-packages/", 1)[1]
        text += f" (at {where}:{f.lineno} in {f.name})"
    return text


def _hta_rank_of(path):
    """The rank HTA 0.5.0 reads from a file (hta/common/trace_file.py
    create_rank_to_trace_dict): the first line matching '"rank":\\s+(\\d+)' (at least
    one blank after the colon); None when no line matches (HTA then uses rank 0)."""
    rank_re = re.compile(r'"rank":\s+(\d+)')
    opener = gzip.open if path.endswith("gz") else open
    with opener(path, "rb") as fh:
        for line in fh:
            m = rank_re.search(line.decode("utf-8", errors="replace"))
            if m:
                return int(m.group(1))
    return None


def _comm_comp(gpu_df, sym_table):
    """HTA's get_comm_comp_overlap_value for one rank dataframe, unrounded, plus
    |union(comm)|. Same steps as hta/analyzers/communication_analysis.py (0.5.0)."""
    import pandas as pd
    from hta.utils.utils import get_kernel_type, KernelType, merge_kernel_intervals

    gpu_kernels = gpu_df[gpu_df["stream"].ne(-1)].copy()
    if len(gpu_kernels) == 0:
        return None, 0
    gpu_kernels["kernel_type"] = gpu_kernels[["name"]].apply(
        lambda x: get_kernel_type(sym_table[x["name"]]), axis=1
    )
    comp_kernels = merge_kernel_intervals(
        gpu_kernels[gpu_kernels["kernel_type"].eq(KernelType.COMPUTATION.name)].copy()
    )
    comm_kernels = merge_kernel_intervals(
        gpu_kernels[gpu_kernels["kernel_type"].eq(KernelType.COMMUNICATION.name)].copy()
    )
    comm_time = (comm_kernels["end"] - comm_kernels["ts"]).sum()
    if len(comm_kernels) == 0:
        return None, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        status_df = (
            pd.concat(
                [
                    comm_kernels.melt(var_name="status", value_name="time").replace(
                        {"ts": 1, "end": -1}
                    ),
                    comp_kernels.melt(var_name="status", value_name="time").replace(
                        {"ts": 2, "end": -2}
                    ),
                ]
            )
            .sort_values(by="time")
            .reset_index(drop=True)
        )
    status_df["running"] = status_df["status"].cumsum()
    overlap = status_df[status_df["running"].eq(3)]
    shifted = overlap.merge(status_df.shift(-1).dropna(), left_index=True, right_index=True)
    ratio = (shifted["time_y"] - shifted["time_x"]).sum() / comm_time
    return float(ratio), comm_time


def _values(t, rank, df):
    """HTA's temporal breakdown + comm/comp overlap of `df` (one rank's rows)."""
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.analyzers.communication_analysis import CommunicationAnalysis

    out = {}
    sub = copy.copy(t)  # shallow: shares the symbol table
    sub.traces = {rank: df}
    out["gpu_events"] = int(df["stream"].ne(-1).sum())
    try:
        tb = BreakdownAnalysis.get_temporal_breakdown(sub, visualize=False).iloc[0]
        out["kernel_time_us"] = _num(tb["kernel_time(us)"])
        out["idle_time_us"] = _num(tb["idle_time(us)"])
        out["compute_time_us"] = _num(tb["compute_time(us)"])
        out["non_compute_time_us"] = _num(tb["non_compute_time(us)"])
    except Exception as e:  # noqa: BLE001 - recorded, never hidden
        for k in ("kernel_time_us", "idle_time_us", "compute_time_us", "non_compute_time_us"):
            out[k] = None
        out["temporal_breakdown_error"] = _error_text(e)
    sym_table = t.symbol_table.get_sym_table()
    try:
        ratio, comm_time = _comm_comp(df, sym_table)
        out["comm_comp_overlap_pct"] = None if ratio is None else 100.0 * ratio
        out["comm_time_us"] = _num(comm_time)
    except Exception as e:  # noqa: BLE001
        out["comm_comp_overlap_pct"] = None
        out["comm_time_us"] = None
        out["comm_comp_overlap_error"] = _error_text(e)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hta_pct = CommunicationAnalysis.get_comm_comp_overlap(sub, visualize=False).iloc[0][
                "comp_comm_overlap_pctg"
            ]
        out["hta_comp_comm_overlap_pctg"] = _num(hta_pct)  # HTA's own, 2 decimals
        mine = out.get("comm_comp_overlap_pct")
        if mine is not None and not math.isnan(float(hta_pct)):
            if abs(round(mine, 2) - float(hta_pct)) > 0.0051:
                raise AssertionError(
                    f"reproduced overlap {mine} disagrees with HTA's {hta_pct}"
                )
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001
        out["hta_comp_comm_overlap_pctg"] = None
        out["hta_comp_comm_overlap_error"] = _error_text(e)
    return out


def analyse(files, verbose=False):
    import pandas as pd
    from hta.configs.config import logger as hta_logger
    from hta.trace_analysis import TraceAnalysis

    if not verbose:
        hta_logger.setLevel(logging.ERROR)
        warnings.simplefilter("ignore", FutureWarning)
    result = {
        "tool": "bench/hta_check/hta_per_iteration.py",
        "hta_version": pkg_version("HolisticTraceAnalysis"),
        "pandas_version": pd.__version__,
        "numpy_version": pkg_version("numpy"),
        "ns_rounding": os.environ.get("HTA_DISABLE_NS_ROUNDING") != "1",
        "files": [os.path.basename(f) for f in files],
    }
    with tempfile.TemporaryDirectory(prefix="hta-run-") as tmp:
        names = set()
        for i, f in enumerate(files):
            name = os.path.basename(f)
            if not (name.endswith(".json") or name.endswith(".gz")):
                raise SystemExit(f"error: {f}: HTA reads only .json and .gz files")
            if name in names:
                name = f"{i}-{name}"
            names.add(name)
            os.symlink(os.path.abspath(f), os.path.join(tmp, name))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                analyzer = TraceAnalysis(trace_dir=tmp)
        except Exception as e:  # noqa: BLE001
            result["error"] = _error_text(e)
            return result
        t = analyzer.t
        rank_files = {r: os.path.basename(os.path.realpath(p)) for r, p in t.trace_files.items()}
        if len(rank_files) != len(files):
            no_rank = [os.path.basename(f) for f in files if _hta_rank_of(f) is None]
            result["warning"] = (
                f"HTA mapped {len(files)} files to {len(rank_files)} ranks: two files with "
                "the same rank, or without one (HTA then uses rank 0)"
                + (
                    f"; no '\"rank\": N' (blank after the colon) in {', '.join(no_rank)}"
                    if no_rank
                    else ""
                )
            )
        result["ranks"] = []
        for rank in t.get_ranks():
            df = t.get_trace(rank)
            entry = {"rank": int(rank), "file": rank_files.get(rank)}
            entry["iterations"] = []
            for it in t.get_iterations(rank):
                vals = _values(t, rank, df[df["iteration"] == it])
                entry["iterations"].append({"iteration": int(it), **vals})
            entry["whole_trace"] = _values(t, rank, df)
            entry["whole_trace"]["kernels_without_iteration"] = int(
                (df["stream"].ne(-1) & ~(df["iteration"] >= 0)).sum()
            )
            result["ranks"].append(entry)
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Per-iteration HTA temporal breakdown and comm/comp overlap."
    )
    ap.add_argument("traces", nargs="+", help="Kineto trace files of one run (one per rank)")
    ap.add_argument("--out", help="write the JSON here (default: stdout)")
    ap.add_argument(
        "--no-ns-rounding",
        action="store_true",
        help="HTA_DISABLE_NS_ROUNDING=1: keep fractional microseconds",
    )
    ap.add_argument("--verbose", action="store_true", help="keep HTA's log output")
    a = ap.parse_args(argv)
    if a.no_ns_rounding:
        os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    else:
        os.environ.pop("HTA_DISABLE_NS_ROUNDING", None)
    for f in a.traces:
        if not os.path.isfile(f):
            ap.error(f"{f}: no such file")
    result = analyse(a.traces, a.verbose)
    text = json.dumps(result, indent=1, sort_keys=False) + "\n"
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, a.out)
    else:
        sys.stdout.write(text)
    return 3 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
