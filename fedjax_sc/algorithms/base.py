"""What an algorithm is: the pieces that plug into the one compiled federated round.

An :class:`Algorithm` is a value, not a class hierarchy: a model, a client loss, a client
optimizer, a private-leaf rule, a chain of upload transforms, an aggregator and a server update,
plus the two prediction functions the metrics need (the global model for Ag, the personalised
model for Ap). :func:`fedjax_sc.core.round.make_round_step` turns it into one
``jax.jit``-compiled function that runs every client's local epochs under ``vmap`` and the
upload, aggregation and server update in the same program. Researchers build their own by
replacing any field (``fedavg(model)._replace(leaf_rules=...)``) or by wrapping one, as optax
wraps transformations: a plug-in such as ``fedprox.proximal(algorithm, mu)`` returns the
algorithm with a client loss that calls the old one and adds its term. Every client loss has
one signature, ``loss(params, batch, rng, start)``, so wrappers compose in any order.

Upload transforms follow optax's convention of a NamedTuple of pure functions and compose
with :func:`chain` (mask -> PCA compression -> noise, Li et al. 2021, Alg. 1 lines 13-17);
they live in :mod:`fedjax_sc.algorithms.upload` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import optax

from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.upload import (  # noqa: F401 (re-exported: the upload interface)
    Diagnostics,
    Params,
    UploadContext,
    UploadTransform,
    chain,
    encode_upload,
    identity_upload,
)


class Batch(NamedTuple):
    """One client's mini-batch.

    Attributes:
      tokens: int32 ``[batch, len]`` token ids (``PAD`` = 0 right padding).
      labels: int32 ``[batch]`` class ids in ``[0, C)``.
      mask: bool ``[batch]``; False on padding rows (a client's last, short batch, or a padded
        step of a client with fewer batches than the largest client). Losses must ignore them.
    """

    tokens: jax.Array
    labels: jax.Array
    mask: jax.Array


Aggregator = Callable[[Params, jax.Array], Params]
"""``aggregate(stacked_params, weights) -> params``: stacked ``[num_clients, ...]`` leaves and
float32 ``[num_clients]`` weights summing to 1 (paper Sec. 3.3: N^k / N)."""

Predict = Callable[[Any, jax.Array], dict[str, jax.Array]]
"""``predict(params, tokens) -> {mode: probabilities}``: float32 ``[batch, C]`` class
probabilities of a client's personalised model (shared + private leaves) for int32
``[batch, len]`` tokens, one entry per inference mode (Li et al. 2021, Table 6: ``s``, ``p``,
``sp``; single-branch models have the one mode ``full``)."""

GlobalPredict = Callable[[Params, jax.Array], jax.Array]
"""``global_predict(shared_params, tokens) -> probabilities [batch, C]``: the global model
built from the server's shared leaves alone (Ag, Eq. 14)."""


class ClientStart(NamedTuple):
    """What a client loss sees besides its params, batch and key: where the client started.

    Attributes:
      params: the params the client began the round with -- the downloaded global (shared)
        leaves joined with its private leaves, as local-vocabulary rows when the round trains
        by rows. Fixed during local training: FedProx's proximal centre, FedMMD's and
        FedFusion's frozen global model.
      knowledge: every client's message of ``Algorithm.knowledge`` extracted at the start of
        the round, stacked ``[num_clients, ...]`` (FedKC's cluster centroids), or ``()``
        without a knowledge exchange (and in the Ap phase).
      client: int32 scalar, this client's index on the client axis (ASP's domain label).
      state: this client's own algorithm state (:attr:`Hooks.client_init`; SCAFFOLD's c_i,
        FedDyn's gradient), ``()`` without one. Fixed during local training.
      server: the server's algorithm state as the client downloads it
        (:attr:`Hooks.server_init`; SCAFFOLD's c), ``()`` without one.
      data: the client's whole training split as a :class:`Batch` (tokens int32
        ``[N_max, len]``, labels int32 ``[N_max]``, mask bool ``[N_max]``, False on padding
        rows; the tokens are local-vocabulary ids where ``params`` holds a table as the
        client's rows), for what an algorithm needs of the client's data beyond the step's
        batch (FedRoD's label counts); every client the engine runs has it (the
        communication figures trace ``client_end`` with its shapes), ``None`` only in a
        ``ClientStart`` built without it. The client knows its own data: nothing of it
        leaves it.

    With local vocabularies, every leaf of ``state`` and ``server`` that sits at a
    word-embedding table's path (a path ending in ``embedding/embedding``) arrives as the
    client's rows ``[R, d]``, aligned with ``params``: the path alone decides, so such a leaf
    must be ``[V, ...]`` (a statistic of another shape belongs at another path).
    """

    params: Params
    knowledge: Any = ()
    client: jax.Array | int = 0
    state: Any = ()
    server: Any = ()
    data: Batch | None = None


