"""One rank of test_api.py: runs under `node-launcher run` (2 nodes, complete graph) and checks
starling.Peer on numpy arrays and torch tensors. Both ranks make the same calls in the same order,
so every exchange has its partner. Exits non-zero (an AssertionError) on the first failure."""

import os
import threading
import time

import numpy as np
import torch

import starling
from worker_checks import check, raises


def pointer(a):
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data_ptr()


def extra_peer(index, rank, scenario=None):
    """Another Peer of this process: the run's scenario again (or `scenario`), on the ports the
    test picked (a Peer fixes its dtype and dimension at its first round, so each kind of array
    gets its own)."""
    ports = os.environ["STARLING_TEST_PORTS"].split(";")[index].split(",")
    return starling.Peer(scenario or os.environ["STARLING_SCENARIO"], rank,
                         peers=[f"127.0.0.1:{p}" for p in ports])


def mix_in_place(peer, numpy_dtype, torch_dtype, rank):
    """mix on a numpy array and on a torch tensor of one dtype: the same memory, the average."""
    rounds = 0
    for name, a in [(f"numpy {numpy_dtype.__name__}", np.full(1000, rank + 1.0, numpy_dtype)),
                    (f"torch {torch_dtype}", torch.full((1000,), rank + 1.0, dtype=torch_dtype))]:
        before = pointer(a)
        peer.mix(a)
        rounds += 1
        check(pointer(a) == before, f"mix moved {name}")
        got = np.asarray(a)
        check(np.allclose(got, 1.5, rtol=0, atol=1e-6),
              f"mix of {name}: {got[:3]}, expected 1.5 (the average of 1 and 2)")
    return rounds


def large_mix(peer, rank):
    """A model of 1.2 MB over shared memory, above the size from which plain gossip streams its
    message into the segment past the cache (optim/combine.h, kStreamBytes = 1 MiB): two rounds
    with the trainer's own change between them, every value the exact average."""
    k = np.arange(300_000, dtype=np.float32) % 1000 + 1
    x = (rank + 1) * k
    peer.mix(x)
    check(np.array_equal(x, 1.5 * k), f"large mix: {x[:3]}, expected {(1.5 * k)[:3]}")
    x += rank  # the ranks now differ by 1.5 k + 1 against 1.5 k
    peer.mix(x)
    check(np.array_equal(x, 1.5 * k + 0.5), f"large mix, round 2: {x[:3]}")
    return 2


def step_in_place(peer, numpy_dtype, rank):
    """step through numpy and through torch on the same memory (torch.from_numpy shares it)."""
    x = np.full(100, rank + 1.0, numpy_dtype)
    t = torch.from_numpy(x)
    before = pointer(x)
    peer.step(x, np.zeros(100, numpy_dtype), lr=0.1)  # a zero gradient: a pure gossip round
    check(pointer(x) == before and t.data_ptr() == before, "step moved the numpy array")
    check(np.allclose(x, 1.5, rtol=0, atol=1e-6), f"step with zero gradient: {x[:3]}, expected 1.5")
    old = x.copy()
    peer.step(t, torch.ones(100, dtype=t.dtype), lr=0.1)
    check(t.data_ptr() == before, "step moved the torch tensor")
    check(np.all(np.isfinite(x)) and not np.array_equal(x, old), f"step did not move: {x[:3]}")
    peer.step(t, torch.zeros(100, dtype=t.dtype))  # the scenario's step size
    return 3


def gil_released_while_waiting(peer, rank):
    """Rank 1 starts its round a second late; while rank 0 waits inside mix() for it, a Python
    thread of rank 0 must keep running (it could not if mix() held the GIL)."""
    ticks, stop = [0], threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    thread = threading.Thread(target=tick)
    thread.start()
    try:
        if rank == 1:
            time.sleep(1.0)
        x = np.full(1000, rank + 1.0, np.float32)
        before = ticks[0]
        peer.mix(x)
        during = ticks[0] - before
    finally:
        stop.set()
        thread.join()
    if rank == 0:
        check(during >= 10, f"a Python thread ticked {during} times while mix() waited 1 s for "
                            "rank 1: mix() does not release the GIL")
    check(np.allclose(x, 1.5), f"mix after the wait: {x[:3]}")
    return 1


