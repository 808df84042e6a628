"""workbook.launch: an argument set is launched directly from a marshalled template (its pointers re-aimed in
place) until its capture sighting, then captured into a graph and replayed; never captured while the caller's
stream is capturing; launched with the cache's device current; kept alive while cached and released when evicted,
least recently used first; a failed capture falls back to direct launches. The driver and device calls are stood
in for, so all of this runs on a CPU."""
import ctypes
import types

import cuda.bindings.driver as cuda
import pytest
import torch

from workbook import launch


class FakeCompiled:
    """Stands in for a cute.compile result: records marshalling and launches (and the device current then)."""

    def __init__(self, devices=None):
        self.marshalled, self.launched, self.devices = [], [], devices

    def generate_execution_args(self, *args):
        self.marshalled.append(args)
        return [f"exe{args}"], [object()]

    def run_compiled_program(self, exe_args):
        self.launched.append(exe_args[0])
        if self.devices is not None:
            self.devices.append(torch.cuda.current_device())


class FakeCudaTensor:
    """What the hosts' run functions read of a CUDA tensor: shape, dtype, device and address."""

    def __init__(self, shape, dtype, device, address):
        self.shape, self.dtype, self.device, self._address = shape, dtype, torch.device("cuda", device), address

    def data_ptr(self):
        return self._address

    def get_device(self):
        return self.device.index


CAPTURE_STREAM = 999          # the stand-in side stream that captures run on


@pytest.fixture
def capturing(monkeypatch):
    """The streams that are capturing now (none by default): stands in for cuStreamIsCapturing."""
    streams = set()
    monkeypatch.setattr(launch, "is_capturing", lambda stream: stream in streams, raising=False)
    return streams


@pytest.fixture
def fake_graphs(monkeypatch, capturing):
    """The driver's graph calls, replaced: a 'graph' records the launch it captured; replays are logged. An
    argument set is captured at its second sighting here, so that each test needs few calls."""
    log = {"captured": [], "replayed": [], "destroyed": []}
    monkeypatch.setattr(launch, "CAPTURE_AFTER", 2)

    def capture(launch_on):
        launch_on(CAPTURE_STREAM)
        log["captured"].append(len(log["captured"]))
        return f"graph{log['captured'][-1]}"

    monkeypatch.setattr(launch, "capture_graph", capture)
    monkeypatch.setattr(launch, "capture_reaimable", lambda launch_on, addresses: None)   # plain graphs
    monkeypatch.setattr(launch, "graph_launch", lambda g, stream: log["replayed"].append((g, stream)))
    monkeypatch.setattr(launch, "graph_destroy", log["destroyed"].append)
    return log


def test_marshals_once_per_key_and_launches_every_call(capturing):
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, size=4, graphs=False)
    for _ in range(3):
        cache(("a", 1), lambda s: (1, 2, s), stream=7)
    cache(("b", 1), lambda s: (3, 4, s), stream=7)
    assert fake.marshalled == [(1, 2, 7), (3, 4, 7)]
    assert fake.launched == ["exe(1, 2, 7)"] * 3 + ["exe(3, 4, 7)"]


def test_another_stream_is_another_argument_set(capturing):
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=False)
    cache("k", lambda s: (s,), stream=1)
    cache("k", lambda s: (s,), stream=2)
    cache("k", lambda s: (s,), stream=1)
    assert fake.launched == ["exe(1,)", "exe(2,)", "exe(1,)"]


def test_oldest_argument_set_is_evicted_first(capturing):
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, size=2, graphs=False)
    for key in ("a", "b", "c", "b", "a"):
        cache(key, lambda s, key=key: (key,), stream=0)
    # "a" was evicted by "c" and marshalled again; "b" stayed
    assert fake.marshalled == [("a",), ("b",), ("c",), ("a",)]
    assert len(cache) == 2


def test_entry_keeps_its_arguments_alive(capturing):
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=False)
    made = []
    cache("k", lambda s: made.append(object()) or (made[-1],), stream=0)
    entry = cache._templates["k", 0]
    assert entry.args == (made[0],) and entry.adapted   # the arguments and the adapted objects are held