ClientLoss = Callable[[Params, Batch, jax.Array, ClientStart],
                      tuple[jax.Array, dict[str, jax.Array]]]
"""``loss(params, batch, rng, start) -> (scalar loss, aux metrics)``, differentiated w.r.t.
``params`` only. ``start`` is the client's :class:`ClientStart`; a loss that needs none of it
(cross-entropy, KTEPS) ``del``-s it, a plug-in term reads it (FedProx's centre, FedMMD's
frozen global model, FedKC's exchanged knowledge, ASP's domain). The aux dict must
hold ``accuracy`` (float32 scalar, on the batch's real rows)."""

BoundLoss = Callable[[Params, Batch, jax.Array], tuple[jax.Array, dict[str, jax.Array]]]
"""``loss(params, batch, rng) -> (loss, aux)``: a :data:`ClientLoss` with one client's start
bound (``functools.partial``-like), what the local steps differentiate."""

GradientFn = Callable[[Params, Batch, jax.Array],
                      tuple[tuple[jax.Array, dict[str, jax.Array]], Params]]
"""``grad_fn(params, batch, rng) -> ((loss, aux), grads)``, the signature of
``jax.value_and_grad(bound_loss, has_aux=True)``."""

KnowledgeFn = Callable[[Params, jax.Array, jax.Array, jax.Array, jax.Array], Any]
"""``extract(params, tokens, labels, mask, rng) -> message``: what a client shares with the
others at the start of a round (FedKC, Wang et al. 2022, Sec. 4.2-4.3), from the shared params
it downloaded (never a private leaf: the message reaches every client) and its whole training
split (tokens int32 ``[N_max, len]``, labels int32 ``[N_max]``, mask
bool ``[N_max]``). Runs on every client under ``vmap``; every client then sees all messages.
A client that does not train in the round (dropped, a dropped straggler: a budget of 0 local
steps) sends zeros, so a message must read zeros as absent (FedKC: clusters of size 0)."""


def bind(loss: ClientLoss, start: ClientStart) -> BoundLoss:
    """``loss`` for one client and round: its :class:`ClientStart` fixed."""
    return lambda params, batch, rng: loss(params, batch, rng, start)


class ClientEnd(NamedTuple):
    """What :attr:`Hooks.client_end` sees when a client's local training ends.

    Attributes:
      start: the client's :class:`ClientStart` (start params, its state, the server's state).
      params: the trained params (shared and private leaves; tables as rows with local
        vocabularies, like ``start.params``).
      steps: int32 scalar, the number of real local steps the client ran (SCAFFOLD's K).
      sent: the client's update as it sent it: its upload as the server decodes it, minus
        the model it downloaded (the shared leaves, local copies left out; tables as its
        rows), upload noise and compression included, ``()`` in a ``ClientEnd`` built without
        it: see :func:`sent_update`.
      optimizer_state: the client optimizer's state after the local steps (its momentum;
        tables' leaves as the client's rows), ``()`` in a ``ClientEnd`` built without it:
        what a client keeps for its next round with :attr:`Hooks.optimizer_init`.
    """

    start: ClientStart
    params: Params
    steps: jax.Array
    sent: Any = ()
    optimizer_state: Any = ()


def sent_update(end: ClientEnd, like: Params) -> Params:
    """The leaves of ``like``'s paths of the update ``end``'s client sent
    (:attr:`ClientEnd.sent`), or of its exact update (trained minus start params) where the
    caller gave none.

    A client state built from the update it sent (noise included) stays the quantity the
    server can rebuild from the uploads: FedDyn's H and SCAFFOLD's c remain the mean of the
    clients' states, and a client's next round corrects the noise of its last one.
    """
    if jax.tree.leaves(end.sent):
        return masking.like(end.sent, like)
    return jax.tree.map(lambda n, o: n - o, masking.like(end.params, like),
                        masking.like(end.start.params, like))


