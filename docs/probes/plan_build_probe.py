"""Run from the project root: `python docs/probes/plan_build_probe.py [rounds]`.

How long the executor takes to plan one task's part of a step (``ExecPlan``, built on a
step's first run and cached), on a ~10k-op graph: 2,500 layers of 4 Mul ops over a fed
placeholder and a variable, all on one task's CPU, and the same graph cut into blocks of
200 ops alternating between two tasks (task 0's part: ~5k ops, 250 tensors sent).  CPU
time of each build (garbage collection included as it comes), best and median of
``rounds``.  Compare two checkouts by running it with each on ``PYTHONPATH``, in turns."""
import statistics
import sys
import time

import numpy as np

import core as tf
from core.cluster import Cluster
from core.partition import ops_needed, partition
from core.placement import Placement
from runtime.exec_plan import ExecPlan
from runtime.executor import Executor
from runtime.local_devices import LocalDevices
from runtime.variables import VariableStore

W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"

g = tf.Graph()
with g.as_default():
    x = tf.placeholder(tf.float32, [8], name="x")
    v = tf.Variable(np.ones(8, np.float32), name="v")
    layer = [x + v.value() for _ in range(4)]
    for _ in range(2500):
        layer = [layer[k] * layer[(k + 1) % 4] for k in range(4)]
    out = layer[0] + layer[1]
ops = ops_needed([out.op])
names = [op.name for op in g.get_operations()]
cluster = Cluster.from_spec({"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                            hosts={("worker", 0): "h", ("worker", 1): "h"})
one = Placement({n: W0 for n in names})
two = Placement({n: (W0 if (i // 200) % 2 == 0 else W1) for i, n in enumerate(names)})
executor = Executor(LocalDevices.for_task(cluster, "worker", 0), VariableStore())
cut = partition(g, two, fetches=[out.name], fed=["x:0"],
                cpu_of=lambda task: W0 if task[1] == 0 else W1)
cases = {"one task": (ops, one, (out.name,), None),
         "two tasks, task 0's part": ([op for op in ops if two[op.name] == W0], two, (),
                                      cut.parts[0].send_to)}
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
for label, (part, placement, fetches, send_to) in cases.items():
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        plan = ExecPlan(executor, part, placement, fetches, (), frozenset({"x:0"}), send_to)
        times.append(time.process_time() - t0)
    print(f"{label}: {plan.plan.n_ops} ops, best {min(times) * 1e3:.1f} ms, "
          f"median {statistics.median(times) * 1e3:.1f} ms")
