"""``dl.Probe``: linear probes fitted once, kept as files bound to their model, applied later.

``estimator.py`` holds the estimator (its parameters, scikit-learn's parameter protocol,
the files), assembled from three rooms: ``fitting.py`` (``fit`` and the steps the reports
share: standardise, solve, threshold, out-of-fold AUROC, what the probe is bound to),
``applying.py`` (logits, probabilities, predictions, ``score``, ``apply``) and
``reporting.py`` (``report``, ``reliability``, ``nulls``, ``transfer``, ``sweep``).
``reading.py`` holds what it reads (a layer's activations per symbol, labels from a
hypothesis or given), ``solver.py`` the logistic fit, its F1 threshold and AUROC,
``newton.py`` the L2 fit's numbers (standardisation without a float64 copy, Newton's
method: float32 steps, a float64 gradient), ``storage.py`` the files
(safetensors + JSON sidecar), ``frames.py`` a probe from a ``logreg`` score frame,
``metrics.py`` the reported statistics as pure functions (AUROC, recall at FPR and the
record bootstrap are the ``roc_auc``/``recall_at_fpr`` measures' code, re-exported;
calibration, F1) and ``evaluation.py`` ``Probe.report`` and
``Probe.nulls`` (control task per symbol type, random directions, an untrained copy),
``transfer.py`` ``Probe.transfer`` (another layer or model of the probe's width, the drop
in AUROC), ``sweep.py`` ``Probe.sweep`` (one probe per layer, held-out AUROC against depth
with intervals and nulls, its chart) and ``cli.py`` ``dni-lab probe fit|apply|report``.
See ``docs/api/probe.md``.
"""

from .estimator import Probe

__all__ = ["Probe"]
