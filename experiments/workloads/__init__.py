"""Benchmark graphs (workloads), each a function that builds a graph."""

from experiments.workloads.mlp import Workload, mlp_forward, mlp_training_step
from experiments.workloads.random_dag import random_layered_dag

__all__ = ["Workload", "mlp_forward", "mlp_training_step", "random_layered_dag"]
