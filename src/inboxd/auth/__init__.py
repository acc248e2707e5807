"""Browser sign-in: identity providers through Authlib, the session cookie, CSRF checks.

The rules (who may sign in, what a session is) live in `services/sign_in.py` and
`services/sessions.py`; this package is the browser's side of them.
"""
