"""Shared problems of the Python tests."""

from pathlib import Path

import pytest

import gradfem
from problems import BLOCK, FIELD_BLOCK, ROOT


@pytest.fixture
def block() -> gradfem.Problem:
    return gradfem.Problem.from_string(BLOCK, ROOT / "block.toml")


@pytest.fixture
def field_block() -> gradfem.Problem:
    return gradfem.Problem.from_string(FIELD_BLOCK, ROOT / "field.toml")


@pytest.fixture
def root() -> Path:
    return ROOT
