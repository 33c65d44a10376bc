"""Host peaks: measured once per host, found by every store, raised and never lowered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmfab.knowledge import Store
from swarmfab.measure.roofline import HostPeaks, host_fingerprint
from swarmfab.swarm import hosts
from swarmfab.swarm.hosts import KnownPeaks, host_peaks, peaks_known


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> list[HostPeaks]:
    """What the next measurements read (each pops one), and a count of them."""
    readings: list[HostPeaks] = []

    def measure(threads: int, device: str, limits: object) -> HostPeaks:
        assert readings, "measured although the peaks were known"
        return readings.pop(0)

    monkeypatch.setattr(hosts, "_measure", measure)
    return readings


def peaks(flops: float, nbytes: float, threads: int = 2) -> HostPeaks:
    return HostPeaks(host_fingerprint(threads), flops * 1e9, nbytes * 1e9)


def test_a_store_on_a_known_host_uses_the_host_s_peaks_without_measuring(
    tmp_path: Path, measured: list[HostPeaks],
) -> None:
    known = KnownPeaks(tmp_path / "cache" / "host-peaks.json")
    first, second = Store(tmp_path / "a.db"), Store(tmp_path / "b.db")
    assert not peaks_known(first, 2, known)
    measured.append(peaks(400, 40))
    assert host_peaks(first, 2, known=known) == peaks(400, 40)
    assert peaks_known(second, 2, known)
    assert host_peaks(second, 2, known=known) == peaks(400, 40)  # no second measurement
    assert second.host_peaks(host_fingerprint(2)) == peaks(400, 40)  # the store has them too
    assert not peaks_known(second, 1, known)  # another thread count is another figure


def test_measuring_again_raises_each_figure_and_never_lowers_one(
    tmp_path: Path, measured: list[HostPeaks],
) -> None:
    known = KnownPeaks(tmp_path / "host-peaks.json")
    store = Store(tmp_path / "x.db")
    measured.extend([peaks(260, 60), peaks(490, 40), peaks(100, 10)])
    host_peaks(store, 2, known=known)
    assert host_peaks(store, 2, measure=True, known=known) == peaks(490, 60)
    assert host_peaks(store, 2, measure=True, known=known) == peaks(490, 60)  # busy: kept
    assert known.get(host_fingerprint(2)) == peaks(490, 60)
    assert store.host_peaks(host_fingerprint(2)) == peaks(490, 60)


def test_a_store_s_better_figures_raise_the_host_s(tmp_path: Path,
                                                  measured: list[HostPeaks]) -> None:
    known = KnownPeaks(tmp_path / "host-peaks.json")
    old, new = Store(tmp_path / "old.db"), Store(tmp_path / "new.db")
    old.save_host_peaks(peaks(480, 30))
    known.raise_to(peaks(300, 50))
    assert host_peaks(old, 2, known=known) == peaks(480, 50)
    assert host_peaks(new, 2, known=known) == peaks(480, 50)


@pytest.mark.parametrize("text", ["{not json", "[]", '{"%s": {"flops_per_s": "many"}}',
                                  '{"%s": {"flops_per_s": -1, "bytes_per_s": 1}}',
                                  '{"%s": {"flops_per_s": NaN, "bytes_per_s": 1}}'])
def test_a_damaged_file_counts_as_empty_and_is_written_again(
    tmp_path: Path, measured: list[HostPeaks], text: str,
) -> None:
    path = tmp_path / "host-peaks.json"
    path.write_text(text.replace("%s", host_fingerprint(2)))
    known = KnownPeaks(path)
    assert known.get(host_fingerprint(2)) is None
    measured.append(peaks(400, 40))
    host_peaks(Store(tmp_path / "x.db"), 2, known=known)
    assert KnownPeaks(path).get(host_fingerprint(2)) == peaks(400, 40)


def test_a_cache_path_that_is_a_directory_is_no_error(tmp_path: Path,
                                                     measured: list[HostPeaks]) -> None:
    path = tmp_path / "host-peaks.json"
    path.mkdir()  # a name that is taken (a read-only directory would not stop root)
    measured.append(peaks(400, 40))
    store = Store(tmp_path / "x.db")
    assert host_peaks(store, 2, known=KnownPeaks(path)) == peaks(400, 40)
    assert store.host_peaks(host_fingerprint(2)) == peaks(400, 40)
    assert not list(tmp_path.glob(".host-peaks.json.[0-9]*"))  # no scratch file left


def test_the_peaks_command_shows_the_host_s_figures_from_the_user_s_cache(
    tmp_path: Path,
) -> None:
    threads = len(os.sched_getaffinity(0))
    cache = tmp_path / "cache"
    KnownPeaks(cache / "swarmfab" / "host-peaks.json").raise_to(peaks(123, 45, threads))
    done = subprocess.run([sys.executable, "-m", "swarmfab", "peaks", "--json", "--db",
                           str(tmp_path / "x.db")], capture_output=True, text=True,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache),
                               "SWARMFAB_HOST_PEAKS": ""}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["flops_per_s"], shown["bytes_per_s"], shown["threads"]) == (123e9, 45e9,
                                                                              threads)
    assert Store(tmp_path / "x.db").host_peaks(host_fingerprint(threads)) == peaks(123, 45,
                                                                                   threads)
