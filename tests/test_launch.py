"""workbook.launch: a marshalled argument set is reused only for an equal key, and kept alive while cached."""
import pytest
import torch

from workbook import launch


class FakeCompiled:
    """Stands in for a cute.compile result: records marshalling and launches."""

    def __init__(self):
        self.marshalled, self.launched = [], []

    def generate_execution_args(self, *args):
        self.marshalled.append(args)
        return [f"exe{args}"], [object()]

    def run_compiled_program(self, exe_args):
        self.launched.append(exe_args[0])


def test_marshals_once_per_key_and_launches_every_call():
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, size=4)
    for _ in range(3):
        cache(("a", 1), lambda: (1, 2))
    cache(("b", 1), lambda: (3, 4))
    assert fake.marshalled == [(1, 2), (3, 4)]
    assert fake.launched == ["exe(1, 2)"] * 3 + ["exe(3, 4)"]


def test_oldest_argument_set_is_evicted_first():
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, size=2)
    for key in ("a", "b", "c", "b", "a"):
        cache(key, lambda key=key: (key,))
    # "a" was evicted by "c" and marshalled again; "b" stayed
    assert fake.marshalled == [("a",), ("b",), ("c",), ("a",)]
    assert len(cache) == 2


def test_entry_keeps_its_arguments_alive():
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake)
    made = []
    cache("k", lambda: made.append(object()) or (made[-1],))
    entry = cache._entries["k"]
    assert entry[2] == (made[0],) and entry[1]   # the arguments and the adapted objects are held


def test_size_must_be_positive():
    with pytest.raises(ValueError, match="size"):
        launch.LaunchCache(FakeCompiled(), size=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_stream_handle_is_the_current_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert launch.stream_handle(torch.device("cuda")) == s.cuda_stream
    assert launch.stream_handle(torch.device("cuda", 0)) == torch.cuda.current_stream(0).cuda_stream
