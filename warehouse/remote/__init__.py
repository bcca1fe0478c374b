"""The owner channel: other processes reach an embedded (chDB) store through its owner.

chDB lets one process at a time open a data path. The long-running owner of an embedded
store (the stream worker) serves requests for it over HTTP on loopback, and announces
itself in an *owner file* next to the data directory (``<path>.owner.json`` for
``chdb:///<path>``): ``{"pid", "url", "token", "started_at"}``, mode 0600. While that
process lives, ``warehouse.connect.connect`` returns a ``RemoteClient`` to it instead of
opening the store (which would fail on chDB's lock).

Wire format: one ``POST`` per call, a JSON object ``{"op", "database", ...}`` with a
``Authorization: Bearer <token>`` header; the answer is JSON too. Values that JSON cannot
carry exactly travel tagged by ``encode_value``/``decode_value`` (the typed codec), so a
remote query returns the same Python values as a local one. Ops:

- ``ping`` -> ``{"pid"}`` (does not touch the store);
- ``query`` (``sql``, ``parameters``, ``settings``, ``column_formats``) ->
  ``{"column_names", "column_types", "rows", "summary"}``;
- ``command`` (``sql``, ``parameters``, ``settings``) -> ``{"result"}`` or ``{"summary"}``;
- ``insert`` (``table``, ``rows``, ``column_names``, ``database``, ``settings``) ->
  ``{"summary"}`` (the owner reads the column types itself).

Failures answer ``{"error": {"class", "message", "code", "name"}}`` with status 400
(malformed request), 401 (token), 422 (the statement failed), 503 (transient) or 500; never
a traceback. ``serve_request`` and ``check_bearer`` are the server side, reusable by any
HTTP stack (the worker's faust page, an ASGI app).

One module per side of the channel: ``codec`` (the typed codec and the error classes the
wire names), ``server`` (``serve_request``, ``check_bearer``, ``OWNER_PATH``), ``client``
(``RemoteClient``) and ``discovery`` (the owner file: ``publish_owner``,
``withdraw_owner``, ``find_owner``, ``owner_file``, ``new_token``).
"""
