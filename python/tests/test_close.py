"""close() while other threads still operate, and non-contiguous buffers as keys/values."""

import threading
import time

import pytest

import pmhash

# A liveness bound (a hang becomes a failure), not a speed threshold. close() used to hang
# here: no progress in 30 s.
LIVENESS_S = 60
SMALL = 64 << 20


def wait_until(pred):
    deadline = time.monotonic() + LIVENESS_S
    while not pred():
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.001)


@pytest.mark.parametrize("scheme", pmhash.schemes())
def test_close_with_four_threads_operating_does_not_hang(pool_path, scheme):
    t = pmhash.open(pool_path, scheme=scheme, create=True, format="variable", pool_size=SMALL)
    done_ok = [0] * 4
    closed_seen = [0] * 4
    errors = []

    def operate(n):
        i = 0
        while closed_seen[n] < 50:  # keep calling well after close()
            k = b"t%d-%d" % (n, i % 2000)
            try:
                t[k] = b"value-%d" % i
                assert t.get(k) == b"value-%d" % i
                if i % 3 == 0:
                    del t[k]
                len(t)
                t.stats()
                done_ok[n] += 1
            except pmhash.ClosedError:
                closed_seen[n] += 1
            except Exception as e:  # anything else fails the test
                errors.append(repr(e))
                return
            i += 1

    threads = [threading.Thread(target=operate, args=(n,), daemon=True) for n in range(4)]
    for th in threads:
        th.start()
    wait_until(lambda: min(done_ok) >= 20 or errors)  # every thread is busy
    closer = threading.Thread(target=t.close, daemon=True)
    closer.start()
    closer.join(LIVENESS_S)
    assert not closer.is_alive(), "close() hung with threads still operating"
    for th in threads:
        th.join(LIVENESS_S)
    assert [th.is_alive() for th in threads] == [False] * 4, "a caller hung after close()"
    assert errors == []
    assert t.closed
    assert min(closed_seen) == 50  # every thread got ClosedError after close
    with pytest.raises(pmhash.ClosedError):
        t[b"after"] = b"close"
    with pytest.raises(pmhash.ClosedError):
        t.get(b"t0-1")
    # What was written before close is there after reopening.
    with pmhash.open(pool_path, scheme=scheme, create=False, format="variable") as r:
        ok, report = r.check()
        assert ok, report
        assert len(r) > 0


@pytest.mark.parametrize("fmt", ["fixed", "variable"])
def test_non_contiguous_buffers_are_copied_in_logical_order(pool_path, fmt):
    with pmhash.open(pool_path, scheme="turbohash", create=True, format=fmt,
                     pool_size=SMALL) as t:
        reversed_key = memoryview(b"IJKLMNOP")[::-1]
        strided_key = memoryview(b"ABCDEFGHIJKLMNOP")[::2]
        assert not reversed_key.contiguous and not strided_key.contiguous
        t[reversed_key] = b"reversed"
        t[strided_key] = b"strided!"
        t[b"contigvl"] = memoryview(b"12345678abcdefgh")[::2]  # a strided value too
        assert t[b"PONMLKJI"] == b"reversed"
        assert t[b"ACEGIKMO"] == b"strided!"
        assert t[b"contigvl"] == b"1357aceg"
        # Not the bytes the buffers span in memory.
        assert b"IJKLMNOP" not in t
        assert b"ABCDEFGH" not in t
        assert len(t) == 3
        # Reading back through the same non-contiguous views finds the same items.
        assert t[reversed_key] == b"reversed"
        assert t.get(strided_key) == b"strided!"
