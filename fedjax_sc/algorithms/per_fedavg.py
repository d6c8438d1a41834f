"""Per-FedAvg (Fallah, Mokhtari and Ozdaglar 2020, "Personalized Federated Learning with
Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach", NeurIPS 2020, Algorithm 1).

The global model w is a meta-model: the initial point from which one gradient step with step
size alpha on a client's own data gives a good personal model. The objective is
F(w) = 1/n sum_i f_i(w - alpha grad f_i(w)), and every local step of Algorithm 1 draws three
independent batches D, D', D'' and takes, with the outer step size beta,

    w_adapted = w - alpha grad f(w; D)
    w <- w - beta (I - alpha hess f(w; D'')) grad f(w_adapted; D')

Per-FedAvg (FO) drops the Hessian term; Per-FedAvg (HF) keeps its product with the gradient.
Here each local step splits its mini-batch into D, D' (FO) or D, D', D'' (HF) by interleaved
rows (row r goes to part r mod 2 or r mod 3), so the real rows of a short batch spread over the
parts; beta is the client optimizer's learning rate (SGD with momentum). We found no code of
the authors'; FL-bench's ``perfedavg`` client (KarhouTam/FL-bench) takes alpha = the
client LR and beta = 1e-3, PFLlib's ``clientperavg`` (TsingZ0/PFLlib) alpha = beta = the
client LR: our default is alpha = beta = 0.01, the library's FDU learning rate.

Where ours differs from those codes: HF's Hessian-vector product is exact (``jax.jvp`` of the
gradient), the delta -> 0 limit of the paper's finite difference
(grad f(w + delta g) - grad f(w - delta g)) / (2 delta); the three sub-batches are parts of one
batch of B rows, not B-row batches each (pass twice or three times the batch size to match);
the outer step uses the client SGD with momentum, and the server weighs clients by N^k / N
(the paper and FL-bench average the sampled clients uniformly). Ap, the library's fine-tuning
phase from the global model on the client's training data, is Per-FedAvg's personalisation
("one or a few steps of gradient descent" from the meta-model, the abstract), with the library's
steps and learning rate, not one step of size alpha. alpha = 0 is FedAvg on D' exactly. A
short last batch whose D' gets no real row (a single real row, FO or HF: the parts interleave
the rows) gives a zero outer gradient and loss; the step still counts, so momentum moves w by
its buffer. With two real rows HF's D'' is empty and its Hessian term zero.
"""

from __future__ import annotations

import flax.linen as nn
import jax

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.base import Algorithm, Batch, BoundLoss, GradientFn
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM

VARIANTS = ("fo", "hf")
"""``fo``: first-order Per-FedAvg; ``hf``: Hessian-free (with the Hessian-vector product)."""
DEFAULT_ALPHA = 0.01
"""alpha, the inner (adaptation) step size: the library's client LR, as in PFLlib."""
DEFAULT_VARIANT = "fo"
"""FL-bench's default version (``--version fo``)."""


def part(batch: Batch, index: int, parts: int) -> Batch:
    """Rows ``index, index + parts, ...`` of ``batch`` (``[ceil((B - index) / parts)]``); a
    part of a short batch may hold no real row (its mask all False)."""
    return Batch(*(x[index::parts] for x in batch))


def meta_gradient(alpha: hparams.Value = DEFAULT_ALPHA, variant: str = DEFAULT_VARIANT):
    """The ``client_gradient`` factory of Per-FedAvg (see the module docstring).

    Args:
      alpha: the inner step size (>= 0; may be traced: it is only multiplied).
      variant: one of :data:`VARIANTS`.

    Returns:
      ``factory(bound_loss) -> grad_fn`` with ``grad_fn(params, batch, rng) -> ((loss, aux),
      grads)``: ``loss`` and ``aux`` (``accuracy`` ...) are the loss's on D' at the adapted
      params, ``aux`` gains ``inner_loss`` (on D at ``params``); ``grads`` has ``params``'s
      shapes and dtypes (float32). Part i of the batch gets the key ``fold_in(rng, i)``.

    Raises:
      ValueError: a negative alpha or an unknown variant.
    """
    hparams.check("Per-FedAvg alpha", alpha, lambda v: v >= 0, ">= 0")
    if variant not in VARIANTS:
        raise ValueError(f"Per-FedAvg variant must be one of {VARIANTS}, got {variant!r}")
    parts = 2 if variant == "fo" else 3

    def factory(loss: BoundLoss) -> GradientFn:
        value_and_grad = jax.value_and_grad(loss, has_aux=True)

        def grad_fn(params, batch: Batch, rng: jax.Array):
            key = lambda i: jax.random.fold_in(rng, i)
            (inner, _), g = value_and_grad(params, part(batch, 0, parts), key(0))
            adapted = jax.tree.map(lambda w, d: w - alpha * d, params, g)
            (outer, aux), grads = value_and_grad(adapted, part(batch, 1, parts), key(1))
            if variant == "hf":  # minus alpha hess f(w; D'') times the outer gradient
                grad_d2 = jax.grad(lambda p: loss(p, part(batch, 2, parts), key(2))[0])
                _, hvp = jax.jvp(grad_d2, (params,), (grads,))
                grads = jax.tree.map(lambda d, h: d - alpha * h, grads, hvp)
            return (outer, {**aux, "inner_loss": inner}), grads

        return grad_fn

    return factory


def per_fedavg(model: nn.Module, learning_rate: hparams.Value = LEARNING_RATE,
               momentum: hparams.Value = MOMENTUM,
               embedding_learning_rate: hparams.Value | None = None,
               alpha: hparams.Value = DEFAULT_ALPHA, variant: str = DEFAULT_VARIANT
               ) -> Algorithm:
    """Builds Per-FedAvg: FedAvg's model, loss and aggregation with the meta-gradient.

    Args:
      model: ``TextClassifier``.
      learning_rate: beta, the outer step size (the client SGD's).
      momentum: the client SGD's momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      alpha: see :func:`meta_gradient`.
      variant: see :func:`meta_gradient`.

    Returns:
      The :class:`Algorithm` (no private leaves but a FURL vector; Ag: the meta-model).

    Raises:
      ValueError: see :func:`meta_gradient` and :func:`~fedjax_sc.algorithms.fedavg.fedavg`.
    """
    return fedavg(model, learning_rate, momentum, embedding_learning_rate)._replace(
        name="per_fedavg", client_gradient=meta_gradient(alpha, variant))
