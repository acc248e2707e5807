"""The message checks' I/O (issue 24): links fetched, rspamd asked, SPF/DKIM/DMARC/ARC verified over
the configured resolver, and the service that assembles and keeps a message's report. The pure
analysis (HTML compatibility, content, link extraction) lives in `mail/checks`."""
