"""The request pipeline both faces share (the REST API and the dashboard): who is calling, the
client address (trusted proxies), limits, body reading and error mapping. It sits below `api` and
`web`, which never import each other."""
