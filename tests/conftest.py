import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--record",
        action="store_true",
        default=False,
        help="gpu tests: write the live recordings into tests/recorded/ (refresh them)",
    )
