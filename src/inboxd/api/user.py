"""`/api/user/*`, the Pro management table: profile, all mailboxes, custom domains, API tokens.

Every route needs a Pro account (403 `pro_required`) and an API token (a mailbox token gets 403
`access_denied`); another user's resources answer 404.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api import messages, schemas
from inboxd.api.filters import FILTER_QUERY, WAIT_DESCRIPTION, WAIT_QUERY, message_filter, wait_response, wait_timeout
from inboxd.api.openapi import Query, describe
from inboxd.http.body import read_json
from inboxd.http.pipeline import Call, endpoint
from inboxd.http.query import page_number
from inboxd.http.responses import json_response, json_stream_response, no_content

pro = endpoint(pro=True)


@describe("Get the Pro profile", tag="pro", response=schemas.ProfileOut)
@pro
async def get_profile(request: Request, call: Call) -> Response:
    user = call.principal.user
    found = await call.services.profiles.of(user, usage=await call.services.admission.usage(user))
    return json_response(schemas.profile(found))


@describe(
    "List all the user's mailboxes",
    tag="pro",
    description="Pages of at most 1,000, newest first.",
    response=schemas.MailboxPage,
    query=(Query("cursor", str, "`next_cursor` of the previous page.", extension=True),),
)
@pro
async def list_accounts(request: Request, call: Call) -> Response:
    cursor = request.query_params.get("cursor", "")
    page, next_cursor = await call.services.mailboxes.page_for_user(
        call.principal.user, cursor, limit=call.services.settings.user_accounts_page_size
    )
    return json_response(
        schemas.MailboxPage(accounts=[schemas.mailbox_listed(m) for m in page], next_cursor=next_cursor)
    )


@describe(
    "List a mailbox's messages (any of the user's)",
    tag="pro",
    response=schemas.MessagePage,
    query=(Query("page", int, "Page number, 30 messages a page.", minimum=1), *FILTER_QUERY),
    errors=(404, 422),
)
@pro
async def list_account_messages(request: Request, call: Call) -> Response:
    page = page_number(request)
    flt = message_filter(request)
    mailbox = await call.services.mailboxes.find(call.principal, request.path_params["id"], scope="user")
    items = await call.services.messages.page(mailbox, page, flt)
    return json_response(schemas.MessagePage(messages=[schemas.message_item(m) for m in items], page=page))


@describe(
    "Wait for a message in any of the user's mailboxes",
    tag="pro",
    description=WAIT_DESCRIPTION,
    response=schemas.MessageDetailOut,
    query=WAIT_QUERY,
    errors=(404, 408, 503),
    codes=("too_many_waits",),
    extension=True,
)
@pro
async def wait_account_message(request: Request, call: Call) -> Response:
    flt, timeout = message_filter(request), wait_timeout(request)
    mailbox = await call.services.mailboxes.find(call.principal, request.path_params["id"], scope="user")
    return await wait_response(request, call.services.waits.wait(mailbox, flt, within=timeout), schemas.message_detail)


@describe(
    "Get a message of any of the user's mailboxes",
    tag="pro",
    description="As `GET /api/accounts/{mailbox}/messages/{id}`, for a mailbox made in the dashboard or "
    "with another token; reading does not mark the message read.",
    response=schemas.MessageDetailOut,
    errors=(404, 410),
    extension=True,
)
@pro
async def get_account_message(request: Request, call: Call) -> Response:
    service = call.services.messages
    read = service.detail_in(request.path_params["id"])
    opened = await call.services.mailboxes.read_in(call.principal, request.path_params["mailbox"], read, scope="user")
    detail = await service.detail_of(opened)
    return json_stream_response(schemas.message_detail(detail), fields=("text_body", "html_body"))


@describe(
    "Get the source of a message of any of the user's mailboxes",
    tag="pro",
    description="As `GET /api/accounts/{mailbox}/messages/{id}/source`, for a mailbox made in the "
    "dashboard or with another token.",
    media_type="message/rfc822",
    errors=(404, 410),
    headers={"Content-Disposition": '`attachment; filename="message.eml"`'},
    extension=True,
)
@pro
async def get_account_source(request: Request, call: Call) -> Response:
    return await messages.source_response(request, call, scope="user")


@describe(
    "Download an attachment of a message of any of the user's mailboxes",
    tag="pro",
    description="As `GET /api/accounts/{mailbox}/messages/{id}/attachments/{index}`, for a mailbox made "
    "in the dashboard or with another token.",
    media_type="application/octet-stream",
    errors=(400, 404, 410),
    codes=("invalid_index",),
    headers={"Content-Disposition": "`attachment` with the part's filename"},
    extension=True,
)
@pro
async def get_account_attachment(request: Request, call: Call) -> Response:
    return await messages.attachment_response(request, call, scope="user")


@describe("Delete any of the user's mailboxes", tag="pro", status=204, errors=(404,))
@pro
async def delete_account(request: Request, call: Call) -> Response:
    await call.services.mailboxes.delete(call.principal, request.path_params["id"], scope="user")
    return no_content()


@describe(
    "Reset the password of any of the user's mailboxes",
    tag="pro",
    body=schemas.MailboxSecret,
    response=schemas.PasswordReset,
    errors=(404,),
    codes=("password_too_short",),
)
@pro
async def reset_account_password(request: Request, call: Call) -> Response:
    body = await read_json(request, schemas.MailboxSecret)
    await call.services.mailboxes.reset_password(
        call.principal, request.path_params["id"], password=body.password, auth_key=body.auth_key, scope="user"
    )
    return json_response(schemas.PasswordReset(message="password_reset"))


@describe("List custom domains", tag="domains", response=schemas.CustomDomains)
@pro
async def list_domains(request: Request, call: Call) -> Response:
    domains = await call.services.domains.list(call.principal.user)
    return json_response(schemas.CustomDomains(domains=[schemas.custom_domain(d) for d in domains]))


@describe(
    "Add a custom domain",
    tag="domains",
    description="Answers the TXT record (`_inboxd.<domain>`, `inboxd-verify=<token>`) and the MX record to publish.",
    body=schemas.AddDomain,
    response=schemas.DomainAdded,
    status=201,
    errors=(409,),
    codes=("invalid_domain", "domain_limit_reached", "domain_already_exists"),
)
@pro
async def add_domain(request: Request, call: Call) -> Response:
    body = await read_json(request, schemas.AddDomain)
    domain = await call.services.domains.add(call.principal.user, body.domain)
    records = call.services.domains.records(domain)
    return json_response(
        schemas.DomainAdded(
            id=domain.id,
            domain=domain.domain,
            verify_token=domain.verify_token,
            dns_records=[schemas.dns_record(r) for r in records],
        ),
        201,
    )


@describe(
    "Verify a custom domain",
    tag="domains",
    description="Looks the TXT and MX records up; while pending, `dns_records` lists the missing ones.",
    response=schemas.VerificationOut,
    errors=(404, 410),
    codes=("domain_expired",),
)
@pro
async def verify_domain(request: Request, call: Call) -> Response:
    result = await call.services.domains.verify(call.principal.user, request.path_params["id"])
    return json_response(schemas.verification(result))


@describe("Delete a custom domain", tag="domains", status=204, errors=(404,))
@pro
async def delete_domain(request: Request, call: Call) -> Response:
    await call.services.domains.delete(call.principal.user, request.path_params["id"])
    return no_content()


@describe("List API tokens", tag="tokens", response=schemas.ApiTokens)
@pro
async def list_tokens(request: Request, call: Call) -> Response:
    tokens = await call.services.users.list_tokens(call.principal.user)
    return json_response(schemas.ApiTokens(tokens=[schemas.api_token(t) for t in tokens]))


@describe("Create an API token", tag="tokens", body=schemas.CreateToken, response=schemas.TokenCreated, status=201)
@pro
async def create_token(request: Request, call: Call) -> Response:
    body = await read_json(request, schemas.CreateToken)
    created = await call.services.users.create_token(call.principal.user, body.name)
    return json_response(schemas.TokenCreated(id=created.token.id, name=created.token.name, token=created.value), 201)


@describe("Revoke an API token", tag="tokens", status=204, errors=(404,))
@pro
async def revoke_token(request: Request, call: Call) -> Response:
    await call.services.users.revoke_token(call.principal.user, request.path_params["id"])
    return no_content()


routes = [
    Route("/api/user/me", get_profile, methods=["GET"]),
    Route("/api/user/accounts", list_accounts, methods=["GET"]),
    Route("/api/user/accounts/{id}", delete_account, methods=["DELETE"]),
    Route("/api/user/accounts/{id}/messages", list_account_messages, methods=["GET"]),
    Route("/api/user/accounts/{id}/messages/wait", wait_account_message, methods=["GET"]),
    Route("/api/user/accounts/{mailbox}/messages/{id}", get_account_message, methods=["GET"]),
    Route("/api/user/accounts/{mailbox}/messages/{id}/source", get_account_source, methods=["GET"]),
    Route("/api/user/accounts/{mailbox}/messages/{id}/attachments/{index}", get_account_attachment, methods=["GET"]),
    Route("/api/user/accounts/{id}/reset-password", reset_account_password, methods=["PUT"]),
    Route("/api/user/domains", list_domains, methods=["GET"]),
    Route("/api/user/domains", add_domain, methods=["POST"]),
    Route("/api/user/domains/{id}", delete_domain, methods=["DELETE"]),
    Route("/api/user/domains/{id}/verify", verify_domain, methods=["POST"]),
    Route("/api/user/tokens", list_tokens, methods=["GET"]),
    Route("/api/user/tokens", create_token, methods=["POST"]),
    Route("/api/user/tokens/{id}", revoke_token, methods=["DELETE"]),
]
