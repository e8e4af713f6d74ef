"""Fixtures shared by the Python tests."""

import os
import uuid

import pytest


@pytest.fixture
def pool_path():
    """A fresh pool path under /dev/shm (emulated PM), removed after the test."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    path = os.path.join(base, "pmhash-py-" + uuid.uuid4().hex)
    yield path
    if os.path.exists(path):
        os.unlink(path)
