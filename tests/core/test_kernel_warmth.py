"""core.kernel_warmth: the kernels' reuse distances."""

from hypothesis import given, strategies as st

from core.kernel_warmth import reuse_distances, warmth

TYPES = st.lists(st.sampled_from(["MatMul", "Add", "Tanh", "Mul", "Sum", "Relu"]),
                 min_size=1, max_size=40)


@given(TYPES, st.integers(1, 8))
def test_a_distance_counts_the_distinct_types_between_two_of_a_type(types, span):
    distances = reuse_distances(types, span)
    doubled = types + types  # (cyclic: a step follows a step of its own graph)
    n = len(types)
    for k, t in enumerate(types):
        last = max(j for j in range(k + n) if doubled[j] == t)
        between = set(doubled[last + 1:k + n])
        assert distances[k] == min(len(between), span)


def test_a_type_run_again_right_away_is_at_distance_zero():
    assert reuse_distances(["Add", "Add", "Add"], 4) == [0, 0, 0]
    assert reuse_distances(["Add", "Mul", "Add", "Mul"], 4) == [1, 1, 1, 1]


def test_warmth_falls_from_one_to_nothing_over_the_span():
    assert [warmth(d, 4) for d in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
