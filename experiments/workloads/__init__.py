"""Benchmark graphs (workloads), each a function that builds a graph."""

from experiments.workloads.mlp import Workload, mlp_forward, mlp_training_step
from experiments.workloads.models import (data_parallel_step, inception_training_step,
                                          rnn_training_step, transformer_training_step)
from experiments.workloads.random_dag import random_layered_dag

__all__ = ["Workload", "mlp_forward", "mlp_training_step", "rnn_training_step",
           "inception_training_step", "transformer_training_step", "data_parallel_step",
           "random_layered_dag"]
