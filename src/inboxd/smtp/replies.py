"""Every SMTP reply inboxd sends, named; and the one table from our errors to replies."""

from __future__ import annotations

from inboxd.errors import InboxdError, MessageRejected, StorageError

GREETING = "220 {host} ESMTP inboxd ready"
BYE = "221 2.0.0 Bye"
OK = "250 2.0.0 OK"
SENDER_OK = "250 2.1.0 Sender OK"
RECIPIENT_OK = "250 2.1.5 Recipient OK"
QUEUED = "250 2.0.0 OK: queued as {id}"
VRFY_CANNOT = "252 2.5.0 Cannot VRFY user, but will accept message"
START_DATA = "354 End data with <CR><LF>.<CR><LF>"
READY_TLS = "220 2.0.0 Ready to start TLS"
AUTH_OK = "235 2.7.0 Authentication successful"
AUTH_CHALLENGE = "334 {challenge}"
HELP = "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA RSET NOOP QUIT VRFY HELP"

SHUTTING_DOWN = "421 4.3.2 Service shutting down"
IDLE_TIMEOUT = "421 4.4.2 Idle timeout, closing connection"
TOO_MANY_ERRORS = "421 4.7.0 Too many errors, closing connection"
AUTH_TOO_MANY = "421 4.7.0 Too many failed authentications, closing connection"
OPS_QUOTA = "451 4.7.1 The monthly operations quota is used up"
SANDBOX_UNAVAILABLE = "451 4.3.0 No sandbox to capture into, try again later"
TOO_MANY_SESSIONS = "421 4.7.0 Too many connections, try again later"
TOO_MANY_FROM_IP = "421 4.7.0 Too many connections from your address, try again later"
# A trusted proxy's connection that does not open with a PROXY protocol header.
PROXY_HEADER_REQUIRED = "421 4.7.0 A PROXY protocol header is required from this address"
TEMP_FAILURE = "451 4.3.0 Temporary storage failure, try again later"
TOO_MANY_RECIPIENTS = "452 4.5.3 Too many recipients"
# A recipient whose mailbox's DATA faults differ from the first recipient's: RFC 5321 §3.3 lets the
# server take fewer recipients, and the sender sends this one again in a transaction of its own.
SPLIT_TRANSACTION = "452 4.5.3 Too many recipients, send this one in a transaction of its own"
INSUFFICIENT_STORAGE = "452 4.3.1 Insufficient system storage, try again later"

LINE_TOO_LONG = "500 5.5.2 Line too long"
UNRECOGNIZED = "500 5.5.2 Command unrecognized"
SYNTAX_ERROR = "501 5.5.4 Syntax error in parameters or arguments"
BAD_CHARACTERS = "501 5.5.2 NUL or bare CR is not allowed in commands"
BAD_ADDRESS = "501 5.1.3 Bad address syntax"
NOT_IMPLEMENTED = "502 5.5.1 Command not implemented"
NEED_HELO = "503 5.5.1 Send HELO or EHLO first"
NESTED_MAIL = "503 5.5.1 Sender already specified"
NEED_MAIL = "503 5.5.1 Need MAIL before RCPT"
NEED_RCPT = "503 5.5.1 Need RCPT before DATA"
TLS_ALREADY = "503 5.5.1 TLS already active"
AUTH_ALREADY = "503 5.5.1 Already authenticated"
AUTH_IN_TRANSACTION = "503 5.5.1 AUTH is not allowed during a mail transaction"
AUTH_CANCELLED = "501 5.7.0 Authentication cancelled"
AUTH_UNDECODABLE = "501 5.5.2 Cannot decode the authentication response"
AUTH_MECHANISM = "504 5.5.4 Unrecognized authentication type"
AUTH_REQUIRED = "530 5.7.0 Authentication required"
AUTH_FAILED = "535 5.7.8 Authentication credentials invalid"
AUTH_REVOKED = "535 5.7.8 Authentication credentials no longer valid"
AUTH_PRO_REQUIRED = "535 5.7.8 The SMTP sandbox needs a Pro account"
AUTH_NEEDS_TLS = "538 5.7.11 Encryption required for requested authentication mechanism"
PARAM_UNKNOWN = "555 5.5.4 Unsupported MAIL or RCPT parameter"

UNKNOWN_RECIPIENT = "550 5.1.1 No such mailbox here"
MAILBOX_DISABLED = "550 5.2.1 Mailbox disabled, not accepting messages"
RELAY_DENIED = "550 5.7.1 Relaying denied: inboxd does not serve that domain"
MAILBOX_FULL = "552 5.2.2 Mailbox full"
TOO_BIG = "552 5.3.4 Message exceeds the size limit"

_REJECTIONS = {
    "unknown_recipient": UNKNOWN_RECIPIENT,
    "mailbox_disabled": MAILBOX_DISABLED,
    "relay_denied": RELAY_DENIED,
    "mailbox_full": MAILBOX_FULL,
    "bad_recipient": BAD_ADDRESS,
    "too_big": TOO_BIG,
    "auth_revoked": AUTH_REVOKED,
    "sandbox_unavailable": SANDBOX_UNAVAILABLE,
    "ops_quota_exceeded": OPS_QUOTA,
}


def reply_for(error: InboxdError) -> str:
    """Our error → the SMTP reply; anything unexpected is temporary so the sender retries."""
    if isinstance(error, MessageRejected):
        return _REJECTIONS.get(error.code, TEMP_FAILURE)
    if isinstance(error, StorageError):
        return TEMP_FAILURE
    return TEMP_FAILURE
