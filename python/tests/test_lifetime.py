"""What users do to a Loader during a long run (issue 25): close from a signal handler
or another thread mid-step, two threads on one Loader, Ctrl-C at every point of a
step, os.fork(), and the habits code written for torch's DataLoader brings.

Real threads, real signals (setitimer, os.kill to self) and a real fork. A stalled
pipeline is real too (Stall): the Loader's arenas are released behind events of a
stream blocked on a semaphore, as a device that does not finish its copies would
hold them, so the next batch cannot come until the test posts the semaphore.
Interrupts at a given point of a step are made by wrapping one C function of the
step with a call that sends SIGINT to this process, so Python's own handler raises
KeyboardInterrupt right after that function returned.
"""
import collections
import ctypes
import faulthandler
import gc
import os
import queue
import signal
import sys
import threading
import time
from ctypes import byref, c_int, c_void_p

import pytest

import ferry
from ferry import _capi
from ferry._capi import lib

from conftest import HAVE_TORCH

# ---- helpers ---------------------------------------------------------------------------

_raw = ctypes.CDLL(ferry.library_path())  # the same library; its own signatures
for _name, _res, _args in (
        ("ferry_stream_open", c_int, [c_void_p, ctypes.POINTER(c_void_p)]),
        ("ferry_stream_close", None, [c_void_p]),
        ("ferry_stream_call", c_int, [c_void_p, c_void_p, c_void_p]),
        ("ferry_event_record", c_int, [c_void_p, ctypes.POINTER(c_void_p)]),
        ("ferry_batch_hold_until", c_int, [c_void_p, c_void_p]),
        ("ferry_batch_release", None, [c_void_p]),
        ("ferry_loader_next", c_int, [c_void_p, ctypes.POINTER(c_void_p)])):
    getattr(_raw, _name).restype, getattr(_raw, _name).argtypes = _res, _args
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def small_loader(synth, **options):
    annotations, images = synth
    options.setdefault("tensor_type", "numpy")
    options.setdefault("shuffle", False)
    return ferry.Loader(annotations, images, batch_size=2, resolution=32, workers=2, **options)


def image_ids(targets):
    return tuple(int(t["image_id"][0]) for t in targets)


class Stall:
    """The Loader's every arena released behind the blocked stream: the next batch waits
    until release(). The batches taken to get there are `taken`."""

    def __init__(self, loader):
        self.gate = ctypes.create_string_buffer(64)  # a sem_t
        assert _libc.sem_init(self.gate, 0, 0) == 0
        self.stream = c_void_p()
        assert _raw.ferry_stream_open(loader._device, byref(self.stream)) == 0
        assert _raw.ferry_stream_call(self.stream, ctypes.cast(_libc.sem_wait, c_void_p),
                                      ctypes.cast(self.gate, c_void_p)) == 0
        self.taken = loader.stats()["arenas"]
        for _ in range(self.taken):
            batch, event = c_void_p(), c_void_p()
            assert _raw.ferry_loader_next(loader._loader, byref(batch)) == 0
            assert _raw.ferry_event_record(self.stream, byref(event)) == 0
            assert _raw.ferry_batch_hold_until(batch, event) == 0
            _raw.ferry_batch_release(batch)

    def release(self):
        _libc.sem_post(self.gate)

    def end(self):
        self.release()
        _raw.ferry_stream_close(self.stream)


def interrupt_after(monkeypatch, name):
    """lib.<name>, followed by a real SIGINT to this process: Python's handler raises
    KeyboardInterrupt as soon as the call has returned (the wrapper's next line)."""
    real = getattr(lib, name)

    def call(*args):
        status = real(*args)
        os.kill(os.getpid(), signal.SIGINT)
        return status
    monkeypatch.setattr(lib, name, call)


@pytest.fixture
def sigint():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def live_allocations():
    gc.collect()
    return ferry.memory_stats("cpu")["live_allocations"]


def join(thread):
    thread.join(60)  # a guard against a hang, not a measure
    assert not thread.is_alive(), "the thread hung"


# ---- 1. close during an iteration ------------------------------------------------------------

def test_close_in_a_signal_handler_mid_step_lets_the_step_finish(synth, monkeypatch):
    loader = small_loader(synth)
    it = iter(loader)
    next(it)
    old = signal.signal(signal.SIGUSR1, lambda signum, frame: loader.close())
    try:
        real = lib.ferry_transfer

        def transfer_after_sigterm_like_close(*args):
            os.kill(os.getpid(), signal.SIGUSR1)  # the handler closes the loader here
            return real(*args)
        monkeypatch.setattr(lib, "ferry_transfer", transfer_after_sigterm_like_close)
        images, targets = next(it)  # the batch already taken is handed over whole
        monkeypatch.undo()
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert len(targets) == 2 and images.shape[0] == 2
    assert loader._loader is None  # closed as the step returned
    with pytest.raises(ValueError, match="closed"):
        next(it)


