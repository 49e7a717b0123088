"""A silo group: many silos held by one Ray actor as stacked arrays.

Trust boundary: the group loads its silos' records itself, from a dataset spec, and keeps them.
What leaves it: privatized silo messages (the algorithm's silo half applies the privacy step
before returning), and for simulation bookkeeping only, per-silo aggregates (mean training loss,
test error sums) and the largest feature norm (the paper's non-private L estimate, used only when
``privacy.l2_clip`` is not set). No record, and no un-noised ISRL-DP message, is ever returned.

``SiloGroup`` is a plain class (tested without Ray); ``SiloGroupActor`` is its Ray actor form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import ray

from fedray.algorithms.base import SiloArrays
from fedray.losses import margins
from fedray.rng import SiloDraws


@dataclass(frozen=True)
class RoundPayload:
    """What the driver broadcasts once per round (one ray.put)."""

    round: int
    broadcast: np.ndarray            # (P, d, C) what the silo step starts from
    evaluate: np.ndarray | None      # (P, d, C) model to evaluate this round, or None
    participation: np.ndarray        # (P, N) bool


@dataclass(frozen=True)
class RoundReply:
    silo_ids: np.ndarray             # (U,) silos that sent a message for some replica
    messages: np.ndarray             # (P, U, ...) privatized; zero where a replica did not sample the silo
    mask: np.ndarray                 # (P, U)
    evaluation: dict | None          # per-silo aggregates, see SiloGroup.evaluate


class SiloGroup:
    def __init__(self, dataset, seed: int, trial: int, silo_ids: np.ndarray, loss, repetitions: np.ndarray):
        self.load(dataset, seed, trial, silo_ids)
        self.configure(loss, repetitions)

    def load(self, dataset, seed: int, trial: int, silo_ids: np.ndarray) -> None:
        """(Re)load this group's silos: a sweep's next trial reuses the actor process."""
        self.silo_ids = np.asarray(silo_ids, dtype=np.int64)
        self.seed = int(seed)
        fed = dataset.load(seed, trial, silo_ids=self.silo_ids)  # only this group's silos are built
        self._fed = fed
        self._train = SiloArrays(
            silo_ids=self.silo_ids,
            x=fed.x_train,
            y=fed.y_train,
            sizes=fed.n_train,
            x_norms=np.linalg.norm(fed.x_train, axis=2),
        )
        self._train_mask = fed.train_mask()
        self._test_mask = fed.test_mask()

    def max_feature_norm(self) -> float:
        return self._fed.max_feature_norm()

    def set_algorithm(self, algorithm) -> None:
        self.algorithm = algorithm

    def configure(self, loss, repetitions: np.ndarray) -> None:
        """A new job on the same records (a sweep reusing its actors): its loss and replica streams."""
        self.loss = loss
        self.repetitions = np.asarray(repetitions)
        self.algorithm = None

    def evaluate(self, params: np.ndarray) -> dict:
        """Per-silo aggregates of ``params`` (P, d, C): mean training loss (P, S), test error sums."""
        fed = self._fed
        train_loss = self.loss.value(margins(params, fed.x_train), fed.y_train[None]) * self._train_mask
        test_err = self.loss.error(margins(params, fed.x_test), fed.y_test[None]) * self._test_mask
        return {
            "train_loss_mean": train_loss.sum(axis=2) / fed.n_train,   # (P, S)
            "test_error_sum": test_err.sum(axis=2),                     # (P, S)
            "test_count": fed.n_test.astype(np.float64),                # (S,)
        }

    def round(self, payload: RoundPayload) -> RoundReply:
        mask = payload.participation[:, self.silo_ids]
        active = np.flatnonzero(mask.any(axis=0))
        evaluation = None if payload.evaluate is None else self.evaluate(payload.evaluate)
        if active.size == 0:
            empty = np.zeros((mask.shape[0], 0) + payload.broadcast.shape[1:])
            return RoundReply(self.silo_ids[:0], empty, mask[:, :0], evaluation)
        t = self._train
        if active.size == self.silo_ids.size:
            silos = t  # everyone takes part: no copy of the records
        else:
            silos = SiloArrays(t.silo_ids[active], t.x[active], t.y[active], t.sizes[active], t.x_norms[active])
        draws = SiloDraws(self.seed, self.repetitions, payload.round, silos.silo_ids, width=t.x.shape[1])
        messages = self.algorithm.silo_step(payload.broadcast, silos, draws)
        sub_mask = mask[:, active]
        # A replica that did not sample this silo receives nothing from it.
        messages = messages * sub_mask.reshape(sub_mask.shape + (1,) * (messages.ndim - 2))
        return RoundReply(silos.silo_ids, messages, sub_mask, evaluation)


SiloGroupActor = ray.remote(SiloGroup)