class ServerInputs(NamedTuple):
    """What :attr:`Hooks.server_update` sees after the round's aggregation.

    Attributes:
      params: the new global (shared) params: the aggregate after the server optimizer.
      previous: the global params the round started from.
      state: the server's algorithm state.
      messages: every client's message from :attr:`Hooks.client_end`, stacked ``[K, ...]``
        (tables as each client's rows ``[K, R, d]``: sum them with ``reduce``).
      weights: float32 ``[K]``, the aggregation weights (N^k / N over the clients that
        trained, summing to 1; 0 for a client that did not).
      participating: bool ``[K]``, the clients that trained this round (a sampled client
        with examples and at least one step; never a padding client).
      reduce: ``reduce(tree, w) -> sum_k w[k] tree[k]`` for float32 weights ``w`` ``[K]``:
        a stacked message tree reduced over the client axis, each table's rows scattered
        into the full ``[V, d]`` table (rows a client does not hold count as zero), so use
        it on messages that are changes, not values (drjax's ``reduce_sum``).
      updates: every client's upload as the server decoded it, minus the model the client
        downloaded, stacked ``[K, ...]`` like ``messages`` (the shared leaves; tables as the
        client's rows, zero on the rows it does not upload; zeros for a client that did
        not train): what the server can derive
        from the uploads, noise and compression included (FedDyn's update). ``()`` where
        a caller builds the inputs without it.
    """

    params: Params
    previous: Params
    state: Any
    messages: Any
    weights: jax.Array
    participating: jax.Array
    reduce: Callable[[Any, jax.Array], Any]
    updates: Any = ()


def _no_state(params: Params) -> Any:
    del params
    return ()


class Hooks(NamedTuple):
    """The state an algorithm owns and the functions that read and write it inside the one
    compiled round (as fedjax's ``client_init / client_step / client_final`` and optax's
    ``init / update`` pairs). Every field is optional; ``Hooks()`` is a stateless algorithm.

    * ``client_init(params) -> state``: one client's round-0 state from the initial shared
      params (unstacked); the round keeps it stacked ``[N, ...]`` across rounds, checkpoints
      it, keeps it for clients that sit a round out and gives it to the client loss as
      ``ClientStart.state``.
    * ``server_init(params) -> state``: the server's round-0 state; every client loss sees it
      as ``ClientStart.server``.
    * ``client_end(ClientEnd) -> (state, message)``: after local training and the upload
      (``ClientEnd.sent``: the update as the server decodes it), the client's new state and
      what it sends the server besides its upload (``()`` for nothing). A client that ran no
      step keeps its state and its message is weighed 0.
    * ``server_update(ServerInputs) -> (params, state)``: after aggregation, the new global
      params and server state.
    * ``optimizer_init(start, fresh) -> optimizer state``: where a client's local steps start
      the client optimizer (``ClientEnd.optimizer_state`` is where they ended).

    What a local step does with the state is the client loss's business: a term that reads
    ``start.state`` / ``start.server`` (SCAFFOLD's correction is the linear term
    ``<c - c_i, w>``, whose gradient is the correction).

    Leaves of either state placed at a word-embedding table's path (ending in
    ``embedding/embedding``) are handled by rows under local vocabularies (gathered for the
    client, its rows written back): the path alone decides, so such a leaf must be
    ``[V, ...]``, indexed by word as the table is.
    """

    client_init: Callable[[Params], Any] = _no_state
    server_init: Callable[[Params], Any] = _no_state
    client_end: Callable[[ClientEnd], tuple[Any, Any]] | None = None
    server_update: Callable[[ServerInputs], tuple[Params, Any]] | None = None
    server_state_sent: bool | Callable[[Any], Any] = False
    """Whether the server's state goes down to the clients with the model (SCAFFOLD's c):
    the communication figures count it in the download. A function of the state gives the
    part that is sent where the server keeps the rest (FedDC's c down, its H kept:
    ``lambda state: state["c"]``); a client's loss should then read only that part."""
    server_metrics: Callable[[Any], dict[str, jax.Array]] | None = None
    """Figures of the server's state after each round, ``state -> {name: float32 scalar}``
    (e.g. the norm of SCAFFOLD's c): a run records them in ``metrics.jsonl`` (``server``),
    its trackers (``server/<name>``) and the tidy CSV (``server_<name>``). A function of the
    state alone, traced once per run."""
    upload_sent: bool = True
    """Whether the client's model upload goes up at all; False where ``server_update`` builds
    the model from the messages alone and never reads ``ServerInputs.params`` (q-FFL's
    Delta_k and h_k): the communication figures count the message only."""
    optimizer_init: Callable[[ClientStart, Any], Any] | None = None
    """``optimizer_init(start, fresh) -> optimizer state``: the client optimizer's state a
    client's local steps start from, given its :class:`ClientStart` and the fresh
    ``client_optimizer.init(start.params)``, shaped as ``fresh``; None: the fresh one, every
    round (the default, as FedJAX's FedAvg). With ``client_end`` returning
    ``ClientEnd.optimizer_state`` as the client's state, a client keeps its momentum across
    rounds (:func:`fedjax_sc.algorithms.kept_optimizer.kept_optimizer_state`). The Ap
    phase's fine-tuning always starts fresh."""


