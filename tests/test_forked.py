"""hisparse_model/answers/forked.py: map_forked gives the answer of a plain loop, in order, for any
number of workers, raises a worker's error, and leaves no worker behind on any way out."""

import multiprocessing
import os

import pytest

from hisparse_model.answers.forked import map_forked


def square(x):
    return x * x


def fail_on_three(x):
    if x == 3:
        raise ValueError(f"item {x} refused")
    return x


def die_on_two(x):
    if x == 2:
        os._exit(3)  # a worker gone without an answer (killed, out of memory, ...)
    return x


@pytest.mark.parametrize("items, jobs", [
    (range(10), 2),   # more items than workers: each worker takes several
    (range(3), 8),    # fewer items than workers: 3 workers started, not 8
    (range(1), 2),    # one item
    ([], 2),          # nothing to do: no worker, an empty answer
    (range(7), 7),    # one item each
])
def test_the_answer_is_the_loops_in_order(items, jobs):
    assert map_forked(square, items, jobs) == [square(x) for x in items]


@pytest.mark.parametrize("fn, error, text", [
    (fail_on_three, ValueError, "item 3 refused"),  # its own exception, raised here
    (die_on_two, RuntimeError, "exit status 3"),     # a worker that died: its exit status
])
def test_a_workers_failure_is_raised_and_no_worker_is_left(fn, error, text):
    with pytest.raises(error, match=text):
        map_forked(fn, range(6), 2)
    assert multiprocessing.active_children() == []  # every worker killed and reaped
