"""Shared problems of the Python tests."""

import os
from pathlib import Path

import pytest

import gradfem
from problems import BLOCK, FIELD_BLOCK, ROOT

# scripts/test.sh leaves torch out on a machine without the disk for it and says why here.
# Otherwise the torch modules import it unconditionally and a missing torch is an error.
TORCH_SKIPPED = os.environ.get("GRADFEM_TORCH_SKIPPED")
collect_ignore = ["test_torch.py", "test_dynamics.py"] if TORCH_SKIPPED else []


def pytest_configure(config):
    config.addinivalue_line("markers", "torch: the test needs PyTorch")


def pytest_collection_modifyitems(config, items):
    if TORCH_SKIPPED:
        skip = pytest.mark.skip(reason=f"torch not installed: {TORCH_SKIPPED}")
        for item in items:
            if "torch" in item.keywords:
                item.add_marker(skip)


def pytest_report_header(config):
    if TORCH_SKIPPED:
        return f"PyTorch bridge tests left out: {TORCH_SKIPPED}"
    return None


@pytest.fixture
def block() -> gradfem.Problem:
    return gradfem.Problem.from_string(BLOCK, ROOT / "block.toml")


@pytest.fixture
def field_block() -> gradfem.Problem:
    return gradfem.Problem.from_string(FIELD_BLOCK, ROOT / "field.toml")


@pytest.fixture
def root() -> Path:
    return ROOT