def hook_pair(name: str, hook: str, what: str, out: Any,
              like: tuple[Any, Any] = (None, None)) -> tuple[Any, Any]:
    """``out``, checked to be the pair that :class:`Hooks`' ``client_end`` and
    ``server_update`` return (``what`` names it, e.g. ``"(params, state)"``), each half shaped
    as its reference in ``like`` where that is not None (the state the hook was given: a state
    that changes shape from one round to the next would fail later, far from its cause).

    Raises:
      ValueError: ``out`` is not a 2-tuple, or a half differs from its reference in tree
        structure, a leaf's shape or its dtype (the message names algorithm ``name``, the hook
        and the leaf's path).
    """
    if not (isinstance(out, tuple) and len(out) == 2):
        size = f" of {len(out)}" if isinstance(out, tuple) else ""
        raise ValueError(f"{name}: Hooks.{hook} must return {what}, got a "
                         f"{type(out).__name__}{size}")
    for half, got, ref in zip(what.strip("()").split(", "), out, like):
        if ref is not None:
            check_like(f"{name}: Hooks.{hook} returned a {half}", got, ref)
    return out


def check_like(what: str, got: Any, ref: Any) -> None:
    """Raises ValueError (``what``, then the first difference: the tree structures, or a
    leaf's path, shape and dtype) unless ``got`` has ``ref``'s tree structure and every leaf
    its reference's shape and dtype (arrays or ``jax.ShapeDtypeStruct``)."""
    got_tree = jax.tree.structure(got)
    ref_leaves, ref_tree = jax.tree.flatten(ref)
    if got_tree != ref_tree:
        raise ValueError(f"{what} of another structure than the one it was given: {got_tree} "
                         f"where {ref_tree}")
    for (path, g), r in zip(jax.tree_util.tree_flatten_with_path(got)[0], ref_leaves):
        (g_shape, g_dtype), (r_shape, r_dtype) = _shape_dtype(g), _shape_dtype(r)
        if g_shape != r_shape or g_dtype != r_dtype:
            raise ValueError(f"{what} whose leaf {jax.tree_util.keystr(path) or '(root)'} is "
                             f"{g_dtype}{list(g_shape)} where it was given "
                             f"{r_dtype}{list(r_shape)}")


def _shape_dtype(x: Any) -> tuple[tuple[int, ...], Any]:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return tuple(x.shape), x.dtype
    return jax.numpy.shape(x), jax.numpy.result_type(x)


CENTRAL_TRAINERS = ("pooled", "multitask")
"""The centralised trainers of :mod:`fedjax_sc.core.central`."""
MULTITASK_SCHEDULES = ("alternate", "sum")
"""How the multi-task trainer steps (:mod:`fedjax_sc.core.multitask`): one domain's batch a
step, or every domain's batch a step with the gradients summed."""
MULTITASK_SCHEDULE = "alternate"
"""The default of the two (Liu et al. 2017's ASP alternates the tasks)."""


class CentralTrainer(NamedTuple):
    """Centralised training in place of the federated round: which of the engine's trainers
    (:mod:`fedjax_sc.core.central`) trains a baseline without privacy (FS, ASP), named by the
    algorithm itself (``Algorithm.central``).

    Attributes:
      name: ``pooled`` (every client's training split pooled into one client, trained by the
        federated round) or ``multitask`` (synchronous multi-task steps over every client);
        also the report's label.
      schedule: the multi-task trainer's, one of :data:`MULTITASK_SCHEDULES`.
    """

    name: str
    schedule: str = MULTITASK_SCHEDULE

    def check(self) -> CentralTrainer:
        """Returns itself.

        Raises:
          ValueError: an unknown trainer or schedule.
        """
        if self.name not in CENTRAL_TRAINERS:
            raise ValueError(f"unknown central trainer {self.name!r}; choose from "
                             f"{CENTRAL_TRAINERS}")
        if self.schedule not in MULTITASK_SCHEDULES:
            raise ValueError(f"unknown multi-task schedule {self.schedule!r}; choose from "
                             f"{MULTITASK_SCHEDULES}")
        return self


