"""The soak's memory verdict (`bench.soak.rss_report`): growth across restarts, and growth over
time judged only past an epoch's warm-up, so a restart soak's short epochs are not flagged for
filling their caches while a steady climb in a long epoch still is."""

from __future__ import annotations

from bench.soak import WARM_UP_S, RssSample, rss_report


def _epoch(epoch: int, start: float, seconds: float, mb_at: object) -> list[RssSample]:
    """Samples every 2 s of one epoch, RSS in MB given by `mb_at(seconds into the epoch)`."""
    return [
        RssSample(start + t, epoch, int(1024 * mb_at(t)))  # type: ignore[operator]
        for t in (2.0 * i for i in range(int(seconds / 2) + 1))
    ]


def _warm_up(t: float) -> float:
    """Caches filling: +60 MB over the warm-up, then level."""
    return 300 + 60 * min(t, WARM_UP_S) / WARM_UP_S


def test_short_epochs_that_only_warm_up_are_not_flagged_and_say_why() -> None:
    samples = [s for e in range(5) for s in _epoch(e, 62.0 * e, 60.0, _warm_up)]
    _, growth = rss_report(samples)
    assert not growth["flagged"] and growth["reasons"] == []
    assert "slope_mb_per_min_longest_epoch" not in growth
    assert "the longest epoch lasted 60 s" in growth["slope_not_judged"]


def test_a_long_epoch_that_levels_off_after_its_warm_up_passes() -> None:
    _, growth = rss_report(_epoch(0, 0.0, 480.0, _warm_up))
    assert not growth["flagged"] and abs(growth["slope_mb_per_min_longest_epoch"]) < 1
    assert "slope_not_judged" not in growth


def test_a_long_epoch_that_keeps_climbing_is_flagged() -> None:
    _, growth = rss_report(_epoch(0, 0.0, 480.0, lambda t: _warm_up(t) + 0.5 * t))  # 30 MB a minute
    assert growth["flagged"] and 29 < growth["slope_mb_per_min_longest_epoch"] < 31


def test_peaks_that_climb_across_restarts_are_flagged() -> None:
    samples = [s for e in range(4) for s in _epoch(e, 62.0 * e, 60.0, lambda t, e=e: _warm_up(t) + 150 * e)]
    _, growth = rss_report(samples)
    assert growth["flagged"] and "across restarts" in growth["reasons"][0]