def test_first_sighting_is_a_direct_launch_and_a_repeat_is_captured_then_replayed(fake_graphs):
    """New tensors at every call (training, a Lloyd loop) must cost a plain launch, not a capture each."""
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=True)
    for key in ("a", "b", "c"):                      # three first sightings: no graph at all
        cache(key, lambda s, key=key: (key, s), stream=5)
    assert fake_graphs["captured"] == [] and fake_graphs["replayed"] == []
    assert fake.launched == ["exe('a', 5)", "exe('b', 5)", "exe('c', 5)"]
    for _ in range(3):                               # "a" repeats: captured once (on the side stream), replayed
        cache("a", lambda s: ("a", s), stream=5)
    assert fake_graphs["captured"] == [0]
    assert fake.launched[3:] == [f"exe('a', {CAPTURE_STREAM})"]
    assert fake_graphs["replayed"] == [("graph0", 5)] * 3


def test_a_capturing_stream_gets_direct_launches_and_no_capture_of_ours(fake_graphs, capturing):
    """Inside the caller's torch.cuda.graph our kernel must be a plain launch on their stream (a node of their
    graph): starting our own capture there would invalidate theirs."""
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=True)
    cache("a", lambda s: ("a", s), stream=5)
    cache("a", lambda s: ("a", s), stream=5)         # "a" on stream 5 holds a graph now
    assert fake_graphs["captured"] == [0]
    capturing.update({5, 9})
    for _ in range(3):
        cache("a", lambda s: ("a", s), stream=5)     # has a graph: still launched directly, not replayed
        cache("n", lambda s: ("n", s), stream=9)     # new, then repeated: never captured
    assert fake_graphs["captured"] == [0] and fake_graphs["replayed"] == [("graph0", 5)]
    assert fake.launched[-6:] == ["exe('a', 5)", "exe('n', 9)"] * 3
    capturing.clear()                                # the caller's capture is over: back to graphs
    cache("n", lambda s: ("n", s), stream=9)
    assert fake_graphs["captured"] == [0, 1] and fake_graphs["replayed"][-1] == ("graph1", 9)


def test_graphs_are_bounded_and_evicted_ones_destroyed(fake_graphs):
    """More distinct repeating argument sets than the cache holds graphs for: the oldest graph goes (its
    device memory with it), the entry stays marshalled, and it is captured again if it comes back."""
    cache = launch.LaunchCache(FakeCompiled(), size=8, max_graphs=2, graphs=True)
    for key in ("a", "b", "c"):
        for _ in range(2):
            cache(key, lambda s, key=key: (key, s), stream=0)
    assert cache.graph_count == 2 and len(cache) == 3
    assert fake_graphs["destroyed"] == ["graph0"]
    assert ("a", 0) not in cache._graphed and ("a", 0) in cache._seen
    cache("a", lambda s: ("a", s), stream=0)
    assert fake_graphs["captured"] == [0, 1, 2, 3] and fake_graphs["destroyed"] == ["graph0", "graph1"]


def test_no_graph_is_destroyed_inside_a_callers_capture(fake_graphs, capturing):
    """Argument sets that repeat while the caller captures are launched into the caller's graph, never captured
    by us, so no graph of ours is evicted (cuGraphExecDestroy would invalidate the caller's capture) until the
    capture is over."""
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, size=2, max_graphs=1, graphs=True)
    for key in ("a", "a"):                           # "a" repeats: it holds graph0
        cache(key, lambda s, key=key: (key, s), stream=5)
    capturing.add(5)
    for key in ("c", "c", "d", "d"):
        cache(key, lambda s, key=key: (key, s), stream=5)
    assert fake_graphs["destroyed"] == [] and cache.counts["direct"] == 2
    capturing.discard(5)
    cache("d", lambda s: ("d", s), stream=5)         # outside it: d is captured, a's graph goes
    assert fake_graphs["destroyed"] == ["graph0"]


def test_graphs_beyond_the_bound_are_released(fake_graphs):
    cache = launch.LaunchCache(FakeCompiled(), size=1, max_graphs=1, graphs=True)
    for key in ("a", "a", "b", "b"):
        cache(key, lambda s, key=key: (key, s), stream=0)
    assert fake_graphs["destroyed"] == ["graph0"] and cache.graph_count == 1


