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
        --embeddings glove-6b-50d --rounds 1 --out runs/fdu4-table
    fedjax-sc train --scene fdu --data-dir ../shared/data/fdu-mtl \\
        --domains MR apparel baby books --embeddings glove-6b-50d --rounds 1 \\
        --out runs/fdu4-fdu

The table scene refuses a review without text: sports_outdoors holds one (line 1121 of its
train file), so that domain cannot be exported as it is.
"""

from __future__ import annotations

import argparse

import pyarrow as pa
import pyarrow.csv

from fedjax_sc.data.corpus import FDU_DOMAINS, read_fdu
from fedjax_sc.data.table import read_table


def export(data_dir: str, domains: list[str], path: str) -> int:
    """Writes the CSV; returns its number of rows. Raises AssertionError when it does not read
    back to ``read_fdu``'s corpora."""
    corpora = read_fdu(data_dir, domains=domains)
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
                      split_column="split")
    assert back.label_names == (0, 1), back.label_names
    assert sorted(back.corpora) == sorted(domains), list(back.corpora)
    for domain, parts in corpora.items():
        for split in ("train", "test"):
            got, want = back.corpora[domain][split], parts[split]
            assert got.texts == want.texts, (domain, split)
            assert (got.labels == want.labels).all(), (domain, split)
    return len(columns["text"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data/fdu-mtl")
    p.add_argument("--domains", nargs="+", default=list(FDU_DOMAINS))
    p.add_argument("--csv", required=True, help="the CSV to write (outside the repository)")
    a = p.parse_args()
    rows = export(a.data_dir, a.domains, a.csv)
    print(f"{rows:,} reviews of {len(a.domains)} domains -> {a.csv}; read back as read_fdu "
          f"gives them")


if __name__ == "__main__":
    main()
