"""Spot economics (issue 14): cost, makespan, lost GPU-hours and savings of a
24-hour single-GPU job and a 4-node job under seeded Poisson preemption
traces (or a trace file), for spotline, all on-demand, restart from scratch on
Spot, and a SkyPilot-like periodic-checkpoint poller.

spotline and on-demand run through spotline's real handlers on a virtual clock
(``benchmarks.econ.spotline_run``); the other two are models
(``benchmarks.econ.baselines``). Prints a Markdown table and the target check.

    python benchmarks/bench_econ.py                      # docs/benchmarks.md's table
    python benchmarks/bench_econ.py --trace benchmarks/econ/traces/example.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.econ import report, traces
from benchmarks.econ.model import Job, Params
from benchmarks.econ.spotline_run import SpotlineRun

RATES = (0.1, 0.5, 1.0, 2.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machine", default="g2-standard-4", help="catalog machine id")
    parser.add_argument("--hours", type=float, default=24.0, help="the job's GPU work")
    parser.add_argument("--gang", type=int, default=4, help="nodes of the multi-node job (0: none)")
    parser.add_argument("--seeds", type=int, default=3, help="seeded traces per rate")
    parser.add_argument(
        "--rates", default=",".join(map(str, RATES)), help="preemptions per VM-hour"
    )
    parser.add_argument("--trace", type=Path, help="a trace file instead of the Poisson traces")
    parser.add_argument("--boot-s", type=float, default=Params.boot_s)
    parser.add_argument("--checkpoint-s", type=float, default=Params.checkpoint_s)
    parser.add_argument("--period-s", type=float, default=Params.period_s)
    parser.add_argument("--detect-s", type=float, default=Params.detect_s)
    parser.add_argument("--delete-s", type=float, default=Params.delete_s)
    args = parser.parse_args(argv)
    params = Params(
        boot_s=args.boot_s,
        checkpoint_s=args.checkpoint_s,
        period_s=args.period_s,
        detect_s=args.detect_s,
        delete_s=args.delete_s,
    )
    jobs = [Job(f"1x {args.machine} {args.hours:g} h", args.machine, args.hours)]
    if args.gang > 0:
        name = f"{args.gang}x {args.machine} {args.hours:g} h"
        jobs.append(Job(name, args.machine, args.hours, args.gang))
    began = time.monotonic()
    table: list[report.Row] = []
    verdicts: list[str] = []
    for job in jobs:
        on_demand = SpotlineRun(job, traces.Trace("none", ()), params, on_demand=True).run()
        if args.trace:
            sets = [(args.trace.name, [traces.load(args.trace)])]
        else:
            sets = [
                (
                    f"{rate:g}",
                    [
                        traces.poisson(rate, job.nodes, params.max_hours, seed)
                        for seed in range(1, args.seeds + 1)
                    ],
                )
                for rate in map(float, args.rates.split(","))
            ]
        for label, trace_set in sets:
            rows = report.rows(job, label, trace_set, params, on_demand)
            table += rows
            if label == "1":
                verdicts.append(report.verdict(rows[0]))
    print(report.markdown(table))
    print("\nspotline's makespan past on-demand, by cause (means):\n")
    print(report.breakdown_markdown(table))
    print()
    for line in verdicts:
        print(f"target: {line}")
    print(f"\nparameters (seconds, hours for max_hours):\n{report.parameters(params)}")
    print(f"\n{len(table)} rows in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
