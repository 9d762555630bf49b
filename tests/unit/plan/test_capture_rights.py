"""Whether a Source's server and user allow capture (`run` and `validate --database`): the
server's `wal_level` must be `logical`, the user needs REPLICATION or to be a superuser, and,
unless the publication exists, CREATE on the database and the tables' ownership."""

from __future__ import annotations

from distributary.api.source import Source
from distributary.plan.sources.source_plan import CaptureRights, capture_problems, database_address


def _source() -> Source:
    return Source.model_validate(
        {
            "metadata": {"name": "shop"},
            "spec": {
                "postgres": {
                    "host": "db.example",
                    "port": 5433,
                    "database": "shop",
                    "user": "cdc",
                    "passwordSecret": {"name": "shop-db"},
                },
                "tables": [{"name": "public.orders"}],
            },
        }
    )


def test_a_logical_server_and_a_replication_user_or_a_superuser_may_capture() -> None:
    assert capture_problems(_source(), CaptureRights("logical", True, False)) == []
    assert capture_problems(_source(), CaptureRights("logical", False, True)) == []


def test_a_server_without_logical_wal_names_the_setting_and_the_restart() -> None:
    assert capture_problems(_source(), CaptureRights("replica", True, False)) == [
        "spec.postgres: the server at shop@db.example:5433 has wal_level 'replica', so it keeps "
        "no changes to decode: set wal_level = logical (ALTER SYSTEM SET wal_level = logical, "
        "or postgresql.conf) and restart the server"
    ]


def test_a_user_without_replication_names_the_user_and_the_grant() -> None:
    assert capture_problems(_source(), CaptureRights("logical", False, False)) == [
        "spec.postgres.user: user 'cdc' has neither REPLICATION nor superuser, so it may not "
        'read the server\'s changes: ALTER ROLE "cdc" REPLICATION as a superuser, or name a '
        "user that has it"
    ]


def test_both_problems_are_said_at_once() -> None:
    problems = capture_problems(_source(), CaptureRights("minimal", False, False))
    assert [p.split(":")[0] for p in problems] == ["spec.postgres", "spec.postgres.user"]


def test_the_database_is_named_as_people_name_it() -> None:
    assert database_address(_source()) == "shop@db.example:5433"


def test_a_user_who_may_not_make_the_publication_is_told_how_to_allow_it() -> None:
    rights = CaptureRights("logical", True, False, publication_exists=False, may_create=False,
                           not_owned=("public.orders",))  # fmt: skip
    problems = capture_problems(_source(), rights)
    assert [p.split(":", 1)[0] for p in problems] == ["spec.postgres.user", "spec.tables"]
    assert "GRANT CREATE ON DATABASE" in problems[0]
    assert "does not own public.orders" in problems[1]
    assert all("CREATE PUBLICATION distributary_default_shop FOR TABLE" in p for p in problems)


def test_an_existing_publication_or_a_superuser_needs_no_more() -> None:
    made = CaptureRights("logical", True, False, publication_exists=True, may_create=False,
                         not_owned=("public.orders",))  # fmt: skip
    assert capture_problems(_source(), made) == []
    superuser = CaptureRights("logical", False, True, publication_exists=False, may_create=False,
                              not_owned=("public.orders",))  # fmt: skip
    assert capture_problems(_source(), superuser) == []