def optimizer_trajectory(peer, rank, overlap):
    """DecentralizedOptimizer on a 3-parameter model whose loss is 0.5 |x - c_r|^2 (gradient
    x - c_r), against the two forms of decentralized SGD computed here by hand for both ranks
    (weights 1/2 and 1/2 on two nodes):
      default (adapt, then combine):     x_r <- mean_j (x_j - lr (x_j - c_j))
      overlap=True (combine while compute): x_r <- mean_j x_j - lr (x_r - c_r)"""
    import starling.torch

    lr, steps = 0.3, 4
    start = [np.array([1.0, -2.0, 0.5]), np.array([3.0, 0.0, -1.5])]
    target = [np.array([0.0, 1.0, 2.0]), np.array([-1.0, 4.0, 0.0])]
    model = torch.nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(start[rank]).view(1, 3))
    inner = torch.optim.SGD(model.parameters(), lr=lr)
    opt = starling.torch.DecentralizedOptimizer(inner, model, peer=peer, overlap=overlap)
    c = torch.from_numpy(target[rank]).view(1, 3)
    polled = []
    real_poll = peer.poll
    if overlap:
        # Count the polls from the gradient hook (the exchange is in flight during backward).
        opt.peer = type("Counting", (), {
            "mix_start": peer.mix_start, "mix_wait": peer.mix_wait, "mix": peer.mix,
            "poll": lambda self=None: (polled.append(1), real_poll())[1]})()
    for _ in range(steps):
        opt.zero_grad()
        loss = 0.5 * ((model.weight - c) ** 2).sum()
        loss.backward()
        opt.step()
    opt.close()
    x = [s.copy() for s in start]
    for _ in range(steps):
        if overlap:
            mean = (x[0] + x[1]) / 2
            x = [mean - lr * (x[j] - target[j]) for j in range(2)]
        else:
            half = [x[j] - lr * (x[j] - target[j]) for j in range(2)]
            x = [(half[0] + half[1]) / 2] * 2
    got = model.weight.detach().numpy().ravel()
    check(np.allclose(got, x[rank], rtol=0, atol=1e-12),
          f"DecentralizedOptimizer(overlap={overlap}) after {steps} steps: {got}, expected "
          f"{x[rank]} (hand-computed)")
    if overlap:
        check(len(polled) == steps, f"the gradient hook polled {len(polled)} times in {steps} "
                                    "backward passes (one parameter: once each)")
    raises(ValueError, ["overlap=True needs mode=\"mix\""],
           lambda: starling.torch.DecentralizedOptimizer(inner, model, peer=peer, mode="step",
                                                        overlap=True))


class FakeCudaTensor:
    """A DLPack producer whose 8 float32 say they live on cuda:0 (kDLCUDA = 2), as a CUDA tensor's
    capsule does; built with ctypes, so no GPU is needed."""

    def __init__(self):
        import ctypes as c

        class Device(c.Structure):
            _fields_ = [("device_type", c.c_int), ("device_id", c.c_int)]

        class DataType(c.Structure):
            _fields_ = [("code", c.c_uint8), ("bits", c.c_uint8), ("lanes", c.c_uint16)]

        class Tensor(c.Structure):
            _fields_ = [("data", c.c_void_p), ("device", Device), ("ndim", c.c_int),
                        ("dtype", DataType), ("shape", c.POINTER(c.c_int64)),
                        ("strides", c.POINTER(c.c_int64)), ("byte_offset", c.c_uint64)]

        class Managed(c.Structure):
            _fields_ = [("dl_tensor", Tensor), ("manager_ctx", c.c_void_p), ("deleter", c.c_void_p)]

        self.c = c
        self.data = (c.c_float * 8)()
        self.shape = (c.c_int64 * 1)(8)
        self.managed = Managed(Tensor(c.cast(self.data, c.c_void_p), Device(2, 0), 1,
                                      DataType(2, 32, 1), self.shape, None, 0), None, None)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        self.stream = stream
        new = self.c.pythonapi.PyCapsule_New
        new.restype = self.c.py_object
        new.argtypes = [self.c.c_void_p, self.c.c_char_p, self.c.c_void_p]
        return new(self.c.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)


