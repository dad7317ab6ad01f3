"""The Trainer callbacks of `zsnli.training.trainer.train`: stop signal, checkpoint clock, time budget, progress.

`StopRequest` is the SIGTERM/SIGINT handler that `stop_on_signals` installs while
training; `trainer_callbacks` builds the callbacks that turn it (and the preset's
time budget and checkpoint interval) into Trainer decisions, agreed by every rank
(`zsnli.training.data_parallel.any_rank`); `progress_line` is the logged progress.

May import `zsnli.training.data_parallel`, `zsnli.training.presets` and, inside
functions, transformers and `zsnli.runtime.progress` (the time-left text).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time

from .data_parallel import any_rank
from .presets import Preset

log = logging.getLogger("zsnli.training.trainer")


class StopRequest:
    """Set by SIGTERM/SIGINT during `train`: the next step end writes a checkpoint and training stops."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __call__(self, signum, frame) -> None:  # a signal handler
        if self.signal is None:
            log.warning("signal %d: writing a checkpoint at the end of this step, then stopping", signum)
        self.signal = signum


def progress_line(step: int, max_steps: int, pairs_per_s: float, steps_per_s: float) -> str:
    """``step 120/4200 (2.9 %)  31.5 pairs/s  1.05 steps/s  left 1h04m`` (time left at this process's rate,
    written by `zsnli.runtime.progress.duration_text`, as every progress line of the project)."""
    from ..runtime.progress import duration_text

    left = (max_steps - step) / steps_per_s if steps_per_s > 0 and max_steps > 0 else float("nan")
    left_text = duration_text(left)
    share = f" ({100 * step / max_steps:.1f} %)" if max_steps > 0 else ""
    return f"step {step}/{max_steps}{share}  {pairs_per_s:.1f} pairs/s  {steps_per_s:.3f} steps/s  left {left_text}"


def trainer_callbacks(preset: Preset, t0: float, reset_best: bool, stop: StopRequest | None = None) -> list:
    """The Trainer callbacks: time budget, checkpoint clock and stop signal, progress log, and
    forgetting a resumed best metric when ``reset_best``."""
    from transformers import TrainerCallback

    class CheckpointClock(TrainerCallback):
        """A checkpoint at least every ``preset.checkpoint_every_s`` seconds, and at once after a stop signal.

        The decision is `any_rank` of the local ones (every rank must join the save).
        """

        def __init__(self) -> None:
            self.last_save = time.time()

        def on_step_end(self, args, state, control, **kwargs):
            due = time.time() - self.last_save >= preset.checkpoint_every_s
            stopping = stop is not None and stop.signal is not None
            if any_rank(due or stopping, args.device):
                control.should_save = True
                if any_rank(stopping, args.device):
                    control.should_training_stop = True
            return control

        def on_save(self, args, state, control, **kwargs):
            self.last_save = time.time()
            return control

    class Progress(TrainerCallback):
        """Log pairs/s of this process and the time left, with every logged loss."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start, self.first_step = time.time(), state.global_step
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            steps = state.global_step - self.first_step
            took = time.time() - self.start
            if steps > 0 and logs and "loss" in logs:
                line = progress_line(state.global_step, state.max_steps, steps * preset.batch_size / took, steps / took)
                log.info("%s  loss %.4f", line, logs["loss"])
            return control

    class TimeBudget(TrainerCallback):
        """Stop (after a checkpoint) when a process has trained longer than the budget: all ranks stop together.

        Each rank's clock may cross the budget at a different step; a rank
        that stopped alone would leave the others waiting in the next
        gradient all-reduce, so the decision is `any_rank` of the local ones.
        """

        def on_step_end(self, args, state, control, **kwargs):
            if not preset.time_budget_s:  # the same on every rank: no collective needed
                return control
            if any_rank(time.time() - t0 > preset.time_budget_s, args.device):
                log.warning("time budget of %.0f s reached at step %d: stopping", preset.time_budget_s, state.global_step)
                control.should_training_stop = True
                control.should_save = True
                control.should_evaluate = True
            return control

    class ResetBest(TrainerCallback):
        """Drop the resumed state's best metric and checkpoint (see ``reset_best`` of `train`)."""

        def on_train_begin(self, args, state, control, **kwargs):
            if state.best_metric is not None or state.best_model_checkpoint is not None:
                log.warning("forgetting the resumed best metric %s (%s)", state.best_metric, state.best_model_checkpoint)
            state.best_metric = None
            state.best_model_checkpoint = None
            state.best_global_step = None
            return control

    return [TimeBudget(), CheckpointClock(), Progress(), *([ResetBest()] if reset_best else [])]


@contextlib.contextmanager
def stop_on_signals(stop: StopRequest):
    """Route SIGTERM and SIGINT to ``stop`` while training (main thread only; handlers restored after)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
