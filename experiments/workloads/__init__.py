"""Benchmark graphs (workloads) behind a registry: ``names()`` and ``get(name, **options)``
(see :mod:`experiments.workloads.registry`).  The builder functions stay importable by
their own names."""

from experiments.workloads.mlp import Workload, mlp_forward, mlp_training_step
from experiments.workloads.models import (data_parallel_step, inception_training_step,
                                          rnn_training_step, transformer_training_step)
from experiments.workloads.random_dag import random_layered_dag
from experiments.workloads.registry import UnknownWorkload, get, names, parse_spec

__all__ = ["Workload", "mlp_forward", "mlp_training_step", "rnn_training_step",
           "inception_training_step", "transformer_training_step", "data_parallel_step",
           "random_layered_dag", "names", "get", "parse_spec", "UnknownWorkload"]
