"""Tests of the Python module (run by `make test` through ctest)."""

import os
import pathlib
import threading

import pytest

import pmhash

SCHEMES = pmhash.schemes()
SMALL = 64 << 20


def key(i, fmt):
    return (b"k%07d" % i) if fmt == "fixed" else b"key-%d" % i


def value(i, fmt):
    return (b"v%07d" % i) if fmt == "fixed" else b"value-%d" % i * 3


def test_all_five_schemes_are_registered():
    assert set(SCHEMES) == {"smartht", "turbohash", "wophi", "hdnh", "pmeh", "lineht"}


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("fmt", ["fixed", "variable"])
def test_mapping_protocol_and_reopen(pool_path, scheme, fmt):
    with pmhash.open(pool_path, scheme=scheme, create=True, format=fmt, pool_size=SMALL) as t:
        for i in range(3000):
            t[key(i, fmt)] = value(i, fmt)
        assert len(t) == 3000
        assert t[key(7, fmt)] == value(7, fmt)
        assert key(7, fmt) in t and key(5000, fmt) not in t
        assert t.get(key(5000, fmt)) is None
        assert t.get(key(5000, fmt), b"dflt") == b"dflt"
        del t[key(7, fmt)]
        assert key(7, fmt) not in t
        with pytest.raises(KeyError):
            t[key(7, fmt)]
        with pytest.raises(pmhash.NotFoundError):
            del t[key(7, fmt)]
        t.insert(key(7, fmt), value(8, fmt))
        with pytest.raises(pmhash.KeyExistsError):
            t.insert(key(7, fmt), value(9, fmt))
        t.update(key(7, fmt), value(9, fmt))
        with pytest.raises(pmhash.NotFoundError):
            t.update(key(9999, fmt), value(1, fmt))
        ok, report = t.check()
        assert ok, report
        st = t.stats()
        assert st["scheme"] == scheme and st["format"] == fmt and st["size"] == 3000
        assert 0 < st["load_factor"] <= 1 and isinstance(st["counters"], dict)
    assert t.closed
    with pytest.raises(pmhash.ClosedError):
        len(t)
    # Reopened: everything is there, and nothing else.
    with pmhash.open(pool_path, scheme=scheme, format=fmt) as t:
        assert len(t) == 3000
        assert t[key(7, fmt)] == value(9, fmt)
        assert dict(t.items())[key(42, fmt)] == value(42, fmt)
        assert not t.stats()["recovered_from_crash"]


@pytest.mark.parametrize("scheme", ["lineht", "turbohash"])
def test_get_many_answers_as_get_does(pool_path, scheme):
    with pmhash.open(pool_path, scheme=scheme, format="variable", pool_size=SMALL) as t:
        for i in range(100):
            t[key(i, "variable")] = value(i, "variable")
        keys = [key(i, "variable") for i in range(0, 200, 7)] + ["key-3", bytearray(b"key-4")]
        assert t.get_many(keys) == [t.get(k) for k in keys]
        assert t.get_many(keys)[-2:] == [value(3, "variable"), value(4, "variable")]
        assert t.get_many(keys, b"-")[-3] == b"-"  # key-196: absent
        assert t.get_many([]) == []
        with pytest.raises(pmhash.InvalidArgumentError):
            t.get_many([key(1, "variable"), b""])  # an empty key, as get(b"") raises
        with pytest.raises(TypeError):
            t.get_many([key(1, "variable"), 42])
        with pytest.raises(TypeError):
            t.get_many(b"key-1")  # one key, not a list of one-byte keys
    with pytest.raises(pmhash.ClosedError):
        t.get_many([key(1, "variable")])


def test_keys_and_values_accept_str_bytearray_memoryview(pool_path):
    with pmhash.open(pool_path, format="variable", pool_size=SMALL) as t:
        t["ключ"] = "значение"
        assert t["ключ".encode()] == "значение".encode()
        t[bytearray(b"ba")] = memoryview(b"mv")
        assert t[b"ba"] == b"mv"
        with pytest.raises(TypeError):
            t[42] = b"x"
        # A str that is not UTF-8 encodable (a lone surrogate): UnicodeEncodeError, nothing
        # stored (was a pybind11 RuntimeError).
        with pytest.raises(UnicodeEncodeError):
            t["\ud800ab"] = b"x"
        assert len(t) == 2


def test_iterating_a_table_gives_its_keys(pool_path):
    # Without __iter__, Python called __getitem__(0) and raised "key must be bytes...".
    with pmhash.open(pool_path, format="variable", pool_size=SMALL) as t:
        assert list(t) == []
        for i in range(100):
            t[key(i, "variable")] = value(i, "variable")
        assert sorted(t) == sorted(key(i, "variable") for i in range(100))


