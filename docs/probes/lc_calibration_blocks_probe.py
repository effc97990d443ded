"""Run from the project root: `python docs/probes/lc_calibration_blocks_probe.py [rounds]`.

Issue 20 §3 probe: how far does one measurement of a distributed step's fixed costs
(:func:`runtime.calibrate.calibrate_distributed`'s figures) land from the next, on one
:class:`runtime.LocalCluster` with nothing changed between them, and which way of
taking them is steadier at about the same cost?

Each round measures, one after the other and at the calibration's settings, the
servers' dispatch per op between kernels (:func:`runtime.calibrate.
measure_server_dispatch`, 15 steps), the step and part overheads
(:func:`runtime.calibrate.measure_step_overheads`, 15 repeats, 3 rounds) and a
crossing's latency and a 64 KiB crossing (:func:`runtime.calibrate.
measure_process_transfer`, 30 repeats).  Over ``rounds`` rounds (default 12), per
figure: each round's value and their spread (max / min - 1); then the rounds in
disjoint groups of three, each group's fastest (least) and its median, and the
spread of those; last, ``rounds // 3`` more rounds with three times the repeats
(one block of the same cost as a group of three), and their spread.

What it showed (2026-11-28 01:09 UTC, this 2-core machine, under the timing lock, 12
rounds of 1.17 s; us; spread of single rounds / of the fastest of each three / of the
median of each three / of one block of three times the repeats):

    dispatch per op  3.8 to 6.6    72% / 23% / 21% /  5%
    step overhead    176 to 279    59% /  7% / 10% / 67%
    part overhead    166 to 218    31% /  6% / 13% / 29%
    latency          102 to 118    16% /  3% /  6% / 14%
    64 KiB crossing  181 to 263    45% / 26% / 21% / 34%

One round lands anywhere in a wide range: the machine's speed changes over seconds
and a block of steps catches it in one state or the other.  Three blocks seconds
apart agree far better than one block of the same cost (more steps in one stretch
of time help only the dispatch, whose steps are the longest), whether taken at their
fastest or their median.  Kept: ``calibrate_distributed(blocks=...)``
(:func:`runtime.calibrate.combine_blocks`), three blocks in a full calibration of
this host (:data:`experiments.backends.DISTRIBUTED_BLOCKS`).

Which statistic, judged on workloads the blocks never saw, paired
(``docs/probes/lc_calibration_blocks_ab.py``: ``experiments.sim_vs_real``'s default
run, ``--no-loop --repeats 31 --calibrate-once``, with three blocks; each static row
predicted with the cluster of the first block alone, as one block calibrated before,
and of the three; both calibrations of each run; 2026-11-28 01:12 to 01:38 UTC,
under the timing lock).  Median |error| over the 16 rows, one block / three blocks:

    fastest of three   10.5/6.9 14.4/11.1 6.1/5.9 9.9/10.9 16.6/17.7 25.3/3.5
                       9.3/14.4 12.5/13.3 9.7/12.8 18.7/14.0 26.1/14.3 11.9/12.2
                       23.1/24.7 14.8/22.8 20.4/21.5 3.8/16.2 9.1/9.2 12.6/11.8
                       14.4/10.4 9.7/9.9 10.3/13.9 14.2/13.4 (further in 13 of 22)
    median of three    26.1/25.8 11.9/11.9 23.1/17.0 14.8/17.3 20.4/9.6 3.8/3.8
                       9.1/8.7 12.6/10.8 14.4/8.7 9.7/9.5 10.3/10.3 14.2/14.2
                       (nearer in 7 of 12, as near in 4, further in 1; median of the
                       12: 13.4% / 10.6%)

The fastest of three blocks of fastest steps is a machine faster than the one the
workloads' fastest steps see; the median keeps the level of one block and drops much
of its noise.  The two calibrations of each of the last six runs predicted its rows
26, 3, 6, 3, 3 and 12% apart at the median with three blocks (their median), against
24, 13, 14, 7, 4 and 11% with one (the first run's 26% came from the in-process
kernel costs, which the blocks do not measure).
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())

import runtime  # noqa: E402
from experiments.backends import runtime_cluster_spec, server_env, this_host_cluster  # noqa: E402
from runtime.calibrate import (measure_process_transfer, measure_server_dispatch,  # noqa: E402
                               measure_step_overheads)

MASTER, SRC = ("worker", 0), ("ps", 0)


def one_round(local, scale: int = 1) -> dict:
    """The figures of one round, in microseconds, at ``scale`` times the repeats."""
    dispatch = measure_server_dispatch(local, MASTER, steps=15 * scale)
    step, part, _ = measure_step_overheads(local, MASTER, 15 * scale, rounds=3)
    latency, _, samples = measure_process_transfer(local, SRC, MASTER, (4, 64 << 10),
                                                   repeats=30 * scale)
    return {"dispatch": dispatch * 1e6, "step": step * 1e6, "part": part * 1e6,
            "latency": latency * 1e6, "64KiB": samples[64 << 10] * 1e6}


def spread(values) -> float:
    return max(values) / min(values) - 1


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    with runtime.LocalCluster(runtime_cluster_spec(this_host_cluster()),
                              env=server_env()) as local:
        t0 = time.perf_counter()
        single = [one_round(local) for _ in range(rounds)]
        seconds = (time.perf_counter() - t0) / rounds
        long = [one_round(local, 3) for _ in range(rounds // 3)]
    print(f"one round: {seconds:.2f} s")
    for name in single[0]:
        values = [r[name] for r in single]
        groups = [values[i:i + 3] for i in range(0, rounds - rounds % 3, 3)]
        fastest = [min(g) for g in groups]
        median = [statistics.median(g) for g in groups]
        tripled = [r[name] for r in long]
        print(f"{name:8s} rounds {[round(v, 1) for v in values]} spread {spread(values):.0%}")
        print(f"{'':8s} fastest of 3 {[round(v, 1) for v in fastest]} spread "
              f"{spread(fastest):.0%}; median of 3 {[round(v, 1) for v in median]} spread "
              f"{spread(median):.0%}; 3x repeats {[round(v, 1) for v in tripled]} spread "
              f"{spread(tripled):.0%}")


if __name__ == "__main__":
    main()
