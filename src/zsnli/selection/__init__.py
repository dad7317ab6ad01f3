"""Choosing the served scoring: the producers of ``calibration.json``.

`zsnli.selection.calibration` (``train.py calibrate``: synthetic choice tasks on the NLI hold-out)
and `zsnli.selection.cli` (``train.py select`` / ``python -m zsnli.selection``: leave-one-dataset-out
on the dev sets, through `zsnli.selection.search`), reading `zsnli.selection.devsets` and the
`zsnli.selection.score_cache`; `zsnli.selection.negation` is the negation-pair experiment.
"""