def test_bad_input_raises_and_loses_nothing(pool_path):
    with pmhash.open(pool_path, format="fixed", pool_size=SMALL) as t:
        t[b"12345678"] = b"abcdefgh"
        with pytest.raises(pmhash.InvalidArgumentError):
            t[b""] = b"abcdefgh"
        with pytest.raises(pmhash.InvalidArgumentError):
            t[b"short"] = b"abcdefgh"  # a fixed pool holds 8-byte keys and values
        with pytest.raises(pmhash.InvalidArgumentError):
            b"short" in t  # a bad key is an error, not absent (see below)
        # The pool is open: a second open is refused.
        with pytest.raises(pmhash.PoolBusyError):
            pmhash.open(pool_path, format="fixed")
    before = open(pool_path, "rb").read()
    with pytest.raises(pmhash.BadPoolError, match="wophi"):
        pmhash.open(pool_path, scheme="wophi", format="fixed")
    with pytest.raises(pmhash.BadPoolError, match="variable"):
        pmhash.open(pool_path, format="variable")
    with pytest.raises(pmhash.InvalidArgumentError):
        pmhash.open(pool_path, format="sideways")
    with pytest.raises(pmhash.InvalidArgumentError):
        pmhash.open(pool_path, scheme="nosuch")
    assert open(pool_path, "rb").read() == before
    with pmhash.open(pool_path, format="fixed") as t:
        assert t[b"12345678"] == b"abcdefgh"


def test_foreign_file_is_refused_unchanged(pool_path):
    data = b"this is not a pool" * 1000
    with open(pool_path, "wb") as f:
        f.write(data)
    with pytest.raises(pmhash.BadPoolError):
        pmhash.open(pool_path)
    assert open(pool_path, "rb").read() == data
    with pytest.raises(pmhash.NotFoundError):
        pmhash.open(pool_path + ".missing", create=False)


def test_full_pool_raises_pool_full(pool_path):
    with pmhash.open(pool_path, scheme="wophi", format="variable", pool_size=16 << 20,
                     params={"buckets": "1024"}) as t:
        with pytest.raises(pmhash.PoolFullError):
            for i in range(1_000_000):
                t[b"key-%d" % i] = b"x" * 200
        n = len(t)
        assert n > 0
        assert t[b"key-0"] == b"x" * 200  # what was acknowledged is still there
        ok, report = t.check()
        assert ok, report


@pytest.mark.parametrize("scheme", SCHEMES)
def test_threads_run_operations_in_parallel(pool_path, scheme):
    # The GIL is released inside operations; four threads write disjoint keys.
    with pmhash.open(pool_path, scheme=scheme, format="variable", pool_size=SMALL) as t:
        def work(w):
            for i in range(2000):
                t[b"w%d-%d" % (w, i)] = b"v%d" % i
                assert t[b"w%d-%d" % (w, i)] == b"v%d" % i

        ts = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        assert len(t) == 8000
        ok, report = t.check()
        assert ok, report


def test_prefault_backs_the_whole_pool(pool_path):
    with pmhash.open(pool_path, scheme="lineht", create=True, pool_size=SMALL, prefault=True) as t:
        t[key(1, "fixed")] = value(1, "fixed")
        assert os.stat(pool_path).st_blocks * 512 >= SMALL
    with pmhash.open(pool_path, scheme="lineht", create=False) as t:
        assert t[key(1, "fixed")] == value(1, "fixed")


@pytest.mark.parametrize("fmt", ["fixed", "variable"])
def test_in_raises_for_a_key_get_refuses(pool_path, fmt):
    # `in` answered False for a key the table cannot hold, where get() and t[key] raise:
    # a bad key is an error, not an absent key.
    bad_keys = [b"short", b"123456789"] if fmt == "fixed" else [b"", b"k" * 5000]
    with pmhash.open(pool_path, format=fmt, pool_size=SMALL) as t:
        t[key(1, fmt)] = value(1, fmt)
        for bad in bad_keys:
            with pytest.raises(pmhash.InvalidArgumentError) as from_get:
                t.get(bad)
            with pytest.raises(pmhash.InvalidArgumentError) as from_in:
                bad in t
            assert str(from_in.value) == str(from_get.value)
            with pytest.raises(pmhash.InvalidArgumentError):
                t[bad]
        assert key(1, fmt) in t and key(2, fmt) not in t


class _PathLike:
    def __init__(self, path):
        self.path = path

    def __fspath__(self):
        return self.path


def test_open_takes_any_path_like(pool_path):
    # pathlib.Path was refused ("incompatible function arguments") where a str was taken.
    with pmhash.open(pathlib.Path(pool_path), pool_size=SMALL) as t:
        t[key(1, "fixed")] = value(1, "fixed")
    for p in (pathlib.Path(pool_path), os.fsencode(pool_path), _PathLike(pool_path),
              _PathLike(os.fsencode(pool_path))):
        with pmhash.open(p, create=False) as t:
            assert t[key(1, "fixed")] == value(1, "fixed")
    with pytest.raises(TypeError):
        pmhash.open(42)
    with pytest.raises(pmhash.InvalidArgumentError):  # not the shorter path before the NUL
        pmhash.open(pool_path + "\0.other", create=False)
