import pytest
from hypothesis import given, strategies as st

from core.devices import DeviceSpec, InvalidDeviceSpec, canonical, full_name


@pytest.mark.parametrize("text, expected", [
    ("/cpu:0", "/device:CPU:0"),
    ("/gpu:1", "/device:GPU:1"),
    ("/CPU:0", "/device:CPU:0"),
    ("/device:GPU:1", "/device:GPU:1"),
    ("/device:gpu:1", "/device:GPU:1"),
    ("/job:ps", "/job:ps"),
    ("/task:1", "/task:1"),
    ("/job:worker/task:1/gpu:0", "/job:worker/task:1/device:GPU:0"),
    ("/job:localhost/replica:0/task:0/cpu:0", "/job:localhost/replica:0/task:0/device:CPU:0"),
    ("/gpu:*", "/device:GPU:*"),
    ("", ""),
    ("job:ps/task:2", "/job:ps/task:2"),
])
def test_short_and_long_forms(text, expected):
    assert canonical(text) == expected


def test_fields():
    spec = DeviceSpec.from_string("/job:worker/replica:2/task:1/device:GPU:3")
    assert (spec.job, spec.replica, spec.task, spec.device_type, spec.device_index) == \
        ("worker", 2, 1, "GPU", 3)
    assert spec.is_full
    assert not DeviceSpec.from_string("/job:ps").is_full
    assert DeviceSpec().is_empty


def test_merge_examples_from_semantics():
    outer = DeviceSpec.from_string("/job:ps/task:0/cpu:0")
    inner = outer.merged("/gpu:1")
    assert inner.to_string() == "/job:ps/task:0/device:GPU:1"
    assert inner.merged("/job:worker").to_string() == "/job:worker/task:0/device:GPU:1"


@pytest.mark.parametrize("text, field", [
    ("/job:", "job:"),
    ("/task:x", "task:x"),
    ("/gpu:-1", "gpu:-1"),
    ("/foo:1", "foo:1"),
    ("/cpu:0/gpu:1", "gpu:1"),
    ("/job:a/job:b", "job:b"),
    ("/replica:1.5", "replica:1.5"),
])
def test_malformed_names_say_what_is_wrong(text, field):
    with pytest.raises(InvalidDeviceSpec) as info:
        DeviceSpec.from_string(text)
    assert info.value.spec == text and info.value.field == field
    assert repr(text) in str(info.value) and field in str(info.value)
    assert isinstance(info.value, ValueError)


def test_equality_hashing_and_immutability():
    a = DeviceSpec.from_string("/gpu:1")
    b = DeviceSpec.from_string("/device:GPU:1")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    with pytest.raises(AttributeError):
        a.job = "ps"


def test_full_name_and_matches():
    name = full_name("ps", 1, "cpu", 0)
    assert name == "/job:ps/replica:0/task:1/device:CPU:0"
    assert DeviceSpec.from_string("/job:ps").matches(name)
    assert not DeviceSpec.from_string("/job:worker").matches(name)
    assert DeviceSpec.from_string("/device:CPU:*").matches(name)


job_names = st.sampled_from(["ps", "worker", "localhost", "chief"])
specs = st.builds(
    DeviceSpec,
    job=st.none() | job_names,
    replica=st.none() | st.integers(0, 3),
    task=st.none() | st.integers(0, 5),
    device_type=st.none() | st.sampled_from(["CPU", "GPU"]),
).flatmap(lambda s: st.builds(
    lambda i: s.replace(device_index=i if s.device_type else None),
    st.none() | st.integers(0, 3)))


@given(specs)
def test_round_trip(spec):
    assert DeviceSpec.from_string(spec.to_string()) == spec


@given(st.lists(specs, min_size=1, max_size=5))
def test_merge_is_fieldwise_last_set_wins(nest):
    merged = DeviceSpec()
    for spec in nest:
        merged = merged.merged(spec)
    for field in ("job", "replica", "task", "device_type"):
        set_values = [getattr(s, field) for s in nest if getattr(s, field) is not None]
        assert getattr(merged, field) == (set_values[-1] if set_values else None)
    typed = [s for s in nest if s.device_type is not None]
    assert merged.device_index == (typed[-1].device_index if typed else None)
