"""Serving trained runs over HTTP (``seqlab serve``): a FastAPI app over the ``System`` protocol and its one
self-contained web page (``static/index.html``: no CDN, no build step). Needs the ``serve`` extra (fastapi,
uvicorn).

``catalog``: the runs served (``load_models``, ``ServedModel``); ``schemas``: request bodies and ``ServeLimits``;
``gate``: the bound on work at once; ``batching``: predict requests that arrive together answered by one call;
``streaming``: server-sent events from a generation running in a worker thread; ``app``: ``create_app``.
"""

from seqlab.serving.app import create_app
from seqlab.serving.catalog import ServedModel, load_models
from seqlab.serving.schemas import ServeLimits

__all__ = ["ServeLimits", "ServedModel", "create_app", "load_models"]
