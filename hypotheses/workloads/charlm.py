"""Shared pieces of the reference char-LSTMs: vocabulary, model, trainer, evaluator.

Every workload in this package is a character-level LSTM (one time step per
character, so symbol ``t`` of a record is time step ``t`` of the model). The
workloads differ only in their data and targets; this module holds what they
share so that each trains the same way: seeded initialisation, a seeded data
order, a fixed thread count, and a fixed number of epochs (never a time
budget, which would make the weights depend on the machine's speed).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from .store import using_threads

#: Target id that the loss and the evaluator skip (padding, unscored positions).
IGNORE = -1

#: Intra-op threads while training. Part of every store key: float reductions
#: may round differently with another thread count, so weights could differ.
#: One thread: these LSTMs' matrix products are too small to gain much from a
#: second one, and OpenMP threads that spin on a busy machine (other jobs,
#: parallel tests) made a training step over ten times slower in our runs.
THREADS = 1

#: Bumped whenever a change here changes trained weights, so stale store entries miss.
TRAINER_VERSION = 1

# Tab, newline and printable ASCII: one fixed alphabet for every workload keeps
# ``encode`` independent of the training data (the model can be built, and its
# store key computed, before any data exists).
ALPHABET = "\t\n" + "".join(chr(c) for c in range(32, 127))


class Vocab:
    """Character vocabulary and encoder: id 0 pads, id 1 is unknown, then the alphabet.

    Instances are picklable callables: ``vocab(records)`` is the ``encode``
    function the workloads hand to :class:`dni_lab.Model`.
    """

    pad_id = 0
    unk_id = 1

    def __init__(self, alphabet: str = ALPHABET) -> None:
        self.alphabet = alphabet
        self._index = {ch: i + 2 for i, ch in enumerate(alphabet)}

    def __len__(self) -> int:
        return len(self.alphabet) + 2

    def __repr__(self) -> str:
        return f"Vocab({len(self)} ids)"

    def ids(self, record: str) -> list[int]:
        """Ids of one record, one per character."""
        return [self._index.get(ch, self.unk_id) for ch in record]

    def __call__(self, records: Sequence[str]) -> torch.Tensor:
        """Encode records as a ``(B, T)`` LongTensor, right-padded with :attr:`pad_id`.

        ``T`` is the longest record's length, so symbol ``t`` is time step ``t``.
        """
        records = [records] if isinstance(records, str) else list(records)
        width = max((len(r) for r in records), default=0)
        out = torch.full((len(records), width), self.pad_id, dtype=torch.long)
        for i, r in enumerate(records):
            if r:
                out[i, : len(r)] = torch.tensor(self.ids(r), dtype=torch.long)
        return out

    encode = __call__

    def decode(self, ids: Sequence[int]) -> str:
        """Characters of ``ids`` (pad dropped, unknown shown as U+FFFD)."""
        chars = {i + 2: ch for i, ch in enumerate(self.alphabet)}
        return "".join(chars.get(int(i), "\ufffd") for i in ids if int(i) != self.pad_id)


class CharLSTM(nn.Module):
    """Embedding → LSTM → linear head, applied at every time step.

    Parameters
    ----------
    vocab : int or Vocab
        Vocabulary size (or the vocabulary itself).
    hidden : int
        LSTM units per layer; these are the units DNI inspects (layer ``"lstm"``).
    layers : int
        Stacked LSTM layers.
    embed : int
        Embedding width.
    n_out : int, optional
        Output classes; defaults to the vocabulary size (next-character prediction).
    """

    def __init__(
        self,
        vocab: int | Vocab,
        hidden: int,
        layers: int = 1,
        embed: int = 32,
        n_out: int | None = None,
    ) -> None:
        super().__init__()
        n_vocab = len(vocab) if isinstance(vocab, Vocab) else int(vocab)
        self.embed = nn.Embedding(n_vocab, embed, padding_idx=Vocab.pad_id)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, n_out or n_vocab)

    def run(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``(B, T, n_out)`` and last-layer hidden states ``(B, T, hidden)``."""
        h, _ = self.lstm(self.embed(x))
        return self.head(h), h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(x)[0]


