"""The request pipeline both faces share (the REST API and the dashboard), below `api` and `web`,
which never import each other: `pipeline.py` (who is calling, the path's access rules, admission
and the limits' headers), `client_address.py` (the client IP the per-IP limits key), `body.py`
(body reading within the size limit, JSON and forms), `query.py` (page numbers), `responses.py`
(JSON answers, downloads' Content-Disposition) and `errors.py` (errors to HTTP answers)."""
