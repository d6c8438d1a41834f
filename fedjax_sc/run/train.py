"""The training loop: scene -> compiled rounds -> Ag per round -> checkpoints and a final report.

Writes into ``out``: ``config.json`` (the resolved configuration), ``vocab.json``,
``metrics.jsonl`` (one JSON object per round with ``"phase": "round"``, then one per Ap
evaluation with ``"phase": "ap"``: the Ap_t curve), ``checkpoints/`` (orbax, one per round, the
last two kept; server params and states, round and the clients' private leaves),
``report.json`` and ``report.md`` (per-client Ag^k and Ap^k table). ``resume=True`` continues
from the last checkpoint; because the round key is ``fold_in(seed key, round)``, a resumed run
ends with exactly the parameters of an uninterrupted one. Resuming a finished run (``rounds``
equal to the checkpoint's round) only redoes the evaluation and the Ap phase.

Scale: ``partition`` re-splits the scene's pooled domains into ``num_clients`` clients
(:mod:`fedjax_sc.data.partition`); ``clients_per_round`` samples M of them per round
(:class:`fedjax_sc.core.participation.ClientFeed`: data and private leaves stay on the host,
sampled rows are gathered and scattered back); the client axis of every round is sharded over
all devices (:mod:`fedjax_sc.core.sharding`); ``server_opt`` adds a FedOpt server
(:mod:`fedjax_sc.algorithms.fedopt`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from fedjax_sc import streams
from fedjax_sc.algorithms import dp_sgd
from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.core import communication, participation, personalize, sharding
from fedjax_sc.core.evaluate import (
    accuracy_list,
    make_evaluate,
    make_personal_evaluate,
    mean_accuracy,
)
from fedjax_sc.core.round import ClientStates, ServerState, build_round, init_states
from fedjax_sc.data import partition, scenes
from fedjax_sc.data.client_data import client_data, host_client_data
from fedjax_sc.data.corpus import FDU_DOMAINS, read_fdu, read_iyy
from fedjax_sc.models.text_classifier import init_params
from fedjax_sc.run import configs, registry, rundir
from fedjax_sc.run.registry import ALGORITHMS, build_algorithm
from fedjax_sc.run.report import format_table, make_report

SCENES = ("synthetic", "fdu", "iyy")
DTYPES = ("float32", "bfloat16")
EMBEDDINGS = tuple(configs.EMBED_DIM)


def _synthetic(param: str) -> int:
    """A default size of the synthetic scene, read from its generator's signature."""
    return inspect.signature(scenes.synthetic_corpora).parameters[param].default


class NonFiniteUpdateError(RuntimeError):
    """A client's local update produced NaN/inf; the round was not aggregated or saved."""


