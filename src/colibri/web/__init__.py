"""``colibri web``: the board in a browser, live.

It meets the daemon as a client only, as the TUI does: one load of the board per identity
(``feed.py``), then the daemon's events, passed on to each open page as server-sent events.
Pages are rendered on the server (Jinja2, autoescaped; ``templates/``) and a small hand-written
script (``static/web.js``) applies what the stream sends. Who may look is settled in
``security.py``: a one-time sign-in URL on loopback, an operator token over TLS elsewhere, a
session cookie, CSRF tokens and a Content-Security-Policy without inline script.

Starlette, uvicorn and Jinja2 are imported only by ``colibri web`` and ``colibri run --web``.
"""
