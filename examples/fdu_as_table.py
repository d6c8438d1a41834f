"""FDU-MTL as one table: the check that ``--scene table`` reads a corpus as ``--scene fdu`` does.

Writes the FDU-MTL reviews of the chosen domains (read with
:func:`fedjax_sc.data.corpus.read_fdu`, which keeps the files' order) to one CSV with the
columns ``text``, ``label`` (0 / 1), ``domain`` and ``split`` (``train`` / ``test``), then reads
it back with :func:`fedjax_sc.data.table.read_table` and checks that every client's texts and
labels come back as ``read_fdu`` gave them, in the same order. Training on the CSV then gives
the FDU scene's vocabulary and figures::

    python examples/fdu_as_table.py --data-dir ../shared/data/fdu-mtl \\
        --domains MR apparel baby books --csv /tmp/fdu4.csv
    fedjax-sc train --scene table --data /tmp/fdu4.csv --text-column text \\
        --label-column label --client-column domain --split-column split \\
        --tokenizer whitespace --embeddings glove-6b-50d --rounds 1 --out runs/fdu4-table
    fedjax-sc train --scene fdu --data-dir ../shared/data/fdu-mtl \\
        --domains MR apparel baby books --embeddings glove-6b-50d --rounds 1 \\
        --out runs/fdu4-fdu

FDU-MTL's texts are lower-cased and tokenised (``do n't``, ``great !``), so the commands above
keep them as they are with ``--tokenizer whitespace``. ``--detokenize`` writes them as raw
review text instead, the kind of CSV a user has: ``sacremoses``' English Moses detokeniser
(``pip install sacremoses``) attaches punctuation and quotes (``great !`` -> ``great!``,
``( x )`` -> ``(x)``, ``` `` x '' ``` -> ``"x"``), a regex joins the clitic ``n't`` (``do n't``
-> ``don't``, ``ca n't`` -> ``can't``, ``wo n't`` -> ``won't``), and sentence starts and the
word ``i`` are capitalised. Training on it with the default ``--tokenizer basic`` then checks
that the table scene's tokeniser finds GloVe's words in raw text (docs/data.md)::

    python examples/fdu_as_table.py --domains books dvd electronics kitchen_housewares \\
        --detokenize --csv /tmp/fdu4-raw.csv

The table scene refuses a review without text unless ``--empty-text`` says what to do with
it: sports_outdoors holds one (line 1121 of its train file), which ``--scene fdu`` keeps as an
all-padding sequence. The CSV is read back with ``empty_text="keep"``, which does the same, so
all 16 domains come back as ``read_fdu`` gives them; train on such a CSV with
``--empty-text keep`` (or ``drop``, which leaves that one review out and names its line).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re

import pyarrow as pa
import pyarrow.csv

from fedjax_sc.data.corpus import FDU_DOMAINS, read_fdu
from fedjax_sc.data.table import read_table

EMPTY_REVIEW = "sports_outdoors"
"""The domain whose training file holds a review without text (line 1121): read back with
``empty_text="keep"``, as ``read_fdu`` keeps it."""

_CLITIC = {"ca": "can't", "wo": "won't"}


@functools.cache
def _moses():
    from sacremoses import MosesDetokenizer
    return MosesDetokenizer("en")


def detokenize(text: str) -> str:
    """FDU-MTL's tokenised, lower-cased ``text`` as raw review text (see the module
    docstring)."""
    text = text.replace("``", '"').replace("''", '"')
    out = _moses().detokenize(text.split())
    out = re.sub(r"\b(ca|wo) n't\b", lambda m: _CLITIC[m.group(1)], out)
    out = re.sub(r"(\w) n't\b", r"\1n't", out)
    out = re.sub(r"\bi\b", "I", out)
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), out)


def export(data_dir: str, domains: list[str], path: str, detokenized: bool = False) -> int:
    """Writes the CSV (with ``detokenized``, the texts through :func:`detokenize`); returns
    its number of rows. Raises AssertionError when it does not read back to ``read_fdu``'s
    corpora."""
    corpora = read_fdu(data_dir, domains=domains)
    if detokenized:
        corpora = {d: {s: dataclasses.replace(c, texts=tuple(map(detokenize, c.texts)))
                       for s, c in parts.items()} for d, parts in corpora.items()}
    columns = {"text": [], "label": [], "domain": [], "split": []}
    for domain, parts in corpora.items():
        for split in ("train", "test"):
            c = parts[split]
            columns["text"] += c.texts
            columns["label"] += c.labels.tolist()
            columns["domain"] += [domain] * len(c)
            columns["split"] += [split] * len(c)
    pyarrow.csv.write_csv(pa.table(columns), path)
    back = read_table(path, text_column="text", label_column="label", client_column="domain",
                      split_column="split", empty_text="keep")
    assert back.label_names == (0, 1), back.label_names
    assert sorted(back.corpora) == sorted(domains), list(back.corpora)
    for domain, parts in corpora.items():
        for split in ("train", "test"):
            got, want = back.corpora[domain][split], parts[split]
            assert got.texts == want.texts, (domain, split)
            assert (got.labels == want.labels).all(), (domain, split)
            assert got.num_empty == want.num_empty, (domain, split)
    return len(columns["text"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data/fdu-mtl")
    p.add_argument("--domains", nargs="+", default=list(FDU_DOMAINS),
                   help=f"the domains to export (default: all 16; {EMPTY_REVIEW}'s empty review "
                   f"needs --empty-text keep or drop to train)")
    p.add_argument("--csv", required=True, help="the CSV to write (outside the repository)")
    p.add_argument("--detokenize", action="store_true", help="write the texts as raw review "
                   "text (needs sacremoses)")
    a = p.parse_args()
    rows = export(a.data_dir, a.domains, a.csv, a.detokenize)
    print(f"{rows:,} reviews of {len(a.domains)} domains -> {a.csv}; read back as read_fdu "
          f"gives them")


if __name__ == "__main__":
    main()