@dataclasses.dataclass
class TrainConfig:
    """Everything that defines a run (``None`` = the scene's preset in :mod:`configs`).

    Attributes:
      scene: ``synthetic`` | ``fdu`` | ``iyy``.
      data_dir: corpus directory (fdu, iyy).
      algorithm: a key of :data:`ALGORITHMS`.
      rounds: number of federated rounds (paper: 50 FDU, 20 IYY).
      local_epochs: local epochs per round (paper: 2).
      batch_size: local batch size (paper: 8 FDU, 64 IYY).
      lr: client learning rate (paper: 0.01 FDU, 0.1 IYY).
      momentum: client SGD momentum (paper: 0.9).
      embedding_lr: optional separate learning rate of the word embeddings (paper's IYY
        setting: 0.01 with lr 0.1).
      lambda_kt: KTEPS lambda1, knowledge-transfer weight (Eq. 9; paper 0.01).
      lambda_div: KTEPS lambda2, HSIC diversity weight (Eq. 9; paper 0.01; arch_* use 0).
      temperature: KTEPS T of Eq. 8 (paper 0.25).
      bandwidth: HSIC Gaussian kernel sigma; None = median heuristic per batch.
      furl_dim: size of FURL's private user vector (0: none).
      pca_band: (d1, d2), upload the shared word embeddings projected on principal components
        d1..d2 (KTEPS*, Eq. 10-12); kteps_star's default keeps the paper's proportions
        (d = 50: (2, 38)); None for the others = no compression.
      pca_center: centre the rows before the PCA (standard PCA; the projection itself is
        Eq. 11 as printed).
      upload_noise: sigma of the Gaussian noise on every uploaded leaf (Alg. 1 line 14);
        kteps_star's default 0.01, the others' 0.
      dp_clip: DP-SGD per-example clipping norm C on the shared leaves (None: no DP-SGD).
      dp_noise: DP-SGD noise multiplier z (noise std z * C on the summed clipped gradient).
      dp_delta: the delta at which the report states each client's epsilon.
      prox_mu: FedProx's mu (fedprox, fedprox_kc; not given by the paper: 0.01).
      mmd_weight: FedMMD's lambda (not given: 0.1).
      fusion: FedFusion's operator, ``conv`` | ``multi`` | ``single`` (Yao et al. 2019).
      kc_clusters / kc_iterations / kc_weight: FedKC's q, Lloyd iterations and alpha
        (fedavg_kc, fedprox_kc; 10, 10, 0.1).
      asp_adversarial / asp_orthogonal: ASP's lambda_adv and gamma (Liu et al. 2017: 0.05,
        0.01).
      server_opt: FedOpt server optimizer on the pseudo-gradient (``sgd``, ``momentum``,
        ``adam``, ``yogi``, ``adagrad``; Reddi et al. 2021); None: the aggregate is the model.
      server_lr / server_momentum / server_tau: its learning rate (None: 1.0 for sgd and
        momentum, 0.01 for the adaptive ones), momentum (b1) and adaptivity eps.
      ap: run the personalisation phase (Ap, Eq. 16) after the last round.
      ap_evals: n_Z, evaluations during fine-tuning (paper Fig. 4: 25).
      ap_steps: z, fine-tuning steps between evaluations (not given by the paper; 10).
      ap_lr_mult: mu, fine-tuning LR = mu * lr (paper Table 5: 0.01).
      ap_mode: inference mode of Ap (s / p / sp for two-branch models; default: the
        algorithm's, sp for KTEPS, Remark 4). Every mode's curve is recorded.
      seed: root seed (model init, shuffling, synthetic data).
      embeddings: ``random`` (N(0, 1), as PyTorch's default), ``glove-6b-50d`` (the PyPI
        package's vectors) or the path of a GloVe/word2vec text file (``.gz`` too; d is
        read from it, e.g. the paper's ``glove.6B.200d.txt``).
      embed_dim: d; default 200 (random) or 50 (GloVe 6B 50d).
      hidden: BiGRU hidden size per direction (paper: 64).
      dtype: the computation dtype, ``float32`` or ``bfloat16`` (mixed precision: parameters,
        optimizer states and aggregation stay float32).
      mlp_hidden: classifier hidden width (paper: unspecified; 128).
      max_len: clip/pad length L (paper: 200 FDU, 400 IYY).
      vocab_size: words kept by the federated vocabulary (paper: 50,000; + <pad>, <unk>).
      domains: FDU domains to use as clients (default: all 16, paper Table 1 order).
      partition: ``natural`` (one client per domain) or ``dirichlet_label`` /
        ``dirichlet_quantity``: the domains pooled and split into ``num_clients`` clients
        (FedNLP, :mod:`fedjax_sc.data.partition`); every split the same way.
      num_clients: N of a Dirichlet partition.
      alpha: label-skew concentration (dirichlet_label; with dirichlet_quantity: combined).
      beta: quantity-skew concentration (dirichlet_quantity; with dirichlet_label: combined).
      partition_seed: seed of the partition (kept apart from ``seed`` so that training seeds
        share one partition).
      clients_per_round: M, clients sampled (without replacement) per round; None: all N.
      sampling: ``uniform`` (aggregation weights N^k / sum over the sampled) or ``size``
        (sampled with probability proportional to N^k, equal aggregation weights, so the
        expected update is the full weighted mean; Li et al. 2020, "On the convergence of
        FedAvg on non-IID data", scheme I without replacement).
      dev_holdout: hold out the last 200 lines of each ``.task.train`` (not used by the paper).
      allow_empty_clients: keep a client whose train or test file has no example (it trains
        nothing, or is left out of the averages and shown as n/a); False refuses it, naming
        the file.
      local_vocab: train only each client's local-vocabulary rows (exact; paper Remark 3).
      synthetic_clients / synthetic_train / synthetic_test: synthetic scene sizes.
      out: output directory.
      resume: continue from the last checkpoint in ``out``.
      overwrite: replace an earlier run in ``out``: its files are deleted once the new run's
        inputs are checked, right before training starts; a folder holding files that a run
        does not write is refused (:mod:`fedjax_sc.run.rundir`).
    """

    scene: str = "synthetic"
    data_dir: str | None = None
    algorithm: str = "fedavg"
    rounds: int | None = None
    local_epochs: int = 2
    batch_size: int | None = None
    lr: float | None = None
    momentum: float = registry.default("momentum")
    embedding_lr: float | None = None
    lambda_kt: float = registry.default("lambda_kt")
    lambda_div: float = registry.default("lambda_div")
    temperature: float = registry.default("temperature")
    bandwidth: float | None = None
    furl_dim: int = registry.default("furl_dim")
    pca_band: tuple[int, int] | None = None
    pca_center: bool = registry.default("pca_center")
    upload_noise: float | None = None
    dp_clip: float | None = None
    dp_noise: float = 0.0
    dp_delta: float = 1e-5
    prox_mu: float = registry.default("prox_mu")
    mmd_weight: float = registry.default("mmd_weight")
    fusion: str = registry.default("fusion")
    kc_clusters: int = registry.default("kc_clusters")
    kc_iterations: int = registry.default("kc_iterations")
    kc_weight: float = registry.default("kc_weight")
    asp_adversarial: float = registry.default("asp_adversarial")
    asp_orthogonal: float = registry.default("asp_orthogonal")
    server_opt: str | None = None
    server_lr: float | None = None
    server_momentum: float = registry.default("server_momentum")
    server_tau: float = registry.default("server_tau")
    ap: bool = True
    ap_evals: int = personalize.DEFAULT_NUM_EVALS
    ap_steps: int = personalize.DEFAULT_STEPS_PER_EVAL
    ap_lr_mult: float = personalize.DEFAULT_LR_MULTIPLIER
    ap_mode: str | None = None
    seed: int = 0
    embeddings: str = "random"
    embed_dim: int | None = None
    hidden: int = registry.default("hidden")
    dtype: str = registry.default("dtype")
    mlp_hidden: int = registry.default("mlp_hidden")
    max_len: int | None = None
    vocab_size: int = scenes.VOCAB_SIZE
    domains: tuple[str, ...] | None = None
    partition: str = "natural"
    num_clients: int | None = None
    alpha: float | None = None
    beta: float | None = None
    partition_seed: int = 0
    clients_per_round: int | None = None
    sampling: str = "uniform"
    dev_holdout: bool = False
    allow_empty_clients: bool = False
    local_vocab: bool = True
    synthetic_clients: int = _synthetic("num_clients")
    synthetic_train: int = _synthetic("train_per_client")
    synthetic_test: int = _synthetic("test_per_client")
    out: str = "runs/latest"
    resume: bool = False
    overwrite: bool = False

    def resolved(self) -> TrainConfig:
        """A copy with every ``None`` filled from the scene preset; validates choices.

        Raises:
          ValueError: unknown scene/algorithm/embeddings, missing data_dir, bad sizes.
        """
        if self.scene not in SCENES:
            raise ValueError(f"unknown scene {self.scene!r}; choose from {SCENES}")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {self.algorithm!r}; choose from "
                             f"{tuple(ALGORITHMS)}")
        if self.embeddings not in EMBEDDINGS and not Path(self.embeddings).is_file():
            raise ValueError(f"--embeddings {self.embeddings!r}: neither one of {EMBEDDINGS} "
                             f"nor an existing word-vector file")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r}: choose from {DTYPES}")
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite exclude each other")
        if self.domains is not None and self.scene != "fdu":
            raise ValueError("--domains applies to --scene fdu only")
        if self.scene != "synthetic" and not self.data_dir:
            raise ValueError(f"--scene {self.scene} needs --data-dir")
        if self.domains is not None:
            repeated = sorted({d for d in self.domains if list(self.domains).count(d) > 1})
            if repeated:
                raise ValueError(f"--domains: {' '.join(repeated)} given more than once (each "
                                 f"domain is one client)")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            values = value if isinstance(value, tuple) else (value,)
            if any(isinstance(v, float) and not math.isfinite(v) for v in values):
                raise ValueError(f"--{f.name.replace('_', '-')} must be a finite number, got "
                                 f"{value}")
        preset = configs.SCENE_DEFAULTS[self.scene]
        c = dataclasses.replace(self, **{k: v for k, v in preset.items()
                                         if getattr(self, k) is None})
        if c.embeddings in EMBEDDINGS:
            c.embed_dim = c.embed_dim or configs.EMBED_DIM[c.embeddings]
            if c.embeddings == "glove-6b-50d" and c.embed_dim != 50:
                raise ValueError(f"glove-6b-50d gives d = 50, got --embed-dim {c.embed_dim}")
        else:  # a word-vector file says its d
            from fedjax_sc.data.embeddings import vector_dim
            d = vector_dim(c.embeddings)
            if c.embed_dim not in (None, d):
                raise ValueError(f"{c.embeddings} holds {d}-dimensional vectors, got "
                                 f"--embed-dim {c.embed_dim}")
            c.embed_dim = d
        for name in ("rounds", "local_epochs", "batch_size", "max_len", "vocab_size",
                     "embed_dim", "hidden", "mlp_hidden"):
            if getattr(c, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(c, name)}")
        for name in ("furl_dim", "ap_evals", "ap_steps"):
            if getattr(c, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(c, name)}")
        if c.ap_lr_mult < 0:
            raise ValueError(f"ap_lr_mult must be >= 0, got {c.ap_lr_mult}")
        c.pca_band, c.upload_noise = registry.upload_settings(c.algorithm, c.embed_dim,
                                                              c.pca_band, c.upload_noise)
        if c.pca_band is not None:
            c.pca_band = tuple(int(x) for x in c.pca_band)
            if len(c.pca_band) != 2 or not 1 <= c.pca_band[0] <= c.pca_band[1] <= c.embed_dim:
                raise ValueError(f"pca_band must be (d1, d2) with 1 <= d1 <= d2 <= d = "
                                 f"{c.embed_dim}, got {c.pca_band}")
        if c.upload_noise < 0 or c.dp_noise < 0:
            raise ValueError("upload_noise and dp_noise must be >= 0")
        if c.dp_clip is not None and not c.dp_clip > 0:
            raise ValueError(f"dp_clip must be > 0, got {c.dp_clip}")
        if not 0 < c.dp_delta < 1:
            raise ValueError(f"dp_delta must lie in (0, 1), got {c.dp_delta}")
        if c.partition not in partition.PARTITIONS:
            raise ValueError(f"unknown partition {c.partition!r}; choose from "
                             f"{partition.PARTITIONS}")
        if c.partition == "natural":
            if c.num_clients is not None or c.alpha is not None or c.beta is not None:
                raise ValueError("--num-clients, --alpha and --beta need --partition "
                                 "dirichlet_label or dirichlet_quantity")
        elif c.num_clients is None or c.num_clients < 1:
            raise ValueError(f"--partition {c.partition} needs --num-clients >= 1")
        if c.sampling not in participation.SAMPLINGS:
            raise ValueError(f"unknown sampling {c.sampling!r}; choose from "
                             f"{participation.SAMPLINGS}")
        if c.clients_per_round is not None and c.clients_per_round < 1:
            raise ValueError(f"clients_per_round must be >= 1, got {c.clients_per_round}")
        return c


