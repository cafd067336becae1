"""`bertkit serve`: look inside models in the browser, offline.

- `workbench`: the models, corpus and runs of the command line, and one method per view
  (fill-mask, attention, a word's contextual vectors, training curves, predictions) that
  answers with JSON-ready dicts; usable from Python without a server.
- `app`: the FastAPI application (the page and its JSON API) and the uvicorn server.
- `static/`: the page itself (HTML, script, styles); nothing is fetched from the network.
"""
