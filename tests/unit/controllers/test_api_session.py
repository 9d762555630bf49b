"""kopf's session to the API server, with its connections capped."""

from __future__ import annotations

import asyncio

import kopf

from distributary.controllers.main import capped_session, fewer_malloc_arenas


def test_the_session_keeps_kopfs_credentials_and_caps_its_connections() -> None:
    info = kopf.ConnectionInfo(
        server="https://127.0.0.1:6443",
        scheme="Bearer",
        token="secret-token",
        insecure=True,
        default_namespace="shop",
    )

    async def main() -> None:
        found = capped_session(info, 40)
        assert found is not None
        session = found.aiohttp_session
        try:
            assert found.server == "https://127.0.0.1:6443"
            assert found.default_namespace == "shop"
            assert session.connector is not None
            assert session.connector.limit == 40
            assert session.headers["Authorization"] == "Bearer secret-token"
        finally:
            await session.close()

    asyncio.run(main())


def test_no_credentials_give_no_session() -> None:
    assert capped_session(None, 40) is None


def test_malloc_keeps_fewer_arenas_on_glibc() -> None:
    import platform

    assert fewer_malloc_arenas() is (platform.libc_ver()[0] == "glibc")
