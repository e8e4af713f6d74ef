"""pmhash: persistent-memory hash indexes (SmartHT, HDNH, PMEH, WOPHI, TurboHash).

    import pmhash
    with pmhash.open("/dev/shm/t.pool", scheme="turbohash", create=True,
                     format="variable") as t:
        t[b"k"] = b"v"          # insert or replace
        t[b"k"]                 # b"v"; NotFoundError (a KeyError) if absent
        b"k" in t, len(t), t.get(b"x"), t.stats(), t.check()
        del t[b"k"]

Operations release the GIL, so threads run them in parallel. Errors are pmhash.Error
subclasses carrying the library's message.
"""

from ._pmhash import (  # noqa: F401
    BadPoolError,
    ClosedError,
    CorruptedError,
    Error,
    InvalidArgumentError,
    IoError,
    KeyExistsError,
    NotFoundError,
    PoolBusyError,
    PoolFullError,
    Table,
    open,
    schemes,
)

__all__ = [
    "open", "schemes", "Table", "Error", "NotFoundError", "KeyExistsError",
    "InvalidArgumentError", "BadPoolError", "PoolBusyError", "PoolFullError",
    "CorruptedError", "IoError", "ClosedError",
]
