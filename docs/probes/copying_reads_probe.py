"""Run from the project root: `python docs/probes/copying_reads_probe.py [CLUSTER.json] [workload ...]`.

Issue 20 §2 probe: this lab's executor hands a variable's buffer on for its read only
when nothing in the step writes the variable (:func:`core.runtime_model.forwarded_reads`);
its Identity, Reshape, StopGradient and Squeeze kernels otherwise copy their input
("outputs never alias inputs", :mod:`runtime.kernels.cpu`), while the cost model took
every such op for one that forwards its buffer (its overheads alone).  In a training
step the reads of the variables it updates are such copies.

Per workload (one inter-op thread, 10 traced steps after 3 untimed), each op that
``INTERPRETER.copying_ops`` names with an output of 100 kB or more: its fastest kernel
against :meth:`core.costs.StaticCostModel.op_time` (the buffer handed on) and
:meth:`~core.costs.StaticCostModel.copy_time` (a copy), less the device's dispatch
overhead, on the calibrated cluster ``CLUSTER.json`` (e.g. a saved
``calibration_0.json``; default: a quick calibration here).

What it showed (2026-11-28 08:58 UTC, this 2-core VM under the timing lock, the
calibration of the 04:41 in-process run; kernel, and the cost model handed on / copied):

- mlp: the three 256 KiB weight matrices' reads (they copy) took 10.4-11.2 us each;
  the cost model 0.6 us handed on, 16.1 us copied;
- gnmt:batch=4: its eight 125-192 KiB reads (they copy) took 8.0-18.7 us; 0.6 us
  handed on, 8.2-12.2 us copied;
- mixed_random:seed=2 (its step updates no variable): its 256 KiB and 4 MiB reads
  took 0.3-1.6 us: handed on, as the executor's rule says.

So ``RuntimeModel.copies_forwarding_ops`` (on in ``INTERPRETER``) times such an op as
the copy its kernel makes.  Re-predicted on saved runs (the same measurements,
``/work/scratch/s8/copy_eval.py``): 741 in-process rows, median |error| 16.4% ->
16.5%, mean 21.0% -> 21.0%, 322 of the 497 rows that moved moved closer (mlp's median
-25% -> -23%); 415 LocalCluster rows, median 17.4% -> 16.4%, 267 of 415 closer.
"""

import os
import sys

sys.path.insert(0, os.getcwd())
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import runtime  # noqa: E402
from core.cluster import Cluster  # noqa: E402
from core.costs import StaticCostModel  # noqa: E402
from core.runtime_model import INTERPRETER  # noqa: E402
from core.step_ops import step_ops  # noqa: E402
from experiments.sim_vs_real import build_workload  # noqa: E402
from runtime.calibrate_kernels import _fastest_kernels  # noqa: E402


def main(cluster, names):
    device = next(d for d in cluster.devices if d.is_cpu)
    model = StaticCostModel()
    config = runtime.SessionConfig(inter_op_parallelism_threads=1, use_per_session_threads=True)
    for name in names:
        w = build_workload(name)
        with runtime.Session(graph=w.graph, config=config) as session:
            if w.init is not None:
                session.run(w.init)
            feeds = w.feeds or None
            for _ in range(3):
                session.run(w.fetch_ops, feed_dict=feeds)
            fastest = _fastest_kernels([session.run(w.fetch_ops, feed_dict=feeds, trace=True)[1]
                                        for _ in range(10)])
        copying = INTERPRETER.copying_ops(step_ops(w.graph.get_operations(), w.fetch_ops)[0])
        for op in w.graph.get_operations():
            if op.name not in fastest or not op.outputs or not op.op_def.forwards_input:
                continue
            nbytes = op.op_def.bytes_written([t.spec for t in op.outputs], op.attrs)
            if nbytes < 100_000:
                continue
            handed = (model.op_time(op, device) - device.op_overhead) * 1e6
            copied = (model.copy_time(op, device) - device.op_overhead) * 1e6
            print(f"{name}: {op.type} {op.name} ({nbytes / 1024:.0f} KiB, "
                  f"{'copies' if op.name in copying else 'hands the buffer on'}): "
                  f"kernel {fastest[op.name] * 1e6:.1f} us; the cost model "
                  f"{handed:.1f} us handed on, {copied:.1f} us copied", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    cluster = (Cluster.load(args.pop(0)) if args and args[0].endswith(".json")
               else runtime.calibrate(quick=True))
    main(cluster, args or ["mlp", "gnmt:batch=4", "mixed_random:seed=2"])