def seeded(build: Callable[[], nn.Module], seed: int) -> Callable[[], nn.Module]:
    """Wrap ``build`` so the initial weights depend on ``seed`` only.

    The global RNG is forked, so building a model never perturbs the caller's.
    """

    def make() -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return build()

    return make


def next_char_targets(x: torch.Tensor) -> torch.Tensor:
    """Targets for next-character prediction: ``y[:, t] = x[:, t + 1]``.

    The last character of each record and the padding get :data:`IGNORE`:
    there is nothing to predict after the end of a record.
    """
    y = torch.full_like(x, IGNORE)
    y[:, :-1] = x[:, 1:]
    y[y == Vocab.pad_id] = IGNORE
    return y


def data_digest(records: Sequence[str]) -> str:
    """Short hash of the training records, part of each model's store key.

    The generators live in another module and may change; hashing what we
    actually trained on keeps a stale cached model from being served.
    """
    h = hashlib.sha256()
    for r in records:
        h.update(r.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def train(
    module: CharLSTM,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int = 64,
    lr: float = 5e-3,
    seed: int = 0,
    clip: float = 1.0,
    aux: torch.Tensor | None = None,
    aux_units: Sequence[int] = (),
    aux_weight: float = 0.0,
    activity_l2: float = 0.0,
    threads: int = THREADS,
    on_epoch: Callable[[int, nn.Module], None] | None = None,
) -> dict[str, Any]:
    """Train ``module`` in place with Adam and a linear learning-rate decay.

    Parameters
    ----------
    module : CharLSTM
        The model, already initialised (see :func:`seeded`).
    x, y : LongTensor ``(N, T)``
        Inputs and per-step targets; :data:`IGNORE` marks unscored steps.
    epochs, batch_size, lr, clip : training schedule; lr decays linearly to lr/10.
    seed : int
        Seeds the data order (and nothing else: initialisation is seeded by the builder).
    aux : Tensor ``(N, T, len(aux_units))``, optional
        Targets for the hidden states of ``aux_units`` (DeepBase §6.1 unit
        specialisation); the loss is ``w * MSE(h_S, aux) + (1 - w) * CE``.
    activity_l2 : float
        L2 penalty on hidden activations (Luigi's Boolean model uses one).
    threads : int
        Torch intra-op threads while training (restored afterwards).
    on_epoch : callable, optional
        Called as ``on_epoch(epoch, module)`` after each epoch (checkpoints).

    Returns
    -------
    dict
        ``train_seconds`` (wall), ``train_cpu_seconds`` and the per-epoch mean
        loss ``loss_history``.
    """
    n = x.shape[0]
    lengths = (x != Vocab.pad_id).sum(1)
    steps_per_epoch = (n + batch_size - 1) // batch_size
    total = max(1, epochs * steps_per_epoch)
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - 0.9 * min(s, total) / total)
    order = torch.Generator().manual_seed(seed)
    units = torch.as_tensor(list(aux_units), dtype=torch.long)
    t0, c0, history = time.perf_counter(), time.process_time(), []
    with using_threads(threads):
        module.train()
        for epoch in range(1, epochs + 1):
            total_loss = 0.0
            for idx in _batches(lengths, batch_size, order):
                width = int(lengths[idx].max())  # trim shared padding: the LSTM is causal
                xb, yb = x[idx, :width], y[idx, :width]
                logits, h = module.run(xb)
                scored = yb != IGNORE
                if not scored.any():  # nothing to predict in this batch (tiny records)
                    continue
                loss = F.cross_entropy(logits[scored], yb[scored])
                valid = xb != Vocab.pad_id
                if aux is not None and aux_weight > 0:
                    err = (h[..., units] - aux[idx, :width]).pow(2)[valid].mean()
                    loss = aux_weight * err + (1 - aux_weight) * loss
                if activity_l2 > 0:
                    loss = loss + activity_l2 * h[valid].pow(2).mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(module.parameters(), clip)
                opt.step()
                sched.step()
                total_loss += float(loss.detach())
            history.append(round(total_loss / steps_per_epoch, 5))
            if on_epoch is not None:
                module.eval()
                on_epoch(epoch, module)
                module.train()
        module.eval()
    return {
        "train_seconds": round(time.perf_counter() - t0, 2),
        # On a busy machine wall time balloons while CPU time stays close to what an
        # idle machine's wall time would be (training uses one thread).
        "train_cpu_seconds": round(time.process_time() - c0, 2),
        "loss_history": history,
    }