def main():
    peer = starling.Peer.from_env()
    rank = peer.rank
    check(peer.nodes == 2, f"nodes {peer.nodes}, expected 2")
    check(rank == int(os.environ["STARLING_RANK"]), f"rank {rank} != STARLING_RANK")
    check(peer.round == 0, f"round {peer.round} before any call")
    # An embedded scenario without "rounds": the trainer decides where the run ends; not a
    # restarted trainer, so nothing to rejoin and restore() is a no-op.
    check(peer.last_round is None, f"last_round {peer.last_round}, expected None")
    check(peer.rejoining is False, f"rejoining {peer.rejoining}, expected False")

    rounds = mix_in_place(peer, np.float32, torch.float32, rank)
    rounds += gil_released_while_waiting(peer, rank)
    # A tensor that requires grad goes in as p.detach(), which shares its memory.
    p = torch.full((1000,), rank + 1.0, requires_grad=True)
    raises(ValueError, ["requires grad", ".detach()"], lambda: peer.mix(p))
    peer.mix(p.detach())
    rounds += 1
    check(torch.allclose(p.detach(), torch.full((1000,), 1.5)), "mix through p.detach()")

    with extra_peer(0, rank) as peer64:
        check(mix_in_place(peer64, np.float64, torch.float64, rank) == peer64.round, "round")
    with extra_peer(1, rank) as step32:
        check(step_in_place(step32, np.float32, rank) == step32.round, "round of step32")
    with extra_peer(2, rank) as step64:
        check(step_in_place(step64, np.float64, rank) == step64.round, "round of step64")

    with extra_peer(5, rank, os.environ["STARLING_SHM_SCENARIO"]) as large:
        check(large_mix(large, rank) == large.round, "round of the large mix")
    with extra_peer(3, rank) as p3:
        optimizer_trajectory(p3, rank, overlap=False)
    with extra_peer(4, rank) as p4:
        optimizer_trajectory(p4, rank, overlap=True)
        check(p4.round == 4, f"{p4.round} rounds with overlap, expected 4")
        p4.poll()  # nothing in flight: a no-op

    # Wrong arrays: clear errors, and nothing is sent (the round count stays).
    expect = "1-D contiguous float32 or float64"
    raises(TypeError, [expect, "int64"], lambda: peer.mix(np.ones(8, np.int64)))
    raises(TypeError, [expect, "float16"], lambda: peer.mix(torch.ones(8, dtype=torch.float16)))
    raises(ValueError, [expect, "shape (2, 4)"], lambda: peer.mix(np.ones((2, 4), np.float32)))
    raises(ValueError, [expect, "shape (2, 4)"], lambda: peer.mix(torch.ones(2, 4)))
    raises(ValueError, ["not contiguous", "stride of 2"],
           lambda: peer.mix(np.ones(2000, np.float32)[::2]))
    raises(ValueError, ["not contiguous", "stride of 2"], lambda: peer.mix(torch.ones(2000)[::2]))
    read_only = np.ones(1000, np.float32)
    read_only.flags.writeable = False
    raises(ValueError, ["read-only"], lambda: peer.mix(read_only))
    raises(TypeError, [expect, "list"], lambda: peer.mix([1.0, 2.0]))
    # A CUDA tensor (a DLPack capsule of device type kDLCUDA, made here without a GPU): mix()
    # asks for the GPU (here without a driver: this process's STARLING_CUDA_DRIVER names none)
    # and says why it cannot; a call that reads CPU memory names the device and what to do.
    os.environ["STARLING_CUDA_DRIVER"] = "/nonexistent/libcuda.so.1"
    raises(starling.Error, ["mix: ", "cuda:0", "no CUDA driver"], lambda: peer.mix(FakeCudaTensor()))
    raises(starling.Error, ["mix_start: ", "cuda:0", "no CUDA driver"],
           lambda: peer.mix_start(FakeCudaTensor()))
    raises(TypeError, [expect, "on cuda:0", ".cpu()", "docs/cuda.md"],
           lambda: peer.restore(FakeCudaTensor()))
    # The CUDA route of Peer.mix end to end, on host memory (STARLING_DEVICE=host: the device
    # path's engine without a GPU): the fake tensor's 8 floats mixed to the average, with the
    # stream Starling handed to __dlpack__ (the host device has none: 0).
    os.environ["STARLING_DEVICE"] = "host"
    with extra_peer(6, rank) as device_peer:
        fake = FakeCudaTensor()
        for k in range(8):
            fake.data[k] = rank + 1.0
        device_peer.mix(fake)
        check(fake.stream == 0, f"__dlpack__ was given stream {fake.stream!r}")
        check(all(abs(fake.data[k] - 1.5) < 1e-6 for k in range(8)),
              f"device mix: {list(fake.data)}, expected 1.5 (the average of 1 and 2)")
        # step: dsgd's x - lr g on the device, then the average: (1 - 0.5 + 2 - 0.5) / 2.
        params, grads = FakeCudaTensor(), FakeCudaTensor()
        for k in range(8):
            params.data[k] = rank + 1.0
            grads.data[k] = 1.0
        device_peer.step(params, grads, lr=0.5)
        check(all(abs(params.data[k] - 1.0) < 1e-6 for k in range(8)),
              f"device step: {list(params.data)}, expected 1.0")
        raises(TypeError, ["both be CUDA tensors", "both CPU arrays"],
               lambda: device_peer.step(params, np.ones(8, np.float32)))
    del os.environ["STARLING_DEVICE"]
    raises(TypeError, ["grads", "dtype of params (float32)", "float64"],
           lambda: peer.step(np.ones(4, np.float32), np.ones(4)))
    raises(ValueError, ["grads", "as many elements as params (4)", "3"],
           lambda: peer.step(np.ones(4), np.ones(3)))
    raises(TypeError, ["loss", "number"], lambda: peer.log(loss="low"))
    # Has __float__ but is no one number: starling.Error naming the metric.
    raises(starling.Error, ["log: metric loss", "one number"], lambda: peer.log(loss=np.ones(3)))
    check(peer.round == rounds, f"round {peer.round} after {rounds} exchanges and refused calls")

    # The asynchronous form: start, compute, wait; the array is updated in place by the wait.
    a = torch.full((1000,), rank + 1.0)
    before = a.data_ptr()
    peer.mix_start(a)
    busy = sum(range(1000))  # the caller's own work while the exchange runs
    peer.mix_wait()
    rounds += 1
    check(busy > 0 and a.data_ptr() == before, "mix_start/mix_wait moved the tensor")
    check(torch.allclose(a, torch.full((1000,), 1.5)), f"mix_start/mix_wait: {a[:3]}")

    peer.log(loss=0.25, accuracy=np.float32(0.5), step=rounds)

    # Starling's own errors are starling.Error, a RuntimeError, with Starling's message.
    missing = os.path.join(os.environ.get("STARLING_OUT", "/tmp"), "no-such-scenario.json")
    raises(starling.Error, ["no-such-scenario.json"], lambda: starling.Peer(missing, 0))
    check(issubclass(starling.Error, RuntimeError), "starling.Error is not a RuntimeError")

    with peer:  # the context manager closes
        check(peer.round == rounds, f"round {peer.round}, expected {rounds}")
    check(peer.closed, "peer not closed by the with block")
    raises(starling.Error, ["closed"], lambda: peer.mix(np.ones(3)))
    peer.close()  # twice is harmless
    # The launcher keeps a rank's output only for failures: the test looks for this file.
    with open(os.path.join(os.environ["STARLING_OUT"], f"api-rank-{rank}.passed"), "w") as f:
        f.write(f"rank {rank}: api checks passed ({rounds} rounds)\n")


if __name__ == "__main__":
    main()
