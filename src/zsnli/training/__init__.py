"""Training the NLI cross-encoder (``train.py train`` / ``evaluate``).

`zsnli.training.presets` (what a run trains on and with), `zsnli.training.nli_data` (loading,
deduplication, the calibration hold-out), `zsnli.training.trainer` (the Hugging Face ``Trainer``
run), `zsnli.training.data_parallel` (multi-GPU launch), `zsnli.training.evaluation` (accuracy on
NLI splits), `zsnli.training.manifest_writer` (``training_manifest.json``, ``data_sources.json``).
The command line is `zsnli.train_cli`.
"""
