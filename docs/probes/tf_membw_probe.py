"""Run from the project root: `python docs/probes/tf_membw_probe.py`.

Issue 20 §3 probe: what rate does TensorFlow's elementwise Add reach when it allocates
its output (both inputs variables, whose buffers it may not write) and when it writes
into an input's buffer (the output of an Add before it, read by nothing else: TensorFlow
forwards it), alone and two at once (one server process of ``sim_vs_real``'s
cluster, two inter-op and two intra-op threads), per size; and which of the two the
kernel calibration's factors follow (:func:`experiments.tf_calibrate.
measure_tf_kernel_costs`: the Add's factor on the roofline of each curve's largest
size).  Each figure is :func:`experiments.tf_calibrate.measure_tf_bandwidth_curve`
(bytes of the Add over its time less an Add of one element's, the fastest of 20 traced
steps).

What it showed (2026-11-27 22:55 UTC, this 2-core machine, under the timing lock), GB/s:

    elements   allocating  in place  allocating x2  in place x2
       65536         32.8     152.8           37.3        119.8
      262144         26.3     113.4           30.8        129.8
     1048576         35.0     122.9           32.1         83.4
     4194304         34.1      60.7           36.3         50.8

An Add that allocates its output runs at a quarter to a fifth of one that writes into
its input's buffer, alone or two at once: the allocation (fresh pages every step),
not the memory, bounds it.  The kernel calibration's Add factor (fitted on the
allocating curve: 0.20 on 23.7 GB/s, i.e. about 117 GB/s) follows the in-place rate,
and so do the million-element elementwise ops of a random graph (a Relu of 1M floats
in 134 us: 60 GB/s).  Kept: the bandwidth curve and ``Host.shared_bandwidth`` of
TensorFlow's calibration measure the in-place Add
(:func:`experiments.tf_calibrate.measure_tf_bandwidth_curve`); with the allocating
one, two kernels at once asked five to ten times what the host was said to serve,
and mixed_random's simple placement was predicted at 9.3-10.3 ms against 4.6 ms
measured (two runs, 22:18 and 22:35), 5.0-5.7 ms against 4.8-6.0 ms after (22:48,
22:52; ``python -m experiments.sim_vs_real --backend tensorflow ...``).
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

from experiments.backends import server_env, this_host_cluster  # noqa: E402
from experiments.tf_backend import TFLocalCluster  # noqa: E402
from experiments.tf_calibrate import measure_tf_bandwidth_curve  # noqa: E402

ELEMENTS = (1 << 16, 1 << 18, 1 << 20, 1 << 22)
cluster = this_host_cluster()
with TFLocalCluster(cluster, env=server_env(1, "passive")) as servers:
    target, device = servers.target("worker", 0), "/job:worker/replica:0/task:0/device:CPU:0"
    print("elements: GB/s  (allocating alone, in place alone, allocating x2, in place x2)")
    curves = {(in_place, arrays): measure_tf_bandwidth_curve(target, device, ELEMENTS, 20,
                                                             arrays, in_place)
              for arrays in (1, 2) for in_place in (False, True)}
    for i, n in enumerate(ELEMENTS):
        print(f"  {n:8d}: " + "  ".join(f"{curves[key][i][1] / 1e9:6.1f}" for key in
                                       [(False, 1), (True, 1), (False, 2), (True, 2)]))
