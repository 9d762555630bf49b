"""How a query aggregates, as the checks of event time read it: whether it does, and the
columns and time windows its GROUP BY groups on."""

from __future__ import annotations

import pytest

from distributary.event_time import Grouping, TimeKey, grouping


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT user, page FROM pv", Grouping(False, ())),
        ("SELECT user, count(*) OVER (PARTITION BY user) AS n FROM pv", Grouping(False, ())),
        ("SELECT count(*) AS n FROM pv", Grouping(True, ())),
        (
            "SELECT user, count(*) AS n FROM pv GROUP BY user",
            Grouping(True, (TimeKey("user", None, None),)),
        ),
        (
            "SELECT window.start AS s, count(*) AS n FROM pv GROUP BY window(pv.ts, '1 minute')",
            Grouping(True, (TimeKey("ts", "pv", "window"),)),
        ),
        (
            "SELECT window(ts, '10 minutes', '5 minutes') AS w, count(*) AS n FROM pv GROUP BY w",
            Grouping(True, (TimeKey("ts", None, "window"),)),
        ),
        (
            "SELECT s.start AS s, count(*) AS n FROM pv GROUP BY session_window(ts, '5 minutes')",
            Grouping(True, (TimeKey("ts", None, "session_window"),)),
        ),
        (
            "SELECT * FROM (SELECT user, max(ts) AS ts FROM pv GROUP BY user) AS t",
            Grouping(True, (TimeKey("user", None, None),)),
        ),
    ],
    ids=["stateless", "over", "global", "by-key", "window", "by-alias", "session", "subquery"],
)
def test_grouping_finds_aggregation_and_its_keys(sql: str, expected: Grouping) -> None:
    assert grouping(sql) == expected


def test_windows_are_the_time_window_keys() -> None:
    shape = grouping(
        "SELECT window.start AS s, user, count(*) AS n FROM pv "
        "GROUP BY window(ts, '1 minute'), user"
    )
    assert shape.windows == (TimeKey("ts", None, "window"),)
