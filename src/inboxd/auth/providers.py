"""The identity providers an operator configured, through Authlib's Starlette client.

GitHub is OAuth 2 with its REST API for the person's id and emails (the primary address counts,
and only when GitHub marks it verified). Google and the generic issuer are OpenID Connect found by
discovery: Authlib checks the ID token's signature against the issuer's JWKS, its issuer,
audience, expiry and nonce. Every flow uses PKCE (S256), `state` and, for OIDC, a nonce; what
Authlib keeps between the redirect and the callback lives in the server-side session's `data`,
handed to Authlib as `request.session`.

Everything a provider can do wrong (be down, answer garbage, refuse the code, sign a token for
someone else) becomes one of our errors here, so the pages show it and nothing leaks as a 500.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from inboxd.config import Settings
from inboxd.errors import InvalidRequest, NotFound, ProviderError
from inboxd.services.sign_in import ProviderInfo, VouchedIdentity, configured

if TYPE_CHECKING:
    from authlib.integrations.starlette_client import OAuth

log = logging.getLogger("inboxd.auth")

PROVIDER_KEYS = ("github", "google", "oidc")
__all__ = ["GOOGLE_ISSUER", "PROVIDER_KEYS", "ProviderInfo", "Providers", "configured"]
GOOGLE_ISSUER = "https://accounts.google.com"


def _discovery(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


class Providers:
    """One Authlib client per configured provider, built once at start."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._info = {p.key: p for p in configured(settings)}
        self._oauth = _oauth() if self._info else None
        if self._oauth is None:
            return
        common = {"code_challenge_method": "S256", "timeout": settings.provider_timeout}
        if "github" in self._info:
            self._oauth.register(
                "github",
                client_id=settings.github_client_id,
                client_secret=settings.github_client_secret,
                authorize_url=settings.github_url.rstrip("/") + "/login/oauth/authorize",
                access_token_url=settings.github_url.rstrip("/") + "/login/oauth/access_token",
                api_base_url=settings.github_api_url.rstrip("/") + "/",
                client_kwargs={**common, "scope": "read:user user:email"},
            )
        if "google" in self._info:
            self._oauth.register(
                "google",
                client_id=settings.google_client_id,
                client_secret=settings.google_client_secret,
                server_metadata_url=_discovery(settings.google_issuer),
                client_kwargs={**common, "scope": "openid email profile"},
            )
        if "oidc" in self._info:
            self._oauth.register(
                "oidc",
                client_id=settings.oidc_client_id,
                client_secret=settings.oidc_client_secret,
                server_metadata_url=_discovery(settings.oidc_issuer),
                client_kwargs={**common, "scope": "openid email profile"},
            )

    def info(self, key: str) -> ProviderInfo:
        if key not in self._info:
            raise NotFound("That sign-in provider is not configured on this server.")
        return self._info[key]

    def callback_url(self, key: str) -> str:
        return f"{self._settings.base_url.rstrip('/')}/auth/{key}/callback"

    def _client(self, key: str) -> Any:
        assert self._oauth is not None, "begin and finish come after info(), which refuses unknown keys"
        return self._oauth.create_client(key)

    async def begin(self, key: str, request: Request) -> str:
        """The provider's authorization URL; Authlib records state, nonce and verifier in
        `request.session`."""
        label = self.info(key).label
        client = self._client(key)
        try:
            redirect = await client.authorize_redirect(request, self.callback_url(key))
        except Exception as exc:
            raise _translate(exc, label) from exc
        location: str = redirect.headers["location"]
        return location

    async def finish(self, key: str, request: Request) -> VouchedIdentity:
        """Check the callback against `request.session` and the provider; who it vouches for."""
        label = self.info(key).label
        client = self._client(key)
        try:
            if key == "github":
                token = await client.authorize_access_token(request)
                return await self._github_identity(client, token)
            options = await self._id_token_rules(key, client)
            token = await client.authorize_access_token(request, claims_options=options)
            return await self._oidc_identity(key, client, token)
        except (InvalidRequest, ProviderError):
            raise
        except Exception as exc:
            raise _translate(exc, label) from exc

    async def _id_token_rules(self, key: str, client: Any) -> dict[str, Any]:
        """Claims an ID token must carry: our client id among its audiences (Authlib alone lets a
        token for another audience through when its `azp` names us), and the discovered issuer,
        which must be the configured one (OpenID Connect Discovery, section 4.3)."""
        configured_issuer = self._settings.google_issuer if key == "google" else self._settings.oidc_issuer
        metadata = await client.load_server_metadata()
        issuer = str(metadata.get("issuer") or "").rstrip("/")
        if issuer != configured_issuer.rstrip("/"):
            raise ProviderError(f"The provider calls itself {issuer or 'nothing'}, not {configured_issuer}.")
        # Google signs ID tokens with `iss` either with or without the scheme.
        issuers = [issuer, issuer.removeprefix("https://")] if key == "google" else [issuer]
        return {
            "iss": {"essential": True, "values": issuers},
            "aud": {"essential": True, "values": [client.client_id]},
        }

    @staticmethod
    async def _github_identity(client: Any, token: dict[str, Any]) -> VouchedIdentity:
        user = (await client.get("user", token=token)).raise_for_status().json()
        emails = (await client.get("user/emails", token=token)).raise_for_status().json()
        if not isinstance(user, dict) or not isinstance(emails, list) or "id" not in user:
            raise ProviderError("GitHub answered with something that is not a user.")
        primary = next((e for e in emails if isinstance(e, dict) and e.get("primary")), None)
        return VouchedIdentity(
            provider="github",
            subject=str(user["id"]),
            email=str(primary.get("email") or "") if primary else "",
            email_verified=bool(primary and primary.get("verified") is True),
            name=str(user.get("name") or user.get("login") or ""),
        )

    @staticmethod
    async def _oidc_identity(key: str, client: Any, token: dict[str, Any]) -> VouchedIdentity:
        claims = dict(token.get("userinfo") or {})
        if not claims.get("sub"):
            raise ProviderError("The provider sent no ID token.")
        if "email" not in claims:
            # Some issuers keep the email claims at the userinfo endpoint only.
            extra = await client.userinfo(token=token)
            if extra.get("sub") != claims["sub"]:
                raise ProviderError("The provider's userinfo is about someone else.")
            claims = {**dict(extra), **claims}
        verified = claims.get("email_verified")
        return VouchedIdentity(
            provider=key,
            subject=str(claims["sub"]),
            email=str(claims.get("email") or ""),
            email_verified=verified is True or verified == "true",
            name=str(claims.get("name") or ""),
        )