def test_failed_capture_warns_once_and_launches_directly(monkeypatch, capturing):
    def broken(launch_on):
        raise RuntimeError("capture not supported")

    monkeypatch.setattr(launch, "capture_graph", broken)
    monkeypatch.setattr(launch, "capture_reaimable", lambda launch_on, addresses: broken(launch_on))
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=True, capture_after=2)
    cache("a", lambda s: ("a", s), stream=3)
    with pytest.warns(RuntimeWarning, match="capture not supported"):
        cache("a", lambda s: ("a", s), stream=3)
    cache("b", lambda s: ("b", s), stream=3)
    cache("b", lambda s: ("b", s), stream=3)     # no second warning: graphs are off for this cache now
    assert not cache.graphs
    assert fake.launched == ["exe('a', 3)"] * 2 + ["exe('b', 3)"] * 2


# ------------------------------------------------------------------ re-aimed graphs

def _word(address: int) -> bytes:
    return address.to_bytes(8, "little")


def test_find_slots_takes_a_pointer_found_once_in_a_small_parameter():
    params = [b"\0" * 128, _word(0xA0) + b"\1" * 8, b"\2" * 8 + _word(0xB0)]
    assert launch.find_slots(params, [0xA0, 0xB0]) == [(1, 0), (2, 8)]
    assert launch.find_slots(params, []) == []
    assert launch.find_slots(params, [0xC0]) is None                      # nowhere
    twice = params + [_word(0xA0)]
    assert launch.find_slots(twice, [0xA0]) is None                       # a coincidence cannot be told apart
    in_descriptor = [_word(0xD0) + b"\0" * 120, _word(0xA0)]
    assert launch.find_slots(in_descriptor, [0xD0]) is None               # inside a 128-byte (TMA) descriptor
    assert launch.find_slots(params, [0xA0, 0xA0]) is None                # two pointers, one place
    unaligned = [b"\0" * 4 + _word(0xA0) + b"\0" * 4]
    assert launch.find_slots(unaligned, [0xA0]) is None                   # only 8-byte aligned words


@pytest.fixture
def fake_reaim(monkeypatch, fake_graphs):
    """capture_reaimable stood in for: a capture launches on the side stream and yields a graph of one kernel
    whose parameters are the key's values as 8-byte words (so each pointer of the key can be found, unless
    `found` is set False); each hand-over of new parameters is logged as the words the node then holds."""
    log = fake_graphs
    log.update(reaimable=[], set_params=[], found=True)

    def capture(launch_on, addresses):
        launch_on(CAPTURE_STREAM)
        params = [_word(v) for v in log["next_words"]]
        slots = launch.find_slots(params, addresses) if log["found"] else None
        log["reaimable"].append(tuple(addresses))
        if slots is None:
            return None
        n = len(log["captured"])
        log["captured"].append(n)
        return launch.Reaimable(f"graph{n}", None, None, types.SimpleNamespace(), params, slots, addresses)

    def set_params(graph):
        log["set_params"].append((graph.exec, tuple(int.from_bytes(graph.parameter(i), "little")
                                                    for i in range(len(graph._buffers)))))

    monkeypatch.setattr(launch, "capture_reaimable", capture)
    monkeypatch.setattr(launch, "graph_set_kernel_params", set_params)
    return log


def _call(cache, log, key, stream=5):
    log["next_words"] = key
    cache(key, lambda s: (*key, s), stream=stream)


def test_a_graph_is_re_aimed_at_every_new_output(fake_reaim):
    """A fresh output at every call (a benchmark's interleaved contenders, a user's loop without out=) must still
    be a replay after the capture: sightings are counted without the re-aimable pointers, and a replay whose
    output moved hands the node its new parameters first (only then)."""
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=True, pointers=3, reaimable=(2,))
    _call(cache, fake_reaim, (0x10, 0x20, 0x30, 7))           # first sighting: the template
    _call(cache, fake_reaim, (0x10, 0x20, 0x31, 7))           # another output, same base: captured, replayed
    for out in (0x32, 0x33, 0x33, 0x30):
        _call(cache, fake_reaim, (0x10, 0x20, out, 7))
    assert fake_reaim["reaimable"] == [(0x31,)] and fake_reaim["replayed"] == [("graph0", 5)] * 5
    assert fake_reaim["set_params"] == [("graph0", (0x10, 0x20, out, 7)) for out in (0x32, 0x33, 0x30)]
    assert fake.launched == [f"exe{(0x10, 0x20, 0x30, 7, 5)}", f"exe{(0x10, 0x20, 0x31, 7, CAPTURE_STREAM)}"]
    assert cache.counts == {"first": 1, "captured": 1, "replayed": 5, "direct": 0}
    _call(cache, fake_reaim, (0x11, 0x20, 0x30, 7))           # another input: its own sightings, its own graph
    _call(cache, fake_reaim, (0x11, 0x20, 0x34, 7))
    assert fake_reaim["reaimable"] == [(0x31,), (0x34,)] and fake_reaim["replayed"][-1] == ("graph1", 5)