def _batches(lengths: torch.Tensor, batch_size: int, order: torch.Generator) -> list[torch.Tensor]:
    """One epoch of batches: shuffled, with similar lengths batched together.

    Records are shuffled, each run of 16 batches' worth is sorted by length and
    cut into batches, and the batches are shuffled again. Short records then
    share batches, so little time goes into padding, while every epoch still
    sees a fresh order.
    """
    perm, run = torch.randperm(len(lengths), generator=order), batch_size * 16
    parts = [p[torch.argsort(lengths[p], stable=True)] for p in perm.split(run)]
    batches = list(torch.cat(parts).split(batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=order)]


@torch.no_grad()
def accuracy(module: CharLSTM, x: torch.Tensor, y: torch.Tensor, batch_size: int = 512) -> float:
    """Fraction of scored steps (``y != IGNORE``) whose argmax prediction is right."""
    was_training = module.training
    module.eval()
    right = seen = 0
    with using_threads(THREADS):
        for b in range(0, x.shape[0], batch_size):
            pred = module(x[b : b + batch_size]).argmax(-1)
            yb = y[b : b + batch_size]
            scored = yb != IGNORE
            right += int((pred[scored] == yb[scored]).sum())
            seen += int(scored.sum())
    module.train(was_training)
    return right / max(seen, 1)


def baselines(
    x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor
) -> dict[str, float]:
    """Accuracy of two count-based predictors fitted on the training targets.

    ``baseline_majority`` always predicts the most frequent target (the
    unigram baseline); ``baseline_bigram`` predicts the most frequent target
    given the current character. A trained LSTM should beat both.
    """
    tr, te = y_train != IGNORE, y_test != IGNORE
    n_in = int(max(x_train.max(), x_test.max())) + 1
    n_out = int(max(y_train[tr].max(), y_test[te].max())) + 1
    majority = torch.bincount(y_train[tr], minlength=n_out).argmax()
    table = torch.zeros(n_in, n_out, dtype=torch.long)
    table.index_put_((x_train[tr], y_train[tr]), torch.ones_like(y_train[tr]), accumulate=True)
    bigram = table.argmax(1)
    bigram[table.sum(1) == 0] = majority  # unseen current character: fall back
    yt = y_test[te]
    return {
        "baseline_majority": round(float((yt == majority).float().mean()), 4),
        "baseline_bigram": round(float((bigram[x_test[te]] == yt).float().mean()), 4),
    }


def evaluate(
    module: CharLSTM,
    train_xy: tuple[torch.Tensor, torch.Tensor],
    test_xy: tuple[torch.Tensor, torch.Tensor],
) -> dict[str, Any]:
    """Held-out accuracy next to the count baselines, as stored in ``meta``."""
    return {
        "accuracy": round(accuracy(module, *test_xy), 4),
        # A slice is enough to show over-fitting and keeps evaluation cheap.
        "train_accuracy": round(accuracy(module, train_xy[0][:4096], train_xy[1][:4096]), 4),
        **baselines(*train_xy, *test_xy),
        "n_train": int(train_xy[0].shape[0]),
        "n_test": int(test_xy[0].shape[0]),
    }


def next_char_data(vocab: Vocab, records: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoded records and their next-character targets, ready for :func:`train`."""
    x = vocab(records)
    return x, next_char_targets(x)


def default(value: Any, quick: bool, quick_value: Any, full_value: Any) -> Any:
    """``value`` if given, else the quick or the full setting."""
    if value is not None:
        return value
    return quick_value if quick else full_value