def load_scene(c: TrainConfig) -> scenes.Scene:
    """The scene a resolved config names: its domains' corpora, re-partitioned into
    ``c.num_clients`` clients unless ``c.partition`` is ``natural``, then ``build_scene``."""
    if c.scene == "fdu":
        corpora = read_fdu(c.data_dir, domains=c.domains or FDU_DOMAINS,
                           dev_holdout=c.dev_holdout)
    elif c.scene == "iyy":
        corpora = read_iyy(c.data_dir, dev_holdout=c.dev_holdout)
    else:
        corpora = scenes.synthetic_corpora(num_clients=c.synthetic_clients,
                                           train_per_client=c.synthetic_train,
                                           test_per_client=c.synthetic_test,
                                           max_len=c.max_len, seed=c.seed)
    num_classes = configs.NUM_CLASSES[c.scene]
    name = c.scene
    if c.partition != "natural":
        corpora = partition.repartition(corpora, c.partition, c.num_clients, num_classes,
                                        alpha=c.alpha, beta=c.beta, seed=c.partition_seed)
        name = f"{c.scene}-{c.partition}"
    return scenes.build_scene(name, corpora, num_classes=num_classes, max_len=c.max_len,
                              vocab_size=c.vocab_size, allow_empty=c.allow_empty_clients)


