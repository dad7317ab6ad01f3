"""The Trainer callbacks of `zsnli.training.trainer.train`: stop signal, checkpoint clock, time budget, plateau, progress.

`StopRequest` is the SIGTERM/SIGINT handler that `stop_on_signals` installs while
training; `trainer_callbacks` builds the callbacks that turn it (and the preset's
time budget, checkpoint interval and plateau rule) into Trainer decisions, agreed by every rank
(`zsnli.training.data_parallel.any_rank`); `plateaued` is the plateau rule as a pure function;
`progress_line` is the logged progress.

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


def plateaued(evaluations: list[tuple[int, float]], window_steps: int, min_gain: float) -> bool:
    """Has the best validation metric gained less than ``min_gain`` over the last ``window_steps`` steps?

    ``evaluations``: (optimiser step, metric) pairs in any order, higher is better (here
    ``eval_mean_accuracy``, a fraction). With ``s`` the newest step, the gain is the best metric at steps
    <= ``s`` minus the best at steps <= ``s - window_steps``; it is False (keep training) while no
    evaluation is that old. Best-so-far on both sides keeps one noisy evaluation from stopping a run that
    still improves. Issue 51's rule: 0.005 (half a point of accuracy) over 3,000 steps.
    """
    if not evaluations:
        return False
    newest = max(step for step, _ in evaluations)
    before = [metric for step, metric in evaluations if step <= newest - window_steps]
    if not before:
        return False
    return max(metric for _, metric in evaluations) - max(before) < min_gain


def _plateau_callback(preset: Preset):
    """The `plateaued` stop as a Trainer callback for ``preset.plateau_steps`` / ``preset.plateau_gain``."""
    from transformers import TrainerCallback

    class Plateau(TrainerCallback):
        """Stop (after a checkpoint) when `plateaued` holds for the evaluations so far, resumed ones included.

        Reads ``state.log_history``, which the Trainer saves in every checkpoint and extends with each
        evaluation before ``on_evaluate``; every rank holds the same history, so no collective is needed.
        """

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            evaluations = [(int(e["step"]), float(e["eval_mean_accuracy"]))
                           for e in state.log_history if "eval_mean_accuracy" in e and "step" in e]
            if plateaued(evaluations, preset.plateau_steps, preset.plateau_gain):
                log.warning("validation mean accuracy gained less than %.4f over the last %d steps at step %d: "
                            "stopping", preset.plateau_gain, preset.plateau_steps, state.global_step)
                control.should_training_stop = True
                control.should_save = True
            return control

    return Plateau()


def trainer_callbacks(preset: Preset, t0: float, reset_best: bool, stop: StopRequest | None = None) -> list:
    """The Trainer callbacks: time budget, checkpoint clock and stop signal, progress log, the plateau stop
    when the preset sets ``plateau_steps`` and ``plateau_gain``, and forgetting a resumed best metric when
    ``reset_best``."""
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

    plateau = [_plateau_callback(preset)] if preset.plateau_steps and preset.plateau_gain is not None else []
    return [TimeBudget(), CheckpointClock(), Progress(), *plateau, *([ResetBest()] if reset_best else [])]


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
