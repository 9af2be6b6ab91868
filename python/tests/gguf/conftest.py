"""Fixtures: the qload CLI."""
import os

import pytest


@pytest.fixture
def qload_cli():
    return os.environ["QLOAD_TEST_CLI"]
