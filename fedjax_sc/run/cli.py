"""Command line: ``fedjax-sc train|reproduce|results|compare|probe ...`` (see
``fedjax-sc COMMAND --help``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from pathlib import Path

from fedjax_sc.run import config
from fedjax_sc.run.options import default as _d
from fedjax_sc.run.options import train_arguments
from fedjax_sc.run.plumbing import processes
from fedjax_sc.run.plumbing.flags import flag


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: ...)`` for options that take a value; an on/off flag, and an option
    whose default is resolved later (None: the scene preset), state their default in their
    own help (argparse would print the stored value: True for a ``--no-...`` flag that is
    off, None for a preset)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.nargs == 0 or action.default is None:
            return action.help or ""
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors (an unknown flag, a value of the wrong type or
    outside the choices) are one line, with where the options are listed, and exit status 2
    (argparse's) instead of the whole usage block; its subcommands' parsers are of this class
    too."""

    help_of = ""  # the subcommand whose options the message points to (set by main)

    def error(self, message: str):
        where = f"{self.prog} {self.help_of}".strip()
        self.exit(2, f"{self.prog}: error: {message} (`{where} --help` lists the "
                     f"options)\n")


def _parser() -> argparse.ArgumentParser:
    from fedjax_sc.run.paper.table_plan import TABLE7_D1, TABLE7_FRACTIONS, TABLES
    p = _Parser(prog="fedjax-sc", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    presets = "; ".join(f"{s}: {v}" for s, v in config.SCENE_DEFAULTS.items())
    t = sub.add_parser(
        "train", help="federated training with Ag per round, checkpoints and a final report",
        description="Federated training. Options left out take the scene's paper preset: "
        + presets, formatter_class=_HelpFormatter, allow_abbrev=False)
    train_arguments(t)
    processes.add_arguments(t)
    t.add_argument("--config", metavar="RUN/config.json",
                   help="rerun a saved run: its configuration, with the flags given here "
                   "overriding it (e.g. --rounds 2 --out runs/rerun); on the same machine it "
                   "reproduces the saved figures exactly")
    t.add_argument("--from-run", metavar="RUN",
                   help="start from the rounds of run folder RUN: its configuration (as "
                   "--config RUN/config.json, unless --config is given) and its checkpoints "
                   "are copied into --out (each member's folder), so that only the "
                   "evaluation and the Ap phase run, with the Ap settings given here (e.g. "
                   "--ap-steps 200 --grid ap_lr_mult=0.01,1); RUN is not changed")
    p.train_parser = t
    p.subcommands = sub.choices  # name -> parser (filled as the subcommands are added)
    q = sub.add_parser(
        "reproduce", help="run every method of a paper table (resumable results store) and "
        "print ours (mean +- std over seeds) beside the paper's figures",
        description="Runs every method Table 2-8 needs, one run directory per method and seed "
        "under --out/<scene>/ (finished runs are skipped, unfinished ones resumed), then "
        "prints and writes <table>.md (and PNG figures for Tables 2-3). Every train option "
        "but the per-run ones (the algorithm, a grid, the run folder, tracking, a table "
        "scene's files) applies to each run. --quick: 1 round, n_Z = 5, 1 seed; otherwise "
        "the scene's paper settings and 3 seeds. Presets: " + presets,
        formatter_class=_HelpFormatter)
    q.add_argument("table", choices=TABLES)
    train_arguments(q, grid=True)
    processes.add_arguments(q)
    for action in q._actions:  # reproduce's own default (set_defaults below)
        if action.dest == "embeddings":
            action.help += " (default: glove-6b-50d; random on the synthetic scene)"
    q.add_argument("--seeds", type=int, help="number of seeds S..S+N-1, S = --first-seed "
                   "(default: 1 with --quick, else 3)")
    q.add_argument("--first-seed", type=int, default=0, metavar="S",
                   help="the first seed: --seeds 2 --first-seed 1 trains seeds 1 and 2 alone, "
                   "e.g. to add seeds to a table whose seed 0 was trained elsewhere")
    q.add_argument("--population-size", type=int, metavar="P",
                   help="the most runs trained as one population (the seeds of a row, a "
                   "table's grid: one compiled program); 1 trains them one by one (default: "
                   "as many as half the free memory holds)")
    q.add_argument("--quick", action="store_true",
                   help="a first look: 1 round, n_Z = 5 Ap evaluations, 1 seed")
    q.add_argument("--methods", nargs="+", metavar="M",
                   help="train only these runs (tables 2-3: methods, e.g. fedavg kteps; "
                   "others: run names); finished runs of the others already in the store "
                   "are shown, the rest print as 'not run' (default: every run)")
    q.add_argument("--d1", type=int, nargs="+", default=list(TABLE7_D1),
                   help="table7: first principal components kept")
    q.add_argument("--d2-fraction", type=float, nargs="+", default=list(TABLE7_FRACTIONS),
                   help="table7: last component kept, as a fraction of d")
    q.add_argument("--no-plots", dest="plots", action="store_false",
                   help="do not write the PNG figures (default: off, figures written)")
    q.add_argument("--status", action="store_true",
                   help="train nothing: print each run's state in the store (finished, its "
                   "last round, not started) and the runs not finished, for --methods")
    q.set_defaults(out=None, data_dir=None, embeddings=None)  # by scene, in _reproduce
    x = sub.add_parser(
        "results", help="results as data: export a store's runs (small files only) into "
        "results/, or regenerate a table and its figure from results/ alone; hits: write "
        "test_hits.json from a run's last checkpoint",
        formatter_class=_HelpFormatter)
    x.add_argument("action", choices=("export", "render", "hits"))
    x.add_argument("runs", nargs="*", metavar="RUN",
                   help="export --csv: run folders whose metrics go into one tidy CSV; hits: "
                   "run folders with checkpoints that lack test_hits.json (runs that ended "
                   "before training wrote it), for fedjax-sc compare without checkpoints; "
                   "the run's Ap phase is redone from its last checkpoint (minutes on FDU)")
    x.add_argument("--csv", metavar="FILE", help="export: write the runs' per-round, "
                   "per-client metrics as one tidy CSV (run, seed, then one column per grid "
                   "setting of a population, phase, round, t, client, metric, value; for "
                   "pandas)")
    x.add_argument("--table", choices=TABLES, help="export (without --csv) and render: the "
                   "table")
    x.add_argument("--scene", default="fdu", help="the scene whose tables are meant")
    x.add_argument("--dest", default="results", help="the results folder")
    x.add_argument("--store", help="export: the results store of fedjax-sc reproduce --out")
    x.add_argument("--methods", nargs="+", help="export: the methods (runs) to export")
    x.add_argument("--seeds", type=int, default=1, help="export: seeds S..S+N-1")
    x.add_argument("--first-seed", type=int, default=0, metavar="S",
                   help="export: the first seed")
    x.add_argument("--no-plots", dest="plots", action="store_false",
                   help="render: no PNG figure (default: off, figure written)")
    m = sub.add_parser(
        "compare", help="Ag(A) - Ag(B) of two trained runs on the same test examples, with "
        "a paired bootstrap interval and the per-client differences",
        description="Reads which test examples each run's model classifies correctly (the "
        "run's test_hits.json, written when it ended and exported with it; else from its "
        "checkpoint) and prints Ag(A) - Ag(B) with a paired, per-client bootstrap "
        "interval, the per-client differences and how many clients each model leads on. "
        "With one run a side the interval holds test-sample noise only; given two folders "
        "of seed runs, the seeds are paired by name, the difference is their mean and the "
        "interval resamples the seed pairs too (both sources of chance; with few seeds it "
        "understates their spread).",
        formatter_class=_HelpFormatter)
    m.add_argument("run_a", help="a run directory (fedjax-sc train --out, a reproduce "
                   "store's <scene>/<method>/seed-<s>, an exported results/fdu/table3/"
                   "kteps-seed0), or a folder of seed-<s> runs (a store's <scene>/<method>), "
                   "or an exported method's prefix (results/fdu/table3/kteps: its -seed<s> "
                   "runs)")
    m.add_argument("run_b", help="another run directory (or folder of seed runs, the same "
                   "seeds) on the same clients and test data")
    m.add_argument("--over-seeds", action="store_true",
                   help="pair every seed run of each side, each under the seed its "
                   "config.json records: the run itself, its seed-<s>/ runs and the "
                   "<run>-seed<s> runs beside it (runs/feddyn with runs/feddyn-seed1, ...; "
                   "default: off, a run directory is one run)")
    m.add_argument("--personal", action="store_true",
                   help="compare the personalised models before fine-tuning (shared + "
                   "private leaves), e.g. for FedPer (default: off, the global models)")
    m.add_argument("--ap", action="store_true",
                   help="compare Ap: the Ap phase's fine-tuned models, per test example the "
                   "share of the n_Z evaluations that get it right (from the runs' "
                   "test_hits.json; default: off, Ag)")
    m.add_argument("--round", dest="at_round", type=int,
                   help="the checkpoints' round (default: each run's test_hits.json, else "
                   "its last checkpoint)")
    m.add_argument("--resamples", type=int, default=10_000, help="bootstrap draws")
    m.add_argument("--seed", type=int, default=0, help="seed of the bootstrap draws")
    m.add_argument("--level", type=float, default=0.95, help="coverage of the interval")
    m.add_argument("--json", dest="json_path", help="also write the result to this JSON file")
    r = sub.add_parser(
        "probe", help="privacy probe of the word-embedding upload (Fig. 5): top-K similar "
        "words of a query in the Client, Server and Agg tables, I_ser and I_ag",
        formatter_class=_HelpFormatter)
    r.add_argument("--out", required=True, help="a run directory of fedjax-sc train")
    r.add_argument("--client", required=True, help="the client (FDU: its domain)")
    r.add_argument("--word", default="man", help="the query word")
    r.add_argument("--band", type=int, nargs=2, action="append", metavar=("D1", "D2"),
                   help="a PCA band to probe; repeat for several (default: the run's)")
    r.add_argument("--sigma", type=float, help="upload noise std (default: the run's)")
    r.add_argument("--top-k", type=int, nargs="+", default=[10, 20, 50, 100],
                   help="the sizes of the nearest-neighbour lists compared")
    return p


def _given(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The destinations of the options written in ``argv`` (abbreviations are off)."""
    return {a.dest for a in parser._actions for o in a.option_strings for arg in argv
            if arg == o or arg.startswith(o + "=")}


def _from_config(path: str, args: dict, given: set[str]) -> dict:
    """``args`` with every option not ``given`` on the command line taken from the saved
    configuration ``path`` (a run's config.json), except ``--out``, ``--resume`` and
    ``--overwrite``, which belong to the new run (:func:`fedjax_sc.run.config_file.merge`);
    the fields that ``path`` lacks, which keep their defaults, are named on stderr.

    Raises:
      FileNotFoundError: ``path`` does not exist; ValueError: not valid JSON, an unknown key,
        a value of the wrong type, no scene or algorithm (names the key).
    """
    from fedjax_sc.run import config_file
    merged, defaulted = config_file.merge(path, args, given)
    if defaulted:
        print(f"fedjax-sc: note: --config {path} has no {', '.join(defaulted)} (an older "
              f"version's configuration?): their defaults apply", file=sys.stderr)
    return merged


def _train(args: dict, given: set[str]) -> None:
    """One run, or with --seeds / --grid a population of runs under --out
    (:func:`fedjax_sc.run.api.train`, which ``fsc.train`` is too); ``given``: the options
    on the command line (a flag that a --grid varies is refused, not dropped)."""
    from fedjax_sc.algorithms.context import is_spec
    from fedjax_sc.run import api, members
    from fedjax_sc.run.plumbing.option_table import refuse_unread
    seeds, specs, mesh = args.pop("seeds"), args.pop("grid"), args.pop("mesh")
    from_run = args.pop("from_run")
    settings = {k: v for k, v in args.items() if k not in ("algorithm", "out")}
    explicit = given | (set(args["algorithm_options"]) if "algorithm_options" in given
                        else set())
    # a flag or a grid name that the algorithm does not read is refused, not dropped (the
    # Python API lets a loop share one settings dict between algorithms)
    named = given | set(members.parse_grid(specs, own=is_spec(args["algorithm"])))
    refuse_unread(args["algorithm"], named)
    lone = sorted(named & {"server_lr", "server_momentum", "server_tau"})
    if lone and args.get("server_opt") is None:
        raise ValueError(f"{flag(lone[0])} is read only with --server-opt (FedOpt's server "
                         f"optimizer); without it the clients' aggregate is the new model")
    api.train_runs(args["algorithm"], explicit, out=args["out"], mesh=mesh, grid=specs,
                   from_run=from_run,
                   seeds=None if seeds is None else members.parse_seeds(seeds), **settings)


def _reproduce(args: dict) -> None:
    from fedjax_sc.run.paper.reproduce import FULL_SEEDS, QUICK, reproduce
    from fedjax_sc.run.train import TrainConfig
    table, quick, plots = args.pop("table"), args.pop("quick"), args.pop("plots")
    status = args.pop("status")
    methods, d1s, fractions = args.pop("methods"), args.pop("d1"), args.pop("d2_fraction")
    seeds, first = args.pop("seeds") or (QUICK["seeds"] if quick else FULL_SEEDS), \
        args.pop("first_seed")
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    if first < 0:
        raise ValueError(f"--first-seed must be >= 0, got {first}")
    size = args.pop("population_size")
    if size is not None and size < 1:
        raise ValueError(f"--population-size must be >= 1, got {size}")
    out = args.pop("out") or ("runs/reproduce-quick" if quick else "runs/reproduce")
    if quick:
        args["rounds"] = args["rounds"] or QUICK["rounds"]
        args["ap_evals"] = QUICK["ap_evals"] if args["ap_evals"] is None else args["ap_evals"]
    if args["ap_evals"] is None:
        args["ap_evals"] = _d("ap_evals")  # n_Z of the paper
    if args["scene"] == "fdu" and not args["data_dir"]:
        # the corpus beside the checkout (../shared/data/fdu-mtl), or FEDJAX_SC_FDU_DIR
        args["data_dir"] = os.environ.get("FEDJAX_SC_FDU_DIR", "../shared/data/fdu-mtl")
        if not (Path(args["data_dir"]) / "apparel.task.train").is_file():
            raise FileNotFoundError(f"FDU-MTL corpus not found in {args['data_dir']}: pass "
                                    f"--data-dir or set FEDJAX_SC_FDU_DIR")
    if args["embeddings"] is None:  # the synthetic scene's words are not English
        args["embeddings"] = "random" if args["scene"] == "synthetic" else "glove-6b-50d"
    text = reproduce(table, TrainConfig(**args), out, list(range(first, first + seeds)),
                     plots=plots, methods=methods, d1s=d1s, fractions=fractions,
                     population_size=size, status=status)
    if status:
        print(text)


LOG_LEVEL = "FEDJAX_SC_LOG_LEVEL"
"""Environment variable: a :mod:`logging` level (``DEBUG``, ``INFO``, ...) for the loggers
under ``fedjax_sc``, shown on stderr (e.g. ``DEBUG``: every corpus file a process reads)."""


def _debug_logging() -> None:
    """Shows the ``fedjax_sc`` loggers' records on stderr at the level :data:`LOG_LEVEL` says
    (nothing when it is not set)."""
    level = os.environ.get(LOG_LEVEL)
    if level:
        names = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
        if level.upper() not in names:
            sys.exit(f"fedjax-sc: error: {LOG_LEVEL}={level}: use one of {', '.join(names)}")
        logger = logging.getLogger("fedjax_sc")
        logger.setLevel(level.upper())
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False  # shown once, whatever handlers the root logger gets


def main(argv: list[str] | None = None) -> int:
    _debug_logging()
    parser = _parser()
    words = sys.argv[1:] if argv is None else argv
    # a flag no subcommand knows is refused by the top parser: point to the subcommand's help
    parser.help_of = next((w for w in words[:1] if w in parser.subcommands), "")
    args = vars(parser.parse_args(argv))
    command = args.pop("command")
    if args.get("domains"):
        args["domains"] = tuple(args["domains"])
    if args.get("pca_band"):
        args["pca_band"] = tuple(args["pca_band"])
    from fedjax_sc.run.train import NonFiniteUpdateError
    try:
        if command in ("train", "reproduce"):  # before anything touches a device
            processes.start(**processes.pop_arguments(args))
        if command == "train":
            config_path = args.pop("config")
            if args["from_run"] and not (Path(args["from_run"]) / "config.json").is_file():
                raise FileNotFoundError(f"--from-run {args['from_run']}: not a run folder "
                                        f"(no config.json)")
            if args["from_run"] and not config_path:
                config_path = str(Path(args["from_run"]) / "config.json")
            given = _given(parser.train_parser, sys.argv[1:] if argv is None else argv)
            if config_path:
                args = _from_config(config_path, args, given)
            _train(args, given)
        elif command == "reproduce":
            _reproduce(args)
        elif command == "results":
            from fedjax_sc.run.paper import results
            if args["action"] == "hits":
                if not args["runs"]:
                    raise ValueError("results hits: name the run folders (RUN [RUN ...])")
                from fedjax_sc.run.paper.compare import write_run_hits
                for run in args["runs"]:
                    print(f"{run}: wrote {write_run_hits(run)}")
                return 0
            if args["csv"]:
                if args["action"] != "export" or not args["runs"]:
                    raise ValueError("--csv: write results export RUN [RUN ...] --csv FILE")
                from fedjax_sc.run.paper.tidy_csv import metrics_csv
                rows = metrics_csv(args["runs"], args["csv"])
                print(f"{rows} rows from {', '.join(args['runs'])} -> {args['csv']}")
                return 0
            if not args["table"]:
                raise ValueError("results: --table is required (or export RUN --csv FILE)")
            if args["action"] == "export":
                if not args["store"] or not args["methods"]:
                    raise ValueError("results export needs --store and --methods")
                if args["seeds"] < 1 or args["first_seed"] < 0:
                    raise ValueError(f"--seeds {args['seeds']} --first-seed "
                                     f"{args['first_seed']}: need N >= 1 and S >= 0")
                results.export(args["store"], args["dest"], args["scene"], args["table"],
                               args["methods"], range(args["first_seed"],
                                                      args["first_seed"] + args["seeds"]))
            print(results.render(args["dest"], args["scene"], args["table"], args["plots"]))
        elif command == "compare":
            from fedjax_sc.run.paper.compare import compare
            compare(**args)
        elif command == "probe":
            from fedjax_sc.run.paper.probe import probe
            probe(args["out"], args["client"], args["word"], bands=args["band"],
                  sigma=args["sigma"], ks=args["top_k"])
    except KeyboardInterrupt:  # Ctrl-C: one line, what is saved and how to go on
        print(f"fedjax-sc: interrupted; {_saved(command, args)}", file=sys.stderr)
        return processes.leave(130)
    except Exception as e:
        lost = processes.lost_contact(e)  # several processes, one of them gone
        if lost:
            print(f"fedjax-sc: error: {lost}; {_saved(command, args, everyone=True)}",
                  file=sys.stderr)
        elif (isinstance(e, (OSError, NonFiniteUpdateError, ValueError, RuntimeError))
              or _raised_in_user_code(e)):  # a user's TypeError, KeyError, ... too
            if os.environ.get("FEDJAX_SC_TRACEBACK") == "1" or _raised_in_user_code(e):
                traceback.print_exception(e)  # where in the user's code (or any, if asked)
            print(f"fedjax-sc: error: {_one_line(e)}", file=sys.stderr)
        elif processes.several():  # a bug: its traceback, without waiting for the others
            traceback.print_exc()
        else:
            raise
        return processes.leave(1)  # several processes: at once, the others notice
    processes.barrier("fedjax-sc done")  # then every process meets JAX's shutdown barrier
    return 0


def _saved(command: str, args: dict, everyone: bool = False) -> str:
    """What an interrupted command left, for its one-line message; ``everyone``: the
    command is to be restarted in every process."""
    again = "in every process " if everyone else ""
    if command == "reproduce":
        return ("finished runs and every run's last finished round are kept in the store; "
                f"rerun the same command {again}to go on")
    if command != "train":
        return "nothing was written"
    if (Path(args["out"]) / "population.json").exists():
        return (f"every member's last finished round is saved in its folder under "
                f"{args['out']}; add --resume to the same command {again}to go on from there")
    ckpts = Path(args["out"]) / "checkpoints"
    rounds = sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) \
        if ckpts.is_dir() else []
    if not rounds:
        return f"no round had finished; nothing to resume in {args['out']}"
    return (f"round {rounds[-1]} is saved in {ckpts}; add --resume to the same command "
            f"{again}to go on from there" + (" (with any number of processes)" if everyone
                                              else ""))


def _raised_in_user_code(e: BaseException) -> bool:
    """Whether ``e`` (or an exception it was raised from) passed through a file of a user's
    algorithm (``--algorithm FILE.py:F`` or ``module:F``): its traceback then goes before the
    one-line error, since the line alone names no file of the user's code."""
    from fedjax_sc.algorithms import context
    files, seen = context.loaded_files(), set()
    while e is not None and id(e) not in seen and files:
        seen.add(id(e))
        for frame in traceback.extract_tb(e.__traceback__):
            if Path(frame.filename).resolve() in files:
                return True
        e = e.__cause__ or e.__context__
    return False


def _one_line(e: Exception) -> str:
    """The one-line error: a library error's message (:func:`_os_error` for an ``OSError``);
    another type, raised in a user's code, with its name (a bare ``KeyError`` says only
    ``'name'``); of a message of several lines (JAX's tracer errors), the first."""
    if isinstance(e, OSError):  # FileExistsError, a full disk
        return _os_error(e)
    lines = str(e).strip().splitlines() or [""]
    first = lines[0] + (" (the traceback above has the rest)" if len(lines) > 1 else "")
    if isinstance(e, (ValueError, RuntimeError)) or type(e).__module__.startswith("fedjax_sc"):
        return first
    return f"{type(e).__name__}: {first}"


def _os_error(e: OSError) -> str:
    """One line for an ``OSError``: the library's own message, or ``"<reason>: <path>"``."""
    if e.strerror and e.filename is not None:
        return f"{e.strerror}: {e.filename}" + (f" -> {e.filename2}" if e.filename2 else "")
    return str(e).splitlines()[0] if str(e) else type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
