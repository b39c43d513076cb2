"""Bad Worker arguments and registrations fail at once, with the argument named."""

from datetime import timedelta

import pytest

import relaybus


@pytest.mark.parametrize("options, error, text", [
    (dict(name=""), ValueError, "name must be a non-empty string"),
    (dict(name="x" * 1001), ValueError, "at most 1000 bytes"),
    (dict(name="relaybus-sql-0"), ValueError, "in-database handler workers"),
    (dict(name="w", holder=""), ValueError, "holder must be"),
    (dict(name="w", concurrency=0), ValueError, "concurrency must be an integer from 1"),
    (dict(name="w", concurrency=2.5), ValueError, "concurrency must be an integer"),
    (dict(name="w", batch_size=10001), ValueError, "batch_size must be an integer from 1 to 10000"),
    (dict(name="w", lease=0), ValueError, "lease must be more than 0"),
    (dict(name="w", lease=timedelta(days=2)), ValueError, "at most 86400 seconds"),
    (dict(name="w", lease="30s"), TypeError, "lease must be a number of seconds or a timedelta"),
    (dict(name="w", poll_interval=-1), ValueError, "poll_interval must be more than 0"),
    (dict(name="w", wakeup_interval=-0.001), ValueError, "wakeup_interval must be at least 0"),
    (dict(name="w", wakeup_interval=61), ValueError, "at most 60 seconds"),
    (dict(name="w", completion_delay=-0.1), ValueError, "completion_delay must be at least 0"),
    (dict(name="w", shutdown_grace=float("nan")), ValueError, "shutdown_grace must be"),
    (dict(name="w", bury_on=[ValueError, "x"]), TypeError, "bury_on must be exception classes"),
    (dict(name="w", connect_kwargs={"nonsense_option": "1"}), Exception, "nonsense_option"),
])
def test_bad_worker_options(options, error, text):
    with pytest.raises(error, match=None) as raised:
        relaybus.Worker("", **options)
    assert text in str(raised.value)


def test_name_is_required():
    with pytest.raises(TypeError):
        relaybus.Worker("")


def test_bad_registrations():
    worker = relaybus.Worker("", name="w")
    with pytest.raises(TypeError, match="not callable"):
        worker.add_handler("a", "not a function")
    with pytest.raises(TypeError, match=r"callable as f\(event\)"):
        worker.add_handler("a", lambda: None)
    with pytest.raises(TypeError, match=r"f\(event, conn\) \(it is transactional\)"):
        worker.add_handler("a", lambda event: None, transactional=True)
    with pytest.raises(ValueError, match="handler name must be"):
        worker.add_handler("", lambda event: None)
    worker.add_handler("a", lambda event: None)
    with pytest.raises(ValueError, match="already registered"):
        worker.add_handler("a", lambda event: None)

    @worker.handler("b", transactional=True)
    def handle(event, conn):
        pass
    assert handle.__name__ == "handle"  # the decorator returns the function unchanged


def test_start_needs_a_handler():
    with pytest.raises(ValueError, match="register at least one handler"):
        relaybus.Worker("", name="w").start()


def test_no_registration_after_start(subscribe, workers):
    handler, _ = subscribe()
    worker = workers()
    worker.add_handler(handler, lambda event: None)
    worker.start()
    with pytest.raises(RuntimeError, match="before start"):
        worker.add_handler("late", lambda event: None)
    with pytest.raises(RuntimeError, match="already started"):
        worker.start()


def test_run_forever_outside_the_main_thread(subscribe, workers):
    import threading
    handler, _ = subscribe()
    worker = workers()
    worker.add_handler(handler, lambda event: None)
    errors = []
    thread = threading.Thread(target=lambda: _catch(worker.run_forever, errors))
    thread.start()
    thread.join()
    assert errors and "main thread" in str(errors[0])


def _catch(call, errors):
    try:
        call()
    except RuntimeError as exc:
        errors.append(exc)
