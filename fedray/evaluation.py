"""Evaluation of linear models on the silos' records: mean training loss and test error.

Both are diagnostics (``fedray.core.evaluation``): they read every silo's records, which the
server of a deployment never sees; a simulation reports them to show how the protocol learns.
An actor computes per-silo parts (``shard_parts``) and the driver combines them
(``combine``): the training loss is the mean over silos of each silo's mean loss (the paper's
F^), the test error pools all silos' test records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

from fedray.core.evaluation import Metric
from fedray.data.federation import FederationShape, SiloArrays
from fedray.losses import Loss, margins


@dataclass(frozen=True)
class LinearModelEvaluation:
    loss: Loss

    def shard_parts(self, params: np.ndarray, fed) -> dict:
        """Per-silo aggregates of ``params`` (P, d, C) on the federation part ``fed``."""
        train_loss = self.loss.value(margins(params, fed.x_train), fed.y_train[None]) * fed.train_mask()
        test_err = self.loss.error(margins(params, fed.x_test), fed.y_test[None]) * fed.test_mask()
        return {
            "train_loss_mean": train_loss.sum(axis=2) / fed.n_train,   # (P, S)
            "test_error_sum": test_err.sum(axis=2),                     # (P, S)
            "test_count": fed.n_test.astype(np.float64),                # (S,)
        }

    def combine(self, parts: list[dict], num_silos: int) -> dict[str, Metric]:
        train = np.concatenate([p["train_loss_mean"] for p in parts], axis=1)      # (P, N)
        errors = np.concatenate([p["test_error_sum"] for p in parts], axis=1)
        counts = np.concatenate([p["test_count"] for p in parts])
        metrics = {"train_loss": Metric(train.sum(axis=1) / num_silos, released=False)}
        if counts.sum() > 0:            # data of sufficient statistics hold no test records
            metrics["test_error"] = Metric(errors.sum(axis=1) / counts.sum(), released=False)
        return metrics


class LinearModels(NamedTuple):
    """What a round protocol over linear models on the silos' records is built from, in the order
    ``fedray.core.planning.CuratorRoundsPlan`` (and ``SampledRounds``) takes them."""

    evaluation: LinearModelEvaluation
    shard_view: Callable[[Any, np.ndarray], SiloArrays]        # the units' training records
    params0: np.ndarray                                        # (P, d, C) zeros: every replica starts at 0
    num_units: int


def linear_models(loss: Loss, shape: FederationShape, num_replicas: int) -> LinearModels:
    """Linear models (P, d, C) of ``loss`` over the silos of ``shape``, starting at 0."""
    return LinearModels(LinearModelEvaluation(loss), SiloArrays.of,
                        np.zeros((num_replicas, shape.dim, loss.num_outputs)), shape.num_silos)
