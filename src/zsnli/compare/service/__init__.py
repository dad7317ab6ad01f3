"""Bake-off as a service: ``POST /v1/bakeoff`` ranks the arms on a user's few labelled examples.

Modules (data flows top to bottom; each imports only those below it and
``zsnli`` core modules):

* `api`: the HTTP routes, added to the app by ``add_bakeoff_routes(app, ...)``;
* `page`: the HTML pages (``/bakeoff``, ``/bakeoffs``, ``/bakeoffs/{id}`` via `zsnli.compare.render`) and static assets;
* `runner`: runs one bake-off (arms, protocol, time budget) -> the answer dict;
* `arms_adapter`: the arms, built through the `zsnli.compare.arms` registry (the served model through the batcher);
* `protocol`: request validation (422 field names), cross-validation folds, metrics, ranking;
* `store`: the SQLite store of finished bake-offs;
* `badge`: the SVG badge;
* `settings`: ``ZSNLI_BAKEOFF_*`` / ``ZSNLI_RECEIPT_KEY`` settings and their ranges.

Receipts (`zsnli.compare.receipts`) and the report renderer (`zsnli.compare.render`) belong to the
comparison engine and are shared with ``validate.py bakeoff`` / ``compare``.
"""
