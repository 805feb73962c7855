"""Which signal interrupted a run decides its exit status (130 for Ctrl-C, 143 for SIGTERM).
A signal that lands while the main thread waits inside Ray's C++ core is caught there
(``check_signals``: ``except KeyboardInterrupt: return Interrupted``) and re-raised as a new,
plain ``KeyboardInterrupt`` (``check_status``): ``_rays_wait`` below does the same. The CI
run on a clean clone saw a SIGTERMed Ray run exit 130 this way."""

from __future__ import annotations

import signal

import pytest

from heron.interrupt import Terminated, install_interrupt_handlers, interrupt_signal


@pytest.fixture(autouse=True)
def handlers():
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    install_interrupt_handlers()
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _rays_wait(signum: int) -> None:
    try:
        signal.raise_signal(signum)  # the handler runs here, as in PyErr_CheckSignals
    except KeyboardInterrupt:
        raise KeyboardInterrupt() from None  # the status code, not the exception, leaves C++


def _caught(signum: int, through_ray: bool) -> KeyboardInterrupt:
    with pytest.raises(KeyboardInterrupt) as info:
        _rays_wait(signum) if through_ray else signal.raise_signal(signum)
    return info.value


@pytest.mark.parametrize("through_ray", [False, True])
def test_sigterm_is_sigterm_even_when_ray_replaced_the_exception(through_ray):
    error = _caught(signal.SIGTERM, through_ray)
    assert isinstance(error, Terminated) != through_ray
    assert interrupt_signal(error) == signal.SIGTERM


@pytest.mark.parametrize("through_ray", [False, True])
def test_ctrl_c_after_an_earlier_sigterm_is_ctrl_c(through_ray):
    _caught(signal.SIGTERM, through_ray=True)
    assert interrupt_signal(_caught(signal.SIGINT, through_ray)) == signal.SIGINT


def test_a_custom_sigint_handler_is_left_alone():
    def mine(signum, frame):
        raise KeyboardInterrupt()

    signal.signal(signal.SIGINT, mine)
    install_interrupt_handlers()
    assert signal.getsignal(signal.SIGINT) is mine


def test_other_errors_are_no_interruption():
    assert interrupt_signal(ValueError("x")) is None
    assert interrupt_signal(None) is None
