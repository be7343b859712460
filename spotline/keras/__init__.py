"""Keras callbacks that make a user's own ``model.fit(...)`` a spotline trainer.

Add them to ``fit`` and exit with the code they give::

    import sys

    from spotline.keras import exit_code, spotline_callbacks

    callbacks = spotline_callbacks()  # reads SPOTLINE_CHECKPOINT_URL, SPOTLINE_OUTPUT_URL
    history = model.fit(x, y, epochs=epochs, callbacks=callbacks)
    sys.exit(exit_code(callbacks))  # 143 after a SIGTERM save, else 0

They report every epoch to the agent, write TensorBoard logs, back the training
state up after every epoch and on SIGTERM (the Spot preemption notice, served
at the next batch end, which then stops training), and restore it when the job
starts again: the weights and every optimizer variable (the global step
included), then the rest of the interrupted epoch from the batch after the
save, in the same order (``keras_resume`` says when the order is the same).
An interrupted run ends with the weights of a run never stopped, within float
tolerance, and ``history`` with one entry per epoch.

Outside spotline (no ``SPOTLINE_CHECKPOINT_URL``) the same script trains as
it would without them: the state goes to a new temporary folder, the reports
to standard output, and a line says so once.

Needs the ``tensorflow`` extra: ``pip install -e '.[tensorflow]'`` in a clone
(``make tensorflow``), ``pip install 'spotline[tensorflow]'`` from an index.
"""

from spotline.keras.callbacks import (
    EXIT_PREEMPTED,
    STATE_FILES,
    EpochReporter,
    PreemptibleBackupAndRestore,
    SigtermFlag,
    exit_code,
    global_step,
    local_path,
    spotline_callbacks,
    stopped_by_sigterm,
)
from spotline.keras.fit import FitResult, fit, result

__all__ = [
    "EXIT_PREEMPTED",
    "STATE_FILES",
    "EpochReporter",
    "FitResult",
    "PreemptibleBackupAndRestore",
    "SigtermFlag",
    "exit_code",
    "fit",
    "global_step",
    "local_path",
    "result",
    "spotline_callbacks",
    "stopped_by_sigterm",
]
