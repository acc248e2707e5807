"""The dashboard: server-rendered pages over the same services as the REST API.

`pages.py` is the shape every page shares (session → guard → CSRF → handler → HTML with the
security headers), `errors.py` the one table from errors to pages, `layout.py` the navigation,
and one module per area (`sign_in.py`, `account.py`, `admin.py`). Templates and static assets
ship inside the wheel.
"""
