"""splitserve.target.ahead: results in order, computed by a background thread while the caller
is busy, its source read lazily, errors delivered in their place, and an early close stops it."""

import threading
import time

import pytest

from splitserve.target.ahead import ahead


class Source:
    """An iterator that counts how far it has been read."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.read = n, fail_at, 0

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise OSError(f"source broke at {i}")
            self.read += 1
            yield i


def wait_until(cond, timeout=10.0) -> None:
    end = time.time() + timeout
    while not cond():
        assert time.time() < end, "timed out"
        time.sleep(0.01)


def test_results_in_order_and_the_source_read_lazily():
    src = Source(1000)
    it = ahead(lambda x: x * x, src, depth=4)
    assert next(it) == 0
    wait_until(lambda: src.read >= 5)
    time.sleep(0.2)
    # one taken, `depth` waiting, one in the thread's hands: never the whole source
    assert 5 <= src.read <= 6
    assert list(it) == [x * x for x in range(1, 1000)]


def test_work_is_done_while_the_caller_is_blocked():
    third = threading.Event()

    def fn(x):
        if x == 3:
            third.set()
        return x

    it = ahead(fn, range(10), depth=4)
    assert next(it) == 0
    # the caller blocks here (as on a device wait) and the thread renders items 1..3 meanwhile
    assert third.wait(timeout=10)
    assert list(it) == list(range(1, 10))


@pytest.mark.parametrize("where", ["fn", "source"])
def test_an_error_arrives_in_its_place(where):
    def fn(x):
        if where == "fn" and x == 3:
            raise ValueError("bad item 3")
        return x

    src = Source(10, fail_at=3 if where == "source" else None)
    got = []
    with pytest.raises(ValueError if where == "fn" else OSError, match="3"):
        for x in ahead(fn, src, depth=2):
            got.append(x)
    assert got == [0, 1, 2]


def renderers() -> set:
    return {t for t in threading.enumerate() if t.name == "render-ahead"}


def test_closing_early_stops_the_thread():
    before = renderers()
    src = Source(10**9)
    it = ahead(lambda x: x, src, depth=3)
    assert next(it) == 0
    (mine,) = renderers() - before  # other tests' threads may still be ending
    it.close()
    mine.join(timeout=10)
    assert not mine.is_alive()
    read = src.read
    time.sleep(0.1)
    assert src.read == read <= 6


def test_depth_zero_is_inline_and_a_negative_one_is_refused():
    """Depth 0 computes each result in the caller's thread when it is asked for: no thread, and
    nothing read ahead of the caller."""
    src = Source(100)
    before = renderers()
    it = ahead(lambda x: (x, threading.current_thread()), src, depth=0)
    assert next(it) == (0, threading.current_thread()) and src.read == 1
    assert renderers() == before
    assert [x for x, _ in it] == list(range(1, 100))
    with pytest.raises(ValueError, match="depth=-1"):
        ahead(lambda x: x, [1], depth=-1)  # at the call, not at the first item
