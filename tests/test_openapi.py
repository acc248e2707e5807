"""The OpenAPI document: complete, valid, served; the docs page and its assets come from the package."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from openapi_spec_validator import validate

from inboxd.api.app import api_routes
from inboxd.api.openapi import build_document, undescribed
from tests.conftest import Harness

sqlite = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def test_every_api_route_is_described() -> None:
    """A route under /api (or /healthz, /metrics) without `@describe` fails here: add one next
    to the handler (see the README's "Describing a route")."""
    assert undescribed(api_routes()) == []


def test_the_document_is_valid_openapi_3_1() -> None:
    document = build_document(api_routes(), base_url="http://localhost:8025", version="1")
    validate(document)
    assert document["openapi"] == "3.1.0"
    operation_ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))


def test_responses_reference_the_structs_handlers_encode() -> None:
    document = build_document(api_routes(), base_url="http://localhost:8025", version="1")
    listing = document["paths"]["/api/accounts/{mailbox}/messages"]["get"]
    assert listing["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/MessagePage"
    }
    item = document["components"]["schemas"]["MessageItem"]
    assert set(item["required"]) == {"id", "sender", "from", "subject", "preview_text", "size", "is_read", "created_at"}
    # Access comes from `endpoint()`: a mailbox token may read messages, only Pro reaches /api/user.
    assert listing["security"] == [{"apiToken": []}, {"mailboxToken": []}]
    me = document["paths"]["/api/user/me"]["get"]
    assert "`pro_required`" in me["responses"]["403"]["description"]
    assert document["paths"]["/api/domains"]["get"]["security"] == []
    # inboxd's additions are marked.
    assert document["paths"]["/api/token"]["post"]["x-inboxd-extension"] is True
    assert document["components"]["schemas"]["PublicDomainOut"]["properties"]["pro_only"]["x-inboxd-extension"]


def test_a_field_has_one_type_in_every_schema() -> None:
    """`to` and `cc` are the documented string (`Name <addr>, addr2`) in the mailbox and the sandbox
    detail alike; the sandbox's envelope is in `recipients`."""
    schemas = build_document(api_routes(), base_url="http://localhost:8025", version="1")["components"]["schemas"]
    for field in ("to", "cc"):
        kinds = {
            name: schema["properties"][field].get("type")
            for name, schema in schemas.items()
            # A release's body names its recipients as the list issue 27 specifies, not a message's `to`.
            if field in schema.get("properties", {}) and name != "ReleaseIn"
        }
        assert {"MessageDetailOut", "SandboxDetailOut"} <= kinds.keys()
        assert set(kinds.values()) == {"string"}, kinds


@sqlite
async def test_served_document_and_docs_page(harness: Harness) -> None:
    response = await harness.http.get("/api/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    validate(document)
    assert document["servers"] == [{"url": harness.server.settings.base_url.rstrip("/")}]
    page = await harness.http.get("/api/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "//" not in page.text.replace("<!doctype", "").split("<body>")[1], "the page must load nothing remote"
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "init.js"):
        got = await harness.http.get(f"/api/docs/assets/{asset}")
        assert got.status_code == 200 and len(got.content) > 100, asset
    init = (await harness.http.get("/api/docs/assets/init.js")).text
    assert 'url: "openapi.json"' in init


@sqlite
async def test_every_json_answer_decodes_as_its_declared_struct(harness: Harness) -> None:
    """Spot check of the tie between handler and document, on real answers (schemathesis covers
    the rest): the body of a success decodes strictly as the struct the document names."""
    from inboxd.api import schemas

    created = await harness.new_mailbox()
    mailbox = created["address"]
    await harness.send(mailbox)
    pairs: list[tuple[str, type[Any]]] = [
        ("/api/domains", schemas.PublicDomains),
        (f"/api/accounts/{mailbox}", schemas.MailboxOut),
        (f"/api/accounts/{mailbox}/messages", schemas.MessagePage),
        ("/api/user/me", schemas.ProfileOut),
        ("/api/user/accounts", schemas.MailboxPage),
        ("/api/user/tokens", schemas.ApiTokens),
        ("/healthz", schemas.Status),
    ]
    for path, kind in pairs:
        response = await harness.http.get(path, headers=harness.auth())
        assert response.status_code == 200, (path, response.text)
        msgspec.json.decode(response.content, type=kind, strict=True)
    listing = msgspec.json.decode(
        (await harness.http.get(f"/api/accounts/{mailbox}/messages", headers=harness.auth())).content,
        type=schemas.MessagePage,
    )
    detail = await harness.http.get(
        f"/api/accounts/{mailbox}/messages/{listing.messages[0].id}", headers=harness.auth()
    )
    msgspec.json.decode(detail.content, type=schemas.MessageDetailOut)


def test_docs_api_md_is_rendered_from_the_document() -> None:
    """docs/api.md cannot drift: regenerate it with `python -m inboxd.api.reference > docs/api.md`."""
    from pathlib import Path

    from inboxd.api.reference import current

    written = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    assert written == current(), "docs/api.md is stale: run `python -m inboxd.api.reference > docs/api.md`"
    for route in ("GET /healthz", "GET /api/accounts/{mailbox}/messages/{id}/attachments/{index}"):
        assert f"### `{route}`" in written
    assert "### `PUT /api/accounts/{mailbox}/messages/read`" in written


def test_readme_links_stay_inside_the_repository() -> None:
    import re
    from pathlib import Path

    root = Path(__file__).parent.parent
    readme = (root / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert "docs/api.md" in targets
    for target in targets:
        assert not re.match(r"[a-z]+:", target), target
        path = target.split("#", 1)[0]
        assert not path or (root / path).exists(), target
    assert "shared/spec" not in readme
