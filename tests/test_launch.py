"""workbook.launch: an argument set is marshalled (or captured) once per key and stream, launched at every
call, kept alive while cached, and released when evicted; a failed capture falls back to direct launches."""
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


@pytest.fixture
def fake_graphs(monkeypatch):
    """The driver's graph calls, replaced: a 'graph' records the launch it captured; replays are logged."""
    log = {"captured": [], "replayed": [], "destroyed": []}

    def capture(launch_on):
        launch_on("capture-stream")
        log["captured"].append(len(log["captured"]))
        return f"graph{log['captured'][-1]}"

    monkeypatch.setattr(launch, "capture_graph", capture)
    monkeypatch.setattr(launch, "graph_launch", lambda g, stream: log["replayed"].append((g, stream)))
    monkeypatch.setattr(launch, "graph_destroy", log["destroyed"].append)
    return log


def test_marshals_once_per_key_and_launches_every_call():
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, size=4, graphs=False)
    for _ in range(3):
        cache(("a", 1), lambda s: (1, 2, s), stream=7)
    cache(("b", 1), lambda s: (3, 4, s), stream=7)
    assert fake.marshalled == [(1, 2, 7), (3, 4, 7)]
    assert fake.launched == ["exe(1, 2, 7)"] * 3 + ["exe(3, 4, 7)"]


def test_another_stream_is_another_argument_set():
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=False)
    cache("k", lambda s: (s,), stream=1)
    cache("k", lambda s: (s,), stream=2)
    cache("k", lambda s: (s,), stream=1)
    assert fake.launched == ["exe(1,)", "exe(2,)", "exe(1,)"]


def test_oldest_argument_set_is_evicted_first():
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, size=2, graphs=False)
    for key in ("a", "b", "c", "b", "a"):
        cache(key, lambda s, key=key: (key,), stream=0)
    # "a" was evicted by "c" and marshalled again; "b" stayed
    assert fake.marshalled == [("a",), ("b",), ("c",), ("a",)]
    assert len(cache) == 2


def test_entry_keeps_its_arguments_alive():
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=False)
    made = []
    cache("k", lambda s: made.append(object()) or (made[-1],), stream=0)
    entry = cache._entries["k", 0]
    assert entry.args == (made[0],) and entry.adapted   # the arguments and the adapted objects are held


def test_graph_is_captured_once_on_the_side_stream_and_replayed_on_the_callers(fake_graphs):
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=True)
    for _ in range(3):
        cache("k", lambda s: ("a", s), stream=5)
    cache("j", lambda s: ("b", s), stream=5)
    # the capture ran the compiled code once per key, on the capture stream; every call is a replay
    assert fake.launched == ["exe('a', 'capture-stream')", "exe('b', 'capture-stream')"]
    assert fake_graphs["replayed"] == [("graph0", 5)] * 3 + [("graph1", 5)]


def test_evicted_graphs_are_destroyed(fake_graphs):
    cache = launch.LaunchCache(FakeCompiled(), size=1, graphs=True)
    cache("a", lambda s: (s,), stream=0)
    cache("b", lambda s: (s,), stream=0)
    assert fake_graphs["destroyed"] == ["graph0"]


def test_failed_capture_warns_once_and_launches_directly(monkeypatch):
    def broken(launch_on):
        raise RuntimeError("capture not supported")

    monkeypatch.setattr(launch, "capture_graph", broken)
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=True)
    with pytest.warns(RuntimeWarning, match="capture not supported"):
        cache("a", lambda s: ("a", s), stream=3)
    cache("b", lambda s: ("b", s), stream=3)      # no second warning: graphs are off for this cache now
    assert not cache.graphs
    assert fake.launched == ["exe('a', 3)", "exe('b', 3)"]


def test_graphs_default_follows_the_environment_switch(monkeypatch):
    monkeypatch.setattr(launch, "GRAPHS", False)
    assert launch.LaunchCache(FakeCompiled()).graphs is False
    monkeypatch.setattr(launch, "GRAPHS", True)
    assert launch.LaunchCache(FakeCompiled()).graphs is True


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
    assert launch.stream_handle(0) == torch.cuda.current_stream(0).cuda_stream