def corpus_files(c: TrainConfig) -> list[Path]:
    """The files a resolved config's scene reads (none for the synthetic scene)."""
    from fedjax_sc.data.corpus import IYY_FILES
    if c.scene == "fdu":
        return [Path(c.data_dir) / f"{d}.task.{s}" for d in c.domains or FDU_DOMAINS
                for s in ("train", "test")]
    if c.scene == "iyy":
        return [Path(c.data_dir) / name for pair in IYY_FILES.values() for name in pair]
    return []


def _check_out_dir(out: Path, c: TrainConfig) -> None:
    """Checks ``out`` before any work; deletes nothing (an overwritten run is removed by
    :func:`rundir.remove_run` once the new inputs are checked)."""
    saved = out / "config.json"
    if not saved.exists():
        if c.resume:
            raise FileNotFoundError(f"--resume: no run to resume in {out} (no config.json)")
        return
    if c.overwrite:
        rundir.check_replaceable(out)
        return
    if not c.resume:
        raise FileExistsError(f"{out} already holds a run; pass --resume to continue it, "
                              f"--overwrite to replace it, or choose another --out")
    diff = config_diff(json.loads(saved.read_text()), c)
    if diff:
        raise ValueError(f"--resume with a different configuration than {saved}: {diff}")


def config_diff(saved: dict[str, Any], c: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """``{field: (saved, now)}`` for the training settings in which a saved ``config.json``
    differs from ``c``. The rounds, the output folder and the Ap phase's settings may differ
    (a run continues, or only its evaluation is redone); a field an older version did not
    write is compared with its default (what that version did)."""
    ignore = {"rounds", "resume", "overwrite", "out", "ap", "ap_evals", "ap_steps",
              "ap_lr_mult", "ap_mode"}
    defaults = json.loads(json.dumps(dataclasses.asdict(TrainConfig())))
    now = json.loads(json.dumps(dataclasses.asdict(c)))
    return {k: (saved.get(k, defaults[k]), v) for k, v in now.items()
            if k not in ignore and saved.get(k, defaults[k]) != v}


class Setup(NamedTuple):
    """A run's algorithm and round-0 states, rebuilt from its resolved config."""

    algorithm: Algorithm
    state: ServerState
    client_states: ClientStates
    root: jax.Array
    train_key: jax.Array


def build_setup(c: TrainConfig, scene: scenes.Scene,
                log: Callable[[str], None] = print) -> Setup:
    """The algorithm ``c`` names for ``scene`` and its initial states (GloVe-initialised when
    ``c.embeddings`` says so); the same for a fresh run, a resumed one and ``fedjax-sc probe``.
    """
    algorithm = build_algorithm(
        c.algorithm, vocab_size=len(scene.vocab), num_classes=scene.num_classes,
        embed_dim=c.embed_dim, hidden=c.hidden, mlp_hidden=c.mlp_hidden, furl_dim=c.furl_dim,
        dtype=c.dtype,
        learning_rate=c.lr, momentum=c.momentum, embedding_learning_rate=c.embedding_lr,
        lambda_kt=c.lambda_kt, lambda_div=c.lambda_div, temperature=c.temperature,
        bandwidth=c.bandwidth, pca_band=c.pca_band, pca_center=c.pca_center,
        upload_noise=c.upload_noise, dp_clip=c.dp_clip, dp_noise=c.dp_noise,
        prox_mu=c.prox_mu, mmd_weight=c.mmd_weight, fusion=c.fusion,
        kc_clusters=c.kc_clusters, kc_iterations=c.kc_iterations, kc_weight=c.kc_weight,
        asp_adversarial=c.asp_adversarial, asp_orthogonal=c.asp_orthogonal,
        num_clients=scene.num_clients, server_opt=c.server_opt, server_lr=c.server_lr,
        server_momentum=c.server_momentum, server_tau=c.server_tau)
    if algorithm.central is not None and (c.dp_clip is not None or c.pca_band
                                          or c.upload_noise):
        raise ValueError(f"{c.algorithm} is trained centrally: upload compression, upload "
                         f"noise and DP-SGD do not apply")
    matrix = None
    if c.embeddings != "random":
        from fedjax_sc.data.embeddings import glove_6b_50d, word_vectors
        emb = (glove_6b_50d(scene.vocab, seed=c.seed) if c.embeddings == "glove-6b-50d" else
               word_vectors(c.embeddings, scene.vocab, seed=c.seed))
        matrix = emb.matrix
        name = "GloVe 6B 50d" if c.embeddings == "glove-6b-50d" else c.embeddings
        log(f"{name}: {emb.num_found} of {len(scene.vocab) - 2} words found "
            f"(coverage {emb.coverage:.1%}, d = {matrix.shape[1]}); the rest get small "
            f"random vectors")
    root = jax.random.key(c.seed)
    init_key, train_key = jax.random.split(root)
    state, client_states = init_states(algorithm, init_params(algorithm.model, init_key, matrix),
                                       scene.num_clients)
    return Setup(algorithm, state, client_states, root, train_key)


def restore_checkpoint(ckpt: ocp.CheckpointManager, step: int, state: ServerState,
                       client_states: ClientStates) -> tuple[ServerState, ClientStates]:
    """The states saved at round ``step``, restored into the structure of the given ones."""
    restored = ckpt.restore(step, args=ocp.args.StandardRestore(
        _checkpoint_tree(state, client_states)))
    # a state without leaves is not saved: keep the template's (empty) structure for it
    return (ServerState(restored["params"], restored["round"],
                        restored.get("opt_state", state.opt_state),
                        restored.get("upload_state", state.upload_state)),
            ClientStates(restored.get("private", client_states.private)))


def train(config: TrainConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Runs federated training, then the Ap phase, as ``config`` says.

    Args:
      config: the run's configuration (``None`` fields resolved from the scene preset).
      log: where progress lines go.

    Returns:
      The final report: ``{"rounds", "Ag" (None when not applicable), "Ap", "ap_mode",
      "clients": [{"client", "N", "M", "Ag", "personal", "Ap"}...], "params": final global
      params, "private": the clients' private leaves, ...}``.

    Raises:
      NonFiniteUpdateError: a client's update turned NaN/inf (names round and client).
      FileExistsError / FileNotFoundError / ValueError: output directory, data or config
        problems (all found before an overwritten run is deleted).
      CheckpointError: a checkpoint could not be written (names the round).
      OSError: the output folder cannot be written.
    """
    c = config.resolved()
    out = Path(c.out)
    _check_out_dir(out, c)

    t0 = time.perf_counter()
    scene = load_scene(c)
    names = scene.client_names
    log(f"scene {scene.name}: {scene.num_clients} clients, V = {len(scene.vocab)}, "
        f"L = {scene.max_len}, N = {int(scene.train.counts.sum())} train / "
        f"{int(scene.test.counts.sum())} test reviews ({time.perf_counter() - t0:.1f} s)")
    latin1 = {st["client"]: st["n_latin1_lines"] for st in scene.stats if st["n_latin1_lines"]}
    if latin1:
        log("lines not valid UTF-8, decoded as latin-1: "
            + ", ".join(f"{k} {v:,}" for k, v in latin1.items()))
    empty = [f"{n} ({'no training' if not scene.train.counts[k] else 'no test'} examples)"
             for k, n in enumerate(names)
             if not scene.train.counts[k] or not scene.test.counts[k]]
    if empty:
        log("kept by --allow-empty-clients: " + ", ".join(empty))

    setup = build_setup(c, scene, log)
    algorithm, state, client_states = setup.algorithm, setup.state, setup.client_states
    root, train_key = setup.root, setup.train_key
    # the Ap phase always fine-tunes per client; a centralised trainer says what it trains on
    central = algorithm.central
    host_train = host_client_data(scene.train, local_vocab=c.local_vocab)
    round_host = host_train if central is None else central.data(scene.train, c.local_vocab)
    if c.clients_per_round is not None and central is not None:
        raise ValueError(f"{c.algorithm} is trained centrally: --clients-per-round does not "
                         f"apply")
    if c.clients_per_round is not None and c.clients_per_round > scene.num_clients:
        raise ValueError(f"--clients-per-round {c.clients_per_round} > {scene.num_clients} "
                         f"clients")
    test_data = client_data(scene.test)
    has_private = bool(jax.tree.leaves(client_states.private))
    global_eval = (None if algorithm.global_predict is None
                   else make_evaluate(algorithm.global_predict))
    personal_eval = make_personal_evaluate(algorithm.predict) if has_private else None
    mode = c.ap_mode or algorithm.default_mode
    comm = None
    if central is None:
        comm = communication.account(algorithm, state, host_train).summary()
        log(communication.describe(comm))
    else:
        log(f"{c.algorithm} is trained centrally: no communication")

    vocab_json = scene.vocab.to_json()
    data_print = rundir.fingerprint(corpus_files(c), vocab_json)
    if c.resume:
        note = rundir.check_resume_data(out, data_print, vocab_json)
        if note:
            log(note)
    elif c.overwrite and (out / "config.json").exists():  # the new inputs are all checked
        rundir.remove_run(out)
        log(f"--overwrite: removed the earlier run in {out}")
    out.mkdir(parents=True, exist_ok=True)
    ckpt = ocp.CheckpointManager(out.resolve() / "checkpoints",
                                 options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True))
    start = 0
    if c.resume and ckpt.latest_step() is not None:
        start = int(ckpt.latest_step())
        if start > c.rounds:
            raise ValueError(f"--resume: the checkpoint is at round {start}, past --rounds "
                             f"{c.rounds}")
        state, client_states = restore_checkpoint(ckpt, start, state, client_states)
        log(f"resumed from {out / 'checkpoints'} at round {start}")
    metrics_path = out / "metrics.jsonl"
    history = rundir.read_metrics(metrics_path, start, log)
    metrics_path.write_text("".join(json.dumps(r) + "\n" for r in history))
    (out / "config.json").write_text(json.dumps(dataclasses.asdict(c), indent=2))
    (out / "vocab.json").write_text(vocab_json)
    (out / "fingerprint.json").write_text(json.dumps(data_print, indent=2))

    mesh = sharding.client_mesh()
    state = sharding.put_replicated(state, mesh)
    feed = participation.ClientFeed(round_host, client_states.private, mesh,
                                    c.clients_per_round, c.sampling, c.seed)
    if feed.partial or mesh.size > 1:
        log(f"{feed.num_sampled} of {feed.num_clients} clients per round "
            f"({c.sampling if feed.partial else 'all'}); client axis of {feed.round_size} "
            f"over {mesh.size} device(s)")

    def accuracies():
        ag = None if global_eval is None else np.asarray(global_eval(state.params, test_data))
        personal = (None if personal_eval is None else
                    {k: np.asarray(v) for k, v in personal_eval(
                        (state.params, feed.private), test_data).items()})
        return ag, personal

    ag, personal = accuracies()
    if start < c.rounds:
        t0 = time.perf_counter()
        builder = build_round if central is None else central.build
        data, private = feed.inputs(feed.sample(start + 1))
        # the round replaces the server and client states: XLA may reuse their buffers
        round_step = jax.jit(builder(algorithm, batch_size=c.batch_size,
                                     local_epochs=c.local_epochs), donate_argnums=(0, 1)
                             ).lower(state, ClientStates(private), data, train_key).compile()
        log(f"round compiled in {time.perf_counter() - t0:.1f} s; algorithm {c.algorithm}, "
            f"batch {c.batch_size}, lr {c.lr}, {c.local_epochs} local epochs, d = {c.embed_dim}")
    durations = []
    for r in range(start + 1, c.rounds + 1):
        t0 = time.perf_counter()
        idx = feed.sample(r)
        data, private = feed.inputs(idx)
        new_state, new_client_states, m = round_step(state, ClientStates(private), data,
                                                     train_key)
        real = len(idx)
        m = jax.tree.map(lambda x: np.asarray(x)[:real], m)
        finite = m.finite
        if not finite.all():
            k = int(np.flatnonzero(~finite)[0])
            who = (names[idx[k]] if feed.num_clients == scene.num_clients
                   else "all clients pooled")
            raise NonFiniteUpdateError(
                f"round {r}: client {int(idx[k])} ({who}) produced a non-finite update (mean "
                f"local loss {float(m.train_loss[k])}); nothing was aggregated or saved. "
                f"Try a smaller --lr.")
        state = new_state
        feed.update(idx, new_client_states.private)
        jax.block_until_ready((state.params, feed.private))
        seconds = time.perf_counter() - t0
        durations.append(seconds)
        ag, personal = accuracies()
        steps = int(m.steps.sum())
        row = {"phase": "round", "round": r, "train_loss": float(np.mean(m.train_loss)),
               "Ag": None if ag is None else mean_accuracy(ag),
               "seconds": seconds, "client_steps_per_s": steps / seconds,
               "train_loss_per_client": m.train_loss.round(5).tolist(),
               "Ag_per_client": None if ag is None else accuracy_list(ag),
               "aux": {k: float(np.mean(v)) for k, v in m.aux.items()},
               "aux_per_client": {k: v.round(5).tolist() for k, v in m.aux.items()},
               "communication": comm}
        if feed.partial:
            row["clients"] = idx.tolist()
        if personal is not None:
            row["personal"] = {k: mean_accuracy(v) for k, v in personal.items()}
            row["personal_per_client"] = accuracy_list(personal[mode])
        with metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        save_checkpoint(ckpt, r, state, ClientStates(feed.private))
        eta = (c.rounds - r) * float(np.mean(durations))
        shown = "n/a" if ag is None else f"{row['Ag']:.4f}"
        extra = "" if personal is None else f" | personal ({mode}) {row['personal'][mode]:.4f}"
        log(f"round {r:3d}/{c.rounds} | train loss {row['train_loss']:.4f} | Ag {shown}{extra} "
            f"| {seconds:6.1f} s | {row['client_steps_per_s']:6.1f} client-steps/s "
            f"| ETA {_hms(eta)}")
    client_states = ClientStates(feed.private)
    ckpt.wait_until_finished()
    ckpt.close()

    ap, ap_seconds = None, 0.0
    if c.ap:
        t0 = time.perf_counter()
        train_data = jax.tree.map(jnp.asarray, host_train)
        ap = _personalize(c, algorithm, state, client_states, train_data, test_data, root, log)
        ap_seconds = time.perf_counter() - t0
        with metrics_path.open("a") as f:
            for t in range(ap.curve[mode].shape[1]):
                f.write(json.dumps({
                    "phase": "ap", "round": c.rounds, "t": t, "steps": t * c.ap_steps,
                    "Ap_t": {k: mean_accuracy(v[:, t]) for k, v in ap.curve.items()},
                    "Ap_t_per_client": accuracy_list(ap.curve[mode][:, t])}) + "\n")
    if personal is None:  # no private leaves: the personalised model is the global one
        personal = {"full": ag}

    report = make_report(c, scene, ag, personal, ap, mode)
    report["communication"] = comm
    report["training"] = "federated" if central is None else central.name
    report["timing"] = {"round_seconds": durations, "ap_seconds": ap_seconds}
    if c.dp_clip is not None:
        report["dp"] = dp_report(c, scene)
        log(f"DP-SGD: {report['dp']['note']}")
    (out / "report.json").write_text(json.dumps(report, indent=2))
    table = format_table(report) + ("" if comm is None else
                                     "\n\n" + communication.describe(comm))
    (out / "report.md").write_text(table + "\n")
    log(table)
    report["params"] = state.params
    report["private"] = client_states.private
    return report


def dp_report(c: TrainConfig, scene: scenes.Scene) -> dict[str, Any]:
    """Each client's DP-SGD privacy after ``c.rounds`` rounds: noise multiplier z, sampling
    rate q = B / N^k, local steps and epsilon at ``c.dp_delta`` (RDP accountant of
    ``dp-accounting``; ``None`` when it is not installed, with the reason in ``note``)."""
    counts = np.asarray(scene.train.counts)
    steps = [c.rounds * c.local_epochs * math.ceil(int(n) / c.batch_size) for n in counts]
    rates = [min(1.0, c.batch_size / max(int(n), 1)) for n in counts]
    eps = [dp_sgd.epsilon(c.dp_noise, q, t, c.dp_delta) for q, t in zip(rates, steps)]
    if any(e is None for e in eps):
        note = (f"z = {c.dp_noise}, C = {c.dp_clip}, q = B/N^k in [{min(rates):.4f}, "
                f"{max(rates):.4f}]; epsilon not computed: dp-accounting is not installed "
                f"(pip install 'fedjax_sc[dp]')")
    else:
        note = (f"z = {c.dp_noise}, C = {c.dp_clip}: epsilon in [{min(eps):.3g}, "
                f"{max(eps):.3g}] at delta = {c.dp_delta} per client (RDP, Poisson-sampling "
                f"approximation)")
    return {"noise_multiplier": c.dp_noise, "l2_norm_clip": c.dp_clip, "delta": c.dp_delta,
            "sampling_rate": rates, "steps": steps, "epsilon": eps, "note": note}


def _personalize(c: TrainConfig, algorithm, state, client_states, train_data, test_data, root,
                 log) -> personalize.Personalization:
    """The Ap phase (Eq. 16): fine-tune with mu * LR for n_Z * z steps, evaluating every z."""
    lr = c.ap_lr_mult * c.lr
    emb_lr = None if c.embedding_lr is None else c.ap_lr_mult * c.embedding_lr
    run = personalize.make_personalize(
        algorithm, client_sgd(lr, c.momentum, emb_lr), batch_size=c.batch_size,
        num_evals=c.ap_evals, steps_per_eval=c.ap_steps)
    t0 = time.perf_counter()
    result = run(state, client_states, train_data, test_data,
                 jax.random.fold_in(root, streams.AP))
    mode = c.ap_mode or algorithm.default_mode
    if mode not in result.curve:
        raise ValueError(f"--ap-mode {mode!r}: {c.algorithm} has the modes "
                         f"{sorted(result.curve)}")
    log(f"Ap phase: {c.ap_evals} x {c.ap_steps} fine-tuning steps at lr {lr:g} in "
        f"{time.perf_counter() - t0:.1f} s; Ap ({mode}) {result.ap(mode):.4f}; "
        + ", ".join(f"{k}: {result.ap(k):.4f}" for k in sorted(result.curve)))
    return result


class CheckpointError(RuntimeError):
    """A round's checkpoint could not be written; the rounds before it are on disk."""


def save_checkpoint(ckpt: ocp.CheckpointManager, r: int, state: ServerState,
                    client_states: ClientStates) -> None:
    """Saves round ``r`` and waits until it is on disk, so that a failure is reported at the
    round it belongs to.

    Raises:
      CheckpointError: the save failed (one line: round, folder, cause).
    """
    try:
        ckpt.save(r, args=ocp.args.StandardSave(_checkpoint_tree(state, client_states)))
        ckpt.wait_until_finished()
    except Exception as e:  # orbax raises many types; all end the run the same way
        cause = (str(e).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(
            f"round {r}: saving the checkpoint to {ckpt.directory} failed ({type(e).__name__}: "
            f"{cause}); rounds up to {r - 1} are saved: free space or fix the folder, then "
            f"rerun with --resume") from e


def _checkpoint_tree(state: ServerState, client_states: ClientStates) -> dict[str, Any]:
    """What a checkpoint holds: server params, round and states, and the private leaves."""
    tree = {"params": state.params, "round": state.round}
    for name, value in (("opt_state", state.opt_state), ("upload_state", state.upload_state),
                        ("private", client_states.private)):
        if jax.tree.leaves(value):
            tree[name] = value
    return tree


def _hms(seconds: float) -> str:
    seconds = int(math.ceil(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"
