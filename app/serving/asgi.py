"""The dashboard as an ASGI app: ``streamlit run app/serving/asgi.py`` (what ``trainledger dashboard`` starts, via app/serving/serve.py).

Streamlit's ``st.App`` serves app/main.py with, in front of it:

1. :class:`trainledger.app.serving.guard.HostGuard`: the Host/Origin allow-list (DNS rebinding), on
   every HTTP request and on the WebSocket that carries the app;
2. :class:`trainledger.app.serving.signin.SignInRequired`: with an auth file, a page load without a
   valid session goes to the sign-in form (and comes back to the page after);
3. the sign-in routes of :mod:`trainledger.app.serving.signin` (``/_trainledger/signin``) and of
   :mod:`trainledger.app.serving.oidc_routes` (OpenID Connect sign-in, ``/_trainledger/signout``).

Log lines of the dashboard's own loggers (``trainledger.*``: refused requests,
sign-ins) go to stderr with a timestamp.
"""

import logging
import sys
from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware
from trainledger.app.serving import oidc_routes
from trainledger.app.serving.guard import HostGuard
from trainledger.app.serving.signin import SignInRequired, routes


def _log_to_stderr() -> None:
    logger = logging.getLogger("trainledger")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


_log_to_stderr()
app = st.App(str(Path(__file__).parents[1] / "main.py"), routes=[*routes(), *oidc_routes.routes()],
             middleware=[Middleware(HostGuard), Middleware(SignInRequired)])
