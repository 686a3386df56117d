import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is not present")
    return TRACES