def test_close_from_another_thread_ends_a_waiting_step(synth):
    loader = small_loader(synth, prefetch=2)
    stall = Stall(loader)
    errors = []

    def step():
        try:
            next(iter(loader))
        except BaseException as e:  # noqa: B902 - the test looks at what it was
            errors.append(e)
    stepper = threading.Thread(target=step)
    stepper.start()
    closer = threading.Thread(target=loader.close)
    closer.start()
    join(stepper)
    stall.release()  # the C loader's close waits for the device's events
    join(closer)
    stall.end()
    assert len(errors) == 1 and isinstance(errors[0], ValueError) and "closed" in str(errors[0]), errors
    assert loader._loader is None


# ---- 2. two threads, one Loader -------------------------------------------------------------

def test_a_second_concurrent_step_is_refused(synth):
    loader = small_loader(synth, prefetch=2)
    stall = Stall(loader)
    results = queue.Queue()

    def step():
        try:
            results.put(next(iter(loader)))
        except BaseException as e:  # noqa: B902
            results.put(e)
    threads = [threading.Thread(target=step) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        first = results.get(timeout=60)  # a guard: without the refusal, both wait here
    finally:
        stall.release()
    assert isinstance(first, RuntimeError) and "another iteration" in str(first), first
    second = results.get(timeout=60)
    assert isinstance(second, tuple) and len(second[1]) == 2, second
    for t in threads:
        join(t)
    loader.close()
    stall.end()


def test_threads_taking_turns_on_one_loader_lose_and_repeat_nothing(synth):
    reference = small_loader(synth, shuffle=True)
    epochs = [[image_ids(targets) for _, targets in reference] for _ in range(3)]
    reference.close()
    loader = small_loader(synth, shuffle=True)
    delivered, refused, failures = [], [0], []
    lock = threading.Lock()

    def consume():
        it = iter(loader)
        while len(delivered) < 2 * len(epochs[0]) - 4:
            try:
                images, targets = next(it)
            except StopIteration:
                it = iter(loader)
                continue
            except RuntimeError as e:
                assert "another iteration" in str(e)
                with lock:
                    refused[0] += 1
                continue
            except BaseException as e:  # noqa: B902
                failures.append(e)
                return
            assert images.shape[0] == len(targets) == 2
            assert all(len(t["boxes"]) == len(t["labels"]) for t in targets)
            with lock:
                delivered.append(image_ids(targets))
    threads = [threading.Thread(target=consume) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        join(t)
    loader.close()
    assert not failures, failures
    # steps run one at a time, so the batches are the sequence's first ones, each once
    sequence = epochs[0] + epochs[1] + epochs[2]
    assert collections.Counter(delivered) == collections.Counter(sequence[:len(delivered)])


# ---- 3. Ctrl-C ------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["setitimer", "kill_from_a_thread"])
def test_ctrl_c_interrupts_a_stalled_wait_and_loses_nothing(synth, sigint, how, capsys):
    loader = small_loader(synth, prefetch=2)
    stall = Stall(loader)
    faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)  # a deaf wait hangs
    sent = []
    try:
        if how == "setitimer":
            signal.signal(signal.SIGALRM, lambda signum, frame: signal.default_int_handler(signum, frame))
            sent.append(time.monotonic() + 0.2)
            signal.setitimer(signal.ITIMER_REAL, 0.2)
        else:  # a process-directed signal, which any of ferry's threads may receive
            timer = threading.Timer(0.2, lambda: (sent.append(time.monotonic()),
                                                  os.kill(os.getpid(), signal.SIGINT)))
            timer.start()
        with pytest.raises(KeyboardInterrupt):
            next(iter(loader))
        caught = time.monotonic()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        faulthandler.cancel_dump_traceback_later()
    with capsys.disabled():
        print(f"\n  Ctrl-C ({how}) reached Python {1000 * (caught - sent[0]):.1f} ms after the signal")
    stall.release()
    images, targets = next(iter(loader))  # the interrupted step took nothing
    assert loader.state_dict()["batches_delivered"] == stall.taken + 1
    loader.close()
    stall.end()


def test_ctrl_c_between_next_and_release_leaks_no_batch(synth, sigint, monkeypatch):
    loader = small_loader(synth)
    it = iter(loader)
    arenas = loader.stats()["arenas"]
    name = "ferry_loader_next_timed" if hasattr(lib, "ferry_loader_next_timed") else "ferry_loader_next"
    for _ in range(arenas + 2):  # each interrupt took a batch; none may stay held
        interrupt_after(monkeypatch, name)
        with pytest.raises(KeyboardInterrupt):
            next(it)
        monkeypatch.undo()
        it = iter(loader)
    images, targets = next(it)  # not "the consumer holds all batches"
    assert len(targets) == 2
    loader.close()


def test_ctrl_c_after_the_transfer_leaks_no_device_memory(synth, sigint, monkeypatch):
    loader = small_loader(synth)
    it = iter(loader)
    for _ in range(loader.stats()["arenas"]):  # the pool at its size
        next(it)
    it = iter(loader)  # the last batch yielded, held by the iterator, goes
    before = live_allocations()
    for _ in range(3):
        interrupt_after(monkeypatch, "ferry_transfer")
        with pytest.raises(KeyboardInterrupt):
            next(it)
        monkeypatch.undo()
        it = iter(loader)
    assert live_allocations() == before
    loader.close()


def test_a_failing_from_dlpack_leaks_nothing(synth, tensor_type, monkeypatch):
    loader = small_loader(synth, tensor_type=tensor_type)
    it = iter(loader)
    for _ in range(loader.stats()["arenas"]):
        next(it)
    it = iter(loader)
    before = live_allocations()

    def refuse(capsule):
        raise BufferError("the consumer refused the tensor")
    monkeypatch.setattr(loader._convert, "_from_dlpack", refuse)
    for _ in range(2):
        with pytest.raises(BufferError):
            next(it)
        it = iter(loader)
    monkeypatch.undo()
    assert live_allocations() == before
    images, targets = next(it)  # and the loader goes on
    assert len(targets) == 2
    loader.close()


# ---- 4. fork --------------------------------------------------------------------------------

def _in_child(loader, synth):
    """What a fork child does with an inherited Loader; the exit code says which check
    failed (0: none)."""
    for code, call in enumerate([lambda: next(iter(loader)), lambda: len(loader), loader.stats,
                                 lambda: loader.set_epoch(1)], start=10):
        try:
            call()
            return code
        except ferry.FerryError as e:
            if "fork" not in str(e):
                return code + 10
    loader.close()  # forgets it: returns
    with small_loader(synth) as fresh:  # a Loader of the child's own works
        images, targets = next(iter(fresh))
        return 0 if len(targets) == 2 else 30


def test_a_fork_child_gets_a_clear_error_not_a_hang(synth):
    with small_loader(synth) as loader:
        it = iter(loader)
        next(it)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _in_child(loader, synth)
            finally:
                os._exit(code)
        status = None
        for _ in range(600):  # a guard against a hang, not a measure
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the fork child hung on the inherited Loader")
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, \
            f"the child's check {os.WEXITSTATUS(status)} failed"
        images, targets = next(it)  # the parent's loader is untouched
        assert len(targets) == 2


# ---- 5. PyTorch habits ----------------------------------------------------------------------

@pytest.mark.parametrize("option, value, hint", [("num_workers", 4, "workers="),
                                                 ("num_workers", 0, "one thread per core"),
                                                 ("pin_memory", True, "device='cuda'")])
def test_dataloader_options_are_refused_saying_what_to_use(synth, option, value, hint):
    with pytest.raises(TypeError) as e:
        small_loader(synth, **{option: value})
    assert option in str(e.value) and hint in str(e.value), str(e.value)


def test_set_epoch_where_the_loader_stands_keeps_the_prefetched_batches(synth):
    reference = small_loader(synth, shuffle=True)
    want = [[image_ids(targets) for _, targets in reference] for _ in range(2)]
    reference.close()
    loader = small_loader(synth, shuffle=True, prefetch=2)
    for _ in range(6000):  # until a batch is prefetched; a guard, not a measure
        if loader.stats()["samples_decoded"] >= 2:
            break
        time.sleep(0.01)
    got = []
    for epoch in range(2):  # the recommended loop
        loader.set_epoch(epoch)
        got.append([image_ids(targets) for _, targets in loader])
    assert got == want
    assert loader.stats()["batches_dropped"] == 0
    loader.close()


def test_a_failing_state_get_is_an_error(synth, monkeypatch):
    loader = small_loader(synth)
    it = iter(loader)
    monkeypatch.setattr(lib, "ferry_loader_state_get", lambda handle, out: -1)  # FERRY_EINVAL
    with pytest.raises(ferry.FerryError):
        next(it)
    monkeypatch.undo()
    images, targets = next(iter(loader))  # the batch taken was released
    assert len(targets) == 2
    loader.close()