def test_inside_the_callers_capture_a_re_aimable_set_is_launched_from_its_template(fake_reaim, capturing):
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=True, pointers=2, reaimable=(1,))
    _call(cache, fake_reaim, (0x10, 0x20))
    _call(cache, fake_reaim, (0x10, 0x21))                    # graph0
    capturing.add(5)
    _call(cache, fake_reaim, (0x10, 0x22))                    # a node of the caller's graph, not a replay
    assert fake.launched[-1] == f"exe{(0x10, 0x22, 5)}" and fake_reaim["set_params"] == []
    capturing.clear()
    _call(cache, fake_reaim, (0x10, 0x22))
    assert fake_reaim["set_params"] == [("graph0", (0x10, 0x22))] and fake_reaim["replayed"][-1] == ("graph0", 5)


def test_pointers_not_found_key_the_cache_by_every_value(fake_reaim):
    """Where the capture cannot be re-aimed (the pointers not found once each, several nodes, an old driver), it
    becomes a plain graph of its own addresses, and the cache keys by every value from then on."""
    fake_reaim["found"] = False
    cache = launch.LaunchCache(FakeCompiled(), graphs=True, pointers=2, reaimable=(1,))
    for key in ((0x10, 0x20), (0x10, 0x21), (0x10, 0x21), (0x10, 0x22), (0x10, 0x22)):
        _call(cache, fake_reaim, key)
    assert fake_reaim["reaimable"] == [(0x21,)] and not cache._reaiming    # one attempt
    assert fake_reaim["captured"] == [0, 1] and fake_reaim["set_params"] == []
    assert fake_reaim["replayed"] == [("graph0", 5), ("graph0", 5), ("graph1", 5)]
    assert cache.counts == {"first": 2, "captured": 2, "replayed": 3, "direct": 0}


def test_an_evicted_re_aimable_graph_is_destroyed(fake_reaim):
    cache = launch.LaunchCache(FakeCompiled(), graphs=True, max_graphs=1, pointers=2, reaimable=(1,))
    for key in ((0x10, 0x20), (0x10, 0x21), (0x11, 0x20), (0x11, 0x21)):
        _call(cache, fake_reaim, key)
    (destroyed,) = fake_reaim["destroyed"]
    assert isinstance(destroyed, launch.Reaimable) and destroyed.exec == "graph0"


def test_reaimable_must_name_pointer_positions():
    with pytest.raises(ValueError, match="reaimable"):
        launch.LaunchCache(FakeCompiled(), pointers=2, reaimable=(2,))
    with pytest.raises(ValueError, match="reaimable"):
        launch.LaunchCache(FakeCompiled(), pointers=2, reaimable=(1, 1))


@pytest.fixture(autouse=True)
def _gpu_count_read_afresh():
    """`launch.one_gpu` caches torch's device count; the tests here stand in for it."""
    launch.one_gpu.cache_clear()
    yield
    launch.one_gpu.cache_clear()


@pytest.fixture
def devices(monkeypatch):
    """torch's current-device calls, stood in for: two GPUs, device 0 current; `entered` logs the guards."""
    state = {"current": 0, "entered": []}

    class Guard:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            state["entered"].append(self.index)
            self.before, state["current"] = state["current"], self.index

        def __exit__(self, *exc):
            state["current"] = self.before

    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["current"])
    monkeypatch.setattr(torch.cuda, "device", Guard)
    return state


