"""Benchmark graphs (workloads), each a function that builds a graph and returns it."""

from experiments.workloads.random_dag import random_layered_dag

__all__ = ["random_layered_dag"]