def _oauth() -> OAuth:
    # Authlib and its HTTP and JOSE stack are imported only where a provider is configured: a
    # server without one never loads them.
    from authlib.integrations.starlette_client import OAuth

    return OAuth()


def _translate(exc: Exception, label: str) -> InvalidRequest | ProviderError:
    """A provider's failure → our error, with a message a person can act on."""
    import httpx2
    from authlib.common.errors import AuthlibBaseError
    from authlib.integrations.base_client import MismatchingStateError, OAuthError
    from joserfc.errors import JoseError

    if isinstance(exc, MismatchingStateError):
        return InvalidRequest(
            "This sign-in could not be matched to one started in this browser: it may have been "
            "used already, started in another tab, or have taken too long. Please start again.",
            code="sign_in_state",
        )
    if isinstance(exc, OAuthError) and exc.error == "access_denied":
        return ProviderError(f"The sign-in was cancelled at {label}.")
    if isinstance(exc, httpx2.TimeoutException | httpx2.TransportError):
        return ProviderError(f"{label} could not be reached. Please try again in a moment.")
    if isinstance(exc, AuthlibBaseError | JoseError):
        return ProviderError(f"{label} did not confirm the sign-in ({_describe(exc)}). Please try again.")
    if not isinstance(exc, httpx2.HTTPStatusError | ValueError | KeyError | TypeError | AttributeError | RuntimeError):
        # Nothing a provider sends should reach here; if it does, the visitor still gets a page.
        log.exception("unexpected failure of a sign-in with %s", label)
    return ProviderError(f"{label} answered in a way inboxd does not understand. Please try again later.")


def _describe(exc: Exception) -> str:
    from authlib.integrations.base_client import OAuthError

    if isinstance(exc, OAuthError):
        return exc.error or "refused"
    error = getattr(exc, "error", None)
    return str(error or type(exc).__name__)
