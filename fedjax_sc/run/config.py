"""A run's configuration: the scenes' paper presets, :class:`TrainConfig` (every setting of a
run, each default written once: here, or in the builder it is read from), how a saved
configuration is compared with a new one, and the scene a configuration names.

Presets: options a user leaves out take the scene's paper settings (Li et al. 2021, Sec.
5.1-5.2). How to run each:

* FDU (16 clients, the paper's Table 2 setting, GloVe 50d as shipped here)::

      fedjax-sc train --scene fdu --data-dir ../shared/data/fdu-mtl --embeddings glove-6b-50d \\
          --out runs/fdu-fedavg

* IYY (3 clients; Tang et al. 2015 files in --data-dir)::

      fedjax-sc train --scene iyy --data-dir /path/to/iyy --out runs/iyy-fedavg

* synthetic (built in, seconds on a laptop CPU)::

      fedjax-sc train --scene synthetic --out runs/quickstart
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from fedjax_sc.algorithms import dp_sgd
from fedjax_sc.algorithms.context import is_spec, load, parse_option
from fedjax_sc.algorithms.noise import PAPER_SIGMA
from fedjax_sc.core import personalize
from fedjax_sc.data import flwr_partition, scenes, synthetic
from fedjax_sc.models import text_classifier
from fedjax_sc.run import ranges, registry, table_scene
from fedjax_sc.run.plumbing import uploads
from fedjax_sc.run.plumbing.flags import flag
from fedjax_sc.run.registry import ALGORITHMS

SCENE_DEFAULTS: dict[str, dict[str, float | int]] = {
    # Sec. 5.1-5.2: L = 200, batch 8, LR 0.01, 2 local epochs, 50 rounds; the FL methods
    # upload with N(0, 0.01^2) noise (Sec. 5.2; see UPLOAD_NOISE).
    "fdu": {"rounds": 50, "batch_size": 8, "lr": 0.01, "max_len": scenes.MAX_LEN["fdu"],
            "upload_noise": PAPER_SIGMA},
    # Sec. 5.1-5.2: L = 400, batch 64, LR 0.1 with 0.01 for the embedding layer ("can be
    # better"), 20 rounds, the same noise.
    "iyy": {"rounds": 20, "batch_size": 64, "lr": 0.1, "embedding_lr": 0.01,
            "max_len": scenes.MAX_LEN["iyy"], "upload_noise": PAPER_SIGMA},
    # Built-in scene (fedjax_sc.data.scenes.synthetic_scene): small and fast. LR 0.1 because
    # its randomly initialised embeddings need larger steps than GloVe-initialised ones.
    "synthetic": {"rounds": 10, "batch_size": 8, "lr": 0.1, "max_len": synthetic.MAX_LEN},
    # A corpus of one's own (fedjax_sc.data.table): FDU's, the paper's for short English reviews
    # of 1-2k per client (FDU as a table trains as --scene fdu); big clients: --batch-size 32.
    "table": {"rounds": 50, "batch_size": 8, "lr": 0.01, "max_len": 200},
}

NUM_CLASSES = scenes.NUM_CLASSES
"""C per scene (:data:`fedjax_sc.data.scenes.NUM_CLASSES`); the table scene's is its data's."""

EMBED_DIM = {"random": text_classifier.EMBED_DIM, "glove-6b-50d": 50}
"""Embedding size d per initialisation: 200 as the paper; 50 for the GloVe 6B 50d vectors."""

SCENES = ("synthetic", "fdu", "iyy", "table")
DTYPES = ("float32", "bfloat16")
EMBEDDINGS = tuple(EMBED_DIM)


@dataclasses.dataclass
class TrainConfig:
    """Everything that defines a run (``None`` = the scene's preset, :data:`SCENE_DEFAULTS`).

    Attributes:
      scene: ``synthetic`` | ``fdu`` | ``iyy`` | ``table`` (a corpus of one's own).
      data_dir: corpus directory (fdu, iyy).
      data / test_data: table: the labelled texts (CSV, JSON lines, Parquet, a datasets
        folder or ``hf:BUILDER:FILE``; :mod:`fedjax_sc.data.table`) and an optional test file.
      text_column / label_column: table: the columns of the texts and of the labels.
      client_column: table: one client per value, sorted (flwr-datasets' NaturalIdPartitioner);
        None: ``partition`` splits the rows into ``num_clients``.
      split_column: table: a column of ``train`` / ``test`` values splitting ``data``.
      test_fraction: table without a test split: each client's share held out, seeded by
        ``partition_seed`` (default 0.2: FDU-MTL's 400 of 2,000 reviews per domain).
      test_split: table without a test split: which rows are held out, ``random`` (default)
        or each client's ``last`` rows in file order (needs ``client_column``).
      empty_text: table: what a row without text does, ``refuse`` (default: an error naming
        it), ``drop`` or ``keep`` as an empty text (:data:`fedjax_sc.data.table.EMPTY_TEXT`).
      label_names: table: the label value of each class, filled from the data when a run is
        written (the labels' distinct values, sorted); set, it fixes the classes and order.
      tokenizer: table: ``basic`` (default), ``whitespace`` or a ``tokenizer.json``
        (:mod:`fedjax_sc.data.tokenize`); a saved table config without it: ``whitespace``.
      min_partition_size / self_balancing: partition ``dirichlet``: flwr-datasets'
        DirichletPartitioner settings (defaults as flwr-datasets: 10, False).
      algorithm: a key of :data:`ALGORITHMS`, or one's own ``FILE.py:FUNCTION``.
      algorithm_options: one's own algorithm's settings, ``{name: int | float | str}``
        (``--algorithm-option NAME=VALUE``; its builder reads them as ``context.options``,
        :class:`fedjax_sc.algorithms.context.BuildContext`); empty for a built-in algorithm,
        whose settings have flags of their own.
      rounds: number of federated rounds (paper: 50 FDU, 20 IYY).
      local_epochs: local epochs per round (paper: 2).
      batch_size: local batch size (paper: 8 FDU, 64 IYY).
      lr: client learning rate (paper: 0.01 FDU, 0.1 IYY).
      momentum: client SGD momentum (paper: 0.9).
      embedding_lr: optional separate learning rate of the word embeddings (None: ``lr``;
        the iyy preset's 0.01 with lr 0.1, the paper's Sec. 5.2).
      lr_schedule: lr over the rounds (``optimizers.round_schedule``; ``constant``).
      client_optimizer_state: ``fresh`` (every round's local steps start the client
        optimizer afresh, the default) or ``kept`` (each client's momentum carries
        over to its next round; :mod:`fedjax_sc.algorithms.kept_optimizer`).
      lambda_kt: KTEPS lambda1, knowledge-transfer weight (Eq. 9; paper 0.01).
      lambda_div: KTEPS lambda2, HSIC diversity weight (Eq. 9; paper 0.01; arch_* use 0).
      temperature: KTEPS T of Eq. 8 (paper 0.25).
      bandwidth: HSIC Gaussian kernel sigma; None = median heuristic per batch.
      hsic_normalization: ``biased`` (HSIC over (n - 1)^2, default) or ``none`` (the trace
        alone, 49x larger at batch 8).
      furl_dim: size of FURL's private user vector (0: none).
      pca_band: (d1, d2), upload the shared word embeddings projected on principal components
        d1..d2 (KTEPS*, Eq. 10-12); kteps_star's default keeps the paper's proportions
        (d = 50: (2, 38)); None for the others = no compression.
      pca_center: centre the rows before the PCA (standard PCA; the projection itself is
        Eq. 11 as printed).
      upload_noise: sigma of the Gaussian noise on every uploaded leaf (Sec. 5.2, Alg. 1
        line 14); None = the scene's preset for an algorithm that uploads (fdu, iyy: the
        paper's 0.01, Sec. 5.2), else the algorithm's builder's (kteps_star: 0.01, Alg. 1;
        every other: none), so the library and the CLI train the same run; always 0 for
        indiv, fs and asp (:func:`fedjax_sc.run.plumbing.uploads.upload_settings`).
      upload_compression: send the model change compressed: ``none``, ``topk:FRACTION``,
        ``bits:BITS`` or ``sign``, ``+ef`` after topk or sign for error feedback
        (:mod:`fedjax_sc.run.plumbing.uploads`; not with ``pca_band``).
      dp_clip: DP-SGD per-example clipping norm C on the shared leaves (None: no DP-SGD).
      dp_noise: DP-SGD noise multiplier z (noise std z * C on the summed clipped gradient).
      dp_delta: the delta at which the report states each client's epsilon.
      prox_mu ... asp_schedule (except ``fusion_private_embedding``): an algorithm's own
        options, one field each; each is documented once, in
        :data:`fedjax_sc.run.registry.OPTIONS` (its help, the algorithms that read it), and
        defaults to its builder's parameter (``fedjax-sc train --help`` lists both).
      fusion_private_embedding: FedFusion keeps each client's word embedding private (Li et
        al. 2021's run, Sec. 5.5; default True); False averages every leaf (Yao et al.).
      server_opt: FedOpt server optimizer on the pseudo-gradient (``sgd``, ``momentum``,
        ``adam``, ``yogi``, ``adagrad``; Reddi et al. 2021); None: the aggregate is the model.
      server_lr / server_momentum / server_tau: its learning rate (None: the optimizer's
        :data:`fedjax_sc.algorithms.fedopt.DEFAULT_LR`), momentum (b1) and adaptivity eps.
      ap: run the personalisation phase (Ap, Eq. 16) after the last round.
      ap_evals: n_Z, evaluations during fine-tuning (paper Fig. 4: 25).
      ap_steps: z, fine-tuning steps between evaluations (not given by the paper; 10).
      ap_lr_mult: mu, fine-tuning LR = mu * lr (paper Table 5: 0.01).
      ap_mode: inference mode of Ap (s / p / sp for two-branch models; default: the
        algorithm's, sp for KTEPS, Remark 4). Every mode's curve is recorded.
      seed: root seed (model init, random vectors of words without a pretrained one,
        shuffling, client sampling, noise).
      embeddings: ``random`` (N(0, 1), as PyTorch's default), ``glove-6b-50d`` (the PyPI
        package's vectors) or the path of a GloVe/word2vec text file (``.gz`` too; d is
        read from it, e.g. the paper's ``glove.6B.200d.txt``).
      embed_dim: d; default 200 (random) or 50 (GloVe 6B 50d).
      hidden: BiGRU hidden size per direction (paper: 64).
      dtype: the computation dtype, ``float32`` or ``bfloat16`` (mixed precision: parameters,
        optimizer states and aggregation stay float32).
      gru_init: how the BiGRU's weights start: ``semi_orthogonal`` (default), ``flax``
        (Flax's GRUCell) or ``pytorch`` (PyTorch's nn.GRU) (:data:`~fedjax_sc.models.
        text_classifier.GRU_INITS`; the paper does not say).
      mlp_hidden: classifier hidden width (paper: unspecified; 128).
      max_len: clip/pad length L (paper: 200 FDU, 400 IYY).
      vocab_size: words kept by the federated vocabulary (paper: 50,000; + <pad>, <unk>).
      domains: FDU domains to use as clients (default: all 16, paper Table 1 order).
      partition: ``natural`` (one client per domain) or ``dirichlet_label`` /
        ``dirichlet_quantity``: the domains pooled and split into ``num_clients`` clients
        (FedNLP, :mod:`fedjax_sc.data.partition`); every split the same way; or ``iid`` /
        ``dirichlet``, flwr-datasets' IidPartitioner / DirichletPartitioner.
      num_clients: N of a Dirichlet partition.
      alpha: label-skew concentration (dirichlet_label; with dirichlet_quantity: combined;
        dirichlet: each class's shares over the clients ~ Dir(alpha)).
      beta: quantity-skew concentration (dirichlet_quantity; with dirichlet_label: combined).
      partition_seed: the data's seed: the Dirichlet partition and the synthetic scene's
        reviews (kept apart from ``seed`` so that training seeds share one dataset, and the
        members of a population one scene).
      clients_per_round: M, clients sampled per round; None: all N.
        The Ap phase then fine-tunes the N clients in blocks of M.
      sampling: ``uniform`` (aggregation weights N^k / sum over the sampled) or ``size``
        (M draws with replacement, probability proportional to N^k, each weighed 1/M, so the
        expected update is the full weighted mean; Li et al. 2020, "On the convergence of
        FedAvg on non-IID data", scheme I; a client drawn twice trains once and weighs 2;
        needs ``clients_per_round`` below N).
      padding: a sampled round's example axis: ``auto`` (``bucket`` for a cross-device
        scene, else ``global``; :func:`fedjax_sc.run.cross_device.padding`), ``bucket``,
        ``sampled`` or ``global``; figures change by float32 rounding only, so a run resumes
        with another padding (:func:`config_diff`).
      local_steps: heterogeneous local work (:mod:`fedjax_sc.core.heterogeneity`): ``"N"``,
        N local steps for every client each round, or ``"LO:HI"``, drawn per client and
        round uniformly from LO..HI; None: ``local_epochs`` epochs of the client's own data
        (work proportional to N^k, the paper's setting).
      client_dropout: probability that a client misses a round (it trains and uploads
        nothing; the others' weights are renormalised); 0: none.
      straggler_fraction: fraction of the clients that straggle each round (FedProx's
        systems heterogeneity); 0: none.
      straggler_policy: ``partial`` (a straggler's partial work is aggregated) or ``drop``
        (discarded, as FedAvg's handling in the FedProx paper).
      aggregation: ``mean`` (N^k-weighted, FedAvg) or ``fednova`` (normalised averaging,
        Wang et al. 2020, for unequal local work).
      dev_holdout: fdu and iyy: hold out a dev split of each training file, FDU-MTL's last 200
        lines of each ``.task.train``, IYY's last tenth (not used by the paper).
      allow_empty_clients: keep a client whose train or test file has no example (it trains
        nothing, or is left out of the averages and shown as n/a); False refuses it, naming
        the file.
      local_vocab: train only each client's local-vocabulary rows (exact; paper Remark 3).
      synthetic_clients / synthetic_train / synthetic_test: synthetic scene sizes.
      synthetic_zipf: None, or the exponent of Zipf-distributed synthetic training sizes
        (:func:`fedjax_sc.data.partition.zipf_sizes`, clipped to ``synthetic_train``).
      tensorboard: also write the metrics as TensorBoard event files in
        ``out/tensorboard/`` (:mod:`fedjax_sc.run.plumbing.tracking`; needs tensorboardX).
      wandb: also log the metrics, this configuration and the final Ag/Ap to a Weights &
        Biases run whose files are in ``out/wandb/`` (:mod:`fedjax_sc.run.plumbing.tracking`).
      wandb_project: the W&B project.
      wandb_mode: ``offline`` (the run stays in ``out/wandb/`` until ``wandb sync``) or
        ``online``; offline unless asked, so that a simulation sends nothing anywhere.
      out: output directory.
      resume: continue from the last checkpoint in ``out``.
      overwrite: replace an earlier run in ``out``: its files are deleted once the new run's
        inputs are checked, right before training starts; a folder holding files that a run
        does not write is refused (:mod:`fedjax_sc.run.rundir`).
    """

    scene: str = "synthetic"
    data_dir: str | None = None
    data: str | None = None
    test_data: str | None = None
    text_column: str | None = None
    label_column: str | None = None
    client_column: str | None = None
    split_column: str | None = None
    test_fraction: float | None = None
    test_split: str | None = None
    empty_text: str | None = None
    label_names: tuple | None = None
    tokenizer: str | None = None
    min_partition_size: int = flwr_partition.MIN_PARTITION_SIZE
    self_balancing: bool = flwr_partition.SELF_BALANCING
    algorithm: str = "fedavg"
    algorithm_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    rounds: int | None = None
    local_epochs: int = 2
    batch_size: int | None = None
    lr: float | None = None
    momentum: float = registry.default("momentum")
    embedding_lr: float | None = None
    lr_schedule: str = "constant"
    client_optimizer_state: str = registry.default("client_optimizer_state")
    lambda_kt: float = registry.default("lambda_kt")
    lambda_div: float = registry.default("lambda_div")
    temperature: float = registry.default("temperature")
    bandwidth: float | None = None
    hsic_normalization: str = registry.default("hsic_normalization")
    furl_dim: int = registry.default("furl_dim")
    pca_band: tuple[int, int] | None = None
    pca_center: bool = registry.default("pca_center")
    upload_noise: float | None = None
    upload_compression: str = uploads.NO_COMPRESSION
    dp_clip: float | None = None
    dp_noise: float = dp_sgd.NO_NOISE
    dp_delta: float = 1e-5
    prox_mu: float = registry.default("prox_mu")
    dyn_alpha: float = registry.default("dyn_alpha")
    moon_mu: float = registry.default("moon_mu")
    moon_temperature: float = registry.default("moon_temperature")
    scaffold_global_lr: float = registry.default("scaffold_global_lr")
    ditto_lambda: float = registry.default("ditto_lambda")
    rep_head_steps: int = registry.default("rep_head_steps")
    rod_label_prior: str = registry.default("rod_label_prior")
    perfedavg_alpha: float = registry.default("perfedavg_alpha")
    perfedavg_variant: str = registry.default("perfedavg_variant")
    apfl_alpha: float = registry.default("apfl_alpha")
    apfl_alpha_lr: float | None = registry.default("apfl_alpha_lr")
    pfedme_lambda: float = registry.default("pfedme_lambda")
    pfedme_k: int = registry.default("pfedme_k")
    pfedme_personal_lr: float = registry.default("pfedme_personal_lr")
    pfedme_beta: float = registry.default("pfedme_beta")
    mmd_weight: float = registry.default("mmd_weight")
    mmd_kernel: str = registry.default("mmd_kernel")
    fusion: str = registry.default("fusion")
    fusion_init: str = registry.default("fusion_init")
    fusion_private_embedding: bool = registry.default("fusion_private_embedding")
    fusion_gamma_momentum: float = registry.default("fusion_gamma_momentum")
    kc_clusters: int = registry.default("kc_clusters")
    kc_iterations: int = registry.default("kc_iterations")
    kc_weight: float = registry.default("kc_weight")
    asp_adversarial: float = registry.default("asp_adversarial")
    asp_orthogonal: float = registry.default("asp_orthogonal")
    asp_schedule: str = registry.default("asp_schedule")
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
    gru_init: str = registry.default("gru_init")
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
    padding: str = "auto"
    local_steps: str | None = None
    client_dropout: float = 0.0
    straggler_fraction: float = 0.0
    straggler_policy: str = "partial"
    aggregation: str = "mean"
    dev_holdout: bool = False
    allow_empty_clients: bool = False
    local_vocab: bool = True
    synthetic_clients: int = synthetic.NUM_CLIENTS
    synthetic_train: int = synthetic.TRAIN_PER_CLIENT
    synthetic_test: int = synthetic.TEST_PER_CLIENT
    synthetic_zipf: float | None = None
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "fedjax-sc"
    wandb_mode: str = "offline"
    out: str = "runs/latest"
    resume: bool = False
    overwrite: bool = False

    def resolved(self) -> TrainConfig:
        """A copy with every ``None`` filled from the scene preset; validates choices.

        Raises:
          ValueError: unknown scene/algorithm/embeddings, missing data_dir, bad sizes, a
            number out of range (:func:`fedjax_sc.run.ranges.check`).
          FileNotFoundError, MissingPyarrowError, MissingTokenizersError: a table scene's, as
            :func:`fedjax_sc.run.table_scene.check` (a missing tokenizer.json, an extra not
            installed).
        """
        if self.scene not in SCENES:
            raise ValueError(f"unknown scene {self.scene!r}; choose from {SCENES}")
        if not registry.known(self.algorithm):
            raise ValueError(f"unknown algorithm {self.algorithm!r}; choose from "
                             f"{tuple(ALGORITHMS)} or give path/to/file.py:FUNCTION")
        if is_spec(self.algorithm):
            load(self.algorithm)  # a missing file or function, before any data is read
        elif self.algorithm_options:
            raise ValueError(f"--algorithm-option {' '.join(self.algorithm_options)}: only "
                             f"an algorithm of one's own (FILE.py:FUNCTION) reads these; "
                             f"{self.algorithm}'s settings have flags of their own "
                             f"(fedjax-sc train --help)")
        for name, value in dict(self.algorithm_options).items():
            parse_option(f"{name}={value}")  # a name and a value as the flag takes them
        if self.embeddings not in EMBEDDINGS and not Path(self.embeddings).is_file():
            raise ValueError(f"--embeddings {self.embeddings!r}: neither one of {EMBEDDINGS} "
                             f"nor an existing word-vector file")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r}: choose from {DTYPES}")
        if self.gru_init not in text_classifier.GRU_INITS:
            raise ValueError(f"--gru-init {self.gru_init!r}: choose from "
                             f"{', '.join(text_classifier.GRU_INITS)}")
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite exclude each other")
        if self.domains is not None and self.scene != "fdu":
            raise ValueError("--domains applies to --scene fdu only")
        if self.scene == "synthetic" and (self.data_dir is not None or self.dev_holdout):
            given = "--data-dir" if self.data_dir is not None else "--dev-holdout"
            raise ValueError(f"{given} applies to --scene fdu and iyy; the synthetic scene "
                             f"makes its reviews")
        if self.scene in ("fdu", "iyy") and not self.data_dir:
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
        preset = SCENE_DEFAULTS[self.scene]
        c = dataclasses.replace(self, **{k: v for k, v in preset.items()
                                         if getattr(self, k) is None})
        c = dataclasses.replace(c, **table_scene.check(c))
        ranges.check(c)  # --lr, --momentum, --client-dropout, --local-steps, ...
        if c.data_dir is not None:  # one spelling of the folder in config.json
            c.data_dir = str(Path(c.data_dir).expanduser().resolve())
        if c.embeddings in EMBEDDINGS:
            c.embed_dim = EMBED_DIM[c.embeddings] if c.embed_dim is None else c.embed_dim
            if c.embeddings == "glove-6b-50d" and c.embed_dim != 50:
                raise ValueError(f"glove-6b-50d gives d = 50, got --embed-dim {c.embed_dim}")
        else:  # a word-vector file says its d
            from fedjax_sc.data.embeddings import vector_dim
            d = vector_dim(c.embeddings)
            if c.embed_dim not in (None, d):
                raise ValueError(f"{c.embeddings} holds {d}-dimensional vectors, got "
                                 f"--embed-dim {c.embed_dim}")
            c.embed_dim = d
            # as the data folder: config.json reruns from any folder (--config)
            c.embeddings = str(Path(c.embeddings).expanduser().resolve())
        for name in ("rounds", "local_epochs", "batch_size", "max_len", "vocab_size",
                     "embed_dim", "hidden", "mlp_hidden"):
            if getattr(c, name) < 1:
                raise ValueError(f"{flag(name)} must be >= 1, got {getattr(c, name)}")
        for name in ("furl_dim", "ap_evals", "ap_steps"):
            if getattr(c, name) < 0:
                raise ValueError(f"{flag(name)} must be >= 0, got {getattr(c, name)}")
        if c.ap_lr_mult < 0:
            raise ValueError(f"--ap-lr-mult must be >= 0, got {c.ap_lr_mult}")
        for name in ("seed", "partition_seed"):
            if not 0 <= getattr(c, name) < 2**32:
                raise ValueError(f"{flag(name)} must be in [0, 2^32 - 1], got "
                                 f"{getattr(c, name)}")
        if self.upload_noise is None and c.algorithm in registry.NO_UPLOAD:
            c.upload_noise = None  # nothing uploaded: the scene's noise does not apply
        c.pca_band, c.upload_noise = uploads.upload_settings(c.algorithm, c.embed_dim,
                                                             c.pca_band, c.upload_noise)
        uploads.check(c)  # --pca-band, --upload-noise, --upload-compression
        if c.dp_clip is not None and not c.dp_clip > 0:
            raise ValueError(f"dp_clip must be > 0, got {c.dp_clip}")
        if not 0 < c.dp_delta < 1:
            raise ValueError(f"dp_delta must lie in (0, 1), got {c.dp_delta}")
        ranges.clients(c)  # --partition, --sampling, --padding, --synthetic-zipf, ...
        return c