class Algorithm(NamedTuple):
    """A federated algorithm as plug-in pieces of the compiled round.

    Attributes:
      name: identifier used in configs, metrics and the CLI (``fedavg``, ``kteps``, ...).
      model: the Flax module trained by the clients.
      client_loss: the local objective (see :data:`ClientLoss`); plug-ins (FedProx, FedMMD,
        FedKC) wrap it and add their term, reading what they need from ``start``.
      client_optimizer: an optax transformation; its state is created fresh at the start of
        every round for every client, unless :attr:`Hooks.optimizer_init` says otherwise.
      aggregator: how the server reduces the clients' decoded uploads (:data:`Aggregator`).
      predict: the personalised model's class probabilities per inference mode
        (:data:`Predict`); used for the personalised accuracy and Ap (Eq. 16).
      global_predict: the global model's class probabilities from the server's shared leaves
        (:data:`GlobalPredict`), or ``None`` when the shared leaves do not form a complete
        model (FedPer, LG-FedAvg): Ag is then reported as not applicable.
      default_mode: the key of ``predict``'s output that Ap uses (KTEPS: ``sp``, Remark 4).
      leaf_rules: ``None`` (every leaf shared, as FedAvg) or ``{"private": regexes,
        "shared": regexes}`` over parameter paths (:func:`fedjax_sc.algorithms.masking.
        label_leaves`; every leaf must match exactly one rule). Private leaves stay on their
        client across rounds and are never uploaded.
      upload: transform of the shared leaves a client uploads (default: sent as they are).
      server_optimizer: ``None`` (the new global model is the aggregate) or an optax
        transformation applied to the pseudo-gradient ``params - aggregate`` (FedOpt, Reddi et
        al. 2021; ``optax.sgd(1.0)`` reproduces ``None`` up to rounding).
      client_gradient: ``None`` (``jax.value_and_grad`` of the client loss) or a factory
        ``bound_loss -> GradientFn`` that the round uses for every local step instead, e.g.
        DP-SGD's clipped, noised per-example gradients
        (:func:`fedjax_sc.algorithms.dp_sgd.dp_sgd`).
      knowledge: ``None`` or a :data:`KnowledgeFn` run at the start of every round on the
        downloaded shared leaves; its messages reach every client's loss as
        ``start.knowledge``.
      central: ``None`` (federated: the round's local epochs, upload and aggregation) or the
        :class:`CentralTrainer` of a centralised baseline (FS, ASP: no upload, sampling,
        compression or DP-SGD).
      local_copies: ``{copy: source}`` over top-level module names: modules a client makes
        itself from the model it downloads, frozen during local training and never sent
        (FedFusion's reference extractor, Yao et al. 2019); see
        :mod:`fedjax_sc.core.copies`. Empty for every other algorithm.
      hooks: the state the algorithm owns and its hooks (:class:`Hooks`; SCAFFOLD, FedDyn);
        ``Hooks()`` for a stateless one.
      personal_loss: the loss of the Ap phase's fine-tuning (Li et al. 2021, Eq. 16), or
        ``None`` for ``client_loss``, terms and all: a method whose training terms (a drift
        correction, a pull towards the global model) should not act while a client
        fine-tunes gives the loss it means there.
    """

    name: str
    model: nn.Module
    client_loss: ClientLoss
    client_optimizer: optax.GradientTransformation
    aggregator: Aggregator
    predict: Predict
    global_predict: GlobalPredict | None
    default_mode: str = "full"
    leaf_rules: Mapping[str, str | Sequence[str]] | None = None
    upload: UploadTransform = identity_upload()
    server_optimizer: optax.GradientTransformation | None = None
    client_gradient: Callable[[BoundLoss], GradientFn] | None = None
    knowledge: KnowledgeFn | None = None
    central: CentralTrainer | None = None
    local_copies: Mapping[str, str] = {}
    hooks: Hooks = Hooks()
    personal_loss: ClientLoss | None = None
