"""``train.py verify``: re-hash a model directory against its manifest, one line per check, then a summary.

`run_verify` runs every check of ``--model-dir`` against ``--manifest`` (both already checked by
`zsnli.training.cli_checks.check_args`) and prints them.

May import `zsnli.manifest`, `zsnli.training.encoder_install` (the state of an install) and, inside `run_verify`,
`zsnli.training.distill` (a teacher's check; no torch).
"""

from __future__ import annotations

import argparse

from ..manifest import check_encoder_dir, check_model_dir, check_variants, is_encoder_manifest, load_manifest
from .encoder_install import install_checks


def run_verify(args: argparse.Namespace) -> int:
    """Re-hash ``--model-dir`` against ``--manifest``: a training manifest (`zsnli.manifest.check_model_dir`, and the
    variant folders it declares, `zsnli.manifest.check_variants`), or a
    sentence encoder's own ``encoder_manifest.json`` (`zsnli.manifest.check_encoder_dir`: the manifest file itself
    is not one of the files it lists), plus an install a kill left unfinished or data sources that disagree with the
    installed encoder (`zsnli.training.encoder_install.install_checks`). Every check prints a line; the summary's
    "n/m files" counts the checks of files only (`zsnli.manifest.FileCheck.file`: not an install's state, a
    sources table or a pin's digest) and names the other checks that failed. Returns 1 when any check fails, else 0."""
    manifest = load_manifest(args.manifest)
    encoder = is_encoder_manifest(manifest)
    checks = (check_encoder_dir if encoder else check_model_dir)(args.model_dir, manifest)
    if not encoder:  # model/base: its own manifest against the pin, then its files against that manifest
        checks += check_variants(args.model_dir, manifest)
    if manifest.get("teacher"):  # the teacher and its cache are not shipped: "absent" here is no failure
        from .distill import check_teacher

        checks += check_teacher(manifest["teacher"])
    checks += install_checks(args.model_dir, args.manifest)
    for check in checks:
        print(f"{check.status.upper():9s} {check.name}")
    bad = [c for c in checks if c.status not in ("ok", "absent")]
    n_files, other_bad = sum(c.file for c in checks), sum(not c.file for c in bad)
    print(f"{'FAIL' if bad else 'OK'}: {n_files - len(bad) + other_bad}/{n_files} files match {args.manifest}"
          + (f"; {other_bad} other check(s) failed" if other_bad else "")
          + (" (the sentence encoder alone; `python train.py verify` checks the whole served model/, encoder "
             "included, against training_manifest.json)" if encoder else ""))
    return 1 if bad else 0