def test_launches_and_captures_run_on_the_caches_device(devices, fake_graphs, monkeypatch):
    """A tensor on cuda:1 while cuda:0 is current: the launch, and the capture (whose side stream is the
    current device's), must happen with device 1 current; the caller's current device is left as it was."""
    captured_on = []
    capture = launch.capture_graph
    monkeypatch.setattr(launch, "capture_graph",
                        lambda launch_on: captured_on.append(torch.cuda.current_device()) or capture(launch_on))
    launched_on = []
    cache = launch.LaunchCache(FakeCompiled(devices=launched_on), graphs=True, device=1)
    cache("a", lambda s: ("a", s), stream=11)
    cache("a", lambda s: ("a", s), stream=11)
    assert launched_on == [1, 1] and captured_on == [1]
    assert devices["current"] == 0
    here = launch.LaunchCache(FakeCompiled(devices=launched_on), graphs=False, device=0)
    here("b", lambda s: ("b", s), stream=12)
    assert devices["entered"] == [1, 1]           # no guard (no host time) when the device is current already
    assert launched_on[-1] == 0


def test_with_one_gpu_visible_no_device_guard_is_entered(devices, fake_graphs, monkeypatch):
    """One visible GPU: the cache's device is the current one, so a launch skips the guard (and its
    current_device() call, host time on every launch)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cache = launch.LaunchCache(FakeCompiled(), graphs=True, device=0)
    for _ in range(3):
        cache("a", lambda s: ("a", s), stream=3)
    assert devices["entered"] == [] and fake_graphs["replayed"] == [("graph0", 3)] * 2


def test_on_device_asks_for_the_current_device_only_with_several_gpus(devices, monkeypatch):
    """on_device: no guard where the index is current; with one GPU visible not even a current_device() call
    (host time on every launch); with two, a guard for the other one."""
    asked = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: asked.append(1) or devices["current"])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert launch.on_device(0) is launch._NO_GUARD and asked == []
    launch.one_gpu.cache_clear()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert launch.on_device(0) is launch._NO_GUARD and asked == [1]
    with launch.on_device(1):
        assert devices["current"] == 1
    assert devices["entered"] == [1] and devices["current"] == 0


def test_kmeans_caches_are_keyed_by_device_and_launch_there(devices, fake_graphs, monkeypatch):
    """kmeans_kernels.hopper: x on cuda:1 with cuda:0 current compiles (once) and launches with device 1
    current, on device 1's stream, in a cache of its own."""
    from kmeans_kernels import hopper
    compiled_on, launched_on, streams_of = [], [], []
    monkeypatch.setattr(hopper.cute, "compile", lambda *a, **k: compiled_on.append(torch.cuda.current_device())
                        or FakeCompiled(devices=launched_on))
    monkeypatch.setattr(launch, "stream_handle", lambda device: streams_of.append(device) or 100 + device)
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    hopper._launches.cache_clear()
    Tensor = FakeCudaTensor
    try:
        for device in (1, 1, 0):
            x, c = Tensor((64, 128), torch.bfloat16, device, 1 << 20), Tensor((32, 128), torch.bfloat16, device, 2 << 20)
            c_sq, out = Tensor((32,), torch.float32, device, 3 << 20), Tensor((64,), torch.int32, device, 4 << 20)
            hopper.run("serial", x, c, c_sq, out)
        assert compiled_on == [1, 0] and launched_on == [1, 1, 0] and streams_of == [1, 1, 0]
        assert hopper._launches("serial", 128, torch.bfloat16, 1, False).device == 1
        assert hopper._launches("serial", 128, torch.bfloat16, 1, False) is not hopper._launches(
            "serial", 128, torch.bfloat16, 0, False)
        assert compiled_on == [1, 0]                # the look-ups found what `run` compiled: one entry each
    finally:
        hopper._launches.cache_clear()


def test_graphs_default_follows_the_environment_switch(monkeypatch):
    monkeypatch.setattr(launch, "GRAPHS", False)
    assert launch.LaunchCache(FakeCompiled()).graphs is False
    monkeypatch.setattr(launch, "GRAPHS", True)
    assert launch.LaunchCache(FakeCompiled()).graphs is True


def test_sizes_must_be_positive():
    with pytest.raises(ValueError, match="size"):
        launch.LaunchCache(FakeCompiled(), size=0)
    with pytest.raises(ValueError, match="max_graphs"):
        launch.LaunchCache(FakeCompiled(), max_graphs=0)


# ------------------------------------------------------------------ GPU

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@needs_cuda
def test_stream_handle_is_the_current_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert launch.stream_handle(torch.device("cuda")) == s.cuda_stream
    assert launch.stream_handle(torch.device("cuda", 0)) == torch.cuda.current_stream(0).cuda_stream
    assert launch.stream_handle(0) == torch.cuda.current_stream(0).cuda_stream


