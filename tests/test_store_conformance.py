"""Every store shipped with pager passes the one conformance suite (pager.testing)."""

from __future__ import annotations

import pytest

from pager.storage.memory import MemoryStore
from pager.storage.sqlite import SQLiteStore
from pager.testing import StoreContract


class TestSQLiteStore(StoreContract):
    @pytest.fixture
    def make_store(self, tmp_path):
        return lambda: SQLiteStore(tmp_path / "store")


class TestMemoryStore(StoreContract):
    durable = False

    @pytest.fixture
    def make_store(self):
        return MemoryStore
