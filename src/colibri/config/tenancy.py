"""Which tenants of a PostgreSQL board a daemon serves: ``--tenants``/``store.tenants`` (some
of them, by a lease each), ``--share``/``store.share`` (shared out among the sharing daemons),
or neither (the whole board)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from colibri.core.errors import ConfigError
from colibri.core.leases import is_postgres


def served_tenants(
    given: str | None, configured: object, store: str, where: Callable[..., str]
) -> tuple[str, ...]:
    """The tenants this daemon serves of a PostgreSQL board: ``--tenants a,b`` or
    ``store.tenants``; () for the whole board."""
    from colibri.core.errors import BadRequest
    from colibri.core.model import check_name

    if given is not None:
        names: object = [part.strip() for part in given.split(",")]
        said = "--tenants"
    else:
        names, said = configured, f"{where('tenants', 'store')}: store.tenants"
    if names is None:
        return ()
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f'{said} must be a list of tenant names, like ["acme", "beta"]')
    try:
        chosen = tuple(sorted({check_name(n, "tenant") for n in names}))
    except BadRequest as exc:
        raise ConfigError(f"{said}: {exc.message}") from None
    if not is_postgres(store):
        raise ConfigError(
            f"{said}: a daemon serves some tenants only of a PostgreSQL board (--store "
            "postgresql://…); one on SQLite serves its whole board"
        )
    return chosen


def shares_tenants(
    given: bool, section: dict[str, Any], tenants: str | None, store: str, where: Callable[..., str]
) -> bool:
    """Whether this daemon shares the board's tenants out with the other sharing daemons
    (``--share`` or ``store.share``): a PostgreSQL board, and no tenants of its own."""
    configured = section.get("share", False)
    said = "--share" if given else f"{where('share', 'store')}: store.share"
    if not isinstance(configured, bool):
        raise ConfigError(f"{said} must be true or false")
    if not (given or configured):
        return False
    if tenants is not None or section.get("tenants") is not None:
        raise ConfigError(
            f"{said}: a daemon shares the board's tenants out or serves its own (--tenants, "
            "store.tenants), not both"
        )
    if not is_postgres(store):
        raise ConfigError(
            f"{said}: daemons share out the tenants of a PostgreSQL board (--store "
            "postgresql://…); one on SQLite serves its whole board"
        )
    return True