@pytest.mark.gpu
@needs_cuda
def test_is_capturing_follows_the_driver():
    s = torch.cuda.Stream()
    assert not launch.is_capturing(s.cuda_stream)
    g = torch.cuda.CUDAGraph()
    x = torch.zeros(4, device="cuda")
    with torch.cuda.graph(g):
        assert launch.is_capturing(launch.stream_handle(0))
        x += 1
    assert not launch.is_capturing(launch.stream_handle(0))
    g.replay()
    torch.cuda.synchronize()
    assert x.tolist() == [1.0] * 4


def test_gemm_compiles_are_keyed_by_device_and_made_there(devices, monkeypatch):
    """gemm_kernels.hopper_host: one compiled kernel and launch cache per (Config, device), compiled with that
    device current; likewise gemm_kernels.blackwell_host's per-shape builds."""
    from gemm_kernels import blackwell_host, blackwell_options, hopper_host, hopper_options
    compiled_on = []
    fake = lambda *a, **k: compiled_on.append(torch.cuda.current_device()) or FakeCompiled()   # noqa: E731
    monkeypatch.setattr(hopper_host.cute, "compile", fake)
    hopper_host._launches.cache_clear()
    blackwell_host._compiled.cache_clear()
    try:
        cfg = hopper_options.Config()
        one, zero = hopper_host._launches(cfg, 1), hopper_host._launches(cfg, 0)
        assert one is hopper_host._launches(cfg, 1) and one is not zero
        assert (one.device, zero.device) == (1, 0) and compiled_on == [1, 0]
        options = blackwell_options.Options(stages=7, epilogue="register")
        blackwell_host._compiled(256, 256, 64, 1, torch.bfloat16, options, (256,), 1)
        assert compiled_on == [1, 0, 1] and devices["current"] == 0
    finally:
        hopper_host._launches.cache_clear()
        blackwell_host._compiled.cache_clear()


def test_kmeans_step_launcher_is_keyed_by_device_and_launches_there(devices, fake_graphs, monkeypatch):
    """kmeans_kernels.steps.host.Launcher: x on cuda:1 with cuda:0 current compiles (once) and launches with
    device 1 current, on device 1's stream, in a cache of its own; cuda:0 gets another."""
    from kmeans_kernels.steps import host
    compiled_on, launched_on, streams_of = [], [], []
    monkeypatch.setattr(host.cute, "compile", lambda *a, **k: compiled_on.append(torch.cuda.current_device())
                        or FakeCompiled(devices=launched_on))
    monkeypatch.setattr(host, "check_inputs", lambda x, c, c_sq, out, d_max: (c_sq, out))

    def stream_handle(device):                 # as launch.stream_handle: a torch.device or an index
        index = device if isinstance(device, int) else device.index
        return streams_of.append(index) or 100 + index
    monkeypatch.setattr(launch, "stream_handle", stream_handle)
    made = []
    launcher = host.Launcher(lambda D, dtype: made.append((D, dtype)) or object())
    for device in (1, 1, 0):
        x, c = (FakeCudaTensor((64, 128), torch.bfloat16, device, 1 << 20),
                FakeCudaTensor((32, 128), torch.bfloat16, device, 2 << 20))
        c_sq, out = (FakeCudaTensor((32,), torch.float32, device, 3 << 20),
                     FakeCudaTensor((64,), torch.int32, device, 4 << 20))
        assert launcher(x, c, c_sq, out) is out
    assert compiled_on == [1, 0] and launched_on == [1, 1, 0] and streams_of == [1, 1, 0] and len(made) == 2
    one, zero = launcher.launches(128, torch.bfloat16, 1), launcher.launches(128, torch.bfloat16, 0)
    assert (one.device, zero.device) == (1, 0) and one is not zero and len(made) == 2
    assert devices["current"] == 0


