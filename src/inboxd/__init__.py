"""inboxd: a self-hostable developer email platform."""


def package_version() -> str:
    """The installed distribution's version, as the OpenAPI document, `GET /api/server` and the
    MCP server report it; "0" for sources that were never installed."""
    from importlib import metadata  # here, not at import: most of inboxd never asks

    try:
        return metadata.version("inboxd")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0"
