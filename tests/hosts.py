"""This host as the shipped cost model's training rows describe it, for the tests and the guide's
examples about the learned model: a probe taken on a loaded machine may stray outside that range,
and the analytic rule then decides instead (that fallback is tested in
tests/chooser/test_host_fallback.py)."""

from ilargi.chooser import host
from ilargi.chooser.cost_model import load


def pin_trained_host(monkeypatch):
    """Make every host probe report the middle of the shipped CPU model's training range for
    each probed rate (the counts, cores and threads, stay this machine's)."""
    ranges, real = load("cpu").device_ranges, host.probe

    def probe(threads=None, **options):
        measured = dict(real(threads, **options))
        for name, (low, high) in ranges.items():
            if name != "threads":
                measured[name] = round(10 ** ((low + high) / 2), 6)
        return measured

    monkeypatch.setattr(host, "probe", probe)
