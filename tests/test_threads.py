"""spacy_elmo.threads: the thread setting for the biLM's compute and the oversubscription warning."""
import warnings

import pytest
import torch

from spacy_elmo.threads import (
    DEFAULT_THREADS,
    ThreadOversubscriptionWarning,
    available_cores,
    check_oversubscription,
    oversubscription_message,
    resolve_threads,
    set_threads,
    using_threads,
)


def test_default_is_one_thread():
    assert DEFAULT_THREADS == 1 and resolve_threads(None) == 1
    assert resolve_threads(0) == available_cores() and resolve_threads(3) == 3
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match="threads"):
            resolve_threads(bad)


def test_context_manager_restores_the_previous_count():
    before = torch.get_num_threads()
    with using_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    previous = set_threads(1)
    try:
        assert previous == before and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_oversubscription_warns_with_numbers():
    assert oversubscription_message(2, 1, cores=2) is None
    assert oversubscription_message(1, 2, cores=2) is None
    text = oversubscription_message(2, 2, cores=2)
    assert "2 threads x 2 processes = 4 compute threads on 2 CPU cores" in text and "threads=1" in text
    four = oversubscription_message(4, 1, cores=2)
    assert "Use threads=1, the safe default; up to 2 pay only on cores that nothing else uses." in four
    assert "threads=2" not in four and "up to" not in oversubscription_message(2, 1, cores=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert check_oversubscription(3, 1, cores=2)
        assert not check_oversubscription(1, 1, cores=2)
    assert len(caught) == 1 and issubclass(caught[0].category, ThreadOversubscriptionWarning)


def test_component_check_warns_once_per_process():
    from spacy_elmo import threads as module

    module._checked.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert module.check_component_threads(4, cores=2)
        assert not module.check_component_threads(4, cores=2)
        assert not module.check_component_threads(1, cores=2)
    assert len(caught) == 1 and "4 threads" in str(caught[0].message)


FORK_SCRIPT = """
import multiprocessing as mp, warnings
import torch
from spacy_elmo.threads import set_threads, using_threads

set_threads(2)
a = torch.randn(256, 256)
(a @ a).sum()  # the parent's OpenMP pool now has 2 threads


def child(queue):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with using_threads(2) as n:  # raw torch.set_num_threads(2) here would hang this child
            x = torch.randn(64, 256)
            for _ in range(5):
                x = torch.tanh(x @ a)
    queue.put((n, [str(w.message) for w in caught]))


if __name__ == "__main__":
    mp.set_start_method("fork")
    queue = mp.Queue()
    proc = mp.Process(target=child, args=(queue,))
    proc.start()
    n, messages = queue.get(timeout=60)
    proc.join()
    assert n == 1, n
    assert len(messages) == 1 and "forked worker" in messages[0], messages
    print("ok")
"""


def test_forked_workers_run_one_thread_instead_of_hanging(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_the_cli_and_the_component_it_builds_warn_once(capsys):
    from spacy_elmo import threads as module
    from spacy_elmo.cli import apply_threads

    too_many = available_cores() + 2
    module._checked.clear()
    before = torch.get_num_threads()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            apply_threads(too_many)  # the CLI's --threads: one line
            assert not module.check_component_threads(too_many)  # the component it builds: nothing more
        printed = capsys.readouterr()
        assert (printed.out + printed.err).count(f"{too_many} threads = {too_many} compute threads") == 1
        assert not caught
    finally:
        torch.set_num_threads(before)
        module._checked.clear()