def test_gemm_step_launches_are_keyed_by_device_and_launch_there(devices, fake_graphs, monkeypatch):
    """gemm_kernels.steps.common: a step's kernel compiles once per device, with that device current, and each
    launch runs on its tensor's device and stream whatever the current device is."""
    import cutlass.cute as cute
    from gemm_kernels.steps import common
    compiled_on, launched_on, streams_of = [], [], []
    monkeypatch.setattr(cute, "compile", lambda *a, **k: compiled_on.append(torch.cuda.current_device())
                        or FakeCompiled(devices=launched_on))
    monkeypatch.setattr(launch, "stream_handle", lambda device: streams_of.append(device) or 100 + device)
    launches = common.launches_for(object(), ("dummy", "args"))
    assert compiled_on == []                                       # nothing compiled before a launch
    for device in (1, 1, 0):
        common.run(launches, ("a", device), lambda s: ("a", s), torch.device("cuda", device))
    assert compiled_on == [1, 0] and launched_on == [1, 1, 0] and streams_of == [1, 1, 0]
    assert (launches.on(1).device, launches.on(0).device) == (1, 0) and launches.on(1) is not launches.on(0)
    assert compiled_on == [1, 0] and devices["current"] == 0


@pytest.mark.gpu
@needs_cuda
def test_a_captured_graph_replays_through_the_driver_calls():
    """capture_graph / graph_launch / graph_destroy: the replay does the captured work on the stream it is
    launched on, once per launch, and an error from the driver is raised."""
    x = torch.zeros(4, device="cuda")

    def enqueue(stream):
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            x.add_(1)

    graph = launch.capture_graph(enqueue)
    torch.cuda.synchronize()
    assert x.tolist() == [0.0] * 4                 # capturing ran nothing
    s = torch.cuda.Stream()
    for _ in range(3):
        launch.graph_launch(graph, s.cuda_stream)
    s.synchronize()
    assert x.tolist() == [3.0] * 4
    launch.graph_destroy(graph)
    with pytest.raises(RuntimeError, match="cuGraphLaunch failed"):
        launch.graph_launch(cuda.CUgraphExec(), s.cuda_stream)


def test_eviction_goes_by_last_use_and_the_counts_say_what_each_call_was(fake_graphs):
    """Least recently used first, for argument sets and for graphs: a set in steady use keeps its graph while
    sets seen once come and go (a benchmark rotating input sets beside a caller's fresh outputs)."""
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, size=3, max_graphs=2, graphs=True)
    for key in ("a", "a", "b", "b", "a", "c", "c"):
        cache(key, lambda s, key=key: (key, s), stream=0)
    assert fake_graphs["destroyed"] == ["graph1"]           # b's graph went, not a's (used after b)
    assert cache._graphed["a", 0] == "graph0"
    cache("d", lambda s: ("d", s), stream=0)
    assert list(cache._seen) == [("b", 0), ("d", 0)]        # b is remembered: captured again if it repeats
    assert cache.counts == {"first": 4, "captured": 3, "replayed": 4, "direct": 0}


class FakePointer:
    """A CuTe DSL pointer argument as the launch cache sees it: its address in a ctypes c_void_p."""

    def __init__(self, address):
        self._desc = ctypes.c_void_p(address)


class FakeMarshalling(FakeCompiled):
    """Marshals a pointer as the address of its c_void_p, as CuTe DSL does; a launch reads the addresses
    there, so a patched template launches with the new ones."""

    def generate_execution_args(self, *args):
        self.marshalled.append(args)
        return [ctypes.addressof(a._desc) if isinstance(a, FakePointer) else a for a in args], [object()]

    def run_compiled_program(self, exe_args):
        self.launched.append(tuple(ctypes.c_void_p.from_address(v).value if isinstance(v, int) else v
                                   for v in exe_args))


def test_a_new_pointer_set_is_a_patched_template_not_a_new_marshalling(capturing):
    fake = FakeMarshalling()
    cache = launch.LaunchCache(fake, graphs=False, pointers=2)

    def make(a, b, m):
        return lambda s: (FakePointer(a), FakePointer(b), f"M={m}", f"s{s}")

    for a, b, m in [(0x100, 0x200, 8), (0x300, 0x400, 8), (0x100, 0x200, 8), (0x500, 0x600, 16)]:
        cache((a, b, m), make(a, b, m), stream=3)
    assert len(fake.marshalled) == 2                  # one template per size (M) and stream
    assert fake.launched == [(0x100, 0x200, "M=8", "s3"), (0x300, 0x400, "M=8", "s3"),
                             (0x100, 0x200, "M=8", "s3"), (0x500, 0x600, "M=16", "s3")]
    assert cache.counts == {"first": 3, "captured": 0, "replayed": 0, "direct": 1}


def test_arguments_that_cannot_be_patched_are_marshalled_per_set(capturing):
    fake = FakeCompiled()                             # its pointers are plain values: no c_void_p to patch
    cache = launch.LaunchCache(fake, graphs=False, pointers=1)
    for a in (1, 2, 1):
        cache((a, 8), lambda s, a=a: (a, 8, s), stream=0)
    assert fake.marshalled == [(1, 8, 0), (2, 8, 0), (1, 8, 0)]
    assert fake.launched == ["exe(1, 8, 0)", "exe(2, 8, 0)", "exe(1, 8, 0)"]


def test_an_argument_set_is_captured_at_its_capture_after_th_sighting(fake_graphs):
    """Until then each call launches from the template; fresh outputs seen a few times never cost a capture."""
    fake = FakeCompiled()
    cache = launch.LaunchCache(fake, graphs=True, capture_after=4)
    for _ in range(6):
        cache("a", lambda s: ("a", s), stream=0)
    assert cache.counts == {"first": 1, "captured": 1, "replayed": 3, "direct": 2}
    assert fake_graphs["replayed"] == [("graph0", 0)] * 3
    assert launch.LaunchCache(fake).capture_after == launch.CAPTURE_AFTER == 2   # the fixture's, by default
    with pytest.raises(ValueError, match="capture_after >= 2"):
        launch.LaunchCache(fake, capture_after=1)


@pytest.mark.gpu
@needs_cuda
def test_a_re_aimable_capture_reads_one_kernel_node():
    """capture_reaimable on torch kernels: one kernel with no pointers asked for is re-aimable (no slots) and
    replays; a pointer it cannot find, or a capture of two kernels, gives None."""
    x = torch.zeros(4, device="cuda")

    def enqueue(stream):
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            x.add_(1)

    graph = launch.capture_reaimable(enqueue, ())
    assert graph is not None and graph.slots == []
    s = torch.cuda.Stream()
    for _ in range(3):
        graph.aim(())
        launch.graph_launch(graph.exec, s.cuda_stream)
    s.synchronize()
    assert x.tolist() == [3.0] * 4
    launch.graph_destroy(graph)
    assert launch.capture_reaimable(enqueue, (0x1234560,)) is None

    def twice(stream):
        enqueue(stream)
        enqueue(stream)
    assert launch.capture_reaimable(twice, ()) is None
    torch.cuda.synchronize()
    assert x.tolist() == [3.0] * 4                 # capturing ran nothing


@pytest.mark.gpu
@needs_cuda
def test_kmeans_fresh_outputs_are_served_by_one_re_aimed_graph():
    """kmeans_kernels.assign with a new output at every call (all held alive, so no address repeats): one
    capture, then replays re-aimed at each output, every answer the reference's; inside the caller's
    torch.cuda.graph the kernel is a node of theirs and writes the output it was given."""
    import kmeans_kernels
    from kmeans_kernels import hopper, reference
    g = torch.Generator(device="cuda").manual_seed(5)
    N, D, K = 1000, 64, 300
    x = torch.randint(-4, 5, (N, D), device="cuda", generator=g).to(torch.bfloat16)
    c = torch.randint(-4, 5, (K, D), device="cuda", generator=g).to(torch.bfloat16)
    c_sq = reference.centroid_norms(c)
    want = reference.assign(x, c)
    cache = hopper._launches("lean_select", D, torch.bfloat16, x.get_device(), False)
    before = dict(cache.counts)
    outs = [torch.full((N,), -7, dtype=torch.int32, device="cuda") for _ in range(3 * launch.CAPTURE_AFTER)]
    for out in outs:
        kmeans_kernels.assign(x, c, variant="lean_select", c_sq=c_sq, out=out)
    torch.cuda.synchronize()
    assert all(torch.equal(out, want) for out in outs)
    done = {k: cache.counts[k] - before[k] for k in cache.counts}
    assert done["captured"] <= 1 and done["replayed"] >= len(outs) - launch.CAPTURE_AFTER
    mine = torch.full((N,), -7, dtype=torch.int32, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kmeans_kernels.assign(x, c, variant="lean_select", c_sq=c_sq, out=mine)
    torch.cuda.synchronize()
    assert (mine == -7).all()                      # captured, not run
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(mine, want)
